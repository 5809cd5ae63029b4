"""OSSP: makespan minimisation (Gavel's ``min_total_duration``).

Gavel bisects on the horizon T for the smallest T at which every job can finish
(x_i = R_i / T, capacity respected); with one GPU type that T has a closed form,
T* = max(max_i R_i, sum_i w_i R_i / G), computed exactly here.
"""

from __future__ import annotations

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Memory, Planned
from slurm_shockwave.policies.base import NoConfig, Policy
from slurm_shockwave.policies.realise import realise
from slurm_shockwave.solver.fractional import min_makespan


class Ossp(Policy[NoConfig]):
    name = "ossp"
    summary = "open-shop makespan minimisation: x_i = R_i / T*, round-based"

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        jobs = view.jobs
        x, _ = min_makespan([j.gpus for j in jobs], [j.remaining_s_now for j in jobs],
                            view.total_gpus)
        return realise(view, {j.job_id: v for j, v in zip(jobs, x, strict=True)}, memory)
