"""Choosing a backend, and falling back to HiGHS when Gurobi cannot solve."""

from __future__ import annotations

import logging
import time
from typing import Protocol

from slurm_shockwave.solver.gurobi import GurobiBackend
from slurm_shockwave.solver.highs import HighsBackend
from slurm_shockwave.solver.milp import Milp, SolveOptions, SolveResult, Status

log = logging.getLogger("slurm_shockwave.solver")

BACKEND_NAMES = ("auto", "highs", "gurobi")


class Backend(Protocol):
    name: str

    def solve(self, model: Milp, options: SolveOptions) -> SolveResult: ...


_fallback_warned = False


def solve(model: Milp, options: SolveOptions, backend: str = "highs") -> SolveResult:
    """Solve with the named backend; ``auto`` and ``gurobi`` fall back to HiGHS when
    Gurobi refuses the model (``gurobi`` was checked to be installed and licensed when the
    configuration was read, so here that means a model too large for the licence).

    A licence problem is reported in the result's message and in one warning per process
    (later ones at debug level), never raised: a scheduler must keep scheduling.
    """
    global _fallback_warned
    if backend not in BACKEND_NAMES:
        raise ValueError(f"solver: unknown backend {backend!r} (known: {', '.join(BACKEND_NAMES)})")
    if backend == "highs":
        return _guarded(HighsBackend(), model, options)
    first = _guarded(GurobiBackend(), model, options)
    if first.status != Status.LICENCE_LIMIT:
        return first
    log.log(logging.DEBUG if _fallback_warned else logging.WARNING,
            "solver: %s; falling back to HiGHS (warned once per process)", first.message)
    _fallback_warned = True
    second = _guarded(HighsBackend(), model, options)
    return SolveResult(second.status, second.x, second.objective, second.bound,
                       first.wall_s + second.wall_s, second.backend,
                       f"fallback from gurobi ({first.message}); {second.message}")


def _guarded(backend: Backend, model: Milp, options: SolveOptions) -> SolveResult:
    """The backend's result, or ``ERROR`` where the solver library raised (an internal
    error, a numerical failure, memory): the caller then falls back (``solve_window``:
    the greedy rounds), so a round is planned all the same, and the traceback is logged
    (found by a review: it reached the service, which failed every round with the
    jobs it holds left held)."""
    started = time.perf_counter()
    try:
        return backend.solve(model, options)
    except Exception as exc:  # the solver library's, whatever its kind
        log.error("solver: %s raised; this solve falls back", backend.name, exc_info=True)
        return SolveResult(Status.ERROR, None, float("nan"), float("inf"),
                           time.perf_counter() - started, backend.name,
                           f"{type(exc).__name__}: {exc}")
