"""Admission: which observed jobs a policy may consider this round."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from slurm_shockwave.model.cluster import SEVERAL_TYPES, ClusterView
from slurm_shockwave.model.job import JobId
from slurm_shockwave.model.plan import Reason, ReasonCode


def admit(view: ClusterView) -> tuple[ClusterView, dict[JobId, Reason]]:
    """Drop jobs that cannot be placed, with a reason, so policies need not care: never
    (wider than the partition's GPUs: ``rejected_too_large``), or not while nodes are
    drained, down or another partition's (``waiting_capacity``, live only)."""
    now = _by_type((n.gpu_type, n.gpus) for n in view.nodes)
    ever = _by_type(view.configured) if view.configured else now
    rejected: dict[JobId, Reason] = {}
    kept = []
    for job in view.jobs:
        kind = job.spec.gpu_type
        # an elastic job fits on its fewest (the GPUs usable shrink whenever a node is
        # drained or another partition's job runs there: reviews)
        asked = job.spec.gpu_counts()[0]  # ascending; a fixed job's is its request
        if job.is_running and job.gpus >= 1:
            kept.append(job)  # it holds its GPUs: dropped, they were given to another job
        elif asked > _room(ever, kind) or job.gpus < 1:
            rejected[job.job_id] = Reason(ReasonCode.REJECTED_TOO_LARGE,
                                          f"gpus={asked} {kind or 'cluster'}="
                                          f"{_room(ever, kind)}")
        elif asked > _room(now, kind):
            rejected[job.job_id] = Reason(
                ReasonCode.WAITING_CAPACITY,
                f"gpus={asked} usable{f' {kind}' if kind else ''}={_room(now, kind)} of "
                f"{_room(ever, kind)}: the rest drained, down or held by jobs outside the "
                "plan")
        else:
            kept.append(job)
    if not rejected:
        return view, rejected
    return replace(view, jobs=tuple(kept)), rejected


def _by_type(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind, gpus in pairs:
        out[kind] = out.get(kind, 0) + gpus
    return out


def _room(of_type: dict[str, int], kind: str) -> int:
    """The GPUs a job asking ``kind`` may have: all for "", else its type's and those of
    nodes of several types."""
    return of_type.get(kind, 0) + of_type.get(SEVERAL_TYPES, 0) if kind \
        else sum(of_type.values())
