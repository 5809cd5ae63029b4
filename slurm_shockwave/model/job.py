"""Jobs as the policies see them: an immutable spec plus observed progress."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from slurm_shockwave.model.lifecycle import Phase

JobId = int


class AdaptationMode(str, Enum):
    """How a job changes its batch size while it trains (trace column 8, hint `mode`)."""

    STATIC = "static"
    ACCORDION = "accordion"
    GNS = "gns"


def gpu_counts(gpus: int, gpus_range: tuple[int, int] | None) -> tuple[int, ...]:
    """See :meth:`JobSpec.gpu_counts`."""
    if gpus_range is None:
        return (gpus,)
    lo, hi = gpus_range
    counts = {lo, hi} | ({gpus} if lo <= gpus <= hi else set())
    c = gpus
    while c % 2 == 0 and c // 2 >= lo:  # halvings
        c //= 2
        if c <= hi:
            counts.add(c)
    c = gpus * 2
    while c <= hi:  # doublings
        if c >= lo:
            counts.add(c)
        c *= 2
    return tuple(sorted(counts))


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What the user asked for; never changes after submission."""

    job_id: JobId
    model: str
    init_bs: int
    gpus: int
    mode: AdaptationMode
    arrival_s: float
    num_epochs: int
    priority_weight: float = 1.0
    user: str = ""
    gpus_range: tuple[int, int] | None = None
    """(LO, HI) for an elastic job (hint ``gpus=LO-HI``): the planner may run it on any
    of :meth:`gpu_counts`; None: the job runs on ``gpus`` only (docs/elastic.md)."""
    nodes: int = 0
    """The nodes a fixed job asked for, its GPUs split evenly over them as Slurm places
    it (``sbatch -N 2 --gres=gpu:4``: 4 on each of 2 nodes); 0: placement chooses (one
    node where the job fits on one, else whole nodes), as for every elastic job, whose
    node count the service sets with its count."""
    gpu_type: str = ""
    """The GPU type the job asked for (``--gres=gpu:v100:4``): placed only on nodes of that
    type; "": any."""
    spreads: bool = True
    """Its GPUs may go over several nodes when no one node has room (asked per job,
    ``--gpus=N``, as every simulated job; an elastic job, the service setting its count
    per node). False: asked per node (``--gres=gpu:N``), which Slurm gives on one node (or
    its ``nodes``), never spread: a plan of 7 + 1 for ``--gres=gpu:8`` never started."""
    max_nodes: int = 0
    """The most nodes a job that ``spreads`` may be given (``-N 1-2 --gpus=8``: 2); 0: no
    limit (every simulated job). A plan of 3 + 3 + 2 for it never started."""
    min_nodes: int = 0
    """The fewest nodes a job that ``spreads`` must be given (``-N 2 --gpus=7``: 2), as
    Slurm splits a count per job over them: one GPU on each, the rest on the first with
    room (measured on 22.05: 6 + 1 for that job on two idle nodes of 8, 7 + 1 for ``-N 2
    --gpus=8``, 1 + 5 + 1 for ``-N 3 --gpus=7``); 0: none asked (every simulated job).
    Planned on one node, such a job was released beside a node another job filled and
    never started, while that job's next 8-GPU job waited."""

    @property
    def is_elastic(self) -> bool:
        return self.gpus_range is not None

    def gpu_counts(self) -> tuple[int, ...]:
        """The counts the job may run on, ascending: the request times a power of two
        inside the range, and the range's ends (so a count of 3-8 still offers 3 and 8);
        ``(gpus,)`` for a fixed job. Powers of two, because throughput tables and
        nodes come in 1/2/4/8."""
        return gpu_counts(self.gpus, self.gpus_range)


@dataclass(frozen=True, slots=True)
class JobProgress:
    """What has been observed of a job so far.

    ``epoch_s`` is the wall time of one epoch at the current batch size on the job's GPUs
    (from the throughput table in simulation, from reported progress on Slurm).
    """

    epochs_done: float = 0.0
    bs: int = 0
    epoch_s: float = 0.0
    run_s: float = 0.0
    attained_gpu_s: float = 0.0
    rounds_run: int = 0
    last_run_round: int = -1
    bs_history: tuple[tuple[int, int], ...] = ()
    """(batch size, epochs completed at it), run-length encoded, in order."""
    epoch_s_by_bs: tuple[tuple[int, float], ...] = ()
    """Known epoch duration at each batch size the job may use (throughput table), on
    ``gpus``."""
    gpus: int = 0
    """The GPU count the epoch times above are for: the count the job runs (or last
    ran) on; 0 means its request. Differs from the request only for an elastic job."""
    rate_by_gpus: tuple[tuple[int, float], ...] = ()
    """An elastic job's throughput at each of its counts relative to its request, at the
    current batch size (1.0 at the request); empty for a fixed job."""
    epoch_s_is_prior: bool = False
    """The epoch times are a prior (a model the table does not know), not a table's: the
    job's own measurements replace them, even a run's first interval."""


@dataclass(frozen=True, slots=True)
class Job:
    spec: JobSpec
    progress: JobProgress
    phase: Phase = Phase.PENDING
    gpu_slots: tuple[str, ...] = field(default=())
    """The GPUs the job holds now (empty unless running)."""

    @property
    def job_id(self) -> JobId:
        return self.spec.job_id

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    @property
    def current_gpus(self) -> int:
        """The count the job runs on now (its slots), else the one it last ran on."""
        if self.gpu_slots:
            return len(self.gpu_slots)
        return self.progress.gpus or self.spec.gpus

    @property
    def remaining_epochs(self) -> float:
        return max(0.0, self.spec.num_epochs - self.progress.epochs_done)

    @property
    def remaining_s_now(self) -> float:
        """Remaining runtime at the current rate: what Gavel-era policies assume."""
        return self.remaining_epochs * self.progress.epoch_s

    @property
    def done_s_now(self) -> float:
        """The work done so far in runtime at the current rate (restores not included):
        the other half of what Gavel-era policies assume."""
        return min(self.progress.epochs_done, self.spec.num_epochs) * self.progress.epoch_s

    @property
    def is_running(self) -> bool:
        """Holds its GPUs: running, or checkpointing before a requeue (the plan may still
        keep it, which cancels the preemption; a policy must not mistake it for waiting)."""
        return self.phase in (Phase.RUNNING, Phase.CHECKPOINTING)
