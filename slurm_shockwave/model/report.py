"""What a training job tells the service about itself (through the client, over HTTP)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ReportKind(str, Enum):
    PROGRESS = "progress"
    """An epoch (or part of one) done: ``epoch``, ``batch_size``, ``samples_per_s``."""
    CHECKPOINTED = "checkpointed"
    """The job saved a checkpoint after the signal: the service may requeue it now."""
    END = "end"
    """The epilog: the job ended (``exit_code``), requeues included."""


@dataclass(frozen=True, slots=True)
class ProgressReport:
    job_id: int
    kind: ReportKind
    at_s: float
    """When the service accepted it (its clock, not the job's)."""
    epoch: float | None = None
    """Epochs completed so far (fractions allowed), counted over the whole job."""
    batch_size: int | None = None
    samples_per_s: float | None = None
    restart_count: int = 0
    exit_code: int | None = None
    uid: int = -1
    """Who sent it (from the MUNGE credential)."""
    report_id: int = 0
    """The store's row id (0 before it is stored): reports are read incrementally by it."""
    key: str = ""
    """The client's name for this report (``X-Shockwave-Report``), the same each time it
    is sent: one sent again (its answer not believed, or too late) is stored once. "":
    none given (a client before it)."""
