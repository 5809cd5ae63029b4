#!/bin/sh
# slurm-shockwave Epilog (runs as root on the node after a job ends, requeues included).
# Records the end in the same root-only place as prolog.sh (event() from events.sh next
# to this script), forwards the reports the job spooled while the service was away (its
# own job id only) and reports the job's end with its exit code. Never fails; every step
# is bounded in time; exits 0.
ENDPOINT_FILE="/var/lib/slurm-shockwave/endpoint"
SERVICE_URL=""  # for nodes that cannot read the endpoint file, as in task_prolog.sh
SERVICE_UID=""  # the uid the service at SERVICE_URL runs as, when not root
PARTITION="shockwave"  # the managed partition, as in task_prolog.sh
case "$0" in */*) HERE="${0%/*}" ;; *) HERE=. ;; esac
if [ -r "$HERE/events.sh" ] && command . "$HERE/events.sh" 2>/dev/null; then
  event "$(date +%s) end job=$JOB user=${SLURM_JOB_USER:-?} node=${SLURMD_NODENAME:-$(hostname -s 2>/dev/null)}" 2>/dev/null
fi
# another partition's job has no spool and no end to report (the event above is kept)
case "${SLURM_JOB_PARTITION:-}" in ""|"$PARTITION") ;; *) exit 0 ;; esac
# the shockwave command; install-scripts writes its path (Slurm gives an Epilog its own PATH)
SHOCKWAVE_BIN=""
BIN="$SHOCKWAVE_BIN"
[ -x "$BIN" ] || BIN="$(command -v shockwave 2>/dev/null)"
case "${SLURM_JOB_ID:-}" in ''|*[!0-9]*) BIN="" ;; esac
if [ -n "$BIN" ]; then
  export SHOCKWAVE_ENDPOINT_FILE="$ENDPOINT_FILE"
  if [ ! -r "$ENDPOINT_FILE" ] && [ -n "$SERVICE_URL" ]; then
    export SHOCKWAVE_URL="$SERVICE_URL"
    case "$SERVICE_UID" in ''|*[!0-9]*) ;; *) export SHOCKWAVE_SERVICE_UID="$SERVICE_UID" ;; esac
  fi
  # the job's spools (task_prolog.sh): only directories, not symlinks, of the job's own
  # user that nobody else may write (another user may plant one in /tmp to inject
  # reports, which root would forward with its own credential); the client checks the
  # directory it opens again (its owner must be $SLURM_JOB_UID)
  # (one filter for the flush and the removal: "$@" is find's action)
  spools() {
    find /tmp -maxdepth 1 \( -name "shockwave-spool-$SLURM_JOB_ID" \
      -o -name "shockwave-spool-$SLURM_JOB_ID.*" \) -type d -uid "$SLURM_JOB_UID" \
      ! -perm /022 "$@" 2>/dev/null
  }
  # SLURM_JOB_EXIT_CODE2 is EXIT:SIGNAL; SLURM_JOB_EXIT_CODE a wait(2) status (256 is
  # exit 1). A job killed by a signal ends 128 + the signal, as a shell reports it.
  code=-1 sig=0
  if [ -n "${SLURM_JOB_EXIT_CODE2:-}" ]; then
    code="${SLURM_JOB_EXIT_CODE2%%:*}"
    case "$SLURM_JOB_EXIT_CODE2" in *:*) sig="${SLURM_JOB_EXIT_CODE2#*:}" ;; esac
  elif [ -n "${SLURM_JOB_EXIT_CODE:-}" ]; then
    case "$SLURM_JOB_EXIT_CODE" in
      *[!0-9]*) ;;
      ?|??|???|????|?????) code=$(( (SLURM_JOB_EXIT_CODE >> 8) & 255 ))
                           sig=$(( SLURM_JOB_EXIT_CODE & 127 )) ;;
    esac
  fi
  case "$code" in ''|*[!0-9]*|????*) code=-1 ;; esac
  case "$sig" in ''|*[!0-9]*|????*) sig=0 ;; esac
  if [ "$code" -eq 0 ] && [ "$sig" -gt 0 ] && [ "$sig" -lt 128 ]; then code=$((128 + sig)); fi
  [ "$code" -le 255 ] || code=-1
  # tasks that started together may have made several spools: up to 16, flushed and the
  # end reported in one call (one Python start), the flushes within 3 s in all, the end
  # skipped when the service did not take the spool (a service that never answers held a
  # node 12.8 s with a call of 5 s per spool, then 11 s with 10 s for them all; 2.2 s now)
  set --
  case "${SLURM_JOB_UID:-}" in
    ''|*[!0-9]*) ;;
    *) found="$(spools -print | head -n 16)"
       while IFS= read -r spool; do
         [ -n "$spool" ] && set -- "$@" --flush-spool "$spool"
       done <<EOF
$found
EOF
       ;;
  esac
  SLURM_JOB_ID="$SLURM_JOB_ID" timeout -k 1 6 "$BIN" report "$@" --job-id "$SLURM_JOB_ID" \
    --end "$code" </dev/null >/dev/null 2>&1
  # then every spool of the job goes, sent or not, by its owner's hand (never root's rm
  # in a user's folder): job ids come back (a state reset, MaxJobId), and a later job of
  # that user and id took a spool left here for its own, old reports and all; the job's
  # next run reports its progress anew. -k: a process of the user's may trace rm and
  # swallow timeout's TERM
  case "${SLURM_JOB_UID:-}" in ''|*[!0-9]*) ;; *)
    case "${SLURM_JOB_GID:-}" in ''|*[!0-9]*) ;; *)
      spools -print0 | timeout -k 1 2 setpriv --reuid="$SLURM_JOB_UID" \
        --regid="$SLURM_JOB_GID" --clear-groups -- xargs -0 -r rm -rf -- \
        >/dev/null 2>&1 ;;
    esac ;;
  esac
fi
exit 0
