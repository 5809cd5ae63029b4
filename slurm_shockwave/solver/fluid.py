"""What no schedule can beat: a trace's jobs as a fluid relaxation (flows and an LP).

Any schedule of the trace (gangs, node placement, restarts and restore costs included)
gives, slot by slot, how many seconds each job ran in each slot of ``slot_s`` seconds at
each of its GPU counts: ``y[j, k, c]``. A fixed job has one count, its request; an
elastic job runs on one of its counts at a time. Those seconds obey three things
whatever the schedule: a job runs no longer in a slot, over all its counts, than the
part of the slot between its arrival and its finish; its progress adds up to its work,
its exclusive runtime at its request (restores only add seconds), a second at count c
making at most the job's speed ``s_j(c)`` of it; and the GPU-seconds of a slot are at
most ``capacity * slot_s``. The speed is the best any of the job's epochs gets at c,
(epoch time at the request) / (epoch time at c) (``benchmarks/traces.py::fluid_jobs``):
1 at the request, so a fixed job is an elastic job with one count at speed 1. The
program asks for progress equal to the work: a schedule's seconds, each slot's scaled by
the progress the job made in it over their seconds x speeds (at most 1), still meet
every row. A schedule that meets finish deadlines therefore makes this program feasible
(checked as a maximum flow where every job has one count, as an LP where some have
several), so an infeasible program proves that no schedule meets them: that is what
turns "the targets were not met" into "they cannot be".

The average-JCT bound uses a job's mean busy time M = (1/p) x integral of t r(t) dt, over
its progress rate r(t) <= r_max (its best speed, 1 for a fixed job) that adds up to its
work p. A job finishing at C has C >= M + p / (2 r_max): with C given, M is largest with
the progress as late as it can be, at r_max through [C - p / r_max, C], where M is
C - p / (2 r_max). The program takes each slot's progress at the earliest instant the job
may run in the slot (which loses at most ``slot_s / 2`` per job), and a schedule's seconds
scaled as above are one of its solutions, so its least mean of (M + p / (2 r_max) -
arrival) is below every schedule's average JCT.

Finish-time fairness is the metric's own: rho = JCT / (exclusive runtime x contention),
with the trace's contention max(1, N / G) (``metrics.summary``), so a worst rho r is a
deadline of arrival + r x contention x exclusive runtime for every job, the exclusive
runtime at its request for an elastic job too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

from slurm_shockwave.solver.backends import solve
from slurm_shockwave.solver.milp import Milp, SolveOptions, Status
from slurm_shockwave.solver.search import narrow


@dataclass(frozen=True)
class FluidJobs:
    arrival_s: np.ndarray
    work_s: np.ndarray
    """Exclusive runtime at the requested GPU count (the least any schedule takes of a
    fixed job; an elastic job's work, in seconds at its request)."""
    gpus: np.ndarray
    """The requested count."""
    capacity: int
    speeds: tuple[Mapping[int, float], ...] | None = None
    """Per job, each count it may run on (1 to the capacity) and its speed there: at
    most the seconds of its work a second at that count gets through (``{gpus: 1.0}``
    for a fixed job). None: every job fixed."""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.work_s) == len(self.gpus) == n) or n == 0:
            raise ValueError("need one arrival, work and GPU count per job, at least one job")
        if np.any(self.gpus > self.capacity) or np.any(self.gpus < 1) \
                or not np.all(self.work_s > 0) or not np.all(self.arrival_s >= 0):
            raise ValueError("every job needs an arrival >= 0, work > 0 and 1 to the "
                             "capacity's GPUs")
        if self.speeds is not None and (len(self.speeds) != n or not all(
                by and all(1 <= c <= self.capacity and 0 < v < math.inf
                           for c, v in by.items()) for by in self.speeds)):
            raise ValueError("need speeds > 0 at counts of 1 to the capacity's GPUs, at "
                             "least one count per job")

    @cached_property
    def options(self) -> _Options:
        """Every job's (count, speed) pairs, flattened."""
        per_job: list[tuple[tuple[int, float], ...]]
        if self.speeds is None:
            per_job = [((int(g), 1.0),) for g in self.gpus]
        else:
            per_job = [tuple(sorted(by.items())) for by in self.speeds]
        sizes = np.array([len(o) for o in per_job])
        flat = [cs for o in per_job for cs in o]
        job = np.repeat(np.arange(len(per_job)), sizes)
        count = np.array([c for c, _ in flat])
        speed = np.array([v for _, v in flat], dtype=float)
        per_gpu_s = count / speed  # GPU-seconds a second of work takes at that count
        return _Options(job, count, speed, np.concatenate([[0], np.cumsum(sizes)]),
                        np.maximum.reduceat(speed, np.cumsum(sizes) - sizes),
                        np.minimum.reduceat(speed, np.cumsum(sizes) - sizes),
                        np.minimum.reduceat(per_gpu_s, np.cumsum(sizes) - sizes),
                        np.maximum.reduceat(per_gpu_s, np.cumsum(sizes) - sizes))

    @property
    def simple_bound_s(self) -> float:
        """max(latest arrival + work at the best speed, least GPU-work / capacity): issue
        10's lower bound for fixed jobs, and a looser one than
        ``benchmarks/traces.py::elastic_lower_bound_s`` for elastic jobs."""
        o = self.options
        return float(max(np.max(self.arrival_s + self.work_s / o.top_speed),
                         np.sum(self.work_s * o.least_gpu_s) / self.capacity))


@dataclass(frozen=True)
class _Options:
    """Each (job, count) pair: its job, count and speed, in job order, job j's from
    ``first[j]`` to ``first[j + 1]``; and per job its best and least speed and its least
    and most GPU-seconds per second of work."""
    job: np.ndarray
    count: np.ndarray
    speed: np.ndarray
    first: np.ndarray
    top_speed: np.ndarray
    least_speed: np.ndarray
    least_gpu_s: np.ndarray
    most_gpu_s: np.ndarray

    @property
    def one_each(self) -> bool:
        """Every job has one count: the program is a maximum flow."""
        return len(self.job) == len(self.first) - 1


@dataclass(frozen=True)
class _Slots:
    """Every (job, slot) pair in which a job may run: the job, the slot, and the earliest
    instant and the length of the part of the slot between its arrival and deadline."""
    job_of: np.ndarray
    slot: np.ndarray
    start_s: np.ndarray
    room_s: np.ndarray
    count: int


def _slots(jobs: FluidJobs, deadline_s: np.ndarray, slot_s: float) -> _Slots | None:
    """None when a job's window is shorter than its work (infeasible without a solve)."""
    a, p = jobs.arrival_s, jobs.work_s
    if not slot_s > 0:
        raise ValueError(f"slot_s must be > 0, not {slot_s}")
    if np.any(deadline_s - a < p / jobs.options.top_speed - 1e-9):
        return None
    if not np.all(np.isfinite(deadline_s)):
        raise ValueError("the fluid program needs a finite deadline for every job")
    first = np.floor(a / slot_s).astype(int)
    last = np.ceil(deadline_s / slot_s).astype(int)  # exclusive
    job_of = np.repeat(np.arange(len(a)), last - first)
    slot = np.concatenate([np.arange(f, e) for f, e in zip(first, last, strict=True)])
    start = np.maximum(a[job_of], slot * slot_s)
    end = np.minimum(deadline_s[job_of], (slot + 1) * slot_s)
    return _Slots(job_of, slot, start, np.maximum(end - start, 0.0), int(last.max()))


def _program(jobs: FluidJobs, deadline_s: np.ndarray, slot_s: float,
             jct_objective: bool) -> Milp | None:
    """The slotted program for these deadlines as an LP; None as ``_slots``. One column
    per job, slot and count; rows: each job's progress (= its work), each slot's
    GPU-seconds, and, for a job with several counts, its seconds in each slot."""
    cells = _slots(jobs, deadline_s, slot_s)
    if cells is None:
        return None
    o = jobs.options
    p, n = jobs.work_s, len(jobs.work_s)
    per_cell = np.diff(o.first)[cells.job_of]
    cell = np.repeat(np.arange(len(cells.job_of)), per_cell)
    cols = len(cell)
    option = o.first[cells.job_of][cell] + np.arange(cols) - np.repeat(
        np.cumsum(per_cell) - per_cell, per_cell)
    job, speed = cells.job_of[cell], o.speed[option]
    shared = per_cell > 1  # a job with several counts runs one at a time
    room_row = np.cumsum(shared) - 1
    in_shared = shared[cell]
    rooms = int(shared.sum())
    rows = sp.vstack([
        sp.csr_matrix((speed, (job, np.arange(cols))), shape=(n, cols)),
        sp.csr_matrix((o.count[option].astype(float), (cells.slot[cell], np.arange(cols))),
                      shape=(cells.count, cols)),
        sp.csr_matrix((np.ones(int(in_shared.sum())),
                       (room_row[cell[in_shared]], np.flatnonzero(in_shared))),
                      shape=(rooms, cols)),
    ]).tocsc()
    row_lo = np.concatenate([p, np.zeros(cells.count + rooms)])
    row_hi = np.concatenate([p, np.full(cells.count, float(jobs.capacity) * slot_s),
                             cells.room_s[shared]])
    # maximise -(mean over jobs of: mean busy time + work / (2 x best speed) - arrival),
    # in seconds
    c = -(speed * cells.start_s[cell] / p[job]) / n if jct_objective else np.zeros(cols)
    offset = (-float(np.mean(p / (2 * o.top_speed) - jobs.arrival_s)) if jct_objective
              else 0.0)
    return Milp(c=c, a=rows, row_lo=row_lo, row_hi=row_hi, col_lo=np.zeros(cols),
                col_hi=cells.room_s[cell], integer=np.zeros(cols, dtype=bool), offset=offset)


def _solve(program: Milp) -> tuple[bool, float]:
    result = solve(program, SolveOptions(), "highs")
    if result.status == Status.INFEASIBLE:
        return False, math.inf
    if result.status != Status.OPTIMAL:
        raise RuntimeError(f"fluid bound: the LP ended {result.status.value} ({result.message})")
    return True, -result.objective


def deadlines(jobs: FluidJobs, *, worst_rho: float = math.inf, contention: float = 1.0,
              makespan_s: float = math.inf) -> np.ndarray:
    """Every job's latest finish: within ``worst_rho`` and within ``makespan_s``."""
    return np.minimum(jobs.arrival_s + worst_rho * contention * jobs.work_s, makespan_s)


def jct_horizon_s(jobs: FluidJobs, slot_s: float) -> float:
    """A time no JCT-optimal fluid schedule needs to run past. Moving a job's seconds to an
    earlier slot of its window lowers the objective, so at an optimum every slot before a
    job's last is full or runs that job throughout; after the last arrival, full slots
    add up to at most the most GPU-work the jobs can take (each at its least efficient
    count) over the GPUs, and slots running every unfinished job throughout to at most
    the longest job at its slowest count (plus a slot of rounding at each end)."""
    o = jobs.options
    return float(np.max(jobs.arrival_s)
                 + np.sum(jobs.work_s * o.most_gpu_s) / jobs.capacity
                 + np.max(jobs.work_s / o.least_speed) + 2 * slot_s)


def feasible(jobs: FluidJobs, deadline_s: np.ndarray, slot_s: float) -> bool:
    """Whether the program has a solution: as an LP where a job has several counts, else
    as a maximum flow (source -> job: its GPU-work; job -> slot: its GPUs x its room in
    the slot; slot -> sink: the slot's GPU-seconds). Capacities are whole GPU-seconds
    rounded up and demands rounded down, so rounding only ever loosens the relaxation (a
    bound stays a bound)."""
    o = jobs.options
    if not o.one_each:
        program = _program(jobs, deadline_s, slot_s, jct_objective=False)
        return program is not None and _solve(program)[0]
    cells = _slots(jobs, deadline_s, slot_s)
    if cells is None:
        return False
    n, slots = len(jobs.work_s), cells.count
    source, sink = 0, 1 + n + slots
    tails = np.concatenate([np.zeros(n, dtype=int), 1 + cells.job_of, 1 + n + np.arange(slots)])
    heads = np.concatenate([1 + np.arange(n), 1 + n + cells.slot, np.full(slots, sink)])
    # units of GPU-seconds, coarser where the total would overflow the int32 capacities
    per_slot = float(jobs.capacity) * slot_s
    unit = max(1.0, math.ceil(per_slot * slots / 2**30))
    # one count per job (o.count is its GPUs), its work taking work / speed seconds there
    demand = np.floor(o.count * jobs.work_s / o.speed / unit).astype(np.int64)
    caps = np.concatenate([demand,
                           np.ceil(o.count[cells.job_of] * cells.room_s / unit - 1e-9),
                           np.full(slots, math.ceil(per_slot / unit))]).astype(np.int32)
    graph = sp.csr_matrix((caps, (tails, heads)), shape=(sink + 1, sink + 1))
    return bool(maximum_flow(graph, source, sink).flow_value >= int(demand.sum()))


def min_avg_jct_s(jobs: FluidJobs, deadline_s: np.ndarray, slot_s: float) -> float:
    """A lower bound on the average JCT of any schedule meeting the deadlines (inf: none
    can)."""
    capped = np.minimum(deadline_s, jct_horizon_s(jobs, slot_s))
    program = _program(jobs, capped, slot_s, jct_objective=True)
    return math.inf if program is None else _solve(program)[1]


def min_makespan_s(jobs: FluidJobs, slot_s: float, *, worst_rho: float = math.inf,
                   contention: float = 1.0, tol_s: float = 1.0) -> float:
    """The least makespan of any schedule (with every job within ``worst_rho``), to
    ``tol_s`` below it (the bracket's infeasible end: a bound must not be above it); inf
    when the worst rho alone cannot be met."""
    lo = jobs.simple_bound_s

    def ok(m: float) -> bool:
        return feasible(jobs, deadlines(jobs, worst_rho=worst_rho, contention=contention,
                                        makespan_s=m), slot_s)

    if math.isfinite(worst_rho) and not ok(math.inf):
        return math.inf
    if ok(lo):
        return lo
    hi = 1.05 * lo
    while not ok(hi):  # ends: late enough, the makespan adds nothing to the worst rho's deadlines
        lo, hi = hi, 1.05 * hi
    return narrow(ok, lo, hi, abs_tol=tol_s)[0]


def min_worst_rho(jobs: FluidJobs, contention: float, slot_s: float, *,
                  makespan_s: float = math.inf, tol: float = 1e-3) -> float:
    """The least worst rho of any schedule (finishing by ``makespan_s``), to ``tol``
    (relative) below it (the bracket's lower end); inf when the makespan alone cannot be
    met."""
    # rho < 1 / (contention x best speed) means finishing before the work at the best speed
    lo = 1.0 / (contention * float(np.min(jobs.options.top_speed)))

    def ok(r: float) -> bool:
        return feasible(jobs, deadlines(jobs, worst_rho=r, contention=contention,
                                        makespan_s=makespan_s), slot_s)

    if math.isfinite(makespan_s) and not ok(math.inf):
        return math.inf
    hi = 2.0 * lo
    while not ok(hi):  # ends: without a makespan, a large enough rho is always met
        lo, hi = hi, 2.0 * hi
    return narrow(ok, lo, hi, rel_tol=tol)[0]
