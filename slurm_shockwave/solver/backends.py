"""Choosing a backend, and falling back to HiGHS when Gurobi cannot solve."""

from __future__ import annotations

import logging
from typing import Protocol

from slurm_shockwave.solver.gurobi import GurobiBackend
from slurm_shockwave.solver.highs import HighsBackend
from slurm_shockwave.solver.milp import Milp, SolveOptions, SolveResult, Status

log = logging.getLogger("slurm_shockwave.solver")

BACKEND_NAMES = ("auto", "highs", "gurobi")


class Backend(Protocol):
    name: str

    def solve(self, model: Milp, options: SolveOptions) -> SolveResult: ...


def solve(model: Milp, options: SolveOptions, backend: str = "highs") -> SolveResult:
    """Solve with the named backend; ``auto`` and ``gurobi`` fall back to HiGHS.

    A licence problem is reported in one log line and in the result's message, never
    raised: a scheduler must keep scheduling.
    """
    if backend not in BACKEND_NAMES:
        raise ValueError(f"solver: unknown backend {backend!r} (known: {', '.join(BACKEND_NAMES)})")
    if backend == "highs":
        return HighsBackend().solve(model, options)
    first = GurobiBackend().solve(model, options)
    if first.status != Status.LICENCE_LIMIT:
        return first
    log.warning("solver: %s; falling back to HiGHS", first.message)
    second = HighsBackend().solve(model, options)
    return SolveResult(second.status, second.x, second.objective, second.bound,
                       first.wall_s + second.wall_s, second.backend,
                       f"fallback from gurobi ({first.message}); {second.message}")
