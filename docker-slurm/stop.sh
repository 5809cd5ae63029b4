#!/usr/bin/env bash
# Stop the daemons docker-slurm/start.sh started (by their pid files), and munged if it
# started that too. Leaves every other Slurm or munge process alone.
#   docker-slurm/stop.sh [--state-dir DIR] [--purge]
set -uo pipefail
STATE=/tmp/shockwave-slurm
PURGE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --state-dir) STATE="$2"; shift 2 ;;
    --purge) PURGE=1; shift ;;
    -h|--help) sed -n '2,4p' "$0"; exit 0 ;;
    *) echo "stop.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -d "$STATE/run" ] || { echo "stop.sh: no cluster state in $STATE" >&2; exit 0; }
pids=()
for f in "$STATE"/run/slurmd-*.pid "$STATE/run/slurmctld.pid"; do
  [ -f "$f" ] || continue
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then kill "$pid" && pids+=("$pid"); fi
  rm -f "$f"
done
if [ -f "$STATE/run/munged.started" ]; then
  [ -f /run/munge/munged.pid ] && kill "$(cat /run/munge/munged.pid)" 2>/dev/null
  rm -f "$STATE/run/munged.started"
fi
for _ in $(seq 1 50); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && break
  sleep 0.2
done
[ "$PURGE" = 1 ] && rm -rf "$STATE"
echo "stopped ${#pids[@]} daemon(s) from $STATE" >&2
