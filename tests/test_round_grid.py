"""The round-grid schedule (solver/round_grid.py, benchmarks/grid.py): the least makespan
of brute force on tiny instances, and a schedule the simulator replays no later than
planned."""

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.grid import measure, online, runtimes_s
from slurm_shockwave.live.run import ROUND_TRACE_S, live_restore_s
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import build_workload, load_throughputs
from slurm_shockwave.solver import round_grid

R, RESTORE, HORIZON = 120.0, 20.0, 9


def _instance(seed: int) -> round_grid.GridJobs:
    rng = np.random.default_rng(seed)
    n = 3
    return round_grid.grid_jobs(np.sort(rng.uniform(0, 300, n)).round(),
                                rng.uniform(50, 330, n).round(), rng.integers(1, 3, n),
                                int(rng.integers(2, 4)), R, RESTORE)


def _brute(jobs: round_grid.GridJobs) -> float:
    """The least makespan over every choice of first rounds (within HORIZON of the
    arrival)."""
    need, last = round_grid.rounds_needed(jobs)
    first = np.ceil((jobs.arrival_s - jobs.t0_s) / R - 1e-9).astype(int)
    options = []
    for j in range(len(need)):
        window = range(first[j], first[j] + HORIZON)
        options.append([tuple(range(s, s + int(need[j]))) for s in window])
    best = math.inf
    for choice in itertools.product(*options):
        used: dict[int, int] = {}
        for j, rounds in enumerate(choice):
            for r in rounds:
                used[r] = used.get(r, 0) + int(jobs.gpus[j])
        if max(used.values()) <= jobs.capacity:
            best = min(best, max(jobs.t0_s + rounds[-1] * R + last[j]
                                 for j, rounds in enumerate(choice)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_least_makespan_is_brute_forces_own(seed: int) -> None:
    jobs = _instance(seed)
    scheduled = _brute(jobs)
    got = round_grid.least_makespan_s(jobs)
    assert scheduled <= got <= scheduled + 1.0
    for front in (False, True):
        starts = round_grid.schedule(jobs, got, front=front)
        assert starts is not None
        assert round_grid.schedule_makespan_s(jobs, starts) == pytest.approx(scheduled)
        need, _ = round_grid.rounds_needed(jobs)
        assert np.all(jobs.t0_s + starts * R >= jobs.arrival_s)
        used = np.zeros(int((starts + need).max()))
        for j, s in enumerate(starts):
            used[s:s + need[j]] += jobs.gpus[j]
        assert used.max() <= jobs.capacity


def test_a_makespan_below_a_jobs_own_rounds_has_no_schedule() -> None:
    # one 1-GPU job of 200 s at 0: rounds [0, 120) and [120, 240), finishing at 220
    jobs = round_grid.grid_jobs(np.array([0.0]), np.array([200.0]), np.array([1]), 1,
                                R, RESTORE)
    assert round_grid.schedule(jobs, 219.0) is None
    starts = round_grid.schedule(jobs, 220.0)
    assert starts is not None and list(starts) == [0]


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_the_simulator_replays_the_schedule_no_later_than_planned(seed: int) -> None:
    """Each job started in its planned round: where every job of a round ended early the
    simulator starts the next round early (seed 3 has one), and the rest moves earlier.
    Measured on these traces; not a rule (a job due in a round that starts early may not
    have arrived yet)."""
    table = load_throughputs(None)
    trace = generate(TraceShape(num_jobs=14, mean_gap_s=40, min_h=0.1, max_h=0.6,
                                gpu_mix=(0.5, 0.3, 0.2, 0.0)), table, seed=seed)
    workload = build_workload(trace, table, source="generated")
    row = measure("crowded", workload, 4, runtimes_s(workload, R, RESTORE), R, RESTORE)
    assert row["replayed_restarts"] == 0
    assert row["lower_bound_s"] <= row["replayed_makespan_s"] <= row["schedule_makespan_s"]


def test_with_every_job_known_at_once_the_replanner_keeps_the_offline_makespan() -> None:
    """``Replan`` knows the runtimes, not the arrivals: when every job arrives at once it
    knows everything, and each round's re-plan keeps the last one's schedule feasible, so
    it finishes no later than the offline schedule (its exact runtimes ignore the
    batch-size lag, so these jobs keep one batch size)."""
    from dataclasses import replace

    from slurm_shockwave.model.job import AdaptationMode

    table = load_throughputs(None)
    trace = generate(TraceShape(num_jobs=5, mean_gap_s=40, min_h=0.1, max_h=0.5,
                                gpu_mix=(0.5, 0.3, 0.2, 0.0)), table, seed=4)
    at_once = [replace(j, spec=replace(j.spec, arrival_s=0.0, mode=AdaptationMode.STATIC))
               for j in trace]
    workload = build_workload(at_once, table, source="generated")
    run_s = runtimes_s(workload, R, RESTORE)
    row = {**measure("at once", workload, 4, run_s, R, RESTORE),
           **online(workload, 4, run_s, R, RESTORE)}
    assert row["runtime_lag_max"] == 1.0
    assert row["online_makespan_s"] <= row["schedule_makespan_s"] + 1e-6


def test_a_replay_keeps_its_plan_across_an_idle_gap() -> None:
    """With nothing to run the simulator jumps to the next arrival without counting
    rounds: the replay goes by the planned round's time there (it went by the count, and
    started the second job 9 rounds late)."""
    from tests.builders import a_spec, a_workload

    workload = a_workload(a_spec(0, epochs=30), a_spec(1, epochs=30, arrival_s=3000.0))
    row = measure("idle gap", workload, 4, runtimes_s(workload, R, RESTORE), R, RESTORE)
    assert row["replayed_makespan_s"] == row["schedule_makespan_s"]


def test_a_trace_file_is_measured_at_a_live_runs_costs() -> None:
    """``--trace FILE --gpus G --time-scale X``: the figures a live run's sit beside
    (docs/evaluation.md), each start charged the restore that run pays."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "benchmarks.grid", "--trace", "demo-live",
                           "--gpus", "16", "--time-scale", "12", "--json"], cwd=root,
                          capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(proc.stdout)
    assert (out["round_s"], out["restore_s"]) == (ROUND_TRACE_S, live_restore_s(12))
    (row,) = out["traces"]
    assert (row["trace"], row["jobs"], row["gpus"]) == ("demo-live", 16, 16)
    assert row["lower_bound_s"] <= min(row["schedule_makespan_s"], row["online_makespan_s"])
    assert row["replayed_makespan_s"] <= row["schedule_makespan_s"] + 1e-6
