"""The simulator's time model on hand-checkable cases."""

from itertools import pairwise
from pathlib import Path

import pytest

from slurm_shockwave.engine.fill import round_due
from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.model.plan import Memory, Plan, Planned
from slurm_shockwave.policies.base import NoConfig, Policy
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.sim.rounds import busy_s_at_least, rounds_at_least, rounds_at_most
from slurm_shockwave.sim.run import RoundLimit, make_nodes, simulate
from slurm_shockwave.workloads.profile import epoch_seconds
from tests.builders import a_spec, a_table, a_workload

# Transformer bs16 at 10 steps/s on 1 GPU: 10000/16 = 625 steps per epoch -> 62.5 s
EPOCH_S = 62.5


def test_epoch_duration_from_the_table() -> None:
    assert epoch_seconds("Transformer", 16, 1, a_table()) == pytest.approx(EPOCH_S)


def test_lone_job_pays_the_restore_penalty_once() -> None:
    w = a_workload(a_spec(epochs=8))  # 500 s of work
    r = simulate(w, make_policy("fifo"), gpus=1)
    assert r.summary.makespan_s == pytest.approx(20 + 8 * EPOCH_S)
    assert r.rounds == 5  # 4 full rounds, then a short last one
    assert r.summary.utilization == pytest.approx(1.0)
    assert r.summary.useful_utilization == pytest.approx(500 / 520)


def test_preemption_costs_a_restore_each_time() -> None:
    a, b = a_spec(0, epochs=8), a_spec(1, epochs=8)
    r = simulate(a_workload(a, b), make_policy("gandiva_fair"), gpus=1)
    # 1000 s of work on one GPU; alternating rounds restart each job every round
    per_round = 120 - 20
    rounds = -(-1000 // per_round)
    assert r.summary.makespan_s > 1000 + 20
    assert r.summary.makespan_s <= rounds * 120
    fifo = simulate(a_workload(a, b), make_policy("fifo"), gpus=1)
    assert fifo.summary.makespan_s < r.summary.makespan_s


def test_arrivals_wait_for_the_next_round_and_idle_clock_jumps() -> None:
    w = a_workload(a_spec(0, epochs=1), a_spec(1, epochs=1, arrival_s=10_000))
    r = simulate(w, make_policy("fifo"), gpus=1)
    finish = {o.job_id: o.finish_s for o in r.outcomes}
    assert finish[0] == pytest.approx(20 + EPOCH_S)
    assert finish[1] == pytest.approx(10_000 + 20 + EPOCH_S)


def test_batch_size_change_applies_at_round_end_with_epochs_preserved() -> None:
    # LM bs10 GNS on 1 GPU doubles at epoch 11: 5967.5 / 10 = 596.75 s per epoch at
    # 10 steps/s; then bs 20 takes half as long per epoch (same steps/s in the test table).
    spec = a_spec(model="LM", bs=10, epochs=12, mode=AdaptationMode.GNS)
    w = a_workload(spec)
    r = simulate(w, make_policy("fifo"), gpus=1)
    (o,) = r.outcomes
    e10 = epoch_seconds("LM", 10, 1, a_table())
    e20 = epoch_seconds("LM", 20, 1, a_table())
    assert o.exclusive_s == pytest.approx(11 * e10 + e20)
    # the switch lags to the end of the round in which epoch 11 began
    assert o.finish_s > 20 + o.exclusive_s
    assert o.finish_s < 20 + 12 * e10


def test_deadline_cutoff_force_completes() -> None:
    a, b = a_spec(0, epochs=40), a_spec(1, epochs=40)
    r = simulate(a_workload(a, b), make_policy("gandiva_fair"), gpus=1, deadline_factor=1.01)
    assert any(o.cut_off for o in r.outcomes)


def test_nodes_and_validation() -> None:
    assert [n.gpus for n in make_nodes(8, 4)] == [4, 4]
    with pytest.raises(ValueError, match="multiple"):
        make_nodes(10, 4)
    with pytest.raises(ValueError, match="needs 8 GPUs"):
        simulate(a_workload(a_spec(gpus=8)), make_policy("fifo"), gpus=4)


def test_a_requeued_job_waits_out_the_requeue_delay() -> None:
    """The live cluster's cred_expire + 1 s, modelled: a preempted job is out of the view
    until then, so a delay can only lengthen the run (SRTF preempts the long job)."""
    from slurm_shockwave.model.plan import Action, ActionKind
    from slurm_shockwave.sim.world import SimulatedCluster

    w = a_workload(a_spec(1, epochs=50), a_spec(2, epochs=2, arrival_s=300.0))
    world = SimulatedCluster(w, make_nodes(1), requeue_delay_s=500.0)
    world.observe()
    world.apply([Action(ActionKind.START, 1, ("pool:0",))])
    world.advance()
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1, ("pool:0",))])
    assert [j.job_id for j in world.observe().jobs] == []
    for _ in range(5):
        world.advance()
    assert 1 in {j.job_id for j in world.observe().jobs}
    plain = simulate(w, make_policy("srtf"), gpus=1).summary
    delayed = simulate(w, make_policy("srtf"), gpus=1, requeue_delay_s=500.0).summary
    assert delayed.makespan_s >= plain.makespan_s
    with pytest.raises(ValueError):
        SimulatedCluster(w, make_nodes(1), requeue_delay_s=-1.0)


def test_a_moved_job_holds_its_new_gpus_in_view_through_the_requeue_delay() -> None:
    """A job moved in a round (preempted and started) waits out the requeue delay on its
    new GPUs: it stays in the view with them (the live world keeps a moved job too), so
    the next round's placement cannot give them to another job even with a delay longer
    than the round; and the wait is neither run time nor attained service nor busy GPU
    time (live, the job is pending then)."""
    from slurm_shockwave.model.plan import Action, ActionKind, Outcome
    from slurm_shockwave.sim.world import SimulatedCluster

    w = a_workload(a_spec(1, epochs=50), a_spec(2, epochs=50))
    world = SimulatedCluster(w, make_nodes(2), requeue_delay_s=180.0)
    world.observe()
    world.apply([Action(ActionKind.START, 1, ("pool:0",))])
    world.advance()
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1, ("pool:0",)),
                 Action(ActionKind.START, 1, ("pool:1",))])
    busy = world.busy_gpu_s
    world.advance()
    view = {j.job_id: j for j in world.observe().jobs}
    assert view[1].gpu_slots == ("pool:1",)
    assert view[1].progress.run_s == pytest.approx(120.0)  # the first round only
    assert world.busy_gpu_s == busy
    taken = world.apply([Action(ActionKind.START, 2, ("pool:1",))])
    assert taken.results[0].outcome == Outcome.REJECTED


def test_a_moved_job_preempted_in_its_requeue_delay_keeps_its_eligible_time() -> None:
    """Live, a moved job still in its requeue delay is a held pending job: preempting it
    again changes nothing in Slurm, its eligible time stands (no second delay)."""
    from slurm_shockwave.model.plan import Action, ActionKind
    from slurm_shockwave.sim.world import SimulatedCluster

    world = SimulatedCluster(a_workload(a_spec(1, epochs=50)), make_nodes(2),
                             requeue_delay_s=180.0)
    world.observe()
    world.apply([Action(ActionKind.START, 1, ("pool:0",))])
    world.advance()  # 120 s
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1, ("pool:0",)),
                 Action(ActionKind.START, 1, ("pool:1",))])  # eligible at 300
    world.advance()  # 240 s: still waiting on pool:1
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1, ("pool:1",))])
    world.advance()  # 360 s
    assert [j.job_id for j in world.observe().jobs] == [1]


def test_fifo_never_restarts_a_job_on_nodes() -> None:
    """Placement may clear a node for a wide job, but only by moving jobs the plan ranks
    below it: FIFO ranks running jobs first, so it stays non-preemptive (the simulator's
    model of Slurm alone, benchmarks.live; docs/evaluation.md says so)."""
    from slurm_shockwave.policies.registry import make_policy
    from slurm_shockwave.sim.generate import TraceShape, generate
    from slurm_shockwave.sim.inputs import build_workload, load_throughputs
    from slurm_shockwave.sim.run import simulate

    table = load_throughputs(None)
    trace = generate(TraceShape(num_jobs=24, mean_gap_s=30, min_h=0.1, max_h=1.0,
                                gpu_mix=(0.4, 0.3, 0.2, 0.1)), table, seed=0)
    workload = build_workload(trace, table, source="generated")
    fifo = simulate(workload, make_policy("fifo"), gpus=16, gpus_per_node=8)
    assert fifo.starts == len(trace)
    shockwave = simulate(workload, make_policy("shockwave"), gpus=16, gpus_per_node=8)
    assert shockwave.starts > len(trace)  # the count sees restarts where there are some


def test_fill_steps_start_a_waiting_job_when_a_job_ends_and_an_arrival_at_once() -> None:
    """Off (the paper's model) a GPU freed mid-round idles to the round's end and an
    arrival waits for the next round; with ``fill_freed`` both start at that moment,
    paying their restore from then, and the round keeps its boundary."""
    # 2 GPUs: job 1 ends at 82.5 s beside the long job 0, job 2 waits for its GPU
    ends = a_workload(a_spec(0, epochs=4), a_spec(1, epochs=1), a_spec(2, epochs=1))
    arrives = a_workload(a_spec(0, epochs=4), a_spec(1, epochs=1, arrival_s=30.0))  # 2 GPUs
    off = {o.job_id: o.finish_s for o in simulate(ends, make_policy("fifo"), gpus=2).outcomes}
    on = {o.job_id: o.finish_s for o in
          simulate(ends, make_policy("fifo"), gpus=2, fill_freed=True).outcomes}
    assert off[2] == pytest.approx(120 + 20 + EPOCH_S)
    assert on[2] == pytest.approx(2 * (20 + EPOCH_S))
    assert on[0] == off[0] == pytest.approx(20 + 4 * EPOCH_S)
    late = {o.job_id: o.finish_s for o in
            simulate(arrives, make_policy("fifo"), gpus=2).outcomes}
    now = {o.job_id: o.finish_s for o in
           simulate(arrives, make_policy("fifo"), gpus=2, fill_freed=True).outcomes}
    assert late[1] == pytest.approx(120 + 20 + EPOCH_S)
    assert now[1] == pytest.approx(30 + 20 + EPOCH_S)
    assert now[0] == late[0] == pytest.approx(20 + 4 * EPOCH_S)  # nobody else moved


def test_a_new_job_on_the_critical_path_calls_the_next_round_at_its_arrival() -> None:
    """A job whose remaining time sets the makespan arrives at 50 s with both GPUs busy:
    with fill steps the one its arrival wakes finds it must start now (Shockwave's
    critical path), so the round ends there and the next starts it at 50 s, stopping a
    job as that round would have at 120 s; without fill steps it starts at 120 s."""
    w = a_workload(a_spec(0, epochs=30), a_spec(1, epochs=30),
                   a_spec(2, epochs=2000, arrival_s=50.0))
    runs = {fill: simulate(w, make_policy("shockwave"), gpus=2, fill_freed=fill)
            for fill in (False, True)}
    done = {fill: {o.job_id: o.finish_s for o in r.outcomes} for fill, r in runs.items()}
    assert done[True][2] == pytest.approx(50 + 20 + 2000 * EPOCH_S)
    assert done[False][2] == pytest.approx(120 + 20 + 2000 * EPOCH_S)
    assert runs[True].starts == runs[False].starts == 4  # one job stopped either way


def test_only_a_job_the_round_did_not_have_calls_a_round() -> None:
    assert round_due(frozenset({3}), frozenset())
    assert not round_due(frozenset({3}), frozenset({3}))  # the round could not start it
    assert not round_due(frozenset(), frozenset({3}))


def test_a_fill_step_never_preempts_and_a_restore_runs_on_past_the_round() -> None:
    """SRTF would preempt the long job for the short one at a round; in a fill step the
    short one takes only the GPU a finish freed. A job started 10 s before the round ends
    pays the rest of its 20 s restore in the next round."""
    w = a_workload(a_spec(0, epochs=20), a_spec(1, epochs=1, arrival_s=0.0),
                   a_spec(2, epochs=1, arrival_s=1.0))
    r = simulate(w, make_policy("srtf"), gpus=2, fill_freed=True)
    finish = {o.job_id: o.finish_s for o in r.outcomes}
    assert finish[1] == pytest.approx(20 + EPOCH_S)  # started at 0 beside job 0
    # job 2 arrived at 1 s with no GPU free; job 1's end at 82.5 s frees one at once
    assert finish[2] == pytest.approx(2 * (20 + EPOCH_S))
    assert r.starts == 3  # job 0 never preempted
    # round 90 s: job 2 starts at 82.5 s, 7.5 s of its restore in this round, 12.5 in the next
    r = simulate(w, make_policy("srtf"), gpus=2, fill_freed=True, round_s=90.0)
    assert {o.job_id: o.finish_s for o in r.outcomes}[2] == pytest.approx(2 * (20 + EPOCH_S))


def test_a_fill_step_starts_a_preempted_job_once_its_requeue_delay_ends_on_idle_gpus() -> None:
    """SRTF preempts the longer job 1 for job 2 at the 120 s round; job 2 ends at
    202.5 s, before job 1 may start again (requeue delay 100 s: at 220 s). With fill
    steps it starts at 220 s on the idle GPU, as the service's poll starts a requeued
    job at its eligible time; without, at the next round (240 s)."""
    w = a_workload(a_spec(0, epochs=20), a_spec(1, epochs=30),
                   a_spec(2, epochs=1, arrival_s=100.0))
    runs = {fill: simulate(w, make_policy("srtf"), gpus=2, requeue_delay_s=100.0,
                           fill_freed=fill) for fill in (False, True)}
    done = {fill: {o.job_id: o.finish_s for o in r.outcomes} for fill, r in runs.items()}
    assert done[True][2] == done[False][2] == pytest.approx(120 + 20 + EPOCH_S)
    assert runs[True].starts == runs[False].starts == 4  # job 1 preempted once
    left = 30 * EPOCH_S - (120 - 20)  # job 1's work after its first run
    assert done[True][1] == pytest.approx(220 + 20 + left)
    assert done[False][1] == pytest.approx(240 + 20 + left)


def test_a_round_in_which_nothing_runs_takes_its_fill_steps_too() -> None:
    """One GPU; SRTF preempts job 0 at 120 s for job 1 (requeue delay 300 s: eligible at
    420 s), job 1 ends at 202.5 s, and nothing runs in the next round. Found by a review:
    such a round took no fill step, so job 0 started at the round after its delay and a
    job arriving on the idle GPU (job 2, at 250 s) waited for the round too."""
    w = a_workload(a_spec(0, epochs=30), a_spec(1, epochs=1, arrival_s=100.0),
                   a_spec(2, epochs=1, arrival_s=250.0))
    done = {o.job_id: o.finish_s for o in simulate(
        w, make_policy("srtf"), gpus=1, requeue_delay_s=300.0, fill_freed=True).outcomes}
    assert done[2] == pytest.approx(250 + 20 + EPOCH_S)  # at its arrival
    left = 30 * EPOCH_S - (120 - 20)  # job 0's work after its first run
    assert done[0] == pytest.approx(420 + 20 + left)  # at its requeue delay's end


def test_the_view_says_whether_fill_steps_run(tmp_path: Path) -> None:
    """ClusterView.fills (Shockwave's finishing jobs read it): the simulator's
    ``fill_freed``, the service's ``service.fill_freed``."""
    from dataclasses import replace

    from slurm_shockwave.cli.live_options import Live, service
    from slurm_shockwave.config import Settings
    from slurm_shockwave.service.store import Store
    from slurm_shockwave.sim.world import SimulatedCluster
    from slurm_shockwave.slurm.fake import FakeSlurm
    from slurm_shockwave.slurm.protocol import SlurmNode

    w = a_workload(a_spec(1))
    assert SimulatedCluster(w, make_nodes(1), fill_freed=True).observe().fills
    assert not SimulatedCluster(w, make_nodes(1)).observe().fills
    for on in (True, False):
        fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
        settings = Settings(service=replace(Settings().service, fill_freed=on))
        store = Store(tmp_path / f"{on}.db")
        try:
            assert service(Live(settings, fake), store, "fifo").world.observe().fills is on
            # `shockwave plan` plans as the service would
            assert Live(settings, fake).world().observe().fills is on
        finally:
            store.close()


class Stuck(Policy[NoConfig]):
    """Runs nothing: a policy that stopped making progress (a bug)."""

    name = "stuck"

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        return Planned(Plan(()), memory)


def test_a_run_past_its_round_limit_is_the_inputs_doing_only_if_it_could_take_that_long(
        ) -> None:
    """Found by a review: a run stopped at the round limit was reported as a bug, though
    restores eating each round's time make any trace take that long."""
    w = a_workload(a_spec(0, epochs=8), a_spec(1, epochs=8))  # 1,000 s of work on one GPU
    r = simulate(w, make_policy("gandiva_fair"), gpus=1)  # each round restarts a job
    assert r.rounds <= rounds_at_most(w, round_s=120, restore_s=20, requeue_delay_s=0)
    with pytest.raises(RoundLimit) as slow:
        simulate(w, make_policy("gandiva_fair"), gpus=1, max_rounds=3)
    assert slow.value.from_input
    with pytest.raises(RoundLimit) as stuck:
        simulate(w, Stuck(), gpus=1, max_rounds=100)
    assert not stuck.value.from_input
    # restores and requeue delays that can eat a whole round: no bound
    assert rounds_at_most(w, round_s=120, restore_s=60, requeue_delay_s=60) == float("inf")


def test_rounds_at_least_counts_jobs_one_after_another_not_the_idle_time_between() -> None:
    back_to_back = a_workload(a_spec(0, epochs=8), a_spec(1, epochs=8, arrival_s=500))
    assert busy_s_at_least(back_to_back, 20) == pytest.approx(500 + 20 + 500)
    apart = a_workload(a_spec(0, epochs=8), a_spec(1, epochs=8, arrival_s=10**6))
    assert busy_s_at_least(apart, 20) == pytest.approx(2 * 520)
    r = simulate(back_to_back, make_policy("fifo"), gpus=2)
    assert rounds_at_least(back_to_back, gpus=2, round_s=120, restore_s=20) <= r.rounds


@pytest.mark.parametrize("fill_freed", [False, True])
def test_the_gpus_busy_plot_draws_the_gpu_time_utilisation_counts(fill_freed: bool) -> None:
    """Found by a red-team: the timeline (drawn as steps by the "GPUs busy" plot) had no
    step where jobs finished inside a round or where the clock jumped over an idle gap,
    so the plot drew the GPUs busy until the next round: 58 GPU-hours against 3 on a
    trace with a late arrival, 5% over on ordinary ones. Its area is the busy GPU time."""
    w = a_workload(a_spec(0, epochs=3), a_spec(1, epochs=7, gpus=2),
                   a_spec(2, epochs=2, arrival_s=50_000), a_spec(3, epochs=5, arrival_s=70))
    r = simulate(w, make_policy("fifo"), gpus=4, fill_freed=fill_freed)
    steps = [*r.timeline, (r.summary.makespan_s, 0)]
    area = sum((t1 - t0) * g for (t0, g), (t1, _) in pairwise(steps))
    assert [t for t, _ in steps] == sorted(t for t, _ in steps)
    assert area == pytest.approx(r.summary.utilization * 4 * r.summary.makespan_s)
    assert r.timeline[-1][1] == 0


def test_the_gpus_busy_plot_leaves_out_a_moved_jobs_requeue_delay() -> None:
    """Found by a second red-team: a job moved onto new GPUs waits out its requeue delay
    there, held, not busy (docs/simulator.md), and the plot drew it busy from the
    stretch's start. Its area is the busy GPU time with moves and a delay too."""
    from slurm_shockwave.sim.inputs import build_workload, load_throughputs, load_trace

    path = Path(__file__).resolve().parents[1] / "slurm_shockwave" / "data" / "demo.jsonl"
    w = build_workload(load_trace(str(path)), load_throughputs(None), source=str(path))
    r = simulate(w, make_policy("gandiva_fair"), gpus=16, gpus_per_node=4,
                 requeue_delay_s=150)
    steps = [*r.timeline, (r.summary.makespan_s, 0)]
    area = sum((t1 - t0) * g for (t0, g), (t1, _) in pairwise(steps))
    assert area == pytest.approx(r.summary.utilization * 16 * r.summary.makespan_s)
