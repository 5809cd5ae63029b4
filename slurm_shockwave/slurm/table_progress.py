"""A job's progress before it reports: epoch times from the throughput table (the
simulator's), or a prior; the service's feed replaces them with the job's own reports."""

from __future__ import annotations

import math
from collections.abc import Callable

from slurm_shockwave.model.job import JobProgress, gpu_counts
from slurm_shockwave.model.throughputs import ThroughputTable
from slurm_shockwave.slurm.hints import Hint
from slurm_shockwave.slurm.job_gpus import request_gpus
from slurm_shockwave.slurm.protocol import SlurmJob
from slurm_shockwave.workloads.catalog import MODELS
from slurm_shockwave.workloads.scaling import fill_rates, relative_rates, table_rates

ProgressFn = Callable[[SlurmJob, Hint], JobProgress]
"""What is known of a job's progress (the throughput table; later the job's reports)."""

PRIOR_EPOCH_S = 600.0
"""An epoch's time for a model the table does not know, of a job with no time limit."""


def table_progress(table: ThroughputTable, prior_epoch_s: float = PRIOR_EPOCH_S,
                   time_scale: float = 1.0) -> ProgressFn:
    """Before a job reports anything: no epochs done, epoch times from the throughput
    table for its model and GPU count (what the simulator knows too), divided by
    ``time_scale`` (the jobs train that many times faster than the table: emulated jobs
    at ``--time-scale X``; 1 on a real cluster). Every time in the planner's view is wall
    time: the round, now, arrivals, and the epoch times jobs report; a table time left
    unscaled would make a job that has not reported yet look X times longer than one
    that has.

    A batch size the table lacks takes the nearest one's epoch time (never 0, which would
    make a 5,000-epoch job look instant). A GPU count it lacks (3, 16: an elastic job's
    range, or a request) takes the nearest measured count's throughput scaled by the
    prior, as the simulator's elastic jobs do (``fill_rates``): before, such a job was
    planned from the prior alone, 600 s an epoch, and a job grown from 8 to 16 GPUs read
    71 times longer (found by a review). A model the table does not know is planned from
    a prior: its time limit spread over its epochs, else ``prior_epoch_s`` per epoch.
    """

    def progress(job: SlurmJob, hint: Hint) -> JobProgress:
        gpus = max(job.gpus, 1)
        request = request_gpus(job, hint)
        known: dict[int, float] = {}
        info = MODELS.get(hint.model)
        if info is not None:
            known = {bs: info.samples_per_epoch / bs / rate / time_scale
                     for bs in {hint.bs, *info.batch_sizes, info.max_bs}
                     if (rate := _steps_per_s(table, hint.model, bs, gpus)) is not None}
        if not known:
            limit = job.time_limit_s
            prior = limit / hint.epochs if limit > 0 else prior_epoch_s
            return JobProgress(bs=hint.bs, epoch_s=prior, epoch_s_by_bs=((hint.bs, prior),),
                               gpus=gpus, rate_by_gpus=elastic_rates(
                                   table, hint, gpus, hint.bs, request)
                               if hint.gpus_range else (), epoch_s_is_prior=True)
        nearest = min(known, key=lambda b: (abs(math.log(b / hint.bs)), b))
        if hint.bs not in known:
            known[hint.bs] = known[nearest]
        rates = elastic_rates(table, hint, gpus, nearest, request) if hint.gpus_range else ()
        return JobProgress(bs=hint.bs, epoch_s=known[hint.bs],
                           epoch_s_by_bs=tuple(sorted(known.items())), gpus=gpus,
                           rate_by_gpus=rates)

    return progress


def _steps_per_s(table: ThroughputTable, model: str, bs: int, gpus: int) -> float | None:
    """The table's throughput at ``gpus``, or the prior's from its nearest measured count;
    None when the table has none at ``bs``."""
    measured = table_rates(table, model, bs, [gpus])
    return fill_rates(measured, [gpus])[gpus] if measured else None


def elastic_rates(table: ThroughputTable, hint: Hint, gpus: int, bs: int,
                  request: int | None = None) -> tuple[tuple[int, float], ...]:
    """An elastic job's throughput at each of its counts (those of its ``request``, and
    ``gpus``, the count Slurm holds for it now) relative to its request (to ``gpus``
    without one): the table's entries at batch size ``bs``, else the prior."""
    base = request or gpus
    counts = {*gpu_counts(base, hint.gpus_range), gpus}
    known = table_rates(table, hint.model, bs, counts)
    return tuple(sorted(relative_rates(known or {gpus: 1.0}, counts, base).items()))
