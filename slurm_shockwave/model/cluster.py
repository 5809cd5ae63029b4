"""The cluster as one round sees it: nodes, active jobs and the time."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_shockwave.model.job import Job, JobId


@dataclass(frozen=True, slots=True)
class GpuNode:
    """A node's GPUs that the managed partition may use.

    ``indices`` are the real device indices where known (a live cluster: GPUs that jobs
    of other partitions hold are left out); empty means ``0..gpus-1`` (simulation).
    """

    name: str
    gpus: int
    indices: tuple[int, ...] = ()
    gpu_type: str = ""
    """The one GPU type the node has (``Gres=gpu:a100:8``); "": untyped or unknown;
    ``SEVERAL_TYPES``: several (a MIG node, a node of two kinds), where a job asking any
    type may be placed (its GPUs of that type are not told apart)."""
    def slots(self) -> tuple[str, ...]:
        return tuple(f"{self.name}:{i}" for i in (self.indices or range(self.gpus)))


SEVERAL_TYPES = "*"
"""``GpuNode.gpu_type`` of a node with GPUs of several types."""


def slot_node(slot: str) -> str:
    """The node of a GPU slot (``<node>:<index>``, as ``GpuNode.slots`` names them)."""
    return slot.rsplit(":", 1)[0]


@dataclass(frozen=True, slots=True)
class ClusterView:
    """A read-only snapshot handed to admission, policies and placement."""

    now_s: float
    round_index: int
    round_s: float
    nodes: tuple[GpuNode, ...]
    jobs: tuple[Job, ...]
    num_jobs_total: int = 0
    """Jobs known for the whole run (the trace length in simulation, 0 if unknown)."""
    restart_cost_s: float = 20.0
    """Time a job loses at each (re)start, as the world knows it: the simulator's restore
    cost; live, ``slurm.restart_cost_s`` (checkpoint restore plus Slurm's start latency)."""
    reserved: frozenset[JobId] = frozenset()
    """Waiting jobs this round's plan already started (live: released and not yet given
    GPUs, most often a preempted job's while it checkpoints, or moved and waiting out
    the requeue delay), and the last round's fill-step starts still ``starting``: a fill
    step places them first (engine.fill). Empty in the simulator, which starts a job at
    once."""
    moving_to: tuple[tuple[JobId, int], ...] = ()
    """The count the round planned for each job of ``reserved`` it moves or resizes
    (live: checkpointed and requeued, its GRES not yet updated), which a fill step
    starts it on: at the count it holds, a fill step undid every resize of a running
    elastic job (a red-team). Also for such a job still in ``returning`` (live:
    COMPLETING, out of ``jobs``), for which a fill step keeps that many GPUs free: given
    out, the move waited for the next round (live, 32 jobs / 24 GPUs). Empty in the
    simulator."""
    starting: frozenset[JobId] = frozenset()
    """Waiting jobs a fill step of the last round started (live: released, Slurm not yet
    done starting them when this round observed them): a round a fill step calls at once
    comes milliseconds later, and planned as merely waiting such a job was held again or
    stopped (seen live 60 ms apart). Policies count them as started in the last round,
    as a running job seen for the first time (Shockwave's lease). Empty in the
    simulator, which starts a job at once."""
    returning: tuple[Job, ...] = ()
    """Jobs a preemption sent back to the queue, still in their requeue delay (live:
    COMPLETING while their Epilog runs, then cred_expire + 1 s; the simulator's
    ``requeue_delay_s``): out of ``jobs``, since no
    plan may start them before then, but back within the round. A policy that reads the
    makespan's critical path counts their remaining work, or it starts a job for the path
    that their return takes off it moments later (seen live: an 8-GPU job stopped one
    round after its start)."""
    fills: bool = False
    """GPUs freed between rounds go to waiting jobs at once (fill steps: the simulator's
    ``fill_freed``, the service's ``service.fill_freed``); without them a job that ends
    mid-round leaves its GPUs idle until the round's end."""
    configured: tuple[tuple[str, int], ...] = ()
    """GPUs of each type (``GpuNode.gpu_type``) on every node of the partition, live:
    drained, down and other partitions' ones too. A job wider than ``nodes`` but not than
    these waits for them rather than being rejected: one drained node read
    ``rejected_too_large``, which sounds final. Empty: ``nodes`` are all there is (the
    simulator)."""
    exact_slots: bool = False
    """The running jobs' slots are the GPUs Slurm gave them (live), and a job on several
    nodes holds only those: Slurm lends the rest of its nodes to other jobs (4 + 1 for
    ``--gpus=5`` on nodes of 4, 6 + 6 for an elastic 12 on nodes of 8). False in the
    simulator, whose placement holds such a job's nodes whole."""

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def gpus_per_node(self) -> int:
        return max((n.gpus for n in self.nodes), default=0)

    def job(self, job_id: JobId) -> Job:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        raise KeyError(job_id)

    def by_id(self) -> dict[JobId, Job]:
        return {j.job_id: j for j in self.jobs}
