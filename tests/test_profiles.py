"""Profiles against the Shockwave artefact's per-epoch profiles (every job, every trace)."""

import json

import pytest

from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.sim.inputs import build_workload, load_throughputs
from slurm_shockwave.sim.trace import read_trace
from slurm_shockwave.workloads.adaptation import accordion_schedule, gns_schedule
from tests.builders import a_spec, a_workload
from tests.conftest import REFERENCE, reference_file


@pytest.mark.reference
@pytest.mark.parametrize("prefix", ["120_", "220_", "900_0.2_5_1000_", "900_0.2_5_100_"])
@pytest.mark.parametrize("bundled", [False, True])
def test_profiles_match_reference(prefix: str, bundled: bool) -> None:
    ref = json.loads(reference_file(f"profiles/{prefix}*.json").read_text())
    trace = read_trace(REFERENCE / "traces" / ref["trace"])
    name = ref["throughputs_file"]
    table = load_throughputs(f"builtin:{name.split('_')[0]}" if bundled
                             else REFERENCE / "throughputs" / name)
    workload = build_workload(trace, table, source=ref["trace"])
    assert len(ref["jobs"]) == len(trace)
    for job in ref["jobs"]:
        ours = workload.profiles[job["job_id"]]
        assert ours.num_epochs == job["num_epochs"], job["job_id"]
        assert [list(s) for s in ours.segments()] == job["bs_segments"], job["job_id"]
        # the issue asks for 1%; we are exact up to the bundled table's rounding
        assert ours.exclusive_s == pytest.approx(job["exclusive_runtime_s"],
                                                 rel=1e-5 if bundled else 1e-8), job["job_id"]


def test_accordion_keeps_warmup_and_critical_regimes() -> None:
    s = accordion_schedule("ResNet-50", 16, 46)
    assert s[:14] == [16] * 14 and s[14:30] == [128] * 16 and s[30:40] == [16] * 10
    assert accordion_schedule("Transformer", 64, 40) == [64] * 40
    # 0.3 * 1040 == 312.0 in floating point; epoch 312 still trains small
    assert accordion_schedule("Recommendation", 512, 1040).index(8192) == 313


def test_gns_doubles_caps_and_reverts_the_last_epoch() -> None:
    s = gns_schedule("LM", 10, 1, 23)
    assert s[:11] == [10] * 11 and s[11:21] == [20] * 10 and s[21] == 40 and s[22] == 10
    assert gns_schedule("LM", 40, 1, 30)[-1] == 80  # one doubling only: no revert
    assert gns_schedule("Transformer", 16, 1, 30) == [16] * 30


def test_missing_larger_batch_size_keeps_the_current_one() -> None:
    from slurm_shockwave.model.throughputs import ThroughputTable

    table = ThroughputTable({("LM", 10, 1): 10.0}, "tiny")
    w = a_workload(a_spec(model="LM", bs=10, epochs=23, mode=AdaptationMode.GNS), table=table)
    assert set(w.profiles[0].bs_by_epoch) == {10}


@pytest.mark.parametrize(("bs", "gpus", "doublings"), [
    (32, 2, (101, 111)), (32, 4, (131, 221)), (64, 1, (101,)), (64, 2, (81,)),
    (64, 4, (191,))])
def test_resnet50_gns_doubles_late_as_the_artefact_does(bs: int, gpus: int,
                                                        doublings: tuple[int, ...]) -> None:
    """The artefact's GNS pattern doubles ResNet-50 at these epochs, which no reference
    trace's job reaches; a review found them missing (such a job ran as static)."""
    schedule = gns_schedule("ResNet-50", bs, gpus, 260)
    assert [e for e in range(1, 259) if schedule[e] > schedule[e - 1]] == list(doublings)
