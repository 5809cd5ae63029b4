"""Elastic greedy: the elastic baseline, a marginal-gain GPU allocator.

In the spirit of Optimus (EuroSys 2018) and Pollux (OSDI 2021), which resize jobs but do
not time-slice them: running jobs keep running; waiting jobs are admitted in arrival
order at their smallest usable count (the most jobs at work, the most throughput per
GPU); GPUs still free go one step at a time to the job whose next count saves the most
remaining time per extra GPU (greedy marginal gain), a running job only when the
saving over ``horizon_s`` is worth the world's ``restart_cost_s``
(``policies/gpu_counts.py``).
Fixed-count jobs take their request. Remaining time is epochs left x the current epoch
time (no prediction), as for the other baselines. docs/policies.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import Job, JobId
from slurm_shockwave.model.plan import Memory, Plan, Planned
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.policies.gpu_counts import grow, usable_counts


@dataclass(frozen=True)
class ElasticGreedyConfig:
    horizon_s: float = 2400.0
    """How far ahead a resize of a running job must pay off (Shockwave's window)."""

    def validate(self) -> tuple[str, str] | None:
        if self.horizon_s <= 0:
            return "horizon_s", "must be > 0"
        return None


class ElasticGreedy(Policy[ElasticGreedyConfig]):
    name = "elastic_greedy"
    summary = ("elastic baseline: admit in arrival order at the smallest count, give free "
               "GPUs by greedy marginal gain; never preempts")
    Config = ElasticGreedyConfig

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        cfg = self.config
        order = sorted(view.jobs, key=lambda j: (not j.is_running, j.spec.arrival_s, j.job_id))
        free = view.total_gpus
        counts: dict[JobId, int] = {}
        admitted: list[Job] = []
        for job in order:
            want = job.current_gpus if job.is_running else min(usable_counts(job, view))
            if not job.spec.is_elastic:
                want = job.gpus
            if want <= free:
                counts[job.job_id] = want
                admitted.append(job)
                free -= want
        elastic = [j for j in admitted if j.spec.is_elastic]
        if free > 0 and elastic:
            grow(counts, elastic, view, free, {j.job_id: j.remaining_s_now for j in elastic},
                 horizon_s=cfg.horizon_s, cost_s=view.restart_cost_s)
        rest = [j for j in order if j.job_id not in counts]
        gpus = {j.job_id: counts[j.job_id] for j in elastic}
        gpus.update({j.job_id: min(usable_counts(j, view)) for j in rest if j.spec.is_elastic})
        return Planned(Plan(tuple(j.job_id for j in admitted + rest), gpus=gpus), memory)
