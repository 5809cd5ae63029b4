"""The simulator's time model on hand-checkable cases."""

import pytest

from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.sim.run import make_nodes, simulate
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
