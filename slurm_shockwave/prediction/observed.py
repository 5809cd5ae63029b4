"""A job's progress from its own reports: what the planner believes once a job talks.

Pure: the reports in, a ``JobProgress`` out. The table's guess (or the prior for a model
the table does not know) is the starting point; reports replace what they measure:

- epochs done and the batch size are the latest progress report's (after a requeue the
  job resumes from its checkpoint, so a lower epoch than before is the truth);
- the batch-size history (completed epochs at each batch size, run-length encoded) is what
  the Dirichlet regime posterior reads;
- the epoch time at the current batch size is measured between consecutive progress
  reports of the same run (restart), not across a run's first interval where an
  earlier one measured it (that interval holds the restore: once it made a migrated
  4,949-epoch job look 25x slower for a round), so the estimate calibrates the table by the ratio
  (``prediction/calibration.py``); a batch size the table does not know gets its measured
  time, and a job of an unknown model gets every estimate from its own reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from slurm_shockwave.model.job import JobProgress
from slurm_shockwave.model.report import ProgressReport, ReportKind


def observed_progress(guess: JobProgress, reports: Sequence[ProgressReport]) -> JobProgress:
    """``guess`` updated by ``reports`` (in the order the service accepted them)."""
    progress = [r for r in reports if r.kind == ReportKind.PROGRESS and r.epoch is not None]
    if not progress:
        return guess
    history: list[tuple[int, int]] = []
    measured: dict[int, float] = {}
    last_epoch = 0.0
    prev: ProgressReport | None = None
    # the first interval of a run holds its start-up (restore, data loading): it is an
    # epoch time only where nothing else measured that batch size
    run_first: ProgressReport | None = None
    for r in progress:
        epoch = float(r.epoch or 0.0)
        bs = r.batch_size or (prev.batch_size if prev else None) or guess.bs
        # after a requeue the job resumes from its checkpoint: epochs it redoes up to
        # the furthest it had reached are not new history
        whole = int(epoch) - int(last_epoch)
        if whole > 0:
            if history and history[-1][0] == bs:
                history[-1] = (bs, history[-1][1] + whole)
            else:
                history.append((bs, whole))
        if (prev is not None and prev.restart_count == r.restart_count
                and epoch > float(prev.epoch or 0.0) and r.at_s > prev.at_s
                and (prev.batch_size or bs) == bs
                and not (run_first is prev and bs in measured)):
            measured[bs] = (r.at_s - prev.at_s) / (epoch - float(prev.epoch or 0.0))
        if prev is None or prev.restart_count != r.restart_count:
            run_first = r
        last_epoch = max(last_epoch, epoch)
        prev = r
    latest = progress[-1]
    bs = latest.batch_size or guess.bs
    known = dict(guess.epoch_s_by_bs)
    for b, s in measured.items():
        known.setdefault(b, s)  # a batch size the table lacks: its measured time
    if bs not in known:
        known[bs] = guess.epoch_s
    epoch_s = measured.get(bs, known[bs])
    return replace(guess, epochs_done=float(latest.epoch or 0.0), bs=bs, epoch_s=epoch_s,
                   bs_history=tuple(history), epoch_s_by_bs=tuple(sorted(known.items())))


def acknowledged(reports: Sequence[ProgressReport], since_s: float) -> bool:
    """A checkpoint acknowledged at or after ``since_s`` (the signal's time)."""
    return any(r.kind == ReportKind.CHECKPOINTED and r.at_s >= since_s for r in reports)
