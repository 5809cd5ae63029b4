"""A solver-neutral sparse MILP and the result every backend reports."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class Milp:
    """maximise c @ x + offset  s.t.  row_lo <= A x <= row_hi,  col_lo <= x <= col_hi."""

    c: np.ndarray
    a: sp.csc_matrix
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    integer: np.ndarray
    offset: float = 0.0

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self.a.shape
        return int(rows), int(cols)

    def relaxed(self) -> Milp:
        return replace(self, integer=np.zeros_like(self.integer))

    def objective(self, x: np.ndarray) -> float:
        return float(self.c @ x) + self.offset

    def is_feasible(self, x: np.ndarray, tol: float = 1e-6) -> bool:
        ax = self.a @ x
        return bool(np.all(ax >= self.row_lo - tol) and np.all(ax <= self.row_hi + tol)
                    and np.all(x >= self.col_lo - tol) and np.all(x <= self.col_hi + tol)
                    and np.all(np.abs(x[self.integer] - np.round(x[self.integer])) <= tol))


def relative_gap(bound: float, objective: float) -> float:
    """|bound - objective| / |objective|, as Gurobi defines the MIP gap (inf if unknown)."""
    if not np.isfinite(bound) or not np.isfinite(objective):
        return float("inf")
    return abs(bound - objective) / max(abs(objective), 1e-12)


class Status(str, Enum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"          # stopped (time or work limit) with an incumbent
    NO_SOLUTION = "no_solution"    # stopped without an incumbent
    INFEASIBLE = "infeasible"
    LICENCE_LIMIT = "licence_limit"
    ERROR = "error"

    @property
    def has_solution(self) -> bool:
        return self in (Status.OPTIMAL, Status.FEASIBLE)


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float | None = None
    """Wall-clock limit: a safety net for live rounds. None: none, so that results do not
    depend on the machine's load (simulation)."""
    max_nodes: int | None = None
    """Branch-and-bound nodes a MILP may explore: a deterministic work limit (HiGHS
    ``mip_max_nodes``, Gurobi ``NodeLimit``). None: no limit."""
    threads: int = 0
    """0 lets the backend decide."""
    rel_gap: float = 1e-3
    warm_start: np.ndarray | None = None


@dataclass(frozen=True)
class SolveResult:
    status: Status
    x: np.ndarray | None
    objective: float
    bound: float
    """An upper bound on the optimum (maximisation), reported only by a solve that
    finished (OPTIMAL); +inf when unknown. A solve stopped by a limit gives no bound."""
    wall_s: float
    backend: str
    message: str = ""

    @property
    def gap(self) -> float:
        return relative_gap(self.bound, self.objective) if self.status.has_solution \
            else float("inf")
