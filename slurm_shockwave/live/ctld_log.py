"""Actuation waits read from slurmctld's log, so that a live run checks the simulator's
model of them instead of assuming it.

The simulator charges every (re)start a modelled wait (half of Slurm's scheduling
interval, on top of the restore) and a requeued job ``cred_expire`` + 1 s before it may
start again; it charges nothing between the checkpoint signal and the requeue, because
the service requeues on the job's acknowledgement. Two waits come from the controller's
own log: a release to the job's allocation (Slurm's scheduling pass), and a checkpoint
signal to Slurm's requeue (the job saving its checkpoint, ending, and its Epilog).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] (.*)$")
_PRIORITY = re.compile(r"set priority to (\d+) for JobId=(\d+)\b")
_HOLD = re.compile(r"(release )?hold on JobId=(\d+)\b")
_ALLOCATE = re.compile(r"sched: Allocate JobId=(\d+)\b|Started JobId=(\d+) in ")
_SIGNAL = re.compile(r"REQUEST_KILL_JOB JobId=(\d+)\b")
_REQUEUE = re.compile(r"Requeuing JobId=(\d+)\b")
_DONE = re.compile(r"_job_complete: JobId=(\d+) done\b")


@dataclass
class ActuationWaits:
    """Wall seconds, in log order."""

    start: list[float] = field(default_factory=list)
    """A release (a hold released or a priority above 0 set, on a job not running) to
    the job's next allocation; a hold before it cancels the release. A job that starts
    with no release before it (Slurm alone) is not a wait of ours. A requeued job
    released before Slurm may start it again waits from then (its requeue + the delay
    given): the simulator charges that part as ``requeue_delay_s``, not as this wait."""
    requeue: list[float] = field(default_factory=list)
    """A signal to a running job (the service's checkpoint signal) to Slurm requeuing it."""


def actuation_waits(lines: Iterable[str], requeue_delay_s: float = 0.0) -> ActuationWaits:
    """Both waits of every job in ``lines`` (slurmctld's log at the default level);
    ``requeue_delay_s``: how long after its requeue Slurm may start a job again
    (``cred_expire`` + 1 s)."""
    waits = ActuationWaits()
    released: dict[int, float] = {}
    eligible: dict[int, float] = {}
    signalled: dict[int, float] = {}
    running: set[int] = set()

    def mark(job: int, release: bool, at: float) -> None:
        if not release:
            released.pop(job, None)
        elif job not in running:  # the service re-pins a running job's priority too
            released.setdefault(job, at)

    for line in lines:
        m = _LINE.match(line)
        if m is None:
            continue
        at, text = datetime.fromisoformat(m.group(1)).timestamp(), m.group(2)
        if (p := _PRIORITY.search(text)) is not None:
            mark(int(p.group(2)), int(p.group(1)) > 0, at)
        elif (h := _HOLD.search(text)) is not None:
            mark(int(h.group(2)), h.group(1) is not None, at)
        elif (a := _ALLOCATE.search(text)) is not None:
            job = int(a.group(1) or a.group(2))
            running.add(job)
            if (since := released.pop(job, None)) is not None:
                since = max(since, eligible.pop(job, since))
                waits.start.append(round(max(0.0, at - since), 3))
        elif (s := _SIGNAL.search(text)) is not None:
            if int(s.group(1)) in running:
                signalled.setdefault(int(s.group(1)), at)
        elif (r := _REQUEUE.search(text)) is not None:
            job = int(r.group(1))
            running.discard(job)
            eligible[job] = at + requeue_delay_s
            if (since := signalled.pop(job, None)) is not None:
                waits.requeue.append(round(max(0.0, at - since), 3))
        elif (d := _DONE.search(text)) is not None:
            running.discard(int(d.group(1)))
            signalled.pop(int(d.group(1)), None)
    return waits


def summary(waits: list[float]) -> dict[str, Any]:
    """n, mean, median and 90th percentile (nearest rank) and max, seconds; None where n is 0."""
    if not waits:
        return {"n": 0, "mean_s": None, "p50_s": None, "p90_s": None, "max_s": None}
    ordered = sorted(waits)

    def rank(q: float) -> float:
        return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)

    return {"n": len(ordered), "mean_s": round(sum(ordered) / len(ordered), 3),
            "p50_s": rank(0.5), "p90_s": rank(0.9), "max_s": round(ordered[-1], 3)}


def log_summaries(path: Path, requeue_delay_s: float = 0.0) -> dict[str, Any]:
    """Both waits' summaries from the log at ``path``; empty ones where it is missing."""
    try:
        with path.open(encoding="utf-8", errors="replace") as log:
            waits = actuation_waits(log, requeue_delay_s)
    except FileNotFoundError:
        waits = ActuationWaits()
    return {"start": summary(waits.start), "requeue": summary(waits.requeue)}
