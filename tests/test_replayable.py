"""A simulation is replayable: the same results on a slower or busier machine.

The planner's solver runs under a deterministic work limit (branch-and-bound nodes), not
a wall-clock one, in simulation. Run the same trace twice: once as is, once beside a CPU
hog with the process clock running 100,000 times fast (a machine that much slower, as
far as any wall-clock limit could tell). Every job's outcome must be identical. (With
``time_limit_s: 15`` the second run's makespan differs: 5,602 s against 5,597 s.)

Nor may results depend on where time zero is: live it is when the service first ran, so
a trace shifted by a day or a month must be scheduled exactly as it is, by every policy.

Nor on the solver's threads (``threads: N``) from one run to the next.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

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


# One simulation in a fresh process (HiGHS's pool of threads is per process), printing
# its outcome and every solve's status and message (the MILPs' node counts).
_THREADED = """
import json, sys
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import build_workload
from slurm_shockwave.sim.run import simulate
from slurm_shockwave.solver import plan_window
from slurm_shockwave.workloads.bundled import bundled_table

solves, solve = [], plan_window.solve
def recorded(*args, **kwargs):
    result = solve(*args, **kwargs)
    solves.append([result.status.value, result.message])
    return result
plan_window.solve = recorded
table = bundled_table("wisr")
trace = generate(TraceShape(num_jobs=40, mean_gap_s=60.0, max_h=0.5), table, seed=3)
policy = make_policy("shockwave", {"threads": int(sys.argv[1])})
r = simulate(build_workload(trace, table, source="generated"), policy, gpus=8)
print(json.dumps({"result": repr((r.summary, r.outcomes, r.rhos)), "solves": solves}))
"""


def _threaded(threads: int) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", _THREADED, str(threads)],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=120, check=True)
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def test_same_results_with_several_solver_threads_run_to_run() -> None:
    """docs/planner.md, "Replayable": HiGHS's MIP search is deterministic with several
    threads. Two runs with ``threads: 2`` (a thread per core here), each in its own
    process: every solve (its status and node count) and every job's outcome the same.
    One with ``threads: 1`` searches differently (5 of the MILPs took other node counts
    with HiGHS 1.16) and here still ends with the same outcomes, which is measured on
    this trace, not promised: if that changes, docs/planner.md must say so."""
    two, again, one = _threaded(2), _threaded(2), _threaded(1)
    solves = two["solves"]
    assert isinstance(solves, list)
    # the MILP ran, and branched, which is where threads could change the search
    assert sum(1 for _, message in solves if "nodes)" in message
               and int(message.rsplit("(", 1)[1].split()[0]) > 1) >= 3
    assert all(status != "error" for status, _ in solves)
    assert again == two
    assert one["result"] == two["result"]
