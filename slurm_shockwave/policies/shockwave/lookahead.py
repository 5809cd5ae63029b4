"""A one-round lookahead that chooses the order the round runs in (docs/planner.md, step 9).

The market's order (the window's round, then backfill longest first) shares the cluster
among the jobs present, which costs average JCT: the middle of the job sizes waits behind
every job's first rounds. Other orders are better on some rounds and worse on others, so
each round the policy projects a few candidates forward and runs the best:

- the market's order (its later rounds by the window's order);
- shortest predicted remaining time first;
- earliest stretch-deadline first (``stretch_edf``'s deadlines, arrival + S x size) at
  1, 1.5, 2, 3, 5 and 10 times the least stretch the jobs can all still meet.

Every candidate keeps the commitments (finishing jobs, the critical path, leases) ahead.
Each is projected over the jobs present, no arrivals, with a list schedule on predicted
remaining times: GPU counts against capacity, starts at round boundaries, a restore for
every job not running now, and the critical path started first at each step, as the
policy would. The chosen one has the least projected total JCT among those whose
projected worst stretch (JCT over exclusive runtime: rho up to the trace's constant) is
within ``tol`` of the least; a tie goes to a candidate other than the market's. Plain
arithmetic, no solver and no clock: a simulation replays exactly.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_shockwave.model.job import JobId

STRETCHES = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
"""Multiples of the least stretch at which earliest-deadline-first orders are tried."""


@dataclass(frozen=True, slots=True)
class Jobs:
    """What the projection needs of the jobs present (seconds; sizes exclusive)."""

    gpus: Mapping[JobId, int]
    """Each at least 1: admission turns away a job that asks for none."""
    remaining_s: Mapping[JobId, float]
    size_s: Mapping[JobId, float]
    """Exclusive runtime (done + remaining; an elastic job's at its request)."""
    arrival_s: Mapping[JobId, float]
    running: frozenset[JobId]


@dataclass(frozen=True, slots=True)
class Projection:
    worst_stretch: float
    total_jct_s: float


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    now: tuple[JobId, ...]
    """The order this round runs in."""
    then: tuple[JobId, ...]
    """The priority of the rounds after it."""


def candidates(market: Candidate, keep: Sequence[JobId], jobs: Jobs,
               least_stretch: float) -> list[Candidate]:
    """The market's order first, then the others, each with ``keep`` ahead."""
    committed = set(keep)
    rest = [jid for jid in jobs.gpus if jid not in committed]
    out = [market]
    srpt = (*keep, *sorted(rest, key=lambda j: (jobs.remaining_s[j], j not in jobs.running, j)))
    out.append(Candidate("shortest remaining first", srpt, srpt))
    for m in STRETCHES:
        s = least_stretch * m
        edf = (*keep, *sorted(rest, key=lambda j: (jobs.arrival_s[j] + s * jobs.size_s[j], j)))
        out.append(Candidate(f"earliest deadline at {m:g}x the least stretch", edf, edf))
    return out


def project(c: Candidate, jobs: Jobs, *, now_s: float, capacity: int, round_s: float,
            restore_s: float, critical_frac: float) -> Projection:
    """The candidate's schedule of the jobs present, as a list schedule (module doc)."""
    gpus, rem = jobs.gpus, jobs.remaining_s
    free = capacity
    ends: list[tuple[float, int, JobId]] = []
    finish: dict[JobId, float] = {}
    for jid in c.now:
        if gpus[jid] <= free:
            free -= gpus[jid]
            finish[jid] = now_s + rem[jid] + (0.0 if jid in jobs.running else restore_s)
            heapq.heappush(ends, (finish[jid], gpus[jid], jid))
    waiting = [j for j in c.then if j not in finish and gpus[j] <= capacity]
    waiting_work = sum(gpus[j] * rem[j] for j in waiting)
    # Read from the front, skipping started jobs, so that a step costs the jobs it looks
    # at, not every job waiting (a round of 2,000 jobs): the longest first, for the
    # critical path, and the candidate's order, up to where no GPU is left.
    longest_first = sorted(waiting, key=lambda j: (-rem[j], j))
    front = head = 0
    left = len(waiting)

    def start(jid: JobId, t: float) -> None:
        nonlocal free, waiting_work, left
        free -= gpus[jid]
        finish[jid] = t + rem[jid] + restore_s
        heapq.heappush(ends, (finish[jid], gpus[jid], jid))
        waiting_work -= gpus[jid] * rem[jid]
        left -= 1

    while left and ends:
        # freed GPUs are used from the round boundary after the finish
        t = now_s + math.ceil((ends[0][0] - now_s) / round_s - 1e-9) * round_s
        while ends and ends[0][0] <= t + 1e-9:
            free += heapq.heappop(ends)[1]
        while longest_first[front] in finish:
            front += 1
        while waiting[head] in finish:
            head += 1
        if critical_frac > 0:  # commitments.critical_path's rule, over running and waiting
            running_work = sum(g * (f - t) for f, g, _ in ends)
            longest = max([f - t for f, _, _ in ends] + [rem[longest_first[front]]])
            bound = max(longest, (running_work + waiting_work) / capacity)
            for jid in itertools.islice(longest_first, front, None):
                if rem[jid] < critical_frac * bound:
                    break
                if jid not in finish and gpus[jid] <= free:
                    start(jid, t)
        for jid in itertools.islice(waiting, head, None):
            if free <= 0:
                break
            if jid not in finish and gpus[jid] <= free:
                start(jid, t)
    jct = {j: f - jobs.arrival_s[j] for j, f in finish.items()}
    return Projection(max((v / max(jobs.size_s[j], 1.0) for j, v in jct.items()), default=0.0),
                      sum(jct.values()))


def choose(projections: Sequence[Projection], tol: float) -> int:
    """The least projected total JCT among the projections whose worst stretch is within
    ``tol`` of the least; a tie goes to any but the first (the market's)."""
    least = min(p.worst_stretch for p in projections)
    fair = [i for i, p in enumerate(projections) if p.worst_stretch <= least * (1 + tol) + 1e-12]
    return min(fair, key=lambda i: (round(projections[i].total_jct_s, 6), i == 0, i))
