#!/usr/bin/env bash
# Stop everything docker-slurm/start.sh started from DIR: first the cluster's jobs
# (scancel of each of its job ids, through its own slurm.conf), then its daemons (by
# their pid files, and any other slurmd or slurmctld whose environment or command line
# names DIR/etc/slurm.conf), then any slurmstepd left of THIS cluster (the ones whose environment
# says SLURM_CONF=DIR/etc/slurm.conf, or that run in DIR) with their processes, and munged if start.sh
# started that too. Leaves every other Slurm or munge process, and other clusters'
# jobs, alone.
#   docker-slurm/stop.sh [--state-dir DIR] [--purge]
set -uo pipefail
STATE=/tmp/shockwave-slurm
PURGE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --state-dir) STATE="$2"; shift 2 ;;
    --purge) PURGE=1; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "stop.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -d "$STATE/run" ] || { echo "stop.sh: no cluster state in $STATE" >&2; exit 0; }
STATE="$(cd "$STATE" && pwd)"
CONF="$STATE/etc/slurm.conf"

# This cluster's processes named $1: their environment or command line names this
# cluster's slurm.conf, or they run in its state folder (25.11's slurmstepd keeps no
# SLURM_CONF in its environment; it runs where its slurmd does, the folder's log/: a
# job step outlived a CI run's 25.11 cluster).
cluster_procs() {
  local pid cwd
  for pid in $(pgrep -x "$1"); do
    cwd="$(readlink "/proc/$pid/cwd" 2>/dev/null)"
    case "$cwd/" in "$STATE"/*) echo "$pid"; continue ;; esac
    # grep reads it all (no -q): under pipefail a writer cut off by an early exit
    # (SIGPIPE) failed the match
    { tr '\0' '\n' < "/proc/$pid/environ"; tr '\0' '\n' < "/proc/$pid/cmdline"; } \
      2>/dev/null | grep -xF -e "SLURM_CONF=$CONF" -e "$CONF" >/dev/null && echo "$pid"
  done
}
cluster_stepds() { cluster_procs slurmstepd; }
descendants() {
  local child
  for child in $(pgrep -P "$1"); do echo "$child"; descendants "$child"; done
}

# 1. the cluster's jobs, cancelled one by one through its own controller
cancelled=0
if [ -f "$CONF" ] && { { [ -f "$STATE/run/slurmctld.pid" ] && kill -0 "$(cat "$STATE/run/slurmctld.pid")" 2>/dev/null; } \
                       || [ -n "$(cluster_procs slurmctld)" ]; }; then
  ids="$(SLURM_CONF="$CONF" timeout 20 squeue -h -t all -o '%i %T' 2>/dev/null \
         | awk '$2 !~ /^(COMPLETED|CANCELLED|FAILED|TIMEOUT|NODE_FAIL|PREEMPTED|BOOT_FAIL|DEADLINE|OUT_OF_MEMORY)$/ {print $1}' \
         | sort -u)"
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086
    SLURM_CONF="$CONF" timeout 20 scancel $ids 2>/dev/null
    cancelled=$(echo "$ids" | wc -w)
    for _ in $(seq 1 60); do  # KillWait is 10 s: SIGTERM, then SIGKILL
      [ -z "$(cluster_stepds)" ] && break
      sleep 0.5
    done
  fi
fi

# 2. the daemons
pids=()
for f in "$STATE"/run/slurmd-*.pid "$STATE/run/slurmctld.pid"; do
  [ -f "$f" ] || continue
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then kill "$pid" && pids+=("$pid"); fi
  rm -f "$f"
done
# ...and this cluster's daemons no pid file names (one restarted by hand, or whose pid
# file another start overwrote: a red-team found a slurmd left running)
for pid in $(cluster_procs slurmd) $(cluster_procs slurmctld); do
  case " ${pids[*]} " in *" $pid "*) continue ;; esac
  kill "$pid" 2>/dev/null && pids+=("$pid")
done
for _ in $(seq 1 50); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && break
  sleep 0.2
done
# munged once our daemons are gone (a slurmctld still saving its state after SIGTERM
# counted as another cluster's, so it was never stopped)...
if [ -f "$STATE/run/munged.started" ]; then
  # ...but never from under another cluster on this machine: they authenticate with it
  # too (seen: a test run's teardown cut munge from a live benchmark's cluster)
  if ! pgrep -x slurmctld >/dev/null && ! pgrep -x slurmd >/dev/null; then
    mpid="$(cat /run/munge/munged.pid 2>/dev/null || true)"
    if [ -n "$mpid" ] && kill "$mpid" 2>/dev/null; then
      # gone before we return: a start.sh right after must not find it dying and reuse it
      # (seen in CI: the 25.11 cluster started beside the 22.05 one's exiting munged)
      for _ in $(seq 1 50); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
  rm -f "$STATE/run/munged.started"
fi

# 3. whatever of this cluster's job steps outlived its daemons, with their processes
left=0
for stepd in $(cluster_stepds); do
  for pid in $(descendants "$stepd") "$stepd"; do kill -KILL "$pid" 2>/dev/null; done
  left=$((left + 1))
done
# the short spool directory start.sh made for a long state dir (only ever /tmp/sw-spool.*):
# slurmd's scratch, of no use once the daemons are gone; the state dir keeps the logs
root="$(cat "$STATE/spool-root" 2>/dev/null)"
case "$root" in /tmp/sw-spool.?*) rm -rf "$root"; rm -f "$STATE/spool-root" ;; esac
[ "$PURGE" = 1 ] && rm -rf "$STATE"
echo "stopped ${#pids[@]} daemon(s) from $STATE; cancelled $cancelled job(s); killed $left leftover slurmstepd(s)" >&2
