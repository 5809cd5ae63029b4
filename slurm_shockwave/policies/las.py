"""LAS as in Tiresias: discretised two-dimensional least attained service.

Attained service is GPUs x seconds run. Jobs sit in priority queues split at the
configured thresholds; within a queue the earliest arrival goes first (Tiresias's FIFO
inside a queue, which avoids the thrashing of continuous LAS). A job waiting longer than
``starvation_factor`` times its attained run time is promoted to the top queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import Job
from slurm_shockwave.model.plan import Memory, Plan, Planned, Reason, ReasonCode
from slurm_shockwave.policies.base import Policy


@dataclass(frozen=True)
class LasConfig:
    queue_thresholds_gpu_s: tuple[float, ...] = (3_600.0, 36_000.0)
    starvation_factor: float = 0.0
    """0 disables promotion."""

    def validate(self) -> tuple[str, str] | None:
        t = self.queue_thresholds_gpu_s
        if any(b <= a for a, b in pairwise(t)) or any(v <= 0 for v in t):
            return "queue_thresholds_gpu_s", "must be positive and increasing"
        if self.starvation_factor < 0:
            return "starvation_factor", "must be >= 0"
        return None


class Las(Policy[LasConfig]):
    name = "las"
    summary = "Tiresias-style discretised 2D least attained service (GPUs x time), preemptive"
    Config = LasConfig

    def _queue(self, job: Job, now_s: float) -> int:
        attained = job.progress.attained_gpu_s
        f = self.config.starvation_factor
        waited = now_s - job.spec.arrival_s - job.progress.run_s
        if f > 0 and job.progress.run_s > 0 and waited > f * job.progress.run_s:
            return 0
        return sum(1 for t in self.config.queue_thresholds_gpu_s if attained >= t)

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        keyed = sorted((self._queue(j, view.now_s), j.spec.arrival_s, j.job_id) for j in view.jobs)
        reasons = {jid: Reason(ReasonCode.SCHEDULED, f"queue={q}") for q, _, jid in keyed}
        return Planned(Plan(tuple(k[2] for k in keyed), reasons), memory)
