"""FIFO: first come, first served, non-preemptive; a job that does not fit is skipped."""

from __future__ import annotations

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Memory, Plan, Planned
from slurm_shockwave.policies.base import NoConfig, Policy


class Fifo(Policy[NoConfig]):
    name = "fifo"
    summary = "arrival order, never preempts; later jobs fill GPUs an earlier one cannot use"

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        order = sorted(view.jobs, key=lambda j: (not j.is_running, j.spec.arrival_s, j.job_id))
        return Planned(Plan(tuple(j.job_id for j in order)), memory)
