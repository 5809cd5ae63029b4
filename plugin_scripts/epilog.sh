#!/bin/sh
# slurm-shockwave Epilog (runs as root on the node after a job ends, requeues included).
# Records the end for the planner's progress view; never fails (see prolog.sh).
LOG="${SHOCKWAVE_EVENT_LOG:-/tmp/shockwave-events.log}"
printf '%s end job=%s user=%s node=%s\n' "$(date +%s)" "${SLURM_JOB_ID:-?}" \
  "${SLURM_JOB_USER:-?}" "$(hostname -s 2>/dev/null)" >> "$LOG" 2>/dev/null
exit 0
