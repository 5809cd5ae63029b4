"""The fluid relaxation (solver/fluid.py): exact on instances solved by hand, and never on
the wrong side of what a real schedule does, for every policy, in the simulator; for fixed
jobs and for elastic ones."""

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
SPARSE = TraceShape(num_jobs=12, mean_gap_s=900, min_h=0.2, max_h=1.0,
                    gpu_mix=(0.5, 0.3, 0.2, 0.0))
"""12 jobs arriving over about 3 hours on 16 GPUs: an elastic job mostly runs alone, on
its widest count where a policy widens it."""


def _jobs(arrival: list[float], work: list[float], gpus: list[int], capacity: int,
          speeds: tuple[dict[int, float], ...] | None = None) -> fluid.FluidJobs:
    return fluid.FluidJobs(np.array(arrival, dtype=float), np.array(work, dtype=float),
                           np.array(gpus), capacity, speeds)


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
    with pytest.raises(ValueError, match="speeds"):
        _jobs([0.0], [10.0], [1], 4, ({1: 1.0, 8: 2.0},))
    with pytest.raises(ValueError, match="speeds"):
        _jobs([0.0], [10.0], [1], 4, ({1: 1.0, 2: 0.0},))
    with pytest.raises(ValueError, match="speeds"):
        _jobs([0.0, 0.0], [10.0, 10.0], [1, 1], 4, ({1: 1.0}, {}))


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


ELASTIC_1_2 = {1: 1.0, 2: 1.8}
"""A 1-GPU job that runs 1.8 x as fast on 2."""


def test_an_elastic_job_alone_runs_on_its_fastest_count() -> None:
    # 360 s of work at 1 GPU, 1.8 x as fast on 2 of a 2-GPU cluster: 200 s at 2 GPUs
    jobs = _jobs([0.0], [360.0], [1], 2, (ELASTIC_1_2,))
    assert fluid.min_makespan_s(jobs, 120.0) == pytest.approx(200.0, abs=1.0)
    assert fluid.min_worst_rho(jobs, 1.0, 120.0) == pytest.approx(200.0 / 360.0, rel=2e-3)
    # each slot's progress at its earliest instant loses at most slot/2, whatever the slot
    for slot in (120.0, 60.0, 10.0):
        bound = fluid.min_avg_jct_s(jobs, fluid.deadlines(jobs), slot)
        assert 200.0 - slot / 2 - 1e-6 <= bound <= 200.0 + 1e-6, slot
    # its work at its best speed is 200 s: a deadline before arrival + 200 is out of reach
    assert math.isinf(fluid.min_avg_jct_s(jobs, np.array([199.0]), 10.0))
    assert not fluid.feasible(jobs, np.array([190.0]), 10.0)


def test_two_elastic_jobs_take_the_cluster_in_turn() -> None:
    # two such jobs of 180 s and 360 s on 2 GPUs: the shorter on both GPUs first (100 s),
    # then the longer (200 s more) gives (100 + 300) / 2 = 200, the least (both on one
    # GPU each first only puts A's end later); the relaxation is below it
    jobs = _jobs([0.0, 0.0], [180.0, 360.0], [1, 1], 2, (ELASTIC_1_2, ELASTIC_1_2))
    bound = fluid.min_avg_jct_s(jobs, fluid.deadlines(jobs), 10.0)
    assert 190.0 <= bound <= 200.0 + 1e-6
    # the longer by 200 can only run on both GPUs from 0, the shorter after it: 250
    forced = fluid.min_avg_jct_s(jobs, np.array([1000.0, 200.0]), 10.0)
    assert 250.0 - 5.0 - 1e-6 <= forced <= 250.0 + 1e-6
    assert math.isinf(fluid.min_avg_jct_s(jobs, np.array([1000.0, 199.0]), 10.0))
    # the least makespan: both on one GPU each (the efficient count) for 180 s, then the
    # longer on both for 100 s: 280 (a slot's straddling lets the relaxation go below)
    assert 270.0 - 1.0 <= fluid.min_makespan_s(jobs, 10.0) <= 280.0


def test_a_job_kept_at_its_slow_count_is_not_credited_its_best_speed() -> None:
    """A job that can only run at its slow count finishes later than its mean busy time
    plus its work over twice its best speed: the rate term f(T) of its seconds at each
    count, not p / (2 r_max). On 2 GPUs, B (1 GPU, 720 s) must run from 0 to 720, so A
    (720 s at 1 GPU, 1.5x on 2) has one GPU until 720 and ends at 720 at the soonest:
    the least average JCT is 720. In 10 s slots each job's least mean busy time is 355
    (10 s of progress at the start of each slot), so the rate term p / (2 r_max) would
    give (355 + 720 / 3 + 355 + 720 / 2) / 2 = 655."""
    jobs = _jobs([0.0, 0.0], [720.0, 720.0], [1, 1], 2, ({1: 1.0, 2: 1.5}, {1: 1.0}))
    exact, loose = 720.0, (355.0 + 720.0 / 3 + 355.0 + 720.0 / 2) / 2
    # A held to 720 as well runs at 1 GPU throughout (2 GPUs beside B make 0.75 of a
    # GPU-second's work): f is p / 2 there, 715 = the exact 720 less the slots' 5
    held = fluid.min_avg_jct_s(jobs, np.array([720.0, 720.0]), 10.0)
    assert held == pytest.approx(715.0, abs=1e-6)
    # free, A trades M for f: the relaxation lets it run on 2 GPUs for half of each second
    # beside B (gangs share a slot's GPU-seconds). In continuous time, with the last U of
    # its GPU-seconds before 720 spent on 2 GPUs and U / 6 s on 2 GPUs after 720 (T =
    # (p - U, 2U / 3)), M + f = (p^2 - p U / 3 + 15 U^2 / 48) / p, least at U = 384:
    # 41/45 x 720 = 656, so (656 + 720) / 2 = 688; slots take at most a slot off each
    # job's mean busy time
    free = fluid.min_avg_jct_s(jobs, np.array([math.inf, 720.0]), 10.0)
    assert loose + 20 < 688.0 - 10.0 <= free <= 688.0 + 1e-6 < held < exact
    assert fluid.min_avg_jct_s(jobs, np.array([math.inf, 720.0]), 1.0) == pytest.approx(
        688.0, abs=1.0)


def test_jobs_of_one_count_keep_one_lp_and_their_rate_term() -> None:
    """Where every job has one count the average-JCT program has no rate-term columns, its
    rate term p / (2 x the count's speed) in the offset, and min_avg_jct_s solves one LP:
    the crowded trace's fixed bound is the figure from before f (df116e6), and one count
    at speed 1.8 is p / 3.6."""
    table = load_throughputs(None)
    jobs = traces.fluid_jobs(build_workload(generate(CROWDED, table, seed=3), table,
                                            source="t"), 16)
    deadline = np.minimum(fluid.deadlines(jobs), fluid.jct_horizon_s(jobs, 120.0))
    program = fluid._program(jobs, deadline, 120.0, jct_objective=True)
    rows = fluid._program(jobs, deadline, 120.0, jct_objective=False)
    assert program is not None and rows is not None and program.shape == rows.shape
    assert program.offset == -float(np.mean(jobs.work_s / 2 - jobs.arrival_s))
    assert fluid.min_avg_jct_s(jobs, fluid.deadlines(jobs), 120.0) == \
        pytest.approx(855.4261486040958, rel=1e-9) == fluid._solve(program)[1]
    one = _jobs([0.0], [360.0], [2], 2, ({2: 1.8},))
    program = fluid._program(one, np.array([400.0]), 10.0, jct_objective=True)
    assert program is not None and program.offset == -360.0 / 3.6


def test_a_fixed_job_is_an_elastic_job_of_one_count() -> None:
    """Fixed jobs given as one count at speed 1 give the fixed bounds to the last digit;
    a job of one count c at speed s is a fixed job on c of work / s (its rho apart)."""
    for arrival, work, gpus, cap in (([50.0], [300.0], [2], 4),
                                     ([0.0, 0.0], [100.0, 100.0], [2, 2], 2),
                                     ([0.0, 0.0], [100.0, 300.0], [1, 1], 1),
                                     ([0.0, 30.0, 60.0], [400.0, 200.0, 90.0], [1, 2, 4], 4)):
        fixed = _jobs(arrival, work, gpus, cap)
        same = _jobs(arrival, work, gpus, cap, tuple({g: 1.0} for g in gpus))
        for slot in (60.0, 10.0):
            assert fluid.min_avg_jct_s(same, fluid.deadlines(same), slot) == \
                fluid.min_avg_jct_s(fixed, fluid.deadlines(fixed), slot)
            assert fluid.min_makespan_s(same, slot) == fluid.min_makespan_s(fixed, slot)
            assert fluid.min_worst_rho(same, 1.5, slot) == fluid.min_worst_rho(fixed, 1.5, slot)
    # 360 s of work at 1.8 x on 2 GPUs is 200 s on 2 GPUs, beside a fixed 2-GPU job
    one_count = _jobs([0.0, 40.0], [360.0, 150.0], [1, 2], 2, ({2: 1.8}, {2: 1.0}))
    as_fixed = _jobs([0.0, 40.0], [200.0, 150.0], [2, 2], 2)
    for slot in (60.0, 10.0):
        assert fluid.min_avg_jct_s(one_count, fluid.deadlines(one_count), slot) == \
            pytest.approx(fluid.min_avg_jct_s(as_fixed, fluid.deadlines(as_fixed), slot),
                          rel=1e-9)
        assert fluid.min_makespan_s(one_count, slot) == pytest.approx(
            fluid.min_makespan_s(as_fixed, slot), abs=1.0)


def test_a_fixed_trace_gives_the_fixed_jobs_bounds() -> None:
    """benchmarks/traces.py gives a trace without elastic jobs no speeds, and one made
    elastic the speed of the best epoch at each count (1 at the request)."""
    table = load_throughputs(None)
    trace = generate(CROWDED, table, seed=3)
    fixed = traces.fluid_jobs(build_workload(trace, table, source="t"), 16)
    assert fixed.speeds is None
    elastic_trace = [make_elastic(j, 0.5, 2.0) for j in trace]
    workload = build_workload(elastic_trace, table, source="e")
    elastic = traces.fluid_jobs(workload, 16)
    assert elastic.speeds is not None
    for job, by in zip(elastic_trace, elastic.speeds, strict=True):
        profile = workload.profiles[job.spec.job_id]
        assert sorted(by) == list(job.spec.gpu_counts()) and by[job.spec.gpus] == 1.0
        for c, v in by.items():
            assert v == max(profile.epoch_s_at(bs, job.spec.gpus) / profile.epoch_s_at(bs, c)
                            for bs, _ in profile.segments())
    assert fluid.min_avg_jct_s(elastic, fluid.deadlines(elastic), 120.0) < \
        fluid.min_avg_jct_s(fixed, fluid.deadlines(fixed), 120.0)


LAG = 0.01
"""The simulator applies a batch-size change at a round's end (``benchmarks/traces.py::
lower_bound_s``), so a job whose batch size changes may run up to about 1% faster than
its work at the relaxation's speeds: on SPARSE, Shockwave's last job (4 batch sizes)
ends 0.4% sooner than its work at its best speed, its makespan 2.6 s below the bound."""


def test_no_policy_beats_the_elastic_bounds_in_the_simulator() -> None:
    """Every registered policy on two traces made elastic (0.5x-2x), restarts and node
    placement included: its makespan, worst rho and average JCT are never below the
    relaxation's, nor its average JCT below the least within its own makespan and worst
    rho (what benchmarks/elastic.py's bound within issue 11's limits is). The makespan,
    one job's finish, within ``LAG`` of that job's time; the rest as they are. On
    CROWDED restarts and gangs keep every policy far above the bounds; on SPARSE the
    policies that widen jobs reach the makespan bound (within ``LAG``) and come within
    14% of the average-JCT bound, which a bound that took the speeds or the rate term
    too low would be above."""
    table = load_throughputs(None)
    gpus = 16
    for label, shape in (("crowded", CROWDED), ("sparse", SPARSE)):
        trace = [make_elastic(j, 0.5, 2.0) for j in generate(shape, table, seed=3)]
        workload = build_workload(trace, table, source="e")
        jobs = traces.fluid_jobs(workload, gpus)
        c = contention(len(workload.jobs), gpus)
        makespan = fluid.min_makespan_s(jobs, 120.0)
        rho = fluid.min_worst_rho(jobs, c, 120.0)
        jct = fluid.min_avg_jct_s(jobs, fluid.deadlines(jobs), 120.0)
        lag_s = LAG * float(np.max(jobs.work_s / jobs.options.top_speed))
        for name in POLICIES:
            s = simulate(workload, make_policy(name), gpus=gpus, gpus_per_node=8,
                         restore_s=20.0).summary
            assert s.makespan_s >= makespan - lag_s, (label, name)
            assert s.worst_rho >= rho, (label, name)
            assert s.avg_jct_s >= jct - 1e-6, (label, name)
            within = fluid.deadlines(jobs, worst_rho=s.worst_rho, contention=c,
                                     makespan_s=s.makespan_s + lag_s)
            assert s.avg_jct_s >= fluid.min_avg_jct_s(jobs, within, 120.0) - 1e-6, \
                (label, name)


def test_the_elastic_benchmark_weighs_the_bound_against_issue_11s_target() -> None:
    """benchmarks/elastic.py --bounds: the least average JCT of the elastic trace, of any
    schedule and within the fixed Shockwave run's limits, against 0.85 x its average
    JCT; never above what Shockwave does with the same jobs elastic (on SPARSE, whose
    figures are near the bounds), none within limits that are out of reach, and a
    target below the bound proven out of reach."""
    from benchmarks.elastic import fluid_bounds
    from slurm_shockwave.report.results import summary_record

    table = load_throughputs(None)
    trace = generate(SPARSE, table, seed=3)
    fixed = build_workload(trace, table, source="f")
    elastic = build_workload([make_elastic(j, 0.5, 2.0) for j in trace], table, source="e")
    gpus = 16
    runs = {label: simulate(w, make_policy("shockwave"), gpus=gpus, gpus_per_node=8,
                            restore_s=20.0)
            for label, w in (("shockwave_fixed", fixed), ("shockwave_elastic", elastic))}
    records = {label: summary_record(r) for label, r in runs.items()}
    ref = runs["shockwave_fixed"].summary
    jobs = traces.fluid_jobs(elastic, gpus)
    # the last job arrives too late for any schedule to end by 0.95 x the fixed run's end
    row = fluid_bounds(fixed, elastic, gpus, records, 120.0)
    assert 0.95 * ref.makespan_s < fluid.min_makespan_s(jobs, 120.0)
    assert row["avg_jct_s_within_limits"] is None and row["proven_unreachable"] is True
    assert row["target_avg_jct_s"] == pytest.approx(0.85 * ref.avg_jct_s, abs=0.1)
    assert row["limits"] == {"makespan_s": pytest.approx(0.95 * ref.makespan_s, abs=1e-3),
                             "worst_rho": pytest.approx(ref.worst_rho, abs=1e-5)}
    free, as_fixed = (float(str(row[k])) for k in ("avg_jct_s", "avg_jct_s_fixed"))
    assert free < as_fixed == pytest.approx(fluid.min_avg_jct_s(
        traces.fluid_jobs(fixed, gpus), fluid.deadlines(traces.fluid_jobs(fixed, gpus)),
        120.0), abs=0.05)
    assert runs["shockwave_elastic"].summary.avg_jct_s >= free
    # against a fixed run 10% longer, the limits are in reach and the target is not proven
    # out of reach; against one 0.85 x as long on average as the bound, it is
    records["shockwave_fixed"] = {**records["shockwave_fixed"],
                                  "makespan_s": 1.1 * ref.makespan_s}
    row = fluid_bounds(fixed, elastic, gpus, records, 120.0)
    within = float(str(row["avg_jct_s_within_limits"]))
    assert free <= within < float(str(row["target_avg_jct_s"]))
    assert row["proven_unreachable"] is False
    records["shockwave_fixed"]["avg_jct_s"] = 0.99 * within / 0.85
    assert fluid_bounds(fixed, elastic, gpus, records, 120.0)["proven_unreachable"] is True
