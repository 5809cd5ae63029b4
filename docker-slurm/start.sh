#!/usr/bin/env bash
# Start a local multi-node GPU Slurm cluster on this machine: the project's test bed and
# the demo's default cluster. Real slurmctld and one `slurmd -N` per node, fake GPUs as
# character devices, non-default ports so it can run beside another cluster.
#
#   sudo docker-slurm/start.sh [--nodes 4] [--gpus-per-node 8] [--state-dir DIR]
#                              [--ctld-port 16817] [--node-port-base 16900]
#                              [--cred-expire 10] [--timeout 90] [--heartbeat PATH]
#                              [--managed-default yes|no] [--gpu-types T1,T2,...]
# Prints `export SHOCKWAVE_HEARTBEAT=...` and, last, `export SLURM_CONF=...` (for eval).
# The heartbeat file (default $STATE/heartbeat) is what the scheduler service writes;
# job_submit.lua holds new managed jobs only while it is fresh. docker-slurm/stop.sh
# ends exactly what this script started (the daemons and the cluster's jobs).
set -euo pipefail

NODES=4
GPUS=8
STATE=/tmp/shockwave-slurm
CTLD_PORT=16817
NODE_PORT_BASE=16900
CRED_EXPIRE=10
TIMEOUT=90
HEARTBEAT=
MANAGED_DEFAULT=yes
GPU_TYPES=
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

die() { echo "start.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES="$2"; shift 2 ;;
    --gpus-per-node) GPUS="$2"; shift 2 ;;
    --state-dir) STATE="$2"; shift 2 ;;
    --ctld-port) CTLD_PORT="$2"; shift 2 ;;
    --node-port-base) NODE_PORT_BASE="$2"; shift 2 ;;
    --cred-expire) CRED_EXPIRE="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --heartbeat) HEARTBEAT="$2"; shift 2 ;;
    --managed-default) MANAGED_DEFAULT="$2"; shift 2 ;;
    --gpu-types) GPU_TYPES="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[ "$(id -u)" = 0 ] || die "must run as root (it makes device files and runs slurmd)"
for bin in slurmctld slurmd sinfo munged munge unmunge pgrep; do
  command -v "$bin" >/dev/null || die "$bin not found: apt-get install slurmctld slurmd slurm-client munge procps"
done
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || die "--nodes must be a positive integer"
[[ "$GPUS" =~ ^[1-9][0-9]*$ ]] || die "--gpus-per-node must be a positive integer"
[[ "$MANAGED_DEFAULT" =~ ^(yes|no)$ ]] || die "--managed-default must be yes or no"
# one GPU type a node (Gres=gpu:TYPE:N), as sites with several kinds of GPU have; none:
# untyped GPUs
IFS=, read -r -a TYPES <<< "$GPU_TYPES"
[ -z "$GPU_TYPES" ] || [ "${#TYPES[@]}" = "$NODES" ] \
  || die "--gpu-types needs one type for each of the $NODES nodes"
for t in "${TYPES[@]}"; do [[ "$t" =~ ^[a-z0-9_]+$ ]] || die "--gpu-types: bad type '$t'"; done
if [ -f "$STATE/run/slurmctld.pid" ] && kill -0 "$(cat "$STATE/run/slurmctld.pid")" 2>/dev/null; then
  # its own exit code: the caller must not stop the cluster it refused to disturb
  echo "start.sh: a cluster from $STATE is already running (docker-slurm/stop.sh --state-dir $STATE)" >&2
  exit 3
fi
[[ "$CTLD_PORT" =~ ^[1-9][0-9]*$ && "$NODE_PORT_BASE" =~ ^[1-9][0-9]*$ ]] \
  || die "--ctld-port and --node-port-base must be port numbers"
# another cluster on these ports (a second demo, or daemons a killed run left) would
# answer our sinfo and take our jobs while our own slurmctld died (found by a red-team)
for port in "$CTLD_PORT" $(seq $((NODE_PORT_BASE + 1)) $((NODE_PORT_BASE + NODES))); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "port $port is in use (another cluster? docker-slurm/stop.sh --state-dir ITS_DIR, or --ctld-port / --node-port-base)"
  fi
done

mkdir -p "$STATE"/{etc,run,log,ctld,dev,spool}
STATE="$(cd "$STATE" && pwd)"
# every local user reads slurm.conf, as on a real cluster (a mktemp state dir is 0700)
chmod a+rx "$STATE" "$STATE/etc"
HEARTBEAT="${HEARTBEAT:-$STATE/heartbeat}"
[[ "$HEARTBEAT" =~ ^/[A-Za-z0-9._/+-]+$ ]] || die "--heartbeat must be an absolute path of [A-Za-z0-9._/+-]"
CONF="$STATE/etc/slurm.conf"
HOST="$(hostname -s)"
LAST=$((NODES))
NODELIST="sw-node[1-$LAST]"
[ "$NODES" = 1 ] && NODELIST="sw-node1"

# Fake GPUs: character devices (like /dev/null) that gres.conf lists, so Slurm sets
# CUDA_VISIBLE_DEVICES for jobs. All nodes share one machine and so one set of files.
for ((g = 0; g < GPUS; g++)); do
  [ -e "$STATE/dev/nvidia$g" ] || mknod "$STATE/dev/nvidia$g" c 1 3
done
# slurmstepd's socket is <spool>/<node>_<job>.<step>: a Unix socket path has at most 107
# bytes, and a long --state-dir (a test's tmp_path) made every launch fail ("launch failed
# requeued held"). A long state dir gets its spool in a short directory of its own.
SPOOL="$STATE/spool"
if [ "${#SPOOL}" -gt 48 ]; then
  if [ -s "$STATE/spool-root" ] && [ -d "$(cat "$STATE/spool-root")" ]; then
    SPOOL="$(cat "$STATE/spool-root")"
  else
    SPOOL="$(mktemp -d /tmp/sw-spool.XXXXXX)"
    echo "$SPOOL" > "$STATE/spool-root"
  fi
fi
for ((n = 1; n <= NODES; n++)); do mkdir -p "$SPOOL/sw-node$n"; done

# munge: reuse a munged that answers (a credential made and decoded), else start one and
# remember that we did. Whether one answers, not whether one runs: a munged another
# cluster's stop.sh is ending, or one in a container's pid namespace, runs but will not.
munge_answers() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_answers; then
  for _ in $(seq 1 50); do pgrep -x munged >/dev/null || break; munge_answers && break; sleep 0.1; done
fi
if ! munge_answers; then
  [ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
  chown -R munge:munge /etc/munge 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  # 0755 whatever root's umask: every local user's munge (the job-side client) needs the socket
  install -d -m 0755 /run/munge /var/log/munge /var/lib/munge
  chmod 0700 /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  if id munge >/dev/null 2>&1; then
    su -s /bin/sh munge -c "munged --pid-file=/run/munge/munged.pid" || munged --force
  else
    munged --force
  fi
  echo started > "$STATE/run/munged.started"
  for _ in $(seq 1 50); do munge_answers && break; sleep 0.1; done
  munge_answers || die "munged started but munge -n | unmunge fails (see /var/log/munge/munged.log)"
fi

{
  echo "# Written by docker-slurm/start.sh: a local test cluster. Edit start.sh, not this."
  echo "ClusterName=shockwave-test"
  echo "SlurmctldHost=$HOST(127.0.0.1)"
  echo "SlurmctldPort=$CTLD_PORT"
  echo "SlurmUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=cred_expire=$CRED_EXPIRE"
  echo "StateSaveLocation=$STATE/ctld"
  echo "SlurmdSpoolDir=$SPOOL/%n"
  echo "SlurmctldPidFile=$STATE/run/slurmctld.pid"
  echo "SlurmdPidFile=$STATE/run/slurmd-%n.pid"
  echo "SlurmctldLogFile=$STATE/log/slurmctld.log"
  echo "SlurmdLogFile=$STATE/log/slurmd-%n.log"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "SwitchType=switch/none"
  echo "MpiDefault=none"
  echo "SchedulerType=sched/backfill"
  echo "SchedulerParameters=sched_interval=2,bf_interval=5"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_Core"
  echo "GresTypes=gpu"
  # multifactor, as etc/slurm.conf.shockwave: the planner's pinned priorities
  # (scontrol update priority=) are not recalculated; other jobs age. No slurmdbd here,
  # so no fair-share weight.
  echo "PriorityType=priority/multifactor"
  echo "PriorityWeightAge=1000"
  echo "PriorityWeightPartition=1000"
  echo "PriorityWeightJobSize=0"
  echo "PriorityWeightQOS=0"
  echo "PriorityWeightFairshare=0"
  echo "PriorityMaxAge=00:10:00"  # a test cluster: age shows within minutes
  echo "PriorityCalcPeriod=1"  # minutes: recalculated often, so pinning is observable
  echo "JobRequeue=1"
  echo "KillWait=10"
  echo "MinJobAge=300"
  echo "ReturnToService=2"
  echo "SlurmdParameters=config_overrides"
  echo "TreeWidth=65533"
  echo "JobSubmitPlugins=lua"
  echo "Prolog=$STATE/etc/prolog.sh"
  echo "Epilog=$STATE/etc/epilog.sh"
  echo "TaskProlog=$STATE/etc/task_prolog.sh"
  for ((n = 1; n <= NODES; n++)); do
    echo "NodeName=sw-node$n NodeHostname=sw-node$n NodeAddr=127.0.0.1 Port=$((NODE_PORT_BASE + n)) CPUs=16 RealMemory=64000 Gres=gpu:${TYPES[$((n - 1))]:+${TYPES[$((n - 1))]}:}$GPUS State=UNKNOWN"
  done
  if [ "$MANAGED_DEFAULT" = yes ]; then OTHER_DEFAULT=NO; else OTHER_DEFAULT=YES; fi
  echo "PartitionName=shockwave Nodes=$NODELIST Default=${MANAGED_DEFAULT^^} MaxTime=INFINITE State=UP"
  echo "PartitionName=other Nodes=$NODELIST Default=$OTHER_DEFAULT MaxTime=INFINITE State=UP"
} > "$CONF"
if [ -z "$GPU_TYPES" ]; then
  echo "NodeName=$NODELIST Name=gpu File=$STATE/dev/nvidia[0-$((GPUS - 1))]" > "$STATE/etc/gres.conf"
else
  for ((n = 1; n <= NODES; n++)); do
    echo "NodeName=sw-node$n Name=gpu Type=${TYPES[$((n - 1))]} File=$STATE/dev/nvidia[0-$((GPUS - 1))]"
  done > "$STATE/etc/gres.conf"
fi
# 24.x needs cgroup.conf to say there are no cgroups here; 22.05 knows no "disabled".
SLURM_MAJOR="$(slurmd -V | sed -E 's/^slurm[^0-9]*([0-9]+)\..*/\1/')"
if [ "${SLURM_MAJOR:-0}" -ge 23 ]; then
  echo "CgroupPlugin=disabled" > "$STATE/etc/cgroup.conf"
else
  rm -f "$STATE/etc/cgroup.conf"
fi
# The plugin with this cluster's settings patched into its settings lines.
IS_DEFAULT=false; [ "$MANAGED_DEFAULT" = yes ] && IS_DEFAULT=true
sed -e "s|^SHOCKWAVE_PARTITION = .*|SHOCKWAVE_PARTITION = \"shockwave\"|" \
    -e "s|^if SHOCKWAVE_IS_DEFAULT == nil then .*|SHOCKWAVE_IS_DEFAULT = $IS_DEFAULT|" \
    -e "s|^SHOCKWAVE_HEARTBEAT = .*|SHOCKWAVE_HEARTBEAT = \"$HEARTBEAT\"|" \
    "$REPO/plugin_scripts/job_submit.lua" > "$STATE/etc/job_submit.lua"
# the TaskProlog and the Epilog read the service's endpoint file beside the heartbeat; the
# Epilog runs the shockwave command by its path (Slurm gives it a PATH of its own); each
# cluster keeps its own audit trail (events.sh's DIR), not the host's
SW_BIN="$(python3 -c 'from slurm_shockwave.slurm.plugin_files import shockwave_bin as b; print(b())' 2>/dev/null || true)"
for script in prolog.sh epilog.sh events.sh task_prolog.sh; do
  sed -e "s|^ENDPOINT_FILE=.*|ENDPOINT_FILE=\"$(dirname "$HEARTBEAT")/endpoint\"|" \
      -e "s|^SHOCKWAVE_BIN=.*|SHOCKWAVE_BIN=\"$SW_BIN\"|" \
      -e "s|^DIR=.*|DIR=\"$STATE/events\"|" \
      "$REPO/plugin_scripts/$script" > "$STATE/etc/$script"
  chmod 755 "$STATE/etc/$script"
done
for setting in "SHOCKWAVE_PARTITION = \"shockwave\"" "SHOCKWAVE_IS_DEFAULT = $IS_DEFAULT" \
               "SHOCKWAVE_HEARTBEAT = \"$HEARTBEAT\""; do
  grep -qxF "$setting" "$STATE/etc/job_submit.lua" || die "could not set '$setting' in job_submit.lua"
done

export SLURM_CONF="$CONF"
slurmctld -f "$CONF"
for ((n = 1; n <= NODES; n++)); do
  slurmd -f "$CONF" -N "sw-node$n"
done

deadline=$((SECONDS + TIMEOUT))
while :; do
  ctld="$(cat "$STATE/run/slurmctld.pid" 2>/dev/null || true)"
  if [ -n "$ctld" ] && ! kill -0 "$ctld" 2>/dev/null; then
    # before sinfo: else it would go on asking whatever else answers on its port
    echo "start.sh: slurmctld exited; the end of $STATE/log/slurmctld.log:" >&2
    tail -n 5 "$STATE/log/slurmctld.log" >&2 2>/dev/null || true
    exit 1
  fi
  # a refused sinfo (controller not listening yet) is one more try, not the end of start.sh
  states="$(sinfo -h -N -o '%t' 2>/dev/null | sort -u | tr '\n' ' ' || true)"
  [ "$states" = "idle " ] && [ -n "$ctld" ] && kill -0 "$ctld" 2>/dev/null && break
  if [ $SECONDS -ge $deadline ]; then
    echo "start.sh: nodes not idle after ${TIMEOUT}s (states: ${states:-none}); logs in $STATE/log" >&2
    exit 1
  fi
  sleep 1
done
if [ "$MANAGED_DEFAULT" = yes ]; then DEF="shockwave (default) and other"; else DEF="shockwave and other (default)"; fi
echo "cluster up: $NODES nodes x $GPUS GPUs, partitions $DEF; heartbeat $HEARTBEAT; state in $STATE" >&2
echo "export SHOCKWAVE_HEARTBEAT=$HEARTBEAT"
echo "export SLURM_CONF=$CONF"
