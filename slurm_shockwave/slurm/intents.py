"""Checkpoint intents: a signal the service sent a job, kept across rounds and restarts.

The signal is written to the intent log before it is sent (kube-scheduler's "assume"), so
a restarted service never signals twice; it is confirmed by observation or forgotten
(``SlurmCluster``)."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Protocol

from slurm_shockwave.slurm.protocol import SlurmJob

CLOCK_SKEW_S = 300.0
"""How far slurmctld's clock (a job's start time) and the service's may differ: MUNGE
refuses credentials past its 300 s TTL of skew, so a cluster whose commands answer the
service is within it (60 s first: a review showed a job signalled every round with
slurmctld's clock 120 s ahead)."""


@dataclass(frozen=True)
class CheckpointIntent:
    """A checkpoint signal sent at ``sent_s``; requeue after the ack or at ``deadline_s``."""

    job_id: int
    signal: str
    sent_s: float
    deadline_s: float
    restart_count: int
    """The job's restart count when signalled: a higher one means it has been requeued."""


def signalled_run(job: SlurmJob, ck: CheckpointIntent) -> bool:
    """Whether ``job`` is in the run ``ck`` signalled: one that started later, at the
    same restart count, is another job given the id again (Slurm's state reset while the
    service was down), never signalled, not to be requeued for it."""
    return job.restart_count == ck.restart_count and job.start_time <= ck.sent_s + CLOCK_SKEW_S


def killed_by(job: SlurmJob, ck: CheckpointIntent) -> bool:
    """Whether the checkpoint signal of ``ck`` killed ``job`` before it could handle it:
    its signalled run ended FAILED of that signal (Slurm says FAILED of a batch script a
    signal killed; a job cancelled or past its time limit has the signal's status too,
    signal=TERM, and ended)."""
    return (signalled_run(job, ck) and job.state == "FAILED"
            and job.exit_signal == signal.Signals.__members__.get(f"SIG{ck.signal}"))


class IntentLog(Protocol):
    """Where intents that span rounds live (the service's store; memory for one-shots)."""

    def load_intents(self) -> dict[int, CheckpointIntent]: ...
    def record_intent(self, intent: CheckpointIntent) -> None:
        """Durable before it returns: the signal is sent only after this."""
        ...
    def forget_intent(self, job_id: int) -> None: ...


class MemoryIntents:
    """Intents kept in this process only (one-shot and dry-run rounds; tests)."""

    def __init__(self, initial: dict[int, CheckpointIntent] | None = None) -> None:
        self._intents: dict[int, CheckpointIntent] = dict(initial or {})

    def load_intents(self) -> dict[int, CheckpointIntent]:
        return dict(self._intents)

    def record_intent(self, intent: CheckpointIntent) -> None:
        self._intents[intent.job_id] = intent

    def forget_intent(self, job_id: int) -> None:
        self._intents.pop(job_id, None)
