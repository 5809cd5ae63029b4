"""A job's progress from its own reports: what the planner believes once a job talks.

Pure: the reports in, a ``JobProgress`` out. The table's guess (or the prior for a model
the table does not know) is the starting point; reports replace what they measure:

- epochs done and the batch size are the latest progress report's (after a requeue the
  job resumes from its checkpoint, so a lower epoch than before is the truth), and a
  report of an earlier run accepted after a later run's is dropped (a process Slurm's
  proctrack lost, training on beside the requeued run);
- the batch-size history (completed epochs at each batch size, run-length encoded) is what
  the Dirichlet regime posterior reads;
- the epoch time at the current batch size is measured between consecutive progress
  reports of the same run (restart) with no checkpoint acknowledgement between, not
  across a run's first interval where an earlier one measured it (that interval holds
  the restore: with it, a migrated 4,949-epoch job's remaining time read 241,489 s
  instead of ~160 s for a round), and where a run's first interval is all there is, it
  bounds the epoch time from above, and with a start-up of at most ``startup_s`` taken
  out, from below: the table's time is held between the two, so the estimate
  calibrates the table by the ratio (``prediction/calibration.py``); a batch size the
  table does not know gets its measured time, and a job of an unknown model gets every
  estimate from its own reports;
- an elastic job's throughput at each GPU count it ran on is its own (``measured_rates``,
  ``merged_rates``; the service's feed knows each run's count).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

from slurm_shockwave.model.bounds import MAX_EXCLUSIVE_S
from slurm_shockwave.model.job import JobProgress
from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.workloads.scaling import nearest_count

Interval = tuple[ProgressReport, int, float, bool, float]
"""One of ``_epoch_times``: closing report, batch size, seconds per epoch, run's first,
epochs."""


def _epoch_times(reports: Sequence[ProgressReport], default_bs: int
                 ) -> Iterator[Interval]:
    """Each interval between consecutive progress reports of one run (restart) at one
    batch size with no checkpoint acknowledgement between them: (its closing report, the
    batch size, seconds per epoch, whether it is the run's first interval, which holds
    the run's start-up (restore, data loading), and the epochs it spans). A job
    stopping for its checkpoint reports the partial epoch it saved, acknowledges, and
    reports it again: live, two such reports 0.01 s and 0.00005 epochs apart read as
    220 s an epoch for a job of 0.28 s (its remaining time 38,228 s instead of 82 s).
    A job the plan keeps trains on after its acknowledgement, and its next intervals
    count again."""
    prev: ProgressReport | None = None
    prev_bs = default_bs
    run_first: ProgressReport | None = None
    acked = False
    for r in reports:
        if r.kind == ReportKind.CHECKPOINTED:
            acked = True
            continue
        if not _is_progress(r):
            continue
        epoch = float(r.epoch or 0.0)
        bs = r.batch_size or prev_bs  # a report without one: the last one said
        if (prev is not None and not acked and prev.restart_count == r.restart_count
                and epoch > float(prev.epoch or 0.0) and r.at_s > prev.at_s
                and prev_bs == bs):
            per_epoch = (r.at_s - prev.at_s) / (epoch - float(prev.epoch or 0.0))
            # no epoch lasts longer than a job may (found by a review: epochs 0, 5e-324,
            # 1e-323 read as infinite seconds an epoch, and the infinite remaining time
            # it gave failed every round's write to the store, restarts included)
            if per_epoch <= MAX_EXCLUSIVE_S:
                yield r, bs, per_epoch, run_first is prev, epoch - float(prev.epoch or 0.0)
        if prev is None or prev.restart_count != r.restart_count:
            run_first = r
        prev, prev_bs, acked = r, bs, False


def _is_progress(report: ProgressReport) -> bool:
    return report.kind == ReportKind.PROGRESS and report.epoch is not None


def _progress_reports(reports: Sequence[ProgressReport]) -> list[ProgressReport]:
    return [r for r in reports if _is_progress(r)]


def _superseded_dropped(reports: Sequence[ProgressReport]) -> list[ProgressReport]:
    """``reports`` without those of a run older than one reported before them: a later
    run's report supersedes its earlier runs. Found by a user walkthrough: a script that
    ignored the checkpoint signal died, its child lived on where Slurm's proctrack lost
    it, and reported epoch 8 at batch size 64 while the requeued run was at 4 (and, a
    review, the newest run's batch size and history followed it). A spool an earlier
    run's Epilog flushed comes before the next run's reports, and is kept."""
    newest = -1
    kept = []
    for r in reports:
        if r.restart_count >= newest:
            newest = r.restart_count
            kept.append(r)
    return kept


def observed_progress(guess: JobProgress, reports: Sequence[ProgressReport], *,
                      startup_s: float = math.inf) -> JobProgress:
    """``guess`` updated by ``reports`` (in the order the service accepted them).
    ``startup_s``: the most a run's start-up (restore, loading) takes, in the reports'
    seconds (the service's ``slurm.restart_cost_s``); a run's first interval less that
    raises the table's epoch time (infinite: it never does)."""
    reports = _superseded_dropped(reports)
    intervals = list(_epoch_times(reports, guess.bs))
    return _observed(guess, _progress_reports(reports),
                     _measured(intervals, _table_times(guess), startup_s=startup_s))


def advanced(seen: JobProgress, reports: Sequence[ProgressReport], run: int, now_s: float,
             epochs: int) -> JobProgress:
    """A running job's progress read forward from its latest report of the run in
    progress (restart count ``run``) at its epoch time, up to the next whole epoch.

    A job reports at least at each epoch's end, so between reports the planner would see
    it standing still, by up to an epoch (448 trace seconds for a ResNet-50 job of the
    live traces; an hour for an ImageNet epoch): a job about to finish would read as one
    with an epoch left, and could be stopped for a restart it cannot pay for. The
    simulator knows progress to the second. Nothing is read forward before the run's
    first report (its restore), after a checkpoint acknowledgement (the job stops at
    what it saved), or past the job's last epoch."""
    mine = [r for r in reports if r.restart_count == run]
    if not mine or not _is_progress(mine[-1]) or seen.epoch_s <= 0:
        return seen
    latest = mine[-1]
    epoch = round(float(latest.epoch or 0.0), 6)  # 2.9999999999 is epoch 3's end
    acks = [i for i, r in enumerate(mine) if r.kind == ReportKind.CHECKPOINTED]
    if acks and epoch <= max((float(r.epoch or 0.0) for r in mine[:acks[-1]]
                              if _is_progress(r)), default=0.0):
        return seen  # the saved epoch reported again after the ack: it is stopping
    ahead = min(max(now_s - latest.at_s, 0.0) / seen.epoch_s,
                math.floor(epoch) + 1 - epoch, max(epochs - epoch, 0.0))
    return replace(seen, epochs_done=epoch + ahead) if ahead > 0 else seen


def observed_elastic(guess: JobProgress, reports: Sequence[ProgressReport],
                     gpus_by_run: Mapping[int, int], current: int, *,
                     startup_s: float = math.inf) -> JobProgress:
    """``observed_progress`` for a job that may run on several GPU counts: its own
    throughput at the counts it ran on (``measured_rates``, merged with the table's by
    ``merged_rates``), and an epoch time measured on another count than ``current``
    (before a resize, or a pending job whose GRES was changed) converted to ``current``.
    One pass over the reports for all three (the service asks every round)."""
    reports = _superseded_dropped(reports)
    progress = _progress_reports(reports)
    intervals = list(_epoch_times(reports, guess.bs))
    if not guess.rate_by_gpus:
        return _observed(guess, progress, _measured(intervals, _table_times(guess),
                                                    startup_s=startup_s))
    rates = merged_rates(dict(guess.rate_by_gpus), _rates(intervals, gpus_by_run), current)
    # epoch time on a run's count = on ``current`` x this (the table's times are at current)
    slower = {run: rates[current] / rates[count] for run, count in gpus_by_run.items()
              if rates.get(count, 0.0) > 0 and rates.get(current, 0.0) > 0}
    measured = _measured(intervals, _table_times(guess), slower, startup_s=startup_s)
    seen = _observed(guess, progress, measured)
    got = measured.get(seen.bs)
    source = None if got is None or got[1] is None else gpus_by_run.get(got[1])
    if source is not None and source != current and rates.get(current, 0.0) > 0:
        factor = rates.get(source, 0.0) / rates[current]
        if factor > 0:
            seen = replace(seen, epoch_s=seen.epoch_s * factor)
    return replace(seen, rate_by_gpus=tuple(sorted(rates.items())))


def _table_times(guess: JobProgress) -> dict[int, float] | None:
    """The times a run's first interval may only lower: the table's; a prior's (a model
    the table does not know) are no measurement, so the job's own replace them."""
    return None if guess.epoch_s_is_prior else dict(guess.epoch_s_by_bs)


def _observed(guess: JobProgress, progress: Sequence[ProgressReport],
              measured_by_bs: Mapping[int, tuple[float, int | None]]) -> JobProgress:
    """``guess`` updated by the progress reports, with the epoch times ``_measured``."""
    if not progress:
        return guess
    history: list[tuple[int, int]] = []
    last_epoch = 0.0
    bs = guess.bs
    for r in progress:
        epoch = float(r.epoch or 0.0)
        bs = r.batch_size or bs  # a report without one: the last one said (a job
        # reporting its size once, then epochs only, read as at its first size again)
        # after a requeue the job resumes from its checkpoint: epochs it redoes up to
        # the furthest it had reached are not new history
        whole = int(epoch) - int(last_epoch)
        if whole > 0:
            if history and history[-1][0] == bs:
                history[-1] = (bs, history[-1][1] + whole)
            else:
                history.append((bs, whole))
        last_epoch = max(last_epoch, epoch)
    measured = {b: seconds for b, (seconds, _) in measured_by_bs.items()}
    latest = progress[-1]
    known = dict(guess.epoch_s_by_bs)
    for b, s in measured.items():
        known.setdefault(b, s)  # a batch size the table lacks: its measured time
    if bs not in known:
        known[bs] = guess.epoch_s
    epoch_s = measured.get(bs, known[bs])
    return replace(guess, epochs_done=float(latest.epoch or 0.0), bs=bs, epoch_s=epoch_s,
                   bs_history=tuple(history), epoch_s_by_bs=tuple(sorted(known.items())))


def _measured(intervals: Sequence[Interval], guess: Mapping[int, float] | None = None,
              slower: Mapping[int, float] | None = None, *, startup_s: float
              ) -> dict[int, tuple[float, int | None]]:
    """The epoch time at each batch size (the latest interval's) and the run (restart
    count) that measured it. A run's first interval counts only where nothing else
    measured that batch size, and then only to hold ``guess``'s time (the table's)
    between two bounds: it holds the run's start-up (restore, loading), so it overstates
    the epoch time and bounds it from above (seen live: a job preempted 0.25 epochs in
    read 2.3 times its length, and waited 80 rounds); less a start-up of ``startup_s``
    it bounds it from below (a user walkthrough: with runs too short for a second
    report, a table far faster than the job's GPUs was believed for ever). Where the
    guess stands, the run is None. ``slower``: an elastic job's table time on a run's
    count is ``guess``'s (on the count it holds now) times this, so the interval is
    compared with the table on the count it ran on."""
    out: dict[int, tuple[float, int | None]] = {}
    first_only: dict[int, float] = {}
    for r, bs, seconds, first, epochs in intervals:
        if first and bs in out:
            continue
        out[bs] = (seconds, r.restart_count)
        if first:
            first_only[bs] = max(seconds - startup_s / epochs, 0.0)
        else:
            first_only.pop(bs, None)
    for bs, at_least in first_only.items():
        if guess is None or bs not in guess:
            continue
        seconds, run = out[bs]
        scale = (slower or {}).get(run, 1.0) if run is not None else 1.0
        if guess[bs] * scale < at_least:
            out[bs] = (at_least, run)
        elif guess[bs] * scale < seconds:
            out[bs] = (guess[bs], None)
    return out


def measured_rates(reports: Sequence[ProgressReport], gpus_by_run: Mapping[int, int]
                   ) -> dict[int, float]:
    """An elastic job's throughput at each GPU count it has run on, from its own
    reports, relative to the count of its latest measurement (1.0): epoch times at one
    batch size measured on both counts (the median ratio over the batch sizes they
    share; a run's first interval, its restore, never counts). ``gpus_by_run``: the
    count of each run (restart count), as the service saw it running."""
    return _rates(list(_epoch_times(reports, 0)), gpus_by_run)


def _rates(intervals: Sequence[Interval], gpus_by_run: Mapping[int, int]
           ) -> dict[int, float]:
    times: dict[int, dict[int, float]] = {}
    base_count = 0
    for r, bs, seconds, first, _epochs in intervals:
        count = gpus_by_run.get(r.restart_count)
        if count and not first and seconds > 0:
            times.setdefault(count, {})[bs] = seconds  # the latest at each batch size
            base_count = count
    if not base_count:
        return {}
    base = times[base_count]
    out = {base_count: 1.0}
    for count, by_bs in times.items():
        ratios = sorted(base[b] / by_bs[b] for b in by_bs.keys() & base.keys())
        if count != base_count and ratios:
            out[count] = float(statistics.median(ratios))
    return out


def merged_rates(table_rates: Mapping[int, float], measured: Mapping[int, float],
                 current: int) -> dict[int, float]:
    """Throughput at each count relative to ``current``: measured where the job ran
    (``measured``: on any common scale); elsewhere the table's ratio (the prior's, when
    the table does not know the model: ``table_rates`` is then the prior) to the
    nearest measured count. Fewer than two counts measured: the table's."""
    if len(measured) < 2:
        return dict(table_rates)
    out: dict[int, float] = {}
    for count in {*table_rates, *measured, current}:
        if count in measured:
            out[count] = measured[count]
            continue
        near = nearest_count(count, measured)
        if table_rates.get(near, 0.0) > 0 and count in table_rates:
            out[count] = measured[near] * table_rates[count] / table_rates[near]
    if out.get(current, 0.0) <= 0:
        return dict(table_rates)
    base = out[current]
    return {c: r / base for c, r in out.items()}


def acknowledged(reports: Sequence[ProgressReport], since_s: float, run: int) -> bool:
    """A checkpoint acknowledged by the run signalled (restart count ``run``) at or after
    ``since_s`` (the signal's time). Another run's is not: a process of an earlier run
    that Slurm's proctrack lost, answering a signal of its own, once counted for the
    requeued run's (a user walkthrough), which was then requeued with nothing saved."""
    return any(r.kind == ReportKind.CHECKPOINTED and r.at_s >= since_s
               and r.restart_count == run for r in reports)
