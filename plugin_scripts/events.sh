# slurm-shockwave: the job event log that prolog.sh and epilog.sh share. Sourced by them
# (from their own directory), never run. event LINE appends LINE to
# /var/lib/slurm-shockwave/events/<jobid>.log, a directory only root can write (never a
# world-writable place such as /tmp, where anyone could plant a symlink). If the
# directory is a symlink or not owned by root, nothing is written; errors are swallowed.
DIR=/var/lib/slurm-shockwave/events
JOB="${SLURM_JOB_ID:-}"
event() {
  case "$JOB" in ''|*[!0-9]*) return 0 ;; esac
  if [ ! -e "$DIR" ] && [ ! -L "$DIR" ]; then
    (umask 022 && mkdir -p "${DIR%/*}" && umask 077 && mkdir "$DIR") 2>/dev/null || return 0
  fi
  [ -d "$DIR" ] && [ ! -L "$DIR" ] || return 0
  [ "$(stat -c %u "$DIR" 2>/dev/null)" = 0 ] || return 0
  [ ! -L "$DIR/$JOB.log" ] || return 0
  (umask 077 && printf '%s\n' "$1" >> "$DIR/$JOB.log") 2>/dev/null
}
