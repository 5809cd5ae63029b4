#!/bin/sh
# slurm-shockwave Epilog (runs as root on the node after a job ends, requeues included).
# Records the end for the planner's progress view in the same root-only place as
# prolog.sh (/var/lib/slurm-shockwave/events/<jobid>.log); never fails.
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
event "$(date +%s) end job=$JOB user=${SLURM_JOB_USER:-?} node=$(hostname -s 2>/dev/null)" 2>/dev/null
exit 0
