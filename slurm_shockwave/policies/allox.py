"""AlloX (Le et al., EuroSys 2020) on one GPU type.

AlloX assigns waiting jobs to (worker, position) slots by a min-cost matching with cost
``k * processing_time + waiting_time`` (minimum sum of completion times), starts the
jobs matched to the first position, and never preempts. To bound starvation it only
considers the oldest ``max(alpha * waiting, free GPUs)`` waiting jobs. With identical
GPUs the shortest jobs among the candidates are the first positions of an optimal
matching (the waiting-time term is the same in every column of a row, and an exchange
argument gives shortest-processing-time order), so we sort instead of running the
Hungarian method (checked against scipy's matching in tests/test_policies_unit.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Memory, Plan, Planned, Reason, ReasonCode
from slurm_shockwave.policies.base import Policy


@dataclass(frozen=True)
class AlloxConfig:
    alpha: float = 0.2

    def validate(self) -> tuple[str, str] | None:
        if not 0 < self.alpha <= 1:
            return "alpha", "must be in (0, 1]"
        return None


class Allox(Policy[AlloxConfig]):
    name = "allox"
    summary = "min-sum-completion-time matching over the oldest waiting jobs, non-preemptive"
    Config = AlloxConfig

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        running = sorted((j for j in view.jobs if j.is_running), key=lambda j: j.spec.arrival_s)
        waiting = sorted((j for j in view.jobs if not j.is_running),
                         key=lambda j: (j.spec.arrival_s, j.job_id))
        free = view.total_gpus - sum(j.gpus for j in running)
        n = max(math.ceil(self.config.alpha * len(waiting)), free)
        candidates = sorted(waiting[:n], key=lambda j: (j.remaining_s_now, j.spec.arrival_s))
        reasons = {j.job_id: Reason(ReasonCode.WAITING_CAPACITY, "not among the oldest")
                   for j in waiting[n:]}
        order = tuple(j.job_id for j in running) + tuple(j.job_id for j in candidates)
        return Planned(Plan(order, reasons), memory)
