# slurm-shockwave: the job event log that prolog.sh and epilog.sh share. Sourced by them
# (from their own directory), never run. event LINE appends LINE to
# DIR/<jobid>.log, a directory only root can write (never a world-writable place such as
# /tmp, where anyone could plant a symlink). If the directory is a symlink, not root's or
# writable by others, nothing is written; errors are swallowed. DIR is a settings line
# (`shockwave install-scripts --events-dir`).
DIR="/var/lib/slurm-shockwave/events"
JOB="${SLURM_JOB_ID:-}"
event() {
  case "$JOB" in ''|*[!0-9]*) return 0 ;; esac
  if [ ! -e "$DIR" ] && [ ! -L "$DIR" ]; then
    (umask 022 && mkdir -p "${DIR%/*}" && umask 077 && mkdir "$DIR") 2>/dev/null || return 0
  fi
  # in the folder itself, then checked there, then by a relative name: checked by path
  # and written by path, whoever owns the folder above (a service that is not root) could
  # swap it for another between the two (a red-team finding)
  (up="$(cd -P "${DIR%/*}" 2>/dev/null && pwd -P)" && cd -P "$DIR" 2>/dev/null \
     && [ "$(pwd -P)" = "$up/${DIR##*/}" ] \
     && [ -n "$(find . -maxdepth 0 -uid 0 ! -perm /022 2>/dev/null)" ] \
     && [ ! -L "./$JOB.log" ] && umask 077 && printf '%s\n' "$1" >> "./$JOB.log") 2>/dev/null
  return 0
}
