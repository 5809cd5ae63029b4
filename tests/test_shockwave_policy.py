"""The Shockwave planner on small hand-checkable clusters."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_shockwave.engine.round import run_round
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.model.plan import ReasonCode
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.policies.shockwave import fairness
from slurm_shockwave.policies.shockwave.schedule import pack
from slurm_shockwave.prediction.dirichlet import regime_support, remaining_s
from slurm_shockwave.sim.run import make_nodes, simulate
from slurm_shockwave.sim.world import SimulatedCluster
from tests.builders import a_spec, a_workload


def test_dirichlet_matches_the_paper_worked_example() -> None:
    # job 0 of the 120-job trace: LM bs10 GNS, 23 epochs; profile regimes 10/20/40 with
    # epoch times 62.9/43.8/31.9 s. The paper's support is the profile's; at p = 0 it
    # predicts 1016 s (true 1225 s).
    durations = {10: 62.874732, 20: 43.843826, 40: 31.86233}
    assert remaining_s(23, 0, {}, (10, 20, 40), durations, current_bs=10) == pytest.approx(
        1016, abs=1)
    # ten epochs done at bs 10, the eleventh in progress still at bs 10 (paper: 495 s)
    later = remaining_s(23, 10, {10: 10}, (10, 20, 40), durations, current_bs=10)
    assert later == pytest.approx(495, abs=2)
    # 20 done (11 at bs 10, 9 at bs 20), the 21st at bs 20 (paper: 93 s)
    assert remaining_s(23, 20, {10: 11, 20: 9}, (10, 20, 40), durations,
                       current_bs=20) == pytest.approx(93, abs=2)


@pytest.mark.reference
def test_worked_example_with_the_policys_own_support() -> None:
    """The same job as the policy sees it: support from its mode (GNS doublings up to the
    model maximum, so 10/20/40/80, not the profile's 10/20/40) and epoch times from the
    throughput table. It predicts 950 / 449 / 96 s (paper: 1016 / 495 / 93; true 1225 s
    at epoch 0); docs/planner.md quotes both."""
    from slurm_shockwave.model.job import Job, JobProgress
    from slurm_shockwave.model.lifecycle import Phase
    from slurm_shockwave.policies.shockwave.estimates import estimate
    from slurm_shockwave.sim.inputs import build_workload, load_throughputs
    from slurm_shockwave.sim.trace import read_trace
    from slurm_shockwave.workloads.profile import run_lengths
    from tests.conftest import reference_file

    trace = read_trace(reference_file("traces/120_*.trace"))
    table = load_throughputs(reference_file("throughputs/tacc_throughputs.json"))
    workload = build_workload(trace[:1], table, source="120")
    spec, prof = workload.jobs[0].spec, workload.profiles[0]
    assert regime_support(spec.mode, spec.model, spec.init_bs) == (10, 20, 40, 80)
    predicted = []
    for done in (0, 10, 20):
        bs = prof.bs_by_epoch[done]
        progress = JobProgress(epochs_done=done, bs=bs, epoch_s=prof.epoch_s_by_bs[bs],
                               bs_history=tuple(run_lengths(prof.bs_by_epoch[:done])),
                               epoch_s_by_bs=tuple(sorted(prof.epoch_s_by_bs.items())))
        predicted.append(estimate(Job(spec, progress, Phase.PENDING)).remaining_s)
    assert predicted == pytest.approx([950, 449, 96], abs=1)


_RHO = st.floats(0.0, 50.0, allow_nan=False)


@given(_RHO, _RHO, st.booleans(), st.booleans(), st.floats(0.0, 20.0))
def test_lateness_weights_grow_with_lateness(a: float, b: float, short: bool,
                                               other: bool, lam: float) -> None:
    """For each kind of job; and up to rho 1 (on time) for any two jobs, whatever their
    kinds: a short on-time job weighed rho^100, 0.006 at 0.95 against a long one's 0.03
    at 0.5 (an audit). Past 1 a job about to finish is pushed above a longer one."""
    lo, hi = sorted((a, b))
    w = fairness.lateness_weight(np.array([lo, hi]), np.array([short, short]), lam)
    assert fairness.PRIORITY_RANGE[0] <= w[0] <= w[1] <= fairness.PRIORITY_RANGE[1]
    if hi <= 1.0:
        w = fairness.lateness_weight(np.array([lo, hi]), np.array([short, other]), lam)
        assert w[0] <= w[1]
    at = fairness.lateness_weight(np.array([hi, hi]), np.array([True, False]), lam)
    assert at[0] >= at[1] if hi > 1.0 else at[0] == at[1]


def test_the_program_solved_weighs_every_job_by_its_lateness(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an audit: the weight function was monotone but the program solved was
    not: a job whose cap still held weighed 1 whatever its lateness, one whose cap was
    out of reach (a long job: at rho~ 0.6 already) weighed rho~^lambda, 0.08, less than
    every on-track job. Here the weights each solve is given, against each job's
    projected rho~ (the plan's), on a crowded cluster with caps held and dropped."""
    from slurm_shockwave.policies.shockwave.policy import Shockwave

    given_weights: list[np.ndarray] = []
    solve = Shockwave._run

    def run(self: Shockwave, inputs: object) -> object:
        given_weights.append(np.array(inputs.weight))  # type: ignore[attr-defined]
        return solve(self, inputs)  # type: ignore[arg-type]

    monkeypatch.setattr(Shockwave, "_run", run)
    # two long jobs among short ones on 2 GPUs: the long ones' caps go out of reach
    # while they are on time (the old program weighed them below the short ones)
    jobs = [a_spec(0, epochs=300), a_spec(1, epochs=300, arrival_s=600),
            *(a_spec(i, epochs=10, arrival_s=60 * i) for i in range(2, 14))]
    world = SimulatedCluster(a_workload(*jobs), make_nodes(2))
    # the market's own order: the lookahead's (step 9) finishes the short jobs so soon
    # that no program with every cap held comes
    policy = make_policy("shockwave", {"lookahead": False})
    memory: dict = {}
    seen_relaxed = seen_kept = 0
    for _ in range(150):  # the first program whose caps all hold: round 110
        if world.done:
            break
        given_weights.clear()
        report = run_round(world, policy, memory, world)
        memory = dict(report.memory)
        plan = memory["plan"]
        if given_weights and plan["start"] == report.round_index:
            rho = np.array([plan["rho"][str(j)] for j in plan["per_job"]])
            later = (rho[:, None] < rho[None, :]) & (rho[None, :] <= 1.0)  # the plan's
            for w in given_weights:  # rho~ is rounded to 3 places: ties are not compared
                earlier_w = np.broadcast_to(w[:, None], later.shape)[later]
                assert np.all(earlier_w <= np.broadcast_to(w, later.shape)[later]), (rho, w)
            seen_relaxed += plan["relaxed"]
            seen_kept += not plan["relaxed"]
        world.advance()
    assert seen_relaxed and seen_kept  # both kinds of program were checked


def test_lateness_weight_of_the_review_case() -> None:
    # a job at rho 0.61 weighed 0.08 and one at 0.59 weighed 1
    w = fairness.lateness_weight(np.array([0.59, 0.61]), np.array([False, False]), 5.0)
    assert w[1] > w[0]


def test_regime_support_from_the_mode() -> None:
    assert regime_support(AdaptationMode.GNS, "LM", 10) == (10, 20, 40, 80)
    assert regime_support(AdaptationMode.ACCORDION, "ResNet-18", 32) == (32, 256)
    assert regime_support(AdaptationMode.STATIC, "LM", 10) == (10,)


def test_fair_target_is_time_weighted_with_momentum() -> None:
    state = fairness.record(None, 0, 100.0)
    state = fairness.record(state, 4, 200.0)   # 100 stood 4 rounds
    # at round 5: average (100*4 + 200*1) / 5 = 120; 0.9*120 + 0.1*200 = 128
    assert fairness.target(state, 5, 0.9) == pytest.approx(128.0)


def test_pack_keeps_gangs_capacity_and_runs_critical_full_window_jobs_first() -> None:
    rounds, gpus = {1: 2, 2: 3, 3: 4}, {1: 2, 2: 2, 3: 4}
    plan = pack(rounds, gpus, [1, 2, 3], capacity=4, window=4, first=[3])
    for jobs in plan:
        assert sum(gpus[j] for j in jobs) <= 4
    assert all(3 in r for r in plan)  # the critical job granted every round got every round


def test_pack_places_a_full_window_job_off_the_critical_path_in_the_windows_order() -> None:
    """The short gang jobs ahead of it in the order get their early rounds (the wait of a
    short gang job behind long ones, docs/evaluation.md); it takes what room is left."""
    rounds, gpus = {1: 2, 2: 3, 3: 4}, {1: 2, 2: 2, 3: 4}
    plan = pack(rounds, gpus, [1, 2, 3], capacity=4, window=4)
    assert plan[0] == [1, 2] and plan[1] == [1, 2] and plan[2] == [2]
    assert plan[3] == [3]


def _run(jobs, gpus, config=None, rounds=400):
    workload = a_workload(*jobs)
    world = SimulatedCluster(workload, make_nodes(gpus))
    policy = make_policy("shockwave", config)
    memory: dict = {}
    reports = []
    while not world.done and len(reports) < rounds:
        report = run_round(world, policy, memory, world)
        memory = dict(report.memory)
        reports.append(report)
        world.advance()
    return world, reports, memory


def test_never_exceeds_capacity_and_every_job_finishes() -> None:
    jobs = [a_spec(i, gpus=g, epochs=e, arrival_s=a)
            for i, (g, e, a) in enumerate([(1, 30, 0), (2, 10, 0), (4, 20, 100), (1, 5, 300),
                                           (2, 40, 400), (1, 8, 800)])]
    world, reports, memory = _run(jobs, 4)
    assert world.done and len(world.finished) == len(jobs)
    for r in reports:
        assert r.gpus_busy <= 4
    json.dumps(memory)  # memory is serialisable as the engine stores it


def test_long_job_is_started_early_for_makespan() -> None:
    # one long job and many short ones on 2 GPUs: the planner must not leave the long
    # job for last (the makespan term), unlike a pure shortest-first policy
    jobs = [a_spec(0, epochs=120)] + [a_spec(i, epochs=4, arrival_s=0) for i in range(1, 9)]
    sw = simulate(a_workload(*jobs), make_policy("shockwave"), gpus=2)
    srtf = simulate(a_workload(*jobs), make_policy("srtf"), gpus=2)
    assert sw.summary.makespan_s < srtf.summary.makespan_s


def test_deterministic() -> None:
    jobs = [a_spec(i, gpus=1 + i % 2, epochs=5 + 3 * i, arrival_s=60 * i) for i in range(8)]
    a = simulate(a_workload(*jobs), make_policy("shockwave"), gpus=4)
    b = simulate(a_workload(*jobs), make_policy("shockwave"), gpus=4)
    assert [(o.job_id, o.finish_s) for o in a.outcomes] == [(o.job_id, o.finish_s)
                                                            for o in b.outcomes]


def test_honours_fairness_when_feasible() -> None:
    # two equal jobs on one GPU: the fair finish of each is twice its runtime; the plan
    # must not run one to completion while the other waits past that
    jobs = [a_spec(0, epochs=8), a_spec(1, epochs=8)]
    sw = simulate(a_workload(*jobs), make_policy("shockwave", {"rho_max": 1.0}), gpus=1)
    assert sw.summary.worst_rho <= 1.1


def test_relaxes_and_says_so_when_fairness_cannot_hold() -> None:
    # far more work than GPUs: fair finish times are out of reach for some jobs
    jobs = [a_spec(i, epochs=40, arrival_s=0) for i in range(12)]
    _, reports, memory = _run(jobs, 2, rounds=3)
    assert memory["plan"]["relaxed"] is True
    codes = {r.code for rep in reports for r in rep.reasons.values()}
    assert ReasonCode.SCHEDULED in codes or ReasonCode.SOLVER_TIMEOUT_FALLBACK in codes


def test_config_errors_name_the_field() -> None:
    with pytest.raises(InputError) as err:
        make_policy("shockwave", {"solver": "cplex"})
    assert err.value.field == "shockwave.solver"
    with pytest.raises(InputError) as err:
        make_policy("shockwave", {"window_rounds": 0})
    assert err.value.field == "shockwave.window_rounds"


def test_prediction_noise_is_seeded() -> None:
    jobs = [a_spec(i, epochs=5 + i, arrival_s=30 * i) for i in range(6)]
    cfg = {"prediction_noise": 0.5, "seed": 3}
    a = simulate(a_workload(*jobs), make_policy("shockwave", cfg), gpus=2)
    b = simulate(a_workload(*jobs), make_policy("shockwave", cfg), gpus=2)
    assert a.summary == b.summary


def test_window_order_finishers_then_rescued_then_market() -> None:
    from slurm_shockwave.policies.shockwave.schedule import window_order

    rounds = np.array([20, 2, 5, 3])
    remaining = np.array([9000.0, 200.0, 5000.0, 4000.0])  # job 1 finishes in 2 rounds
    priority = np.array([1.0, 1.0, 1.0, 50.0])             # job 3 is far behind
    due = np.zeros(4)
    order = window_order(rounds, remaining, priority, rescue=10.0, round_s=120.0,
                         running=[True, False, False, False], ids_of=[0, 1, 2, 3], due_s=due)
    assert order == [1, 3, 0, 2]
    # with the rescue threshold above job 3's priority, the market's rounds decide
    order = window_order(rounds, remaining, priority, rescue=100.0, round_s=120.0,
                         running=[True, False, False, False], ids_of=[0, 1, 2, 3], due_s=due)
    assert order == [1, 0, 2, 3]


def test_window_order_takes_the_rescued_jobs_by_deadline() -> None:
    from slurm_shockwave.policies.shockwave.schedule import window_order

    rounds = np.array([20, 2, 20, 20, 20])
    remaining = np.array([9000.0, 200.0, 5000.0, 4000.0, 6000.0])
    priority = np.array([1.0, 1.0, 80.0, 50.0, 1.0])  # jobs 2 and 3 rescued, 2 further
    due = np.array([1e3, 9e9, 9e4, 5e4, 1.0])         # behind, 3 due first; 0, 4 not rescued
    order = window_order(rounds, remaining, priority, rescue=10.0, round_s=120.0,
                         running=[False] * 5, ids_of=[0, 1, 2, 3, 4], due_s=due)
    assert order == [1, 3, 2, 4, 0]


def test_pack_without_contiguity_loses_nothing_when_capacity_allows() -> None:
    rounds = {0: 2, 1: 1, 2: 1, 3: 1}   # 11 of 12 GPU-rounds
    gpus = {0: 2, 1: 2, 2: 4, 3: 1}
    order = sorted(rounds, key=lambda j: (-gpus[j], -rounds[j]))
    plan = pack(rounds, gpus, order, capacity=4, window=3, contiguous=False)
    assert [sum(j in r for r in plan) for j in range(4)] == [2, 1, 1, 1]
    for r in plan:
        assert sum(gpus[j] for j in r) <= 4


def test_memory_survives_a_json_round_trip_with_the_same_decisions() -> None:
    jobs = [a_spec(i, gpus=1 + i % 2, epochs=6 + 2 * i, arrival_s=100 * i) for i in range(6)]

    def run(round_trip: bool) -> list[tuple]:
        world = SimulatedCluster(a_workload(*jobs), make_nodes(3))
        policy = make_policy("shockwave")
        memory: dict = {}
        trace = []
        while not world.done:
            report = run_round(world, policy, memory, world)
            memory = json.loads(json.dumps(report.memory)) if round_trip else dict(
                report.memory)
            trace.append(tuple((a.kind.value, a.job_id) for a in report.actions))
            trace.append(tuple(sorted((k, str(v)) for k, v in report.reasons.items())))
            world.advance()
        return trace

    assert run(round_trip=True) == run(round_trip=False)


def test_notes_citations_point_at_the_shared_reference() -> None:
    """NOTES.md is not in this repository: every citation names its path explicitly."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = [root / "README.md", *(root / "docs").glob("*.md"),
             *(root / "slurm_shockwave").rglob("*.py"), *(root / "benchmarks").glob("*.py")]
    bare = [f"{f.relative_to(root)}: {m.group(0)}" for f in files
            for m in re.finditer(r".{0,30}NOTES\.md", f.read_text(encoding="utf-8"))
            if not m.group(0).endswith("../shared/reference/shockwave/NOTES.md")]
    assert not bare


def test_memory_is_plain_json_every_round() -> None:
    """The service stores the policy's memory as strict JSON (no inf or NaN): a round
    whose memory cannot be written fails whole, so an unknown gap must be null, not inf.
    Seen live: every round whose packing broke a fairness cap failed and was retried.
    This job set (16 GPUs, three 8-GPU jobs) gave such a round."""
    import json

    from slurm_shockwave.model.cluster import ClusterView, GpuNode
    from slurm_shockwave.policies.shockwave.policy import Shockwave
    from tests.builders import a_job

    policy = Shockwave.from_mapping({})
    jobs = tuple(a_job(i, gpus=g, epochs=e, epoch_s=t) for i, (g, e, t) in enumerate(
        ((8, 74, 30.0), (2, 65, 300.0), (8, 13, 300.0), (1, 65, 100.0), (8, 34, 30.0),
         (4, 20, 100.0))))
    memory: dict[str, object] = {}
    gaps = []
    for r in range(3):
        view = ClusterView(now_s=120.0 * r, round_index=r, round_s=120.0,
                           nodes=(GpuNode("n0", 16),), jobs=jobs[: 4 + r],
                           num_jobs_total=len(jobs))
        memory = dict(policy.plan(view, memory).memory)
        json.dumps(memory, allow_nan=False)
        gaps.append(memory["plan"]["solve"]["gap"])  # type: ignore[index]
    assert None in gaps  # the unknown certificate, as JSON's null


@pytest.mark.parametrize(("mode", "bs", "done", "most"), [
    (AdaptationMode.STATIC, 16, 0, 10 * 100.0),  # the posterior counts the epoch under way
    (AdaptationMode.GNS, 16, 0, 10 * 100.0),     # may stay at 16 all along
    (AdaptationMode.GNS, 256, 5, 5 * 25.0),      # at its largest: nothing slower ahead
    (AdaptationMode.ACCORDION, 256, 5, 5 * 100.0),  # Accordion may go back to 16
])
def test_most_remaining_is_the_slowest_batch_size_still_ahead(
        mode: AdaptationMode, bs: int, done: int, most: float) -> None:
    """The critical path's remaining time: epochs left at the slowest epoch among the batch
    sizes the job may still train at (a GNS job's only grow), never under the prediction.
    ResNet-18 from 16: GNS may reach 16..256 by doublings, Accordion 16 and 256."""
    from slurm_shockwave.model.job import Job, JobProgress, JobSpec
    from slurm_shockwave.model.lifecycle import Phase
    from slurm_shockwave.policies.shockwave.estimates import estimate

    table = {16: 100.0, 32: 60.0, 64: 40.0, 128: 30.0, 256: 25.0}
    progress = JobProgress(epochs_done=done, bs=bs, epoch_s=table[bs],
                           bs_history=((16, done),) if done else (),
                           epoch_s_by_bs=tuple(sorted(table.items())))
    e = estimate(Job(JobSpec(1, "ResNet-18", 16, 1, mode, 0.0, 10), progress, Phase.PENDING))
    assert e.most_remaining_s == pytest.approx(max(most, e.remaining_s))
    assert e.most_remaining_s >= e.remaining_s


def test_the_rescued_jobs_go_earliest_deadline_first() -> None:
    """Two jobs far behind (past rescue_rho) on one GPU, neither finished by the window.
    Job 0 is the more behind by projection (rho~ 2.12: about 9,000 s of work, waiting
    since 0), job 1 the less (1.86: about 3,000 s, since 15,000 s), but job 1's deadline
    at the stretch the schedule heads for (arrival + 2.12 x its fair time in the system:
    about 27,300 s against 37,800 s) is the earlier, so it runs first. Most behind first
    on projected lateness took turns instead: a running job's projection stands still
    while a waiting one's grows, so the two overtook each other every lease, each paying
    a restore (found on heavy_tail, jobs 91 and 97, and on 220, job 172)."""
    from tests.builders import a_job, a_view

    late_long = a_job(0, epochs=90, epoch_s=100.0, arrival_s=0.0)
    late_short = a_job(1, epochs=30, epoch_s=100.0, arrival_s=15_000.0)
    planned = make_policy("shockwave").plan(a_view(late_long, late_short, gpus=1,
                                                   now_s=20_000.0), {})
    rho = planned.memory["plan"]["rho"]
    assert rho["0"] > rho["1"] > 1.6  # both rescued, job 0 the more behind
    assert planned.plan.order[0] == 1
    assert planned.plan.reasons[1].code == ReasonCode.SCHEDULED
