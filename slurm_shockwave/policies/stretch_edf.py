"""Max-stretch EDF: earliest deadline first, each job's deadline its arrival plus ``stretch``
times its predicted exclusive runtime; preemptive; the critical path first.

Finish-time fairness is a job's stretch (JCT over exclusive runtime) divided by the
trace's contention, so keeping every job's stretch under one target keeps the worst rho
down; earliest-deadline-first on such deadlines is what the online max-stretch algorithm
of Bender, Chakrabarti and Muthukrishnan (SODA 1998) runs. Among jobs that
arrive together it is shortest first, which keeps average JCT near SRTF's; unlike SRTF,
a long job's deadline comes round, so it is never left behind for ever. One constant
needs no knowledge of the cluster's contention: the order is arrival + stretch x size.

Sizes are Shockwave's predictions (its batch-size posterior, ``shockwave/estimates.py``),
and Shockwave's critical path runs first (``shockwave/commitments.py``): a job whose
remaining time alone nearly sets the makespan's lower bound loses makespan for every
round it waits. Measured against Shockwave and the nine baselines in docs/evaluation.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Memory, Plan, Planned, Reason, ReasonCode
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.policies.shockwave.commitments import critical_path
from slurm_shockwave.policies.shockwave.estimates import estimate


@dataclass(frozen=True)
class StretchEdfConfig:
    stretch: float = 2.0
    """A job's deadline is its arrival plus this many times its predicted exclusive
    runtime (the order depends only on it, not on the cluster's size)."""
    critical_frac: float = 0.95
    """As Shockwave's: jobs whose remaining time reaches this fraction of the makespan's
    lower bound from now run first; 0 turns it off."""

    def validate(self) -> tuple[str, str] | None:
        if not 0 < self.stretch <= 1000:
            return "stretch", "must be > 0 and <= 1000"
        if not 0 <= self.critical_frac <= 1:
            return "critical_frac", "must be in [0, 1]"
        return None


class StretchEdf(Policy[StretchEdfConfig]):
    name = "stretch_edf"
    summary = ("earliest deadline first, deadline = arrival + stretch x predicted runtime; "
               "critical path first")
    Config = StretchEdfConfig

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        cfg = self.config
        est = {j.job_id: estimate(j) for j in view.jobs}
        deadline = {j.job_id: j.spec.arrival_s + cfg.stretch * (est[j.job_id].done_work_s
                                                                + est[j.job_id].remaining_s)
                    for j in view.jobs}
        crit = critical_path({j.job_id: est[j.job_id].remaining_s for j in view.jobs},
                             {j.job_id: j.gpus for j in view.jobs}, view.total_gpus,
                             cfg.critical_frac)
        rest = sorted((j.job_id for j in view.jobs if j.job_id not in crit),
                      key=lambda jid: (deadline[jid], jid))
        reasons = {jid: Reason(ReasonCode.SCHEDULED, "critical path") for jid in crit}
        reasons.update({jid: Reason(ReasonCode.SCHEDULED, f"deadline {deadline[jid]:.0f}s")
                        for jid in rest})
        return Planned(Plan(tuple(crit + rest), reasons), memory)
