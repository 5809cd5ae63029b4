"""The job lifecycle as an explicit state machine.

Every edge names the Slurm event (or simulator step) that causes it. Drivers call
:func:`transition` so that an impossible sequence (say, requeueing a job that never ran)
fails loudly instead of silently corrupting state.
"""

from __future__ import annotations

from enum import Enum

from slurm_shockwave.model.errors import IllegalTransition


class Phase(str, Enum):
    PENDING = "pending"
    HELD = "held"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    REQUEUED = "requeued"
    DONE = "done"
    FAILED = "failed"


_ALLOWED: dict[Phase, frozenset[Phase]] = {
    Phase.PENDING: frozenset({
        Phase.HELD,        # job_submit.lua holds new jobs; the planner re-holds (scontrol hold)
        Phase.RUNNING,     # Slurm starts it (released, priority high enough)
        Phase.FAILED,      # scancel / node failure before start
    }),
    Phase.HELD: frozenset({
        Phase.PENDING,     # scontrol release by the planner (or by the owner: re-held next round)
        Phase.FAILED,      # scancel while held
    }),
    Phase.RUNNING: frozenset({
        Phase.CHECKPOINTING,  # scancel --signal=<ckpt signal>: preemption begins
        Phase.DONE,           # job exits 0 / simulated job reaches its last epoch
        Phase.FAILED,         # non-zero exit, timeout, node failure
    }),
    Phase.CHECKPOINTING: frozenset({
        Phase.REQUEUED,    # scontrol requeue(hold) after the ack or the grace time
        Phase.DONE,        # the job finished while it was checkpointing
        Phase.FAILED,      # it died while checkpointing
    }),
    Phase.REQUEUED: frozenset({
        Phase.PENDING,     # requeue: back in the queue (BeginTime = now + cred_expire + 1)
        Phase.HELD,        # requeuehold
        Phase.FAILED,      # scancel while requeued
    }),
    Phase.DONE: frozenset(),
    Phase.FAILED: frozenset(),
}


def can_transition(src: Phase, dst: Phase) -> bool:
    return src == dst or dst in _ALLOWED[src]


def transition(src: Phase, dst: Phase, *, job_id: int | str = "?") -> Phase:
    """Return ``dst`` if the edge exists (staying put is always allowed), else raise."""
    if not can_transition(src, dst):
        raise IllegalTransition(f"job {job_id}: {src.value} -> {dst.value} is not allowed")
    return dst


def allowed_edges() -> dict[Phase, frozenset[Phase]]:
    """The transition table, for docs and property tests."""
    return dict(_ALLOWED)
