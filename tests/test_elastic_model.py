"""Elastic jobs in the model, the traces, placement and the simulator (docs/elastic.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_shockwave.engine.placement import place
from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode, JobSpec
from slurm_shockwave.model.plan import Memory, Plan, Planned
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.sim.run import simulate
from slurm_shockwave.sim.trace import make_elastic, parse_trace, to_json_line
from slurm_shockwave.workloads.bundled import bundled_table
from slurm_shockwave.workloads.profile import build_profile
from slurm_shockwave.workloads.scaling import SCALING_EFFICIENCY, fill_rates
from tests.builders import a_job, a_spec, a_view, a_workload


def _spec(gpus: int, lo: int, hi: int) -> JobSpec:
    return JobSpec(0, "LM", 10, gpus, AdaptationMode.STATIC, 0.0, 5, gpus_range=(lo, hi))


@pytest.mark.parametrize(("gpus", "lo", "hi", "counts"), [
    (1, 1, 2, (1, 2)), (2, 1, 4, (1, 2, 4)), (8, 4, 16, (4, 8, 16)), (3, 3, 8, (3, 6, 8)),
    (6, 1, 12, (1, 3, 6, 12)), (8, 1, 2, (1, 2)),
])
def test_counts_are_the_request_halved_or_doubled_inside_the_range(
        gpus: int, lo: int, hi: int, counts: tuple[int, ...]) -> None:
    assert _spec(gpus, lo, hi).gpu_counts() == counts
    assert a_spec(gpus=4).gpu_counts() == (4,) and not a_spec().is_elastic


def test_prior_scales_from_the_nearest_measured_count() -> None:
    rates = fill_rates({1: 10.0, 4: 30.0}, [1, 2, 4, 8, 16])
    assert rates[1] == 10.0 and rates[4] == 30.0
    assert rates[8] == pytest.approx(30.0 * 2 * SCALING_EFFICIENCY)
    assert rates[16] == pytest.approx(30.0 * (2 * SCALING_EFFICIENCY) ** 2)
    assert rates[2] == pytest.approx(30.0 / (2 * SCALING_EFFICIENCY))  # tie: the larger


def test_profile_uses_the_table_where_it_has_the_count_else_the_prior() -> None:
    table = bundled_table("tacc")
    p = build_profile(_spec(8, 4, 16), table)
    at8, at4, at16 = p.epoch_s_by_bs[10], p.epoch_s_at(10, 4), p.epoch_s_at(10, 16)
    assert at8 / at4 == pytest.approx(table.steps_per_s("LM", 10, 4)
                                      / table.steps_per_s("LM", 10, 8))
    assert at8 / at16 == pytest.approx(2 * SCALING_EFFICIENCY)
    assert p.exclusive_s == pytest.approx(5 * at8)  # the rho denominator: the request


def test_trace_round_trip_and_make_elastic() -> None:
    (job,) = parse_trace(['{"model": "LM", "batch_size": 10, "epochs": 3, "gpus": 4}'],
                         source="t")
    e = make_elastic(job, 0.5, 2)
    assert e.spec.gpus_range == (2, 8)
    assert parse_trace([to_json_line(e)], source="t")[0].spec == e.spec
    assert make_elastic(replace(job, spec=replace(job.spec, gpus=1)), 0.5, 2) \
        .spec.gpus_range == (1, 2)


@pytest.mark.parametrize("value", ["[2, 1]", "[0, 2]", "4", '"1-2"', "[1, 2, 3]", "[1.5, 2]"])
def test_a_bad_range_names_the_field(value: str) -> None:
    line = f'{{"model": "LM", "batch_size": 10, "epochs": 3, "gpus_range": {value}}}'
    with pytest.raises(InputError) as err:
        parse_trace([line], source="t")
    assert err.value.field == "gpus_range"


def test_trace_elastic_command(tmp_path: Path) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text('{"model": "LM", "batch_size": 10, "epochs": 3, "gpus": 2}\n')
    out = tmp_path / "e.jsonl"
    cmd = [sys.executable, "-m", "slurm_shockwave.cli", "trace", "elastic", str(src)]
    subprocess.run([*cmd, "--range", "0.5,2", "--out", str(out)], check=True,
                   capture_output=True)
    assert json.loads(out.read_text())["gpus_range"] == [1, 4]
    bad = subprocess.run([*cmd, "--range", "2,1", "--out", str(out)], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "--range" in bad.stderr


def test_placement_resizes_a_running_job_to_the_planned_count() -> None:
    job = a_job(0, gpus=2, running=True, slots=("pool:0", "pool:1"))
    job = replace(job, spec=replace(job.spec, gpus_range=(1, 4)))
    view = a_view(job, gpus=4)
    assert place(view, Plan((0,))).slots[0] == ("pool:0", "pool:1")  # kept
    assert len(place(view, Plan((0,), gpus={0: 4})).slots[0]) == 4


class _Resizer(Policy[object]):
    """Runs every job; from round ``at`` on, job 0 on ``count`` GPUs."""

    name = "resizer"
    summary = "test"

    def __init__(self, at: int, count: int) -> None:
        super().__init__(None)
        self.at, self.count = at, count

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        gpus = {0: self.count} if view.round_index >= self.at else {}
        return Planned(Plan(tuple(j.job_id for j in view.jobs), gpus=gpus), memory)


def test_a_resize_pays_a_restore_and_runs_at_the_new_count() -> None:
    spec = replace(a_spec(epochs=20, gpus=1), gpus_range=(1, 2))
    fixed = simulate(a_workload(spec), _Resizer(at=10**9, count=1), gpus=2)
    grown = simulate(a_workload(spec), _Resizer(at=1, count=2), gpus=2)
    epoch_1 = fixed.summary.makespan_s - 20  # one restore at the start
    work_left = epoch_1 - 100  # first round: 100 s of work on one GPU
    # the test table scales linearly: on 2 GPUs the rest takes half, after a restore
    assert grown.summary.makespan_s == pytest.approx(120 + 20 + work_left / 2)
    assert grown.outcomes[0].exclusive_s == fixed.outcomes[0].exclusive_s


def test_a_resize_waits_out_the_requeue_delay_on_its_new_gpus() -> None:
    """Live, a resized (or migrated) job is requeued and Slurm starts it again only after
    cred_expire + 1 s; the simulator with a requeue delay holds the new GPUs idle that
    long before the restore (with none, the paper's model, nothing changes)."""
    spec = replace(a_spec(epochs=20, gpus=1), gpus_range=(1, 2))
    instant = simulate(a_workload(spec), _Resizer(at=1, count=2), gpus=2)
    delayed = simulate(a_workload(spec), _Resizer(at=1, count=2), gpus=2, requeue_delay_s=180)
    assert delayed.summary.makespan_s == pytest.approx(instant.summary.makespan_s + 180)


def test_a_request_outside_1_2_4_8_reads_its_other_counts_from_the_table() -> None:
    """Found by a review: for a request the table has but outside 1/2/4/8 (a site's own
    table with 3- and 6-GPU entries), the request's epoch time went in as epochs a
    second beside the table's steps a second: 2 GPUs read 0.015 s an epoch, not 23 s."""
    from slurm_shockwave.model.throughputs import from_compact
    from slurm_shockwave.workloads.profile import epoch_seconds

    base = bundled_table("tacc")
    rows = {}
    for bs in (16, 32, 64, 128, 256):
        row = {str(g): base.steps_per_s("ResNet-18", bs, g) for g in (1, 2, 4, 8)
               if base.has("ResNet-18", bs, g)}
        if "2" in row and "4" in row:
            row["3"] = (row["2"] + row["4"]) / 2
            row["6"] = row["4"] * 1.4
        rows[str(bs)] = row
    table = from_compact({"ResNet-18": rows}, source="custom")
    spec = JobSpec(0, "ResNet-18", 32, 3, AdaptationMode.STATIC, 0.0, 4, gpus_range=(2, 6))
    profile = build_profile(spec, table)
    for gpus in (2, 6):
        assert profile.epoch_s_at(32, gpus) == pytest.approx(
            epoch_seconds("ResNet-18", 32, gpus, table))
