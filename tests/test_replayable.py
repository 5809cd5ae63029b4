"""A simulation is replayable: the same results on a slower or busier machine.

The planner's solver runs under a deterministic work limit (branch-and-bound nodes), not
a wall-clock one, in simulation. Run the same trace twice: once as is, once beside a CPU
hog with the process clock running 100,000 times fast (a machine that much slower, as
far as any wall-clock limit could tell). Every job's outcome must be identical. (With
``time_limit_s: 15`` the second run's makespan differs: 5,602 s against 5,597 s.)

Nor may results depend on where time zero is: live it is when the service first ran, so
a trace shifted by a day or a month must be scheduled exactly as it is, by every policy.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import build_workload, load_throughputs, load_trace
from slurm_shockwave.sim.run import SimResult, simulate
from slurm_shockwave.workloads.bundled import bundled_table


def run() -> SimResult:
    table = bundled_table("wisr")
    trace = generate(TraceShape(num_jobs=16, mean_gap_s=60.0, max_h=0.5), table, seed=3)
    policy = make_policy("shockwave")
    assert policy.config.time_limit_s is None  # simulation has no wall-clock limit
    return simulate(build_workload(trace, table, source="generated"), policy, gpus=4)


def test_same_results_beside_a_cpu_hog_on_a_slow_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    calm = run()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        real = time.perf_counter
        start = real()
        monkeypatch.setattr(time, "perf_counter", lambda: start + 1e5 * (real() - start))
        busy = run()
    finally:
        hog.kill()
        hog.wait()
    assert busy.summary == calm.summary
    assert busy.outcomes == calm.outcomes
    assert busy.rhos == calm.rhos


@functools.cache
def _spans(policy: str, shift_s: float) -> tuple[tuple[int, float, int], ...]:
    """Each job's time in the system and rounds run, the demo trace shifted by
    ``shift_s``; cached, so the unshifted run is simulated once per policy, not per shift."""
    jobs = [replace(j, spec=replace(j.spec, arrival_s=j.spec.arrival_s + shift_s))
            for j in load_trace(None)]
    result = simulate(build_workload(jobs, load_throughputs("builtin:tacc"), source="demo"),
                      make_policy(policy, {}), gpus=16)
    return tuple(sorted((o.job_id, round(o.finish_s - o.arrival_s, 6), o.rounds_run)
                        for o in result.outcomes))


@pytest.mark.parametrize("shift_s", [86_400.0, 30 * 86_400.0])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_the_schedule_does_not_depend_on_where_time_starts(policy: str, shift_s: float) -> None:
    """The module docstring's second rule (docs/service.md states it). Shockwave's
    fairness caps and lateness taken as ratios of absolute times failed it (the 64-job
    demo trace ran with other finish times)."""
    assert _spans(policy, shift_s) == _spans(policy, 0.0)
