#!/usr/bin/env bash
# The project's test command, the whole suite as CI runs it: install the package with its
# dev tools, lint, type-check, check the import contracts, then pytest with the
# real-cluster tests. With no cluster named by $SLURM_CONF it starts the local test
# cluster (docker-slurm/start.sh, as root where Slurm is installed) and stops it at the
# end; where it cannot, it says why in one line and the real-cluster tests skip.
# Run from anywhere in the checkout; extra arguments go to pytest.
set -euo pipefail
# Two checkouts can test at once on one machine: SHOCKWAVE_TEST_PORT_OFFSET shifts every port.
OFF="${SHOCKWAVE_TEST_PORT_OFFSET:-0}"
cd "$(dirname "$0")/.."
# SHOCKWAVE_SKIP_INSTALL=1: a second checkout tests itself through PYTHONPATH instead of
# re-pointing the one editable install.
[ -n "${SHOCKWAVE_SKIP_INSTALL:-}" ] || python3 -m pip install -q --disable-pip-version-check -e '.[dev]'
echo "== ruff";         python3 -m ruff check .
echo "== mypy";         python3 -m mypy
# (not `lint-imports && echo`: under set -e a failure left of && does not stop the run)
echo "== import contracts"
contracts="$(lint-imports --no-cache 2>&1)" || { echo "$contracts"; exit 1; }
echo "contracts kept"
if [ -z "${SLURM_CONF:-}" ]; then
  why="$(python3 -c 'from slurm_shockwave.live.cluster import missing_for_cluster as m; print(m() or "")')"
  if [ -z "$why" ]; then
    . tests/test-cluster.sh
    start_test_cluster $((17817 + OFF)) $((17900 + OFF))
  else
    echo "== no local Slurm cluster: $why; the real-cluster tests skip"
  fi
fi
echo "== pytest";       python3 -m pytest -q "$@"
