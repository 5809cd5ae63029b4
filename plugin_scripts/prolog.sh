#!/bin/sh
# slurm-shockwave Prolog (runs as root on the node before a job starts).
# Records the start in an audit trail for admins (nothing of the service reads it): one line appended to
# /var/lib/slurm-shockwave/events/<jobid>.log by event() from events.sh, which must sit
# next to this script (Slurm runs it by its absolute path). It must never fail: a failing
# prolog drains the node, so every error is swallowed (`command .` keeps a missing or
# broken events.sh from ending the shell) and the script exits 0.
case "$0" in */*) HERE="${0%/*}" ;; *) HERE=. ;; esac
if [ -r "$HERE/events.sh" ] && command . "$HERE/events.sh" 2>/dev/null; then
  event "$(date +%s) start job=$JOB user=${SLURM_JOB_USER:-?} node=${SLURMD_NODENAME:-$(hostname -s 2>/dev/null)} restart=${SLURM_RESTART_COUNT:-0} gpus=${CUDA_VISIBLE_DEVICES:-${SLURM_JOB_GPUS:-}}" 2>/dev/null
fi
exit 0
