"""The paper's canonical 120-job trace on 32 GPUs with every baseline."""

import pytest

from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.sim.inputs import build_workload, load_throughputs
from slurm_shockwave.sim.run import simulate
from slurm_shockwave.sim.trace import read_trace
from tests.conftest import reference_file

LOWER_BOUND_S = 20_518  # job 100: arrival 4,077 s + 16,441 s exclusive runtime
PAPER_MAKESPAN = {"ossp": 24_205, "themis": 31_929, "gavel": 33_208, "allox": 32_489,
                  "mst": 31_909, "gandiva_fair": 32_367}


@pytest.fixture(scope="module")
def workload():
    trace = read_trace(reference_file("traces/120_*.trace"))
    table = load_throughputs(reference_file("throughputs/tacc_throughputs.json"))
    return build_workload(trace, table, source="120")


@pytest.mark.reference
@pytest.mark.parametrize("name", list(POLICIES))
def test_baseline_respects_the_lower_bound(workload, name: str) -> None:
    r = simulate(workload, make_policy(name), gpus=32)
    assert r.summary.jobs == 120
    assert r.summary.makespan_s >= LOWER_BOUND_S
    assert 0 < r.summary.utilization <= 1
    if name in PAPER_MAKESPAN:  # same inputs, same mechanism: within 15% of the paper
        assert r.summary.makespan_s == pytest.approx(PAPER_MAKESPAN[name], rel=0.15)
