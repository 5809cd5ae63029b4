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

The average-JCT bound uses a job's mean busy time M = (1/p) x integral of t r(t) dt over
its progress rate r(t), which adds up to its work p. Say the job runs T_c seconds at
count c, each making at most s_c of its work, and finishes at C. Then M is largest with
the progress as late as it can be: the pieces back to back ending at C, the fastest last
(a faster piece later moves more progress later). There C - M = (1/p) x integral of
(C - t) r(t) dt = (1/p) sum_c s_c (T_c^2 / 2 + T_c x the seconds of faster pieces), so

    C >= M + f(T),   f(T) = T^T Q T / (2p),   Q_ab = min(s_a, s_b).

For a job of one count at speed s, T = p / s and f = p / (2s): p / 2 for a fixed job, a
constant in the objective. For a job with several counts f is convex (Q is positive
semidefinite: min(a, b) = integral over u > 0 of [u < a][u < b]), so it is at least each
of its tangents, z >= f(T0) + grad f(T0) . (T - T0). The program gives each such job its
seconds at each count (T, columns summing its slots' columns) and a column z bounded by
tangents: at each count alone and at ``EDGE_TANGENTS`` - 1 splits of the work between
each two, then, for up to ``CUT_ROUNDS`` LPs, at the last LP's T of each job where f > z
there. Each LP relaxes the program with z = f, so each LP's value is a bound and the last
is the best. The LP's solution with z raised to f is a solution of the program with
z = f, whose least value is therefore at most mean(f - z) above the LP's: the rounds stop
once that, or a round's gain, is below ``CUT_GAP_S``. On the progress row, f's tangent
at "all at the best speed r_max" is p / (2 r_max), the term the bound took for every job
before f.

Why the program's least mean of (M + f(T) - arrival) is below every schedule's average
JCT: for a schedule finishing a job at C, take the latest stretch [C - L, C] in which the
job, running at the counts the schedule runs it at and making s_c a second, would make
its work p. The schedule's seconds in it, per slot and count, meet every row: they are
at most its seconds and make p at the speeds. Their M, at slot starts, is at most (1/p)
x integral over the stretch of t s(t) dt. Their f(T) is at most (1/p) x integral of
(C - t) s(t) dt, the fastest-last order with no gap being the least (a gap only moves
progress further from C). The two add up to at most C. (Taking each slot's progress at
the earliest instant the job may run in it loses at most ``slot_s / 2`` per job of
timing; gangs sharing a slot's GPU-seconds may put the bound further below, whatever
the slot: a review checked the argument and about 90 small instances against exact
schedules.)

Finish-time fairness is the metric's own: rho = JCT / (exclusive runtime x contention),
with the trace's contention max(1, N / G) (``metrics.summary``), so a worst rho r is a
deadline of arrival + r x contention x exclusive runtime for every job, the exclusive
runtime at its request for an elastic job too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

from slurm_shockwave.solver.backends import solve
from slurm_shockwave.solver.milp import Milp, SolveOptions, Status
from slurm_shockwave.solver.search import narrow

EDGE_TANGENTS = 16
"""The average-JCT program's first tangents of a job's rate term: at each of its counts
alone and at this many - 1 progress splits between each two."""
CUT_ROUNDS = 3
"""At most this many LPs per ``min_avg_jct_s``, each adding tangents at the last one's
solution (about 18 s each for the 900-job trace without limits)."""
CUT_GAP_S = 0.1
"""Seconds of average JCT below which more tangents are not worth an LP."""


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
    GPU-seconds, and, for a job with several counts, its seconds in each slot. With the
    JCT objective, per job with several counts also a column for its seconds at each
    count (T, a row each: the sum of its slots' columns there) and one for its rate term
    (z, bounded below by f's first tangents, ``_first_tangents``), after the others
    (``_Rates``)."""
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
    # minimise the mean over jobs of: mean busy time + rate term - arrival, in seconds
    # (maximise its negative); a job of one count's rate term is p / (2 x its speed)
    rates = _Rates.of(jobs, cols)
    c = -(speed * cells.start_s[cell] / p[job]) / n if jct_objective else np.zeros(cols)
    flat = np.where(rates.several, 0.0, p / (2 * o.top_speed))
    program = Milp(c=c, a=rows, row_lo=row_lo, row_hi=row_hi, col_lo=np.zeros(cols),
                   col_hi=cells.room_s[cell], integer=np.zeros(cols, dtype=bool),
                   offset=-float(np.mean(flat - jobs.arrival_s)) if jct_objective else 0.0)
    if not jct_objective or not rates.several.any():
        return program
    # a row per T column: the seconds of its job's columns at its count, less itself (= 0)
    extra = rates.columns - cols
    t_count = extra - int(rates.several.sum())
    counted = rates.several[job]
    t_rows = sp.csr_matrix(
        (np.ones(int(counted.sum())),
         ((rates.t_col[job] - cols + option - o.first[job])[counted], np.flatnonzero(counted))),
        shape=(t_count, cols))
    zeros = np.zeros(t_count)
    program = Milp(c=np.concatenate([c, zeros, np.full(extra - t_count, -1 / n)]),
                   a=sp.bmat([[rows, sp.csr_matrix((rows.shape[0], extra))],
                              [t_rows, -sp.eye(t_count, extra)]]).tocsc(),
                   row_lo=np.concatenate([row_lo, zeros]),
                   row_hi=np.concatenate([row_hi, zeros]), col_lo=np.zeros(rates.columns),
                   col_hi=np.concatenate([cells.room_s[cell], np.full(extra, np.inf)]),
                   integer=np.zeros(rates.columns, dtype=bool), offset=program.offset)
    return _with_tangents(program, jobs, rates, _first_tangents(jobs))


@dataclass(frozen=True)
class _Rates:
    """Where the average-JCT program keeps, after the slots' columns, the seconds at each
    count (T, a column per count) and the rate term (z) of each job with several counts:
    job j's T from column ``t_col[j]``, its z at ``z_col[j]`` (where ``several[j]``)."""
    several: np.ndarray
    t_col: np.ndarray
    z_col: np.ndarray
    columns: int

    @staticmethod
    def of(jobs: FluidJobs, slot_columns: int) -> _Rates:
        sizes = np.diff(jobs.options.first)
        several = sizes > 1
        t_sizes = np.where(several, sizes, 0)
        z_from = slot_columns + int(t_sizes.sum())
        return _Rates(several, slot_columns + np.cumsum(t_sizes) - t_sizes,
                      z_from + np.cumsum(several) - several, z_from + int(several.sum()))

    def seconds(self, jobs: FluidJobs, x: np.ndarray, j: int) -> np.ndarray:
        return x[self.t_col[j]:self.t_col[j] + jobs.options.first[j + 1]
                 - jobs.options.first[j]]


def _rate_term(jobs: FluidJobs, j: int, seconds: np.ndarray) -> tuple[float, np.ndarray]:
    """Job j's f at these seconds at each of its counts, and its gradient there:
    f(T) = T Q T / (2 p), Q_ab = min(s_a, s_b)."""
    o = jobs.options
    s = o.speed[o.first[j]:o.first[j + 1]]
    grad = np.minimum.outer(s, s) @ seconds / jobs.work_s[j]
    return float(grad @ seconds) / 2, grad


def _first_tangents(jobs: FluidJobs) -> list[tuple[int, np.ndarray]]:
    """Each job with several counts at each count alone, and at ``EDGE_TANGENTS`` - 1
    splits of its work between each two counts."""
    o, points = jobs.options, []
    for j in np.flatnonzero(np.diff(o.first) > 1):
        alone = np.diag(jobs.work_s[j] / o.speed[o.first[j]:o.first[j + 1]])
        points += [(int(j), alone[a]) for a in range(len(alone))]
        points += [(int(j), (1 - k / EDGE_TANGENTS) * alone[a] + k / EDGE_TANGENTS * alone[b])
                   for a in range(len(alone)) for b in range(a + 1, len(alone))
                   for k in range(1, EDGE_TANGENTS)]
    return points


def _with_tangents(program: Milp, jobs: FluidJobs, rates: _Rates,
                   points: list[tuple[int, np.ndarray]]) -> Milp:
    """The program with a row per (job, seconds at each count) point: z >= f's tangent
    there, z - grad . T >= f(T0) - grad . T0 = -f(T0) (f is quadratic)."""
    rows, cols, values, lo = [], [], [], []
    for row, (j, at) in enumerate(points):
        f, grad = _rate_term(jobs, j, at)
        rows += [row] * (len(grad) + 1)
        cols += [int(rates.z_col[j]), *range(rates.t_col[j], rates.t_col[j] + len(grad))]
        values += [1.0, *(-grad)]
        lo.append(-f)
    cuts = sp.csr_matrix((values, (rows, cols)), shape=(len(points), rates.columns))
    return replace(program, a=sp.vstack([program.a, cuts]).tocsc(),
                   row_lo=np.concatenate([program.row_lo, lo]),
                   row_hi=np.concatenate([program.row_hi, np.full(len(points), np.inf)]))


def _solve(program: Milp) -> tuple[bool, float, np.ndarray]:
    """Whether the program has a solution, its least value and a solution where it has."""
    result = solve(program, SolveOptions(), "highs")
    if result.status == Status.INFEASIBLE:
        return False, math.inf, np.empty(0)
    if result.status != Status.OPTIMAL or result.x is None:
        raise RuntimeError(f"fluid bound: the LP ended {result.status.value} ({result.message})")
    return True, -result.objective, result.x


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
    can): the last of up to ``CUT_ROUNDS`` LPs, each with f's tangents at the last one's
    solution added, stopping once they could add less than ``CUT_GAP_S`` (the module's
    docstring). One LP where every job has one count."""
    capped = np.minimum(deadline_s, jct_horizon_s(jobs, slot_s))
    program = _program(jobs, capped, slot_s, jct_objective=True)
    if program is None:
        return math.inf
    rates = _Rates.of(jobs, program.shape[1] - _Rates.of(jobs, 0).columns)
    value = -math.inf
    for _ in range(CUT_ROUNDS):
        ok, least, x = _solve(program)
        if not ok:
            return math.inf
        gain, value = least - value, least
        points, short = [], 0.0
        for j in np.flatnonzero(rates.several):
            at = np.maximum(rates.seconds(jobs, x, int(j)), 0.0)
            over = _rate_term(jobs, int(j), at)[0] - x[rates.z_col[j]]
            if over > 0:
                short += over
                points.append((int(j), at))
        if short / len(jobs.work_s) < CUT_GAP_S or gain < CUT_GAP_S:
            break
        program = _with_tangents(program, jobs, rates, points)
    return value


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
