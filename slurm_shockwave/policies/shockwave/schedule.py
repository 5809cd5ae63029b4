"""Turning rounds-per-job into a window schedule, and a round into a placement order.

Jobs on the critical path that run in every round of the window are placed first (they
have no freedom, and the makespan waits on them). The rest are packed in the window's
order, each into the earliest run of consecutive rounds with room for its gang
(consecutive rounds mean one checkpoint-restore instead of several); a job that finds no
such run takes the roomiest rounds. What the packing cannot fit is dropped and the GPUs
it leaves go to backfill.

Every job granted the whole window used to go first. Those are the long jobs, so a short
gang job the market had granted rounds found its run of free rounds only late in the
window, every re-plan moved it late again, and it waited (docs/evaluation.md, issue 10).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from slurm_shockwave.model.job import JobId


def pack(rounds: Mapping[JobId, int], gpus: Mapping[JobId, int], order: Sequence[JobId],
         capacity: int, window: int, *, contiguous: bool = True,
         first: Collection[JobId] = ()) -> list[list[JobId]]:
    """``first``: the critical path; those of its jobs granted every round go before
    ``order``. ``contiguous=False`` gives every job its roomiest rounds, which loses the
    fewest rounds to packing (widest jobs first) but restarts jobs more often."""
    free = [capacity] * window
    plan: list[list[JobId]] = [[] for _ in range(window)]
    ahead = [j for j in order if j in first and rounds.get(j, 0) >= window]
    placed_first = set(ahead)
    for jid in ahead + [j for j in order if j not in placed_first]:
        need, width = min(rounds.get(jid, 0), window), gpus[jid]
        if need <= 0 or width > capacity:
            continue
        start = _first_run(free, width, need) if contiguous else None
        if start is not None:
            chosen = list(range(start, start + need))
        else:
            roomy = [t for t in range(window) if free[t] >= width]
            chosen = sorted(sorted(roomy, key=lambda t: (-free[t], t))[:need])
        for t in chosen:
            free[t] -= width
            plan[t].append(jid)
    return plan


def _first_run(free: Sequence[int], width: int, need: int) -> int | None:
    """The earliest start of ``need`` consecutive rounds with ``width`` GPUs free, in one
    pass (the packing's hot loop at hundreds of jobs)."""
    run = 0
    for t, room in enumerate(free):
        run = run + 1 if room >= width else 0
        if run >= need:
            return t - need + 1
    return None


def window_order(rounds: np.ndarray, remaining_s: np.ndarray, priority: np.ndarray,
                 rescue: float, round_s: float, running: Sequence[bool],
                 ids_of: Sequence[JobId], due_s: np.ndarray) -> list[int]:
    """Who goes first inside the window; only its first round runs before the next re-plan.

    1. Jobs the plan finishes inside the window, shortest first: they leave soonest and
       hand their GPUs back to the market.
    2. Jobs far behind their fair finish time (relaxation priority above ``rescue``):
       the paper's re-ranking, kept for the jobs that need it, earliest deadline
       first (``due_s``: each job's deadline at one stretch for all,
       ``Shockwave._solve``). Most behind first on projected lateness, as before, took
       turns: a running job's projection stands still while every waiting job's
       grows, so the rescued jobs overtook each other every lease, each paying a
       restore, and all finished late together (heavy_tail's jobs 91 and 97, 220's
       172: two-round runs between waits). A deadline does not move as its job runs,
       and earliest deadline first is the order that keeps the largest lateness least
       (Jackson's rule, on one machine; docs/evaluation.md, "The rescued jobs by
       deadline").
    3. The rest as the market decided: most rounds granted first (a job granted most of
       the window cannot wait without losing them as the window slides).
    Running jobs win ties, to save a checkpoint-restore.
    """
    finishes = rounds * round_s >= remaining_s
    rescued = ~finishes & (priority > rescue)

    def key(i: int) -> tuple[float, ...]:
        first = (float(remaining_s[i]) if finishes[i] else
                 float(due_s[i]) if rescued[i] else 0.0)
        return (not finishes[i], not rescued[i], first, -float(rounds[i]),
                float(remaining_s[i]), not running[i], float(ids_of[i]))

    return sorted(range(len(ids_of)), key=key)
