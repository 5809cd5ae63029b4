"""Gandiva-Fair as the paper runs it: an equal split, x_i = min(1, G/m), scale ignored."""

from __future__ import annotations

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Memory, Planned
from slurm_shockwave.policies.base import NoConfig, Policy
from slurm_shockwave.policies.realise import realise


class GandivaFair(Policy[NoConfig]):
    name = "gandiva_fair"
    summary = "equal time split between active jobs regardless of GPU count, round-based"

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        share = min(1.0, view.total_gpus / len(view.jobs)) if view.jobs else 0.0
        return realise(view, {j.job_id: share for j in view.jobs}, memory)
