"""SRTF: shortest remaining time first, preemptive, at the job's current rate."""

from __future__ import annotations

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Memory, Plan, Planned
from slurm_shockwave.policies.base import NoConfig, Policy


class Srtf(Policy[NoConfig]):
    name = "srtf"
    summary = "shortest remaining time (epochs left x current epoch time) first, preemptive"

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        order = sorted(view.jobs, key=lambda j: (j.remaining_s_now, j.spec.arrival_s, j.job_id))
        return Planned(Plan(tuple(j.job_id for j in order)), memory)
