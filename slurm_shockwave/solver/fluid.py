"""What no schedule can beat: a trace's jobs as a fluid relaxation (flows and an LP).

Any schedule of the trace (gangs, node placement, restarts and restore costs included)
gives, slot by slot, how many seconds each job ran in each slot of ``slot_s`` seconds:
``y[j, k]``. Those seconds obey three things whatever the schedule: a job runs no longer
in a slot than the part of the slot between its arrival and its finish; a job runs its
exclusive runtime in all (restores only add to it); and the GPU-seconds of a slot are at
most ``capacity * slot_s``. A schedule that meets finish deadlines therefore makes this
program feasible (checked as a maximum flow), so an infeasible program proves that no
schedule meets them: that is what turns "the targets were not met" into "they cannot
be". Jobs keep their GPU count: an elastic job run on more GPUs is faster than its
exclusive runtime, which this relaxation does not bound.

The average-JCT bound uses a job's mean busy time: a job that runs at most at rate 1 and
finishes at C has C >= (its mean busy time) + work / 2, and the program takes each slot's
seconds at the earliest instant it may run them (at most ``slot_s / 2`` per job below the
exact value, so still a lower bound).

Finish-time fairness is the metric's own: rho = JCT / (exclusive runtime x contention),
with the trace's contention max(1, N / G) (``metrics.summary``), so a worst rho r is a
deadline of arrival + r x contention x exclusive runtime for every job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    """Exclusive runtime at the requested GPU count (the least any schedule takes)."""
    gpus: np.ndarray
    capacity: int

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.work_s) == len(self.gpus) == n) or n == 0:
            raise ValueError("need one arrival, work and GPU count per job, at least one job")
        if np.any(self.gpus > self.capacity) or np.any(self.gpus < 1) \
                or not np.all(self.work_s > 0) or not np.all(self.arrival_s >= 0):
            raise ValueError("every job needs an arrival >= 0, work > 0 and 1 to the "
                             "capacity's GPUs")

    @property
    def simple_bound_s(self) -> float:
        """max(latest arrival + work, total GPU-work / capacity): issue 10's lower bound."""
        return float(max(np.max(self.arrival_s + self.work_s),
                         np.sum(self.gpus * self.work_s) / self.capacity))


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
    if np.any(deadline_s - a < p - 1e-9):
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
    """The slotted program for these deadlines as an LP; None as ``_slots``."""
    cells = _slots(jobs, deadline_s, slot_s)
    if cells is None:
        return None
    p, n, cols = jobs.work_s, len(jobs.work_s), len(cells.job_of)
    rows = sp.vstack([
        sp.csr_matrix((np.ones(cols), (cells.job_of, np.arange(cols))), shape=(n, cols)),
        sp.csr_matrix((jobs.gpus[cells.job_of].astype(float), (cells.slot, np.arange(cols))),
                      shape=(cells.count, cols)),
    ]).tocsc()
    row_lo = np.concatenate([p, np.zeros(cells.count)])
    row_hi = np.concatenate([p, np.full(cells.count, float(jobs.capacity) * slot_s)])
    # maximise -(mean over jobs of: mean busy time + work/2 - arrival), in seconds
    c = -(cells.start_s / p[cells.job_of]) / n if jct_objective else np.zeros(cols)
    offset = -float(np.mean(p / 2 - jobs.arrival_s)) if jct_objective else 0.0
    return Milp(c=c, a=rows, row_lo=row_lo, row_hi=row_hi, col_lo=np.zeros(cols),
                col_hi=cells.room_s, integer=np.zeros(cols, dtype=bool), offset=offset)


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
    add up to at most the GPU-work over the GPUs, and slots running every unfinished job
    throughout to at most the longest job (plus a slot of rounding at each end)."""
    return float(np.max(jobs.arrival_s)
                 + np.sum(jobs.gpus * jobs.work_s) / jobs.capacity
                 + np.max(jobs.work_s) + 2 * slot_s)


def feasible(jobs: FluidJobs, deadline_s: np.ndarray, slot_s: float) -> bool:
    """Whether the program has a solution, as a maximum flow (source -> job: its GPU-work;
    job -> slot: its GPUs x its room in the slot; slot -> sink: the slot's GPU-seconds).
    Capacities are whole GPU-seconds rounded up and demands rounded down, so rounding
    only ever loosens the relaxation (a bound stays a bound)."""
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
    demand = np.floor(jobs.gpus * jobs.work_s / unit).astype(np.int64)
    caps = np.concatenate([demand,
                           np.ceil(jobs.gpus[cells.job_of] * cells.room_s / unit - 1e-9),
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
    lo = 1.0 / contention  # rho < 1/contention means finishing before the exclusive runtime

    def ok(r: float) -> bool:
        return feasible(jobs, deadlines(jobs, worst_rho=r, contention=contention,
                                        makespan_s=makespan_s), slot_s)

    if math.isfinite(makespan_s) and not ok(math.inf):
        return math.inf
    hi = 2.0 * lo
    while not ok(hi):  # ends: without a makespan, a large enough rho is always met
        lo, hi = hi, 2.0 * hi
    return narrow(ok, lo, hi, rel_tol=tol)[0]
