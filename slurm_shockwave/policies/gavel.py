"""Gavel's max-min fairness (heterogeneity-agnostic, as the Shockwave paper runs it).

With one GPU type and throughputs set to 1, Gavel maximises the minimum of
``w_i x_i / weight_i``: equal, priority-weighted GPU-time shares. We solve the
lexicographic version by water-filling (so GPUs that the minimum does not need are
still shared fairly) and realise it with Gavel's round-based mechanism.
"""

from __future__ import annotations

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Memory, Planned
from slurm_shockwave.policies.base import NoConfig, Policy
from slurm_shockwave.policies.realise import realise
from slurm_shockwave.solver.fractional import water_fill


class Gavel(Policy[NoConfig]):
    name = "gavel"
    summary = "Gavel max-min fairness: equal weighted GPU-time shares, round-based"

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        jobs = view.jobs
        x = water_fill([j.gpus for j in jobs], [j.spec.priority_weight for j in jobs],
                       view.total_gpus)
        return realise(view, {j.job_id: v for j, v in zip(jobs, x, strict=True)}, memory)
