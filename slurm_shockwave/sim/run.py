"""The simulation loop: run_round against a SimulatedCluster until every job is done."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurm_shockwave.engine.fill import round_due
from slurm_shockwave.engine.round import run_round
from slurm_shockwave.metrics.summary import Finished, Summary, rho, summarize
from slurm_shockwave.model.bounds import MAX_CLUSTER_GPUS
from slurm_shockwave.model.cluster import GpuNode
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.plan import Memory
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.sim.inputs import Workload
from slurm_shockwave.sim.rounds import rounds_at_most
from slurm_shockwave.sim.world import JobOutcome, SimulatedCluster

ProgressFn = Callable[[int, int], None]
"""Called after each round with (jobs finished, jobs in the trace)."""


MAX_SIM_ROUNDS = 1_000_000
"""Rounds a simulation stops at: ten times what a trace may need at least (MAX_ROUNDS)."""


class RoundLimit(RuntimeError):
    """Not done after ``max_rounds``. ``from_input``: the trace and settings can explain it
    (``rounds_at_most`` is past the limit: restores or requeue delays that eat the rounds);
    otherwise no policy that keeps a job running while one waits takes that long: a bug."""

    def __init__(self, policy: str, max_rounds: int, at_most: float) -> None:
        super().__init__(f"{policy}: not done after {max_rounds} rounds")
        self.policy, self.max_rounds, self.at_most = policy, max_rounds, at_most

    @property
    def from_input(self) -> bool:
        return self.at_most > self.max_rounds

    @property
    def said(self) -> str:
        """The stop in words, as the ``shockwave`` command and the benchmarks begin it."""
        return f"{self.policy} was not done after the simulator's {self.max_rounds:,} rounds"


def make_nodes(gpus: int, gpus_per_node: int | None = None) -> list[GpuNode]:
    """``gpus_per_node`` None: one pool where any free GPUs serve a job (the paper's model)."""
    if not 1 <= gpus <= MAX_CLUSTER_GPUS:
        raise InputError(f"must be from 1 to {MAX_CLUSTER_GPUS}, got {gpus}", field="gpus")
    if gpus_per_node is None:
        return [GpuNode("pool", gpus)]
    if gpus_per_node < 1 or gpus % gpus_per_node:
        raise InputError(f"gpus ({gpus}) must be a multiple of it ({gpus_per_node})",
                         field="gpus_per_node")
    return [GpuNode(f"node{i:03d}", gpus_per_node) for i in range(gpus // gpus_per_node)]


@dataclass
class SimResult:
    policy: str
    gpus: int
    summary: Summary
    outcomes: list[JobOutcome]
    rounds: int
    wall_s: float
    timeline: list[tuple[float, int]] = field(default_factory=list)
    rhos: dict[int, float] = field(default_factory=dict)
    starts: int = 0
    """Jobs started, restarts included: starts - jobs is what preemptions cost."""

    @property
    def cut_off(self) -> int:
        """Jobs the cut-off (``deadline_factor``) ended before their work was done."""
        return sum(o.cut_off for o in self.outcomes)


def check_placeable(workload: Workload, gpus: int, gpus_per_node: int | None = None) -> None:
    """Raise InputError (the trace's line, field ``gpus``) for the first job that a
    cluster of ``gpus`` GPUs (in nodes of ``gpus_per_node``) cannot place: it would wait
    for ever, and a schedule that must run it never ends."""
    too_big = [j for j in workload.jobs if j.spec.gpus > gpus
               or (gpus_per_node is not None and j.spec.gpus > gpus_per_node
                   and gpus // gpus_per_node < -(-j.spec.gpus // gpus_per_node))]
    if too_big:
        big = too_big[0]
        shape = f"{gpus} GPUs" + (f" in nodes of {gpus_per_node}" if gpus_per_node else "")
        raise InputError(f"job {big.spec.job_id} needs {big.spec.gpus} GPUs; a cluster of "
                         f"{shape} cannot place it", source=workload.source,
                         line=big.line or None, field="gpus")


def simulate(workload: Workload, policy: Policy[Any], *, gpus: int,
             gpus_per_node: int | None = None, round_s: float = 120.0, restore_s: float = 20.0,
             deadline_factor: float | None = None, requeue_delay_s: float = 0.0,
             fill_freed: bool = False, max_rounds: int = MAX_SIM_ROUNDS,
             on_round: ProgressFn | None = None) -> SimResult:
    started = time.perf_counter()
    nodes = make_nodes(gpus, gpus_per_node)
    check_placeable(workload, gpus, gpus_per_node)
    world = SimulatedCluster(workload, nodes, round_s=round_s, restore_s=restore_s,
                             deadline_factor=deadline_factor, requeue_delay_s=requeue_delay_s,
                             fill_freed=fill_freed)
    memory: Memory = {}
    total = len(workload.jobs)
    rounds = 0
    while not world.done:
        if rounds >= max_rounds:
            raise RoundLimit(policy.name, max_rounds, rounds_at_most(
                workload, round_s=round_s, restore_s=restore_s,
                requeue_delay_s=requeue_delay_s))
        report = run_round(world, policy, memory, world)
        memory = report.memory
        while not world.advance():  # a fill step; the policy's memory stays the round's
            step = run_round(world, policy, memory, world, fill=True)
            if round_due(step.must_start, report.must_start):
                world.end_round()
                break
        rounds += 1
        if on_round is not None:
            on_round(len(world.finished), total)
    finished = [Finished(o.job_id, o.arrival_s, o.finish_s, o.exclusive_s)
                for o in world.finished]
    summary = summarize(finished, num_gpus=gpus, busy_gpu_s=world.busy_gpu_s, num_jobs=total,
                        restore_gpu_s=world.restore_gpu_s)
    return SimResult(policy=policy.name, gpus=gpus, summary=summary,
                     outcomes=sorted(world.finished, key=lambda o: o.job_id),
                     rounds=world.round_index, wall_s=time.perf_counter() - started,
                     timeline=world.timeline,
                     rhos={f.job_id: rho(f, total, gpus) for f in finished},
                     starts=world.starts)
