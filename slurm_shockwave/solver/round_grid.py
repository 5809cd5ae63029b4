"""A schedule of a trace on the simulator's round grid with the least makespan, as a MILP.

The simulator (sim/world.py) runs rounds of ``round_s`` from the first arrival: a job
started in a round holds its GPUs to the round's end unless it finishes (its GPUs then
idle to the round's end, unless every job of the round finished: then the next round
starts at the last finish), and every start loses ``restore_s`` to the checkpoint
restore. ``schedule`` answers, for a makespan M: is there a schedule on that grid
without preemption, each job started once in a round at or after its arrival and
holding its GPUs for its consecutive rounds (``rounds_needed``: its runtime plus one
restore), the GPUs of every round within the cluster's, every job finished by M? If so
it returns each job's first round. ``least_makespan_s`` bisects M. It knows every
arrival and runtime in advance, which no online policy does: it shows what a trace's
makespan can be on the grid, offline (benchmarks/grid.py replays it in the simulator).
Not a lower bound: a preemptive schedule, or one that lets a round end early, may be
shorter. The programs are MILPs over binary variables, feasibility only unless
``front`` asks for the earliest starts, solved by HiGHS with no limit: a solve that
ends without a solution or a proof of infeasibility is an error here, not an answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from slurm_shockwave.solver.backends import solve
from slurm_shockwave.solver.milp import Milp, SolveOptions, Status
from slurm_shockwave.solver.search import narrow


@dataclass(frozen=True)
class GridJobs:
    arrival_s: np.ndarray
    run_s: np.ndarray
    """Each job's runtime run alone and without interruption from a round's start (the
    simulator's, restore not included)."""
    gpus: np.ndarray
    capacity: int
    round_s: float
    restore_s: float
    t0_s: float
    """When the first round starts (the simulator: the first arrival)."""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.run_s) == len(self.gpus) == n) or n == 0:
            raise ValueError("need one arrival, runtime and GPU count per job, at least one job")
        if not 0 <= self.restore_s < self.round_s:
            raise ValueError("need 0 <= restore_s < round_s")
        if np.any(self.gpus < 1) or np.any(self.gpus > self.capacity) \
                or not np.all(self.run_s > 0) or np.any(self.arrival_s < self.t0_s):
            raise ValueError("every job needs 1 to the capacity's GPUs, a runtime > 0 and "
                             "an arrival not before t0_s")


def rounds_needed(jobs: GridJobs) -> tuple[np.ndarray, np.ndarray]:
    """Whole rounds each job holds its GPUs when run without interruption, and the
    seconds of the last of them it uses (its finish within that round)."""
    need = jobs.run_s + jobs.restore_s
    rounds = np.ceil(need / jobs.round_s - 1e-9).astype(int)
    return rounds, need - (rounds - 1) * jobs.round_s


def _first_round(jobs: GridJobs) -> np.ndarray:
    """Each job's first round that starts at or after its arrival."""
    return np.ceil((jobs.arrival_s - jobs.t0_s) / jobs.round_s - 1e-9).astype(int)


def _solve_feasibility(columns: list[tuple[int, list[int]]], n: int, capacity: np.ndarray,
                       jobs: GridJobs, front: bool) -> np.ndarray | None:
    """Binary columns (job, the rounds it holds): one column a job, each round's GPUs at
    most ``capacity``'s. With ``front`` the GPU-rounds started late are kept least (each
    job as early as the rest allows). The chosen columns, or None: infeasible."""
    cols, rounds = len(columns), len(capacity)
    job_rows, round_rows, round_vals, round_cols = [], [], [], []
    cost = np.zeros(cols)
    for k, (j, held) in enumerate(columns):
        job_rows.append(j)
        round_rows.extend(held)
        round_cols.extend([k] * len(held))
        round_vals.extend([float(jobs.gpus[j])] * len(held))
        cost[k] = -float(held[0] * jobs.gpus[j] * len(held)) if front else 0.0
    a = sp.vstack([
        sp.csr_matrix((np.ones(cols), (job_rows, np.arange(cols))), shape=(n, cols)),
        sp.csr_matrix((round_vals, (round_rows, round_cols)), shape=(rounds, cols)),
    ]).tocsc()
    program = Milp(c=cost, a=a,
                   row_lo=np.concatenate([np.ones(n), np.full(rounds, -np.inf)]),
                   row_hi=np.concatenate([np.ones(n), capacity.astype(float)]),
                   col_lo=np.zeros(cols), col_hi=np.ones(cols),
                   integer=np.ones(cols, dtype=bool))
    result = solve(program, SolveOptions(rel_gap=0.0), "highs")
    if result.status == Status.INFEASIBLE:
        return None
    if not result.status.has_solution or result.x is None:
        raise RuntimeError(f"round grid: the MILP ended {result.status.value} "
                           f"({result.message})")
    return np.flatnonzero(result.x > 0.5)


def schedule(jobs: GridJobs, makespan_s: float, *, held: np.ndarray | None = None,
             front: bool = False) -> np.ndarray | None:
    """Each job's first round in a schedule without preemption that finishes by
    ``makespan_s`` (its rounds consecutive from there), or None when there is none.
    ``held``: GPUs other jobs already hold in the first rounds (jobs running on, for a
    re-plan); ``front``: of the schedules, one that starts the work as early as it can."""
    n = len(jobs.run_s)
    need, last_s = rounds_needed(jobs)
    first = _first_round(jobs)
    latest_start = np.floor((makespan_s - jobs.t0_s - last_s) / jobs.round_s + 1e-9
                            ).astype(int) - (need - 1)
    if np.any(latest_start < first):
        return None
    columns = [(j, list(range(s, s + int(need[j]))))
               for j in range(n) for s in range(first[j], latest_start[j] + 1)]
    capacity = np.full(int((latest_start + need).max()), jobs.capacity)
    if held is not None:
        span = min(len(held), len(capacity))
        capacity[:span] -= held[:span]
    chosen = _solve_feasibility(columns, n, capacity, jobs, front)
    if chosen is None:
        return None
    start = np.empty(n, dtype=int)
    for k in chosen:
        j, rounds = columns[k]
        start[j] = rounds[0]
    return start


def schedule_makespan_s(jobs: GridJobs, start_round: np.ndarray) -> float:
    """The makespan of the schedule ``schedule`` returned, on the grid."""
    need, last_s = rounds_needed(jobs)
    return float(np.max(jobs.t0_s + (start_round + need - 1) * jobs.round_s + last_s))


def least_makespan_s(jobs: GridJobs, *, held: np.ndarray | None = None,
                     floor_s: float = 0.0, tol_s: float = 1.0) -> float:
    """The least makespan for which ``schedule`` finds a schedule (with ``held`` as
    there), to ``tol_s`` (the bracket's feasible end); ``floor_s``: none below it (the
    running jobs' finish, for a re-plan)."""
    need, _ = rounds_needed(jobs)
    lo = max(schedule_makespan_s(jobs, _first_round(jobs)), floor_s,
             jobs.t0_s + float(np.sum(jobs.gpus * need)) / jobs.capacity * jobs.round_s
             - jobs.round_s)

    def ok(m: float) -> bool:
        return schedule(jobs, m, held=held) is not None

    if ok(lo):
        return lo
    hi = lo + jobs.round_s
    while not ok(hi):
        lo, hi = hi, hi + max(jobs.round_s, 0.05 * (hi - jobs.t0_s))
    return narrow(ok, lo, hi, abs_tol=tol_s)[1]


def shortest_schedule(jobs: GridJobs, *, held: np.ndarray | None = None,
                      floor_s: float = 0.0) -> tuple[float, np.ndarray]:
    """``least_makespan_s`` (with ``held`` and ``floor_s`` as there) and, at it, the
    schedule that starts the work as early as it can (``schedule``'s ``front``)."""
    makespan = least_makespan_s(jobs, held=held, floor_s=floor_s)
    starts = schedule(jobs, makespan, held=held, front=True)
    if starts is None:  # least_makespan_s returned a makespan schedule() had found
        raise RuntimeError(f"round grid: no schedule at {makespan:.0f} s, a makespan "
                           "found feasible")
    return makespan, starts


def grid_jobs(arrival_s: np.ndarray, run_s: np.ndarray, gpus: np.ndarray, capacity: int,
              round_s: float, restore_s: float) -> GridJobs:
    """The grid of a trace as the simulator lays it: the first round at the first arrival."""
    return GridJobs(np.asarray(arrival_s, dtype=float), np.asarray(run_s, dtype=float),
                    np.asarray(gpus, dtype=int), capacity, round_s, restore_s,
                    float(np.min(arrival_s)))
