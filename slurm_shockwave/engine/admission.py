"""Admission: which observed jobs a policy may consider this round."""

from __future__ import annotations

from dataclasses import replace

from slurm_shockwave.model.cluster import SEVERAL_TYPES, ClusterView
from slurm_shockwave.model.job import JobId
from slurm_shockwave.model.plan import Reason, ReasonCode


def admit(view: ClusterView) -> tuple[ClusterView, dict[JobId, Reason]]:
    """Drop jobs that could never be placed, with a reason, so policies need not care."""
    total = view.total_gpus
    of_type: dict[str, int] = {}
    for node in view.nodes:
        of_type[node.gpu_type] = of_type.get(node.gpu_type, 0) + node.gpus
    rejected: dict[JobId, Reason] = {}
    kept = []
    for job in view.jobs:
        kind = job.spec.gpu_type
        # a typed job: its type's GPUs, and those of nodes of several types
        room = of_type.get(kind, 0) + of_type.get(SEVERAL_TYPES, 0) if kind else total
        # an elastic typed job fits on its fewest (the type's free GPUs shrink whenever
        # another partition's job runs there: a review)
        asked = min(job.spec.gpu_counts()) if kind and job.spec.is_elastic else job.gpus
        if asked > room or job.gpus < 1:
            rejected[job.job_id] = Reason(ReasonCode.REJECTED_TOO_LARGE,
                                          f"gpus={job.gpus} cluster={total}" if not kind
                                          else f"gpus={job.gpus} {kind}={room}")
        else:
            kept.append(job)
    if not rejected:
        return view, rejected
    return replace(view, jobs=tuple(kept)), rejected
