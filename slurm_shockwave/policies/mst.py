"""MST: maximise the sum of throughputs (Gavel's ``max_sum_throughput_perf``).

Throughput is in raw steps per second, as the paper's code uses it, so the policy
favours fast-iterating workloads. Per GPU, since a job holds w_i GPUs while it runs.
"""

from __future__ import annotations

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import Job
from slurm_shockwave.model.plan import Memory, Planned
from slurm_shockwave.policies.base import NoConfig, Policy
from slurm_shockwave.policies.realise import realise
from slurm_shockwave.solver.fractional import fractional_knapsack
from slurm_shockwave.workloads.catalog import MODELS


def steps_per_s(job: Job) -> float:
    p = job.progress
    info = MODELS.get(job.spec.model)
    if info is None or p.epoch_s <= 0 or p.bs <= 0:
        return 0.0
    return (info.samples_per_epoch / p.bs) / p.epoch_s


class Mst(Policy[NoConfig]):
    name = "mst"
    summary = "maximise the sum of throughputs (steps/s), round-based"

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        jobs = view.jobs
        x = fractional_knapsack([j.gpus for j in jobs], [steps_per_s(j) / j.gpus for j in jobs],
                                view.total_gpus)
        return realise(view, {j.job_id: v for j, v in zip(jobs, x, strict=True)}, memory)
