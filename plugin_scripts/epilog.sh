#!/bin/sh
# slurm-shockwave Epilog (runs as root on the node after a job ends, requeues included).
# Records the end for the planner's progress view in the same root-only place as
# prolog.sh, by event() from events.sh next to this script; never fails, exits 0.
case "$0" in */*) HERE="${0%/*}" ;; *) HERE=. ;; esac
if [ -r "$HERE/events.sh" ] && command . "$HERE/events.sh" 2>/dev/null; then
  event "$(date +%s) end job=$JOB user=${SLURM_JOB_USER:-?} node=$(hostname -s 2>/dev/null)" 2>/dev/null
fi
exit 0
