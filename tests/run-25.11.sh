#!/usr/bin/env bash
# The backend contract on Slurm 25.11 with both backends (CLI and pyslurm), beside the
# main test bed (Debian's 22.05, tests/run.sh): builds Slurm 25.11 and pyslurm against it
# (docker-slurm/build-slurm-25.11.sh; cached in its prefix), starts a 25.11 test cluster
# with its own state directory and ports, runs the contract tests with pyslurm required
# (a skip would be a failure here), and stops the cluster. Without the Slurm source
# tarball it says so in one line and exits 0 (nothing to run against).
#   bash tests/run-25.11.sh [--tarball PATH] [--prefix DIR]    (as root; extra: pytest args after --)
set -euo pipefail
OFF="${SHOCKWAVE_TEST_PORT_OFFSET:-0}"
cd "$(dirname "$0")/.."
build=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do build+=("$1"); shift; done
[ "${1:-}" != -- ] || shift
set +e
exports="$(bash docker-slurm/build-slurm-25.11.sh "${build[@]}")"
rc=$?
set -e
if [ "$rc" = 3 ]; then
  echo "== Slurm 25.11: no source tarball, the pyslurm contract tests did not run (see above)"
  exit 0
fi
[ "$rc" = 0 ] || exit "$rc"
eval "$exports"
unset SLURM_CONF
. tests/test-cluster.sh
start_test_cluster $((19817 + OFF)) $((19900 + OFF))
export SHOCKWAVE_REQUIRE_SLURM=1 SHOCKWAVE_REQUIRE_PYSLURM=1
echo "== $(slurmd -V), pyslurm $(python3 -c 'import pyslurm; print(pyslurm.__version__)')"
python3 -m pytest -q -p no:cacheprovider tests/test_slurm_contract.py tests/test_backend_choice.py "$@"
