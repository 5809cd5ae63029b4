"""The fluid relaxation (solver/fluid.py): exact on instances solved by hand, and never on
the wrong side of what a real schedule does, for every policy, in the simulator."""

import math

import numpy as np
import pytest

from benchmarks import traces
from slurm_shockwave.metrics.summary import contention
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import build_workload, load_throughputs
from slurm_shockwave.sim.run import simulate
from slurm_shockwave.sim.trace import make_elastic
from slurm_shockwave.solver import fluid

CROWDED = TraceShape(num_jobs=24, mean_gap_s=30, min_h=0.1, max_h=1.0,
                     gpu_mix=(0.5, 0.3, 0.15, 0.05))
"""24 jobs arriving over about 12 minutes, run on 16 GPUs: restarts, gangs and node
placement all matter."""


def _jobs(arrival: list[float], work: list[float], gpus: list[int],
          capacity: int) -> fluid.FluidJobs:
    return fluid.FluidJobs(np.array(arrival, dtype=float), np.array(work, dtype=float),
                           np.array(gpus), capacity)


def test_one_job_finishes_at_arrival_plus_work() -> None:
    jobs = _jobs([50.0], [300.0], [2], 4)
    assert fluid.min_makespan_s(jobs, 120.0) == pytest.approx(350.0, abs=1.0)
    assert fluid.min_worst_rho(jobs, 1.0, 120.0) == pytest.approx(1.0, rel=2e-3)
    # exact 300; each slot's seconds are taken at the slot's earliest instant, which
    # loses at most slot/2
    bound = fluid.min_avg_jct_s(jobs, fluid.deadlines(jobs), 120.0)
    assert 300.0 - 60.0 - 1e-6 <= bound <= 300.0 + 1e-6


def test_two_gangs_that_each_fill_the_cluster_cannot_share_it() -> None:
    # 2 GPUs, two 2-GPU jobs of 100 s at time 0: one of them finishes at 200 at best
    jobs = _jobs([0.0, 0.0], [100.0, 100.0], [2, 2], 2)
    assert fluid.min_makespan_s(jobs, 60.0) == pytest.approx(200.0, abs=1.0)
    # the true least worst rho is 2; a slot holding both deadlines lets the two gangs
    # overlap inside it (capacity is per slot), so the bound is below 2 by at most a slot
    rho = fluid.min_worst_rho(jobs, 1.0, 60.0)
    assert 2.0 - 60.0 / 100.0 <= rho <= 2.0
    assert fluid.min_worst_rho(jobs, 1.0, 10.0) >= rho
    assert math.isinf(fluid.min_worst_rho(jobs, 1.0, 60.0, makespan_s=150.0))
    # the true optimum is 150 (100 and 200); the bound is at most slot/2 below it
    bound = fluid.min_avg_jct_s(jobs, fluid.deadlines(jobs), 60.0)
    assert 150.0 - 30.0 - 1e-6 <= bound <= 150.0 + 1e-6


def test_shortest_first_is_the_jct_optimum_the_bound_stays_under() -> None:
    # one GPU, 100 s and 300 s at time 0: shortest first gives (100 + 400) / 2 = 250
    jobs = _jobs([0.0, 0.0], [100.0, 300.0], [1, 1], 1)
    bound = fluid.min_avg_jct_s(jobs, fluid.deadlines(jobs), 10.0)
    assert 250.0 - 5.0 - 1e-6 <= bound <= 250.0 + 1e-6
    # forcing the long job to finish by 300 forces the order long-short: (300 + 400) / 2
    forced = fluid.min_avg_jct_s(jobs, np.array([400.0, 300.0]), 10.0)
    assert forced == pytest.approx(350.0, abs=5.0) and forced > bound
    assert math.isinf(fluid.min_avg_jct_s(jobs, np.array([250.0, 300.0]), 10.0))


def test_bad_jobs_are_refused() -> None:
    with pytest.raises(ValueError, match="capacity"):
        _jobs([0.0], [10.0], [8], 4)
    with pytest.raises(ValueError, match="one arrival"):
        _jobs([0.0, 1.0], [10.0], [1], 4)
    with pytest.raises(ValueError, match="arrival >= 0"):
        _jobs([-1.0], [10.0], [1], 4)
    with pytest.raises(ValueError, match="slot_s"):
        fluid.feasible(_jobs([0.0], [10.0], [1], 4), np.array([20.0]), 0.0)


def test_no_policy_beats_the_bounds_in_the_simulator() -> None:
    """Every registered policy, restarts and node placement included, on a crowded trace:
    its makespan, worst rho and average JCT are never below the relaxation's."""
    table = load_throughputs(None)
    workload = build_workload(generate(CROWDED, table, seed=3), table, source="t")
    gpus = 16
    jobs = traces.fluid_jobs(workload, gpus)
    c = contention(len(workload.jobs), gpus)
    makespan = fluid.min_makespan_s(jobs, 120.0)
    rho = fluid.min_worst_rho(jobs, c, 120.0)
    jct = fluid.min_avg_jct_s(jobs, fluid.deadlines(jobs), 120.0)
    assert makespan >= traces.lower_bound_s(workload, gpus) - 1e-6
    for name in POLICIES:
        s = simulate(workload, make_policy(name), gpus=gpus, gpus_per_node=8,
                     restore_s=20.0).summary
        assert s.makespan_s >= makespan - 1.0, name
        assert s.worst_rho >= rho, name
        assert s.avg_jct_s >= jct - 1e-6, name


def test_the_flow_and_the_linear_program_agree_on_feasibility() -> None:
    """``feasible`` answers with a maximum flow; the same program as an LP (HiGHS) must
    give the same answer on random instances, feasible and not."""
    rng = np.random.default_rng(7)
    answers = set()
    for _ in range(40):
        n = int(rng.integers(2, 9))
        jobs = fluid.FluidJobs(rng.uniform(0, 500, n), rng.uniform(50, 600, n),
                               rng.choice([1, 2, 4], n), 4)
        deadline = jobs.arrival_s + jobs.work_s * rng.uniform(1.0, 4.0, n)
        program = fluid._program(jobs, deadline, 60.0, jct_objective=False)
        lp = program is not None and fluid._solve(program)[0]
        assert fluid.feasible(jobs, deadline, 60.0) == lp
        answers.add(lp)
    assert answers == {True, False}


def test_no_policy_resizing_jobs_beats_the_elastic_bound() -> None:
    """benchmarks/traces.py's elastic bound: the simple bound for fixed jobs, lower once
    the jobs may resize, and never above what a policy that resizes them does."""
    table = load_throughputs(None)
    trace = generate(CROWDED, table, seed=3)
    fixed = build_workload(trace, table, source="t")
    elastic = build_workload([make_elastic(j, 0.5, 2.0) for j in trace], table, source="e")
    gpus = 16
    bound = traces.elastic_lower_bound_s(elastic, gpus)
    assert traces.elastic_lower_bound_s(fixed, gpus) == pytest.approx(
        traces.lower_bound_s(fixed, gpus), rel=1e-12)
    assert bound < traces.lower_bound_s(fixed, gpus)
    for name in ("shockwave", "elastic_greedy", "stretch_edf"):
        s = simulate(elastic, make_policy(name), gpus=gpus, gpus_per_node=8,
                     restore_s=20.0).summary
        assert s.makespan_s >= bound, name
