"""Diff: the actions that take the cluster from what it runs to what was placed."""

from __future__ import annotations

from slurm_shockwave.engine.placement import Placement
from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Action, ActionKind


def diff(view: ClusterView, placement: Placement) -> list[Action]:
    """Preemptions first, then keeps, then starts: GPUs are freed before they are reused."""
    preempt: list[Action] = []
    keep: list[Action] = []
    start: list[Action] = []
    for job in view.jobs:
        slots = placement.slots.get(job.job_id)
        if job.is_running:
            if slots is None:
                preempt.append(Action(ActionKind.PREEMPT, job.job_id, job.gpu_slots))
            elif placement.moves(job):
                preempt.append(Action(ActionKind.PREEMPT, job.job_id, job.gpu_slots))
                start.append(Action(ActionKind.START, job.job_id, slots))
            else:
                keep.append(Action(ActionKind.KEEP, job.job_id, slots))
        elif slots is not None:
            start.append(Action(ActionKind.START, job.job_id, slots))
    return preempt + keep + start
