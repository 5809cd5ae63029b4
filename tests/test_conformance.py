"""Every policy through the same scenarios in the simulated world.

Properties: capacity is never exceeded, no GPU is double-booked, gangs get exactly their
GPUs (on one node when they fit one, whole nodes otherwise), preemptions come before
starts, every job finishes, and runs are deterministic.
"""

from __future__ import annotations

import pytest

from slurm_shockwave.engine.round import run_round
from slurm_shockwave.model.plan import ActionKind, Outcome
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import build_workload
from slurm_shockwave.sim.run import make_nodes, simulate
from slurm_shockwave.sim.trace import make_elastic
from slurm_shockwave.sim.world import SimulatedCluster
from tests.builders import a_table

SCENARIOS = {
    "pool": dict(gpus=8, gpus_per_node=None, seed=1),
    "nodes": dict(gpus=16, gpus_per_node=4, seed=2),
    "tight": dict(gpus=8, gpus_per_node=8, seed=3),
    "elastic": dict(gpus=16, gpus_per_node=4, seed=4, elastic=True),
}


def _workload(seed: int, elastic: bool = False):
    shape = TraceShape(num_jobs=24, mean_gap_s=60, min_h=0.05, max_h=0.5, num_durations=20,
                       mode_mix=(0.2, 0.4, 0.4), gpu_mix=(0.5, 0.3, 0.15, 0.05))
    table = a_table()
    jobs = generate(shape, table, seed)
    if elastic:  # ranges 0.5x-2x, so 8-GPU jobs may reach 16 (whole nodes)
        jobs = [make_elastic(j, 0.5, 2) for j in jobs]
    return build_workload(jobs, table, source=f"seed{seed}")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("name", list(POLICIES))
def test_policy_conforms(name: str, scenario: str) -> None:
    cfg = SCENARIOS[scenario]
    gpus, per_node = cfg["gpus"], cfg["gpus_per_node"]
    workload = _workload(cfg["seed"], bool(cfg.get("elastic")))
    world = SimulatedCluster(workload, make_nodes(gpus, per_node))
    policy = make_policy(name)
    memory: dict = {}
    per_node_size = per_node or gpus
    for _ in range(5_000):
        if world.done:
            break
        report = run_round(world, policy, memory, world)
        memory = dict(report.memory)
        kinds = [a.kind for a in report.actions]
        assert kinds == sorted(kinds, key=[ActionKind.PREEMPT, ActionKind.KEEP,
                                           ActionKind.START].index)
        assert all(r.outcome == Outcome.APPLIED for r in report.result.results)
        holding = [a for a in report.actions if a.kind != ActionKind.PREEMPT]
        slots = [s for a in holding for s in a.gpu_slots]
        assert len(slots) == len(set(slots)) <= gpus
        view = {j.job_id: j for j in world.observe().jobs}
        for a in holding:
            need = len(a.gpu_slots)  # the request, or one of an elastic job's counts
            assert need in view[a.job_id].spec.gpu_counts()
            nodes = {s.rsplit(":", 1)[0] for s in a.gpu_slots}
            if need <= per_node_size:
                assert len(nodes) == 1
            else:
                assert len(nodes) == -(-need // per_node_size)
        assert set(report.reasons) >= set(view)
        world.advance()
    assert world.done, f"{name} did not finish"
    assert len(world.finished) == len(workload.jobs)


@pytest.mark.parametrize("name", list(POLICIES))
def test_policy_is_deterministic(name: str) -> None:
    workload = _workload(5)
    first = simulate(workload, make_policy(name), gpus=8, gpus_per_node=4)
    second = simulate(workload, make_policy(name), gpus=8, gpus_per_node=4)
    assert [(o.job_id, o.finish_s) for o in first.outcomes] == \
        [(o.job_id, o.finish_s) for o in second.outcomes]


@pytest.mark.parametrize("name", list(POLICIES))
def test_memory_round_trips_through_json(name: str) -> None:
    """Restarts and replays: a policy's memory, stored as JSON, gives the same decisions."""
    import json

    def actions(round_trip: bool) -> list[tuple]:
        world = SimulatedCluster(_workload(7), make_nodes(8, 4))
        policy = make_policy(name)
        memory: dict = {}
        out = []
        while not world.done:
            report = run_round(world, policy, memory, world)
            memory = (json.loads(json.dumps(report.memory)) if round_trip
                      else dict(report.memory))
            out.append(tuple((a.kind.value, a.job_id, a.gpu_slots) for a in report.actions))
            world.advance()
        return out

    assert actions(True) == actions(False)


@pytest.mark.parametrize("name", list(POLICIES))
def test_only_shockwave_asks_placement_to_avoid_idle_gpus(name: str) -> None:
    """Plan.avoid_idle (nodes cleared and running jobs kept so GPUs do not idle) is
    Shockwave's: every other policy keeps its published placement (docs/simulator.md,
    docs/evaluation.md "GPUs that would idle")."""
    world = SimulatedCluster(_workload(2), make_nodes(16, 4))
    world.advance()  # some jobs have arrived
    plan = make_policy(name).plan(world.observe(), {}).plan
    assert plan.avoid_idle == (name == "shockwave")
