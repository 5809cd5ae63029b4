"""Themis as Gavel implements it: minimise the worst finish-time fairness.

This is Gavel's ``finish_time_fairness`` policy, which the Shockwave paper labels
Themis; Themis's own partial-allocation auction is not reproduced (docs/deviations.md).
rho_i(x) = (t_i + R_i / x_i) / (t_iso_i + R_i / x_iso_i), where t_i is time since
arrival, R_i the remaining time at full allocation, x_iso_i = min(1, G / (m w_i)) the
equal-share allocation, and t_iso_i the time the work done so far would have taken at
that share. Solved exactly by bisection, realised round by round.
"""

from __future__ import annotations

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Memory, Planned
from slurm_shockwave.policies.base import NoConfig, Policy
from slurm_shockwave.policies.realise import realise
from slurm_shockwave.solver.fractional import min_max_ratio


class Themis(Policy[NoConfig]):
    name = "themis"
    summary = "Gavel's finish-time-fairness policy (the paper's 'Themis'): min max rho"

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        jobs = view.jobs
        if not jobs:
            return realise(view, {}, memory)
        m, g = len(jobs), view.total_gpus
        iso = [min(1.0, g / (m * j.gpus)) for j in jobs]
        # t_iso from the work done, as Gavel's steps done over the isolated throughput:
        # the time run included every restore, so the more a job had been preempted the
        # larger its denominator and the less it got (found by a review)
        fair = [(j.done_s_now + j.remaining_s_now) / s for j, s in zip(jobs, iso, strict=True)]
        x, _ = min_max_ratio([j.gpus for j in jobs],
                             [view.now_s - j.spec.arrival_s for j in jobs],
                             [j.remaining_s_now for j in jobs], fair, g)
        return realise(view, {j.job_id: v for j, v in zip(jobs, x, strict=True)}, memory)
