"""Elastic jobs in Shockwave: the count each job runs on, decided with its share.

Before the market runs, every elastic job gets a count (``policies/gpu_counts.py``):
a waiting job the count with the most throughput per GPU where that is clearly better
than its request's (the longer the job, the larger the gain asked: ``SHRINK_SLOPE``)
and does not make it the longest job left (shrinking the longest jobs lengthens the
makespan); a running job the count it runs on, unless waiting jobs want more GPUs than
are free and its most efficient smaller count gains twice a waiting job's threshold and
saves several restarts' worth of GPU-time (``shrink_running``); when those counts
leave GPUs idle even if every job ran, the idle GPUs go one step at a time to the job
with the most predicted remaining time (the one that would finish last), to a running
job only when the time saved over the window is worth a checkpoint and restart (the world's
``restart_cost_s``, as for leases). The market
(the window program, packing and order) then plans the jobs as fixed-count jobs at
those counts, so it decides who runs and how often at the width each job will really
have, while each job's fair finish time stays the one of its request (the metric's
reference; without this, shrunk jobs got looser targets and worst rho rose from 1.08
to 1.44 on the 120-job trace). The plan carries the counts; placement applies them (a
resize of a running job is a preempt plus a start). Predicted remaining times are
Shockwave's own (``estimates.py``). docs/elastic.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import JobId
from slurm_shockwave.model.plan import Memory, Planned
from slurm_shockwave.policies.gpu_counts import (
    at_count,
    base_counts,
    grow,
    rates,
    shrink_running,
    with_count_notes,
)
from slurm_shockwave.policies.shockwave.config import ShockwaveConfig
from slurm_shockwave.policies.shockwave.estimates import estimate

PlanFn = Callable[[ClusterView, Memory, Mapping[JobId, float]], Planned]
"""Shockwave's fixed-count plan; the mapping scales each job's runtime estimates to its
request's for the fair finish time."""


def choose_counts(view: ClusterView, cfg: ShockwaveConfig
                  ) -> tuple[dict[JobId, int], dict[JobId, int]]:
    """Each job's count this round (module docstring), and its count before growth."""
    remaining = {j.job_id: estimate(j, noise=cfg.prediction_noise, seed=cfg.seed).remaining_s
                 for j in view.jobs}
    base = base_counts(view, remaining)
    shrink_running(base, view, remaining)
    counts = dict(base)
    spare = view.total_gpus - sum(counts.values())
    elastic = [j for j in view.jobs if j.spec.is_elastic]
    if spare > 0:
        grow(counts, elastic, view, spare, remaining, horizon_s=cfg.window_rounds * view.round_s,
             cost_s=view.restart_cost_s, longest_first=True)
    return counts, base


def plan_elastic(plan_fixed: PlanFn, view: ClusterView, memory: Memory,
                 cfg: ShockwaveConfig) -> Planned:
    """Choose counts, plan the jobs as fixed at them, and put the counts in the plan."""
    counts, base = choose_counts(view, cfg)
    fixed_view = replace(view, jobs=tuple(at_count(j, counts[j.job_id]) if j.spec.is_elastic
                                          else j for j in view.jobs))
    # finish-time fairness stays measured at each job's request (the metric's reference)
    fair_scale = {j.job_id: rates(j)[counts[j.job_id]] for j in view.jobs if j.spec.is_elastic}
    planned = plan_fixed(fixed_view, memory, fair_scale)
    gpus = {j.job_id: counts[j.job_id] for j in view.jobs if j.spec.is_elastic}
    # the count, and why where it is not the request, in each elastic job's reason
    reasons = with_count_notes(planned.plan.reasons, view, counts, base)
    return Planned(replace(planned.plan, gpus=gpus, reasons=reasons), planned.memory)
