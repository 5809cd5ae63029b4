"""Makespan, JCT, finish-time fairness and utilisation.

rho_i = JCT_i / (T_excl_i * max(1, N / G)): a job's completion time against running
alone on its GPUs with a 1/N share of a cluster of G GPUs holding the trace's N jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean


@dataclass(frozen=True, slots=True)
class Finished:
    """The facts about one completed job that the metrics need."""

    job_id: int
    arrival_s: float
    finish_s: float
    exclusive_s: float

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.arrival_s


def contention(num_jobs: int, num_gpus: int) -> float:
    return max(1.0, num_jobs / num_gpus)


def rho(job: Finished, num_jobs: int, num_gpus: int) -> float:
    return job.jct_s / (job.exclusive_s * contention(num_jobs, num_gpus))


@dataclass(frozen=True, slots=True)
class Summary:
    jobs: int
    gpus: int
    makespan_s: float
    avg_jct_s: float
    worst_rho: float
    median_rho: float
    unfair_fraction: float
    """Share of jobs with rho > 1.05 (the paper's threshold), 0..1."""
    unfair_fraction_110: float
    """Share of jobs with rho > 1.1 (the threshold of the paper's plotting code), 0..1."""
    utilization: float
    """GPU-seconds held by running jobs over G x makespan."""
    useful_utilization: float
    """The same without checkpoint-restore time: what preemption costs shows here."""


def summarize(done: Sequence[Finished], *, num_gpus: int, busy_gpu_s: float,
              num_jobs: int | None = None, restore_gpu_s: float = 0.0) -> Summary:
    """``num_jobs`` is the trace's N in the contention factor (defaults to len(done))."""
    n = len(done)
    if n == 0:
        return Summary(0, num_gpus, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    total = num_jobs if num_jobs is not None else n
    makespan = max(j.finish_s for j in done)
    rhos = sorted(rho(j, total, num_gpus) for j in done)
    mid = n // 2
    median = rhos[mid] if n % 2 else 0.5 * (rhos[mid - 1] + rhos[mid])
    return Summary(
        jobs=n, gpus=num_gpus, makespan_s=makespan,
        avg_jct_s=fmean(j.jct_s for j in done),
        worst_rho=rhos[-1], median_rho=median,
        unfair_fraction=sum(r > 1.05 for r in rhos) / n,
        unfair_fraction_110=sum(r > 1.1 for r in rhos) / n,
        utilization=busy_gpu_s / (num_gpus * makespan) if makespan > 0 else 0.0,
        useful_utilization=((busy_gpu_s - restore_gpu_s) / (num_gpus * makespan)
                            if makespan > 0 else 0.0),
    )
