"""What the planner needs from Slurm, independent of how it is reached (CLI or pyslurm)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

MAX_NODE_GPUS = 1_024
MAX_LISTED_JOB_GPUS = 1_000_000
"""More GPUs than any node or job has: a count Slurm lists above them is garbage (one
of 10^20 GPUs ran the host out of memory: found by a red-team), refused in one line."""


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    user: str
    partition: str
    state: str
    """Base state, upper case: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ..."""
    state_flags: tuple[str, ...] = ()
    reason: str = ""
    priority: int = 0
    held: bool = False
    comment: str = ""
    admin_comment: str = ""
    gpus: int = 0
    """GPUs requested for the whole job."""
    node_count: int = 0
    nodes: str = ""
    gres_detail: tuple[str, ...] = ()
    restart_count: int = 0
    submit_time: int = 0
    start_time: int = 0
    eligible_time: int = 0
    gpu_alloc: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Running (or completing/suspended) jobs: one entry per allocated node that holds
    GPUs of the job, in node order: (node name, sorted GPU indices on that node), as
    Slurm reports them (``CUDA_VISIBLE_DEVICES``). Empty while pending or without GPUs."""
    time_limit_s: int = 0
    """The job's time limit in seconds; 0 when unlimited or unknown."""
    exit_signal: int = 0
    """The signal that ended the job's last run (WTERMSIG of its batch script); 0 when
    none or unknown. Read only from full listings (``list_jobs()``)."""
    gpu_type: str = ""
    """The GPU type its request names (``--gres=gpu:v100:4``); "": none, or several."""
    dependency: str = ""
    """Its dependencies Slurm has not found satisfied yet (``afterok:141(unfulfilled)``;
    empty once they are, as Slurm clears them). Slurm does not test them while the job
    is held (measured on 22.05: a held job's stays unfulfilled after the job it waits
    for completed)."""
    requeue: bool = True
    """Whether Slurm requeues the job when asked: False for one submitted
    ``--no-requeue`` (Slurm refuses its requeue, "Requested operation is presently
    disabled"), which the planner therefore cannot stop once it runs."""
    max_nodes: int = 0
    """The most nodes the job may have (``-N 1``: 1); 0: no limit, or not known."""
    per_job: bool = False
    """Its GPUs were asked for the job (``--gpus=N``, ``--gpus-per-task``), which Slurm
    spreads over as many nodes as it takes (7 + 1 where nodes have 7 free), not per node
    (``--gres=gpu:N``: N on each node it asked, never spread)."""
    asks_per_job: bool = False
    """Its GPUs were asked for the job (``--gpus=N``: TresPerJob) and none per node,
    whatever its node limit (``-N 1 --gpus=2`` too): a GRES update gives it a count per
    job, as Slurm refuses it one per node ("Invalid generic resource (gres)
    specification", measured on 22.05 and 25.11). Not per task: job_submit.lua refuses
    an elastic job that asks so, and its count would still be read per task. Read for
    pending jobs, the only ones a GRES update is for."""

    def __post_init__(self) -> None:
        if not 0 <= self.gpus <= MAX_LISTED_JOB_GPUS:
            raise SlurmError(f"job {self.job_id}: Slurm lists {self.gpus} GPUs; at most "
                             f"{MAX_LISTED_JOB_GPUS} are read")


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: tuple[str, ...]
    """Base state first, then flags, upper case: ("IDLE", "DRAIN")."""
    gpus: int
    gpus_used: int
    partitions: tuple[str, ...] = field(default=())
    gpus_used_idx: tuple[int, ...] = ()
    """Indices of the node's GPUs in use by any job (any partition), sorted."""
    gpu_type: str = ""
    """The one GPU type it has (``Gres=gpu:a100:8``); "": untyped; ``SEVERAL_TYPES``
    (model/cluster.py) when several (``json_shapes.node_gpu_type``)."""

    def __post_init__(self) -> None:
        if not (0 <= self.gpus <= MAX_NODE_GPUS and 0 <= self.gpus_used <= MAX_NODE_GPUS
                and len(self.gpus_used_idx) <= MAX_NODE_GPUS):
            raise SlurmError(f"node {self.name}: Slurm lists {self.gpus} GPUs, "
                             f"{self.gpus_used} in use; at most {MAX_NODE_GPUS} are read")

    @property
    def usable(self) -> bool:
        """Whether the planner may give out its GPUs. A node powered down by power saving
        is (Slurm powers it up for a job it starts there: left out, the planner saw no
        GPUs on a site with SuspendTime, and nothing ever started); one in a reservation
        is not (only the reservation's jobs may run there)."""
        bad = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING",
               "MAINTENANCE", "RESERVED", "FUTURE", "REBOOT_REQUESTED"}
        return not bad.intersection(self.state)


class SlurmError(RuntimeError):
    """Slurm refused or failed: carries Slurm's own message."""


class SlurmUnanswered(SlurmError):
    """Slurm did not answer (a timeout, no controller): whether the request took effect
    is not known, and the next request would most likely wait as long."""


class SlurmNotAsked(SlurmUnanswered):
    """A request not made: Slurm left an earlier one of the same step unanswered
    (``slurm.until_silent``). Unlike its parent, it certainly took no effect."""


UNANSWERED = ("Unable to contact slurm controller", "Socket timed out",
              "Connection refused", "Zero Bytes were transmitted or received")
"""Slurm's words for a request that got no answer from slurmctld."""


def slurm_failure(message: str) -> SlurmError:
    """The error for Slurm's ``message``: SlurmUnanswered when it says no answer came."""
    unanswered = any(w.lower() in message.lower() for w in UNANSWERED)
    return (SlurmUnanswered if unanswered else SlurmError)(message)


LISTED_STATES = ("PENDING", "RUNNING", "COMPLETING", "SUSPENDED")
"""What a partition's listing holds (``list_jobs(partition)``; the CLI's ``squeue -t
PD,R,CG,S,SE,CF``, a SPECIAL_EXIT job read as pending and a CONFIGURING one as running,
``json_shapes.job_state``): a job in any other state has ended."""


class SlurmBackend(Protocol):
    def list_jobs(self, partition: str | None = None) -> list[SlurmJob]:
        """All jobs Slurm keeps, ended ones included (until MinJobAge purges them); with
        ``partition``, only that partition's pending and running ones (which lets a
        backend ask Slurm for less)."""
        ...
    def partition_state(self, partition: str) -> str:
        """UP, DOWN, DRAIN or INACTIVE, as ``scontrol show partition`` says; "" when
        Slurm has no such partition."""
        ...

    def list_nodes(self) -> list[SlurmNode]: ...
    def set_priority(self, job_id: int, priority: int) -> None: ...
    def hold(self, job_ids: Sequence[int]) -> None:
        """The planner's hold: a user hold (JobHeldUser, ``scontrol uhold``), so that an
        admin's ``scontrol hold`` (JobHeldAdmin) is told apart and kept; job_submit.lua
        refuses the owner's release while the service is alive."""
        ...
    def release(self, job_ids: Sequence[int]) -> None: ...
    def set_comment(self, job_id: int, comment: str) -> None:
        """The job's comment (``scontrol update comment=``): only to mark a requeue-held
        job ``held=requeue`` (hints.split_hold_mark); job_submit.lua refuses any other
        change of a managed job's comment."""
        ...
    def signal(self, job_id: int, signal: str) -> None: ...
    def requeue(self, job_ids: Sequence[int]) -> None:
        """Requeue those of the jobs still running (``scontrol requeue Incomplete``): a
        job that ended since it was listed stays ended. A plain requeue runs a finished
        batch job again (measured on 22.05: a COMPLETED job went back to PENDING)."""
        ...
    def requeue_ended(self, job_id: int) -> None:
        """Run an ended batch job again (plain ``scontrol requeue``; job_mgr.c supports
        the requeue of done jobs): only for one that died of the checkpoint signal the
        service sent it (world.py, ``_sync_intents``)."""
        ...
    def update_gpus(self, job_id: int, gpus: int, *, nodes: int | None = None,
                    gpu_type: str = "", per_job: bool = False,
                    max_nodes: int | None = None) -> None:
        """A pending job's GPUs per node (Slurm's GRES is per node); with ``nodes``, its
        node count too (a job on several nodes changes both together). ``gpu_type``: the
        type it asked (Slurm replaces the job's GRES with what it is given: without it a
        typed job became untyped, found by a review). ``per_job``: ``gpus`` is the whole
        job's, for a job that asked them so (``--gpus=N``: ``TresPerJob``), whose GRES
        per node Slurm refuses to set ("Invalid generic resource (gres) specification",
        measured on 22.05). ``max_nodes``: with ``nodes``, the most nodes (the job's
        ``-N nodes-max_nodes``; None: exactly ``nodes``)."""
        ...
    def submit(self, script: str, args: Sequence[str] = ()) -> int: ...
    def cancel(self, job_id: int) -> None: ...
