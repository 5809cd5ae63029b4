"""Admission: which observed jobs a policy may consider this round."""

from __future__ import annotations

from dataclasses import replace

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import JobId
from slurm_shockwave.model.plan import Reason, ReasonCode


def admit(view: ClusterView) -> tuple[ClusterView, dict[JobId, Reason]]:
    """Drop jobs that could never be placed, with a reason, so policies need not care."""
    total = view.total_gpus
    rejected: dict[JobId, Reason] = {}
    kept = []
    for job in view.jobs:
        if job.gpus > total or job.gpus < 1:
            rejected[job.job_id] = Reason(ReasonCode.REJECTED_TOO_LARGE,
                                          f"gpus={job.gpus} cluster={total}")
        else:
            kept.append(job)
    if not rejected:
        return view, rejected
    return replace(view, jobs=tuple(kept)), rejected
