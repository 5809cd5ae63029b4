#!/bin/sh
# slurm-shockwave TaskProlog (slurm.conf TaskProlog=; runs as the job's user before each
# task). Slurm turns the `export NAME=value` lines it prints into the job's environment,
# so a job finds the service with no configuration of its own:
#   SHOCKWAVE_URL     the service's progress endpoint (from the file the service writes)
#   SHOCKWAVE_SERVICE_UID  that file's owner: the uid whose answers the job believes
#                     (root's always; with the URL below, root's only)
#   SHOCKWAVE_SIGNAL  the checkpoint signal named in the job's hint (absent: none)
#   SHOCKWAVE_SPOOL   a directory only the job's owner (and root) can write, where the
#                     client keeps reports while the service is away; the epilog forwards it:
#                     /tmp/shockwave-spool-<job>, or /tmp/shockwave-spool-<job>.XXXXXXXX
#                     when that name is taken by something else (job ids are predictable:
#                     another user may make it first, to read the reports or stop them)
# It prints nothing it cannot vouch for and always exits 0 quickly.
ENDPOINT_FILE="/var/lib/slurm-shockwave/endpoint"
# The service's URL for nodes that cannot read the endpoint file (the service on another
# host and no shared file system): `shockwave install-scripts --service-url`. The file wins.
SERVICE_URL=""
SERVICE_UID=""  # the uid the service at SERVICE_URL runs as, when not root
# The managed partition (`shockwave install-scripts` writes it): another partition's
# jobs get nothing, and slurmctld is not asked about them (a red-team: a 1,000-node job
# of any partition asked it 1,000 times at once)
PARTITION="shockwave"
case "${SLURM_JOB_PARTITION:-}" in ""|"$PARTITION") ;; *) exit 0 ;; esac
url="$(head -c 256 "$ENDPOINT_FILE" 2>/dev/null | head -n 1)"
owner=""
[ -z "$url" ] || owner="$(stat -c %u "$ENDPOINT_FILE" 2>/dev/null)"
[ -n "$url" ] || { url="$SERVICE_URL"; owner="$SERVICE_UID"; }
case "$url" in *[!]A-Za-z0-9._~:/[-]*) url="" ;; esac  # no quote, space, $ or ; in it
case "$url" in
  http://[A-Za-z0-9.:\[\]-]*|https://[A-Za-z0-9.:\[\]-]*)
    printf 'export SHOCKWAVE_URL=%s\n' "$url"
    case "$owner" in ''|*[!0-9]*) ;; *) printf 'export SHOCKWAVE_SERVICE_UID=%s\n' "$owner" ;; esac ;;
esac
if [ -n "${SLURM_JOB_ID:-}" ]; then
  # the epilog looks for these, as the job's user's: a directory (not a symlink) of ours
  # that nobody else may write; the first of ours made when the name is taken, or a new one
  me="$(id -u)" spool=""
  case "$SLURM_JOB_ID" in *[!0-9]*) ;; *) spool="/tmp/shockwave-spool-$SLURM_JOB_ID" ;; esac
  [ -z "$spool" ] || (umask 077 && mkdir "$spool") 2>/dev/null
  if [ -n "$spool" ] \
     && [ -z "$(find "$spool" -maxdepth 0 -type d -uid "$me" ! -perm /022 2>/dev/null)" ]; then
    ours() { find /tmp -maxdepth 1 -name "shockwave-spool-$SLURM_JOB_ID.*" -type d \
      -uid "$me" ! -perm /022 2>/dev/null | sort | head -n 1; }
    spool="$(ours)"
    if [ -z "$spool" ]; then
      # the job's tasks start together and may each make one: a moment later all take
      # the first by name (most then share one; none is removed, as a task may have
      # taken it already: the epilog forwards every one)
      mktemp -d "/tmp/shockwave-spool-$SLURM_JOB_ID.XXXXXXXX" >/dev/null 2>&1
      sleep 0.2
      spool="$(ours)"
    fi
  fi
  [ -z "$spool" ] || printf 'export SHOCKWAVE_SPOOL=%s\n' "$spool"
  # the hint's signal, asked of slurmctld once per job and node and kept in the spool
  # (the hint is fixed at submit): this runs before every task, and a 64-task step
  # asked 64 times at once (a red-team finding); the epilog removes it with the spool
  sig=""
  [ -z "$spool" ] || [ -L "$spool/.signal" ] || sig="$(head -c 8 "$spool/.signal" 2>/dev/null)"
  if [ -z "$sig" ]; then
    # only Slurm's answer for this job is kept: a failure or a timeout (slurmctld busy
    # as a whole step starts) cached as "no signal" left every later task without its
    # handler, to die of the checkpoint signal (a review); the next task asks again
    job="$(timeout 5 scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null)"
    case "$job" in
      "JobId=$SLURM_JOB_ID "*)
        sig="$(printf '%s\n' "$job" | sed -n -E \
          's/.*AdminComment=shockwave:v1 (model=[^ ]+ )?bs=[0-9]+ epochs=[0-9]+ mode=[a-z]+ (gpus=[0-9]+-[0-9]+ )?signal=([A-Z0-9]+) .*/\3/p')"
        case "$job" in
          *" AdminComment="*) ;;
          *) # no admin comment (submitted while job_submit.lua was not loaded): the
             # service plans it from its raw comment, and signals it (a red-team found
             # such a job got no handler and died of the signal): read as it reads it
             sig="$(printf '%s\n' "$job" | sed -n -E \
               's/.* Comment=(.* )?signal=(sig)?([a-z0-9]+)( .*)?$/\3/Ip' | tr a-z A-Z)" ;;
        esac
        [ -n "$sig" ] || sig=none
        [ -z "$spool" ] || (printf '%s\n' "$sig" > "$spool/.signal.$$" \
                            && mv -f "$spool/.signal.$$" "$spool/.signal") 2>/dev/null ;;
    esac
  fi
  case "$sig" in USR1|USR2|TERM|INT|HUP) printf 'export SHOCKWAVE_SIGNAL=%s\n' "$sig" ;; esac
fi
exit 0
