"""Solving the window program within a work limit, with fallbacks that never fail.

Strategy: the LP relaxation (fast; its optimum bounds the program) -> rounding (a
feasible integer point) -> the MILP warm-started from it, for at most ``max_nodes``
branch-and-bound nodes (deterministic: the same plan on a busy machine) and, when a
wall-clock ``time_limit_s`` is set (live rounds), what is left of it. If the MILP has no
incumbent or fails, the rounded LP point is used; if even the LP fails, a greedy plan.
Only a solve that finished contributes a bound: an LP or MILP stopped by a limit gives
none, and then the gap is unknown (inf).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from slurm_shockwave.solver.backends import solve
from slurm_shockwave.solver.milp import SolveOptions, Status, relative_gap
from slurm_shockwave.solver.window import WindowInputs, build, evaluate, round_down_up, to_point

WINDOW_STATUSES = ("optimal", "feasible", "within_gap", "rounded_lp", "greedy", "infeasible")
"""Every ``WindowSolution.status``: the MILP's optimal or feasible, the rounded LP's within
the gap or not, the greedy fallback, infeasible (the metrics count solves by these)."""


@dataclass(frozen=True)
class WindowSolution:
    rounds: np.ndarray
    status: str
    """optimal | within_gap (rounded LP, gap <= rel_gap) | feasible (MILP time limit) |
    rounded_lp (MILP found nothing better in time) | greedy (LP failed) | infeasible"""
    objective: float
    bound: float
    """An upper bound on the window program's optimum from a finished LP or MILP; +inf
    when every solve stopped at a limit."""
    backend: str
    wall_s: float
    message: str = ""
    build_s: float = 0.0

    @property
    def gap(self) -> float:
        return relative_gap(self.bound, self.objective)


def greedy_rounds(inp: WindowInputs) -> np.ndarray:
    """Most remaining work first, whole windows, until the GPUs are used."""
    rounds = np.zeros(inp.n, dtype=int)
    left = inp.capacity * inp.rounds
    for i in np.argsort(-inp.remaining_s * inp.weight, kind="stable"):
        need = int(np.ceil(min(inp.rounds, inp.remaining_s[i] / inp.round_s)))
        take = min(need, left // int(inp.gpus[i]))
        rounds[i] = max(take, 0)
        left -= rounds[i] * int(inp.gpus[i])
    return rounds


def solve_window(inp: WindowInputs, *, backend: str = "highs", time_limit_s: float | None = None,
                 max_nodes: int | None = None, rel_gap: float = 1e-3,
                 threads: int = 0) -> WindowSolution:
    started = time.perf_counter()
    model = build(inp)
    build_s = time.perf_counter() - started

    def time_left() -> float | None:
        return None if time_limit_s is None else time_limit_s - (time.perf_counter() - started)

    def infeasible(backend_name: str, message: str, bound: float = float("inf"),
                   rounds: np.ndarray | None = None) -> WindowSolution:
        return WindowSolution(np.zeros(inp.n, dtype=int) if rounds is None else rounds,
                              "infeasible", float("nan"), bound, backend_name,
                              time.perf_counter() - started, message, build_s)

    lp = solve(model.milp.relaxed(), SolveOptions(time_limit_s=time_limit_s, threads=threads),
               backend)
    if lp.status == Status.INFEASIBLE:
        return infeasible(lp.backend, lp.message)
    if not lp.status.has_solution or lp.x is None:
        rounds = greedy_rounds(inp)
        obj, _ = evaluate(inp, rounds)
        return WindowSolution(rounds, "greedy", obj, float("inf"), lp.backend,
                              time.perf_counter() - started, f"LP failed: {lp.message}", build_s)
    bound = lp.bound  # +inf unless the LP finished
    rounds = round_down_up(inp, lp.x[: inp.n])
    obj, ok = evaluate(inp, rounds)
    gap = relative_gap(bound, obj) if ok else np.inf
    best = (rounds, obj if ok else -np.inf, "within_gap" if gap <= rel_gap else "rounded_lp")
    left = time_left()
    backend_used, message = lp.backend, lp.message
    if gap > rel_gap and (left is None or left > 0.05):
        mip = solve(model.milp, SolveOptions(time_limit_s=left, max_nodes=max_nodes,
                                             threads=threads, rel_gap=rel_gap,
                                             warm_start=to_point(inp, rounds) if ok else None),
                    backend)
        backend_used, message = mip.backend, mip.message
        if mip.status == Status.INFEASIBLE:
            return infeasible(mip.backend, mip.message)
        if np.isfinite(mip.bound):
            bound = min(bound, mip.bound)
        if mip.status.has_solution and mip.x is not None:
            cand = model.rounds_of(mip.x)
            cobj, cok = evaluate(inp, cand)
            if cok and cobj >= best[1]:
                best = (cand, cobj, mip.status.value)
    rounds, obj, status = best
    if not np.isfinite(obj):  # nothing feasible found, none proven impossible either:
        # the rounded LP point (a cap it breaks shows in the certificate), not
        # "infeasible", on which the caller dropped every job's cap (a review found 534
        # of 3,044 feasible programs so labelled when a live round's time ran short)
        obj, _ = evaluate(inp, rounds)
        status, message = "rounded_lp", f"rounding broke a fairness cap; {message}"
    return WindowSolution(rounds, status, obj, bound, backend_used,
                          time.perf_counter() - started, message, build_s)
