"""Max-stretch EDF: earliest deadline first, each job's deadline its arrival plus a stretch
times its predicted exclusive runtime; preemptive; the critical path first.

Finish-time fairness is a job's stretch (JCT over exclusive runtime) divided by the
trace's contention, so keeping every job's stretch under one target keeps the worst rho
down; earliest-deadline-first on such deadlines is what the online max-stretch algorithm
of Bender, Chakrabarti and Muthukrishnan (SODA 1998) runs, with the stretch the least
that the jobs seen so far can all still meet. Here (``stretch: auto``) that is the least
stretch S for which no active job's deadline, arrival + S x size, is out of reach in the
fluid relaxation from now (``least_stretch``), re-taken every round, so the order needs
no constant: under light load S is small and the order close to arrival order, under a
crowd S grows and the order goes towards shortest first. Among jobs that arrive together
it is shortest first, which keeps average JCT near SRTF's; unlike SRTF, a long job's
deadline comes round, so it is never left behind for ever. A number fixes the stretch.

Elastic jobs (a ``gpus=LO-HI`` hint) start at their request and only grow: GPUs that
would idle even if every job ran go one step at a time to the job whose next count saves
the most remaining time per GPU, a running one only when that pays for its restart
within ``horizon_s`` (``policies/gpu_counts.py``, shared with Shockwave and
elastic_greedy). No job is planned below its request: a shrunk job runs longer against
a stretch measured at its request; on the paper's traces shrinking waiting jobs lowered
the average JCT but raised the worst rho at 220 and 900 jobs and put the 900-job makespan
behind elastic_greedy's (docs/evaluation.md). Deadlines and the fluid work are taken at
each job's request.

Sizes are Shockwave's predictions (its batch-size posterior, ``shockwave/estimates.py``),
and Shockwave's critical path runs first (``shockwave/commitments.py``): a job whose
remaining time alone nearly sets the makespan's lower bound loses makespan for every
round it waits. Measured against Shockwave and the nine baselines in docs/evaluation.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_shockwave.model.bounds import MAX_SEED
from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import Job, JobId
from slurm_shockwave.model.plan import Memory, Plan, Planned, Reason, ReasonCode
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.policies.gpu_counts import (
    base_counts,
    grow,
    remaining_at,
    with_count_notes,
)
from slurm_shockwave.policies.shockwave.commitments import critical_path
from slurm_shockwave.policies.shockwave.estimates import Estimate, estimate
from slurm_shockwave.solver.search import narrow

AUTO = "auto"
MAX_STRETCH = 1e9
"""Where ``least_stretch`` stops doubling: no deadline this far out is out of reach."""


@dataclass(frozen=True)
class StretchEdfConfig:
    stretch: float | str = AUTO
    """A job's deadline is its arrival plus this many times its predicted exclusive
    runtime; ``auto``: the least stretch the active jobs can all still meet, every round
    (``least_stretch``)."""
    critical_frac: float = 0.95
    """As Shockwave's: jobs whose remaining time reaches this fraction of the makespan's
    lower bound from now run first; 0 turns it off."""
    horizon_s: float = 2400.0
    """Elastic jobs: how far ahead growing a running job must pay for its restart
    (Shockwave's window, 20 rounds of 120 s)."""
    prediction_noise: float = 0.0
    """As Shockwave's, to measure robustness: each job's predicted remaining time times a
    seeded factor in [1-e, 1+e] (``benchmarks/noise.py``)."""
    seed: int = 0

    def validate(self) -> tuple[str, str] | None:
        if not 0 <= self.prediction_noise <= 1:
            return "prediction_noise", "must be in [0, 1]"
        if not 0 <= self.seed <= MAX_SEED:
            return "seed", f"must be from 0 to {MAX_SEED}"
        if not 0 < self.horizon_s <= 10 * 86400:
            return "horizon_s", "must be > 0 and <= 864000 seconds"
        if isinstance(self.stretch, str):
            if self.stretch != AUTO:
                return "stretch", f"must be {AUTO} or a number > 0 and <= 1000"
        elif not 0 < self.stretch <= 1000:
            return "stretch", f"must be {AUTO} or a number > 0 and <= 1000"
        if not 0 <= self.critical_frac <= 1:
            return "critical_frac", "must be in [0, 1]"
        return None


@dataclass(frozen=True, slots=True)
class Active:
    """What the stretch needs of an active job (seconds; size and remaining exclusive)."""

    arrival_s: float
    size_s: float
    remaining_s: float
    gpus: int


def reachable(jobs: Sequence[Active], now_s: float, total_gpus: int, stretch: float) -> bool:
    """Whether every deadline arrival + stretch x size can still be met in the fluid
    relaxation (GPU-seconds shared at will, a job no faster than alone): each job's own
    remaining time fits before its deadline, and the GPU-work due by each deadline fits
    in the GPU-seconds until it. A relaxation: true does not promise a schedule."""
    work = 0.0
    for due, remaining, gpus in sorted((j.arrival_s + stretch * j.size_s, j.remaining_s,
                                        j.gpus) for j in jobs):
        if now_s + remaining > due:
            return False
        work += gpus * remaining
        if work > total_gpus * (due - now_s):
            return False
    return True


def least_stretch(jobs: Sequence[Active], now_s: float, total_gpus: int,
                  rel_tol: float = 1e-3) -> float:
    """The least stretch for which ``reachable`` holds, to ``rel_tol`` (from above, by
    bisection: no clock in it, so a round replays exactly). 0 with no job. Jobs with no
    work left, or sizes that are not positive finite numbers, are left out: no stretch
    makes a deadline of size 0 reachable, and one such job would set S to MAX_STRETCH
    for everyone."""
    jobs = [j for j in jobs if j.remaining_s > 0 and 0 < j.size_s < math.inf]
    if not jobs or total_gpus <= 0:
        return 0.0
    def ok(stretch: float) -> bool:
        return reachable(jobs, now_s, total_gpus, stretch)

    hi = 1.0
    while not ok(hi):
        hi *= 2.0
        if hi > MAX_STRETCH:
            return MAX_STRETCH
    return narrow(ok, 0.0, hi, rel_tol=rel_tol)[1]


def request_sizes(jobs: Sequence[Job], est: Mapping[JobId, Estimate],
                  scale: Mapping[JobId, float]) -> dict[JobId, float]:
    """Each job's predicted exclusive runtime at its request, the size its deadline is
    stretched from: done and remaining work, times ``scale`` (an elastic job's estimates
    are at the count it runs on; 1 where absent)."""
    return {j.job_id: (est[j.job_id].done_work_s + est[j.job_id].remaining_s)
            * scale.get(j.job_id, 1.0) for j in jobs}


def jobs_least_stretch(jobs: Sequence[Job], est: Mapping[JobId, Estimate],
                       scale: Mapping[JobId, float], size: Mapping[JobId, float],
                       now_s: float, total_gpus: int) -> float:
    """``least_stretch`` of these jobs, their sizes and remaining times at their request."""
    return least_stretch([Active(j.spec.arrival_s, size[j.job_id],
                                 est[j.job_id].remaining_s * scale.get(j.job_id, 1.0), j.gpus)
                          for j in jobs], now_s, total_gpus)


class StretchEdf(Policy[StretchEdfConfig]):
    name = "stretch_edf"
    summary = ("earliest deadline first, deadline = arrival + stretch x predicted runtime, "
               "the stretch the least the active jobs can meet; critical path first")
    Config = StretchEdfConfig

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        cfg = self.config
        est = {j.job_id: estimate(j, noise=cfg.prediction_noise, seed=cfg.seed)
               for j in view.jobs}
        # at each job's request: an elastic job's estimates are at the count it runs on
        at_request = {j.job_id: (remaining_at(j, j.gpus, 1.0) if j.current_gpus != j.gpus
                                 else 1.0) for j in view.jobs}
        size = request_sizes(view.jobs, est, at_request)
        stretch = (cfg.stretch if not isinstance(cfg.stretch, str) else jobs_least_stretch(
            view.jobs, est, at_request, size, view.now_s, view.total_gpus))
        deadline = {j.job_id: j.spec.arrival_s + stretch * size[j.job_id] for j in view.jobs}
        remaining = {jid: e.remaining_s for jid, e in est.items()}
        crit = critical_path(remaining, {j.job_id: j.gpus for j in view.jobs},
                             view.total_gpus, cfg.critical_frac)
        rest = sorted((j.job_id for j in view.jobs if j.job_id not in crit),
                      key=lambda jid: (deadline[jid], jid))
        reasons = {jid: Reason(ReasonCode.SCHEDULED, "critical path") for jid in crit}
        reasons.update({jid: Reason(ReasonCode.SCHEDULED, f"deadline {deadline[jid]:.0f}s")
                        for jid in rest})
        counts, base = self._elastic_counts(view, remaining)
        return Planned(Plan(tuple(crit + rest), with_count_notes(reasons, view, counts, base),
                            gpus=counts), memory)

    def _elastic_counts(self, view: ClusterView, remaining_s: Mapping[JobId, float]
                        ) -> tuple[dict[JobId, int], dict[JobId, int]]:
        """Each elastic job's count: its request (or the one it runs on), grown into GPUs
        that would idle even if every job ran (module docstring); and its count before
        growth."""
        elastic = [j for j in view.jobs if j.spec.is_elastic]
        if not elastic:
            return {}, {}
        base = base_counts(view, remaining_s, shrink=False)
        counts = dict(base)
        spare = view.total_gpus - sum(counts.values())
        if spare > 0:
            grow(counts, elastic, view, spare, remaining_s, horizon_s=self.config.horizon_s,
                 cost_s=view.restart_cost_s)
        return ({j.job_id: counts[j.job_id] for j in elastic},
                {j.job_id: base[j.job_id] for j in elastic})
