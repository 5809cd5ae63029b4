# Sourced by tests/run.sh and tests/run-25.11.sh: start_test_cluster CTLD_PORT NODE_PORT_BASE
# starts a local test cluster in a fresh state folder (docker-slurm/start.sh) and exports
# SLURM_CONF and SHOCKWAVE_HEARTBEAT; on exit the cluster is stopped. A start that fails
# ends the run with start.sh's reason (its output is not eval'd blind: an empty one would
# run the tests against no cluster). After a failed run the cluster's logs are kept and
# their ends printed, so a CI log says what Slurm said.
start_test_cluster() {
  TEST_CLUSTER_STATE="$(mktemp -d /tmp/shockwave-test-slurm.XXXXXX)"
  trap stop_test_cluster EXIT
  local exports
  exports="$(bash docker-slurm/start.sh --state-dir "$TEST_CLUSTER_STATE" \
             --ctld-port "$1" --node-port-base "$2")"
  eval "$exports"
  [ -n "${SLURM_CONF:-}" ] || { echo "start.sh printed no SLURM_CONF" >&2; exit 1; }
  export SLURM_CONF SHOCKWAVE_HEARTBEAT
}

stop_test_cluster() {
  local rc=$? purge=--purge
  if [ "$rc" != 0 ]; then
    purge=
    echo "== exit $rc: the test cluster's logs are kept in $TEST_CLUSTER_STATE/log; their ends:" >&2
    tail -n 15 "$TEST_CLUSTER_STATE"/log/*.log >&2 2>/dev/null || true
  fi
  bash docker-slurm/stop.sh --state-dir "$TEST_CLUSTER_STATE" $purge >/dev/null 2>&1 || true
  return "$rc"
}
