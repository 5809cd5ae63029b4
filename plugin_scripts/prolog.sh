#!/bin/sh
# slurm-shockwave Prolog (runs as root on the node before a job starts).
# Records the start for the planner's progress view. It must never fail: a failing
# prolog drains the node, so every error is swallowed and the script exits 0.
LOG="${SHOCKWAVE_EVENT_LOG:-/tmp/shockwave-events.log}"
printf '%s start job=%s user=%s node=%s restart=%s gpus=%s\n' "$(date +%s)" \
  "${SLURM_JOB_ID:-?}" "${SLURM_JOB_USER:-?}" "$(hostname -s 2>/dev/null)" \
  "${SLURM_RESTART_COUNT:-0}" "${CUDA_VISIBLE_DEVICES:-${SLURM_JOB_GPUS:-}}" >> "$LOG" 2>/dev/null
exit 0
