"""The Gurobi backend (gurobipy). The only gurobipy importer.

The licence bundled with the PyPI wheel is size-limited (2,000 variables and
constraints): a larger model fails with error 10010, and with no licence at all Gurobi
raises 10009. Both come back as ``Status.LICENCE_LIMIT`` so the caller can fall back.
"""

from __future__ import annotations

import time
from functools import cache

import numpy as np

from slurm_shockwave.solver.milp import Milp, SolveOptions, SolveResult, Status

LICENCE_ERRORS = {10009: "no Gurobi licence", 10010: "model too large for the Gurobi licence"}


@cache
def unavailable() -> str | None:
    """Why Gurobi cannot solve anything in this process (not installed, no licence), or
    None. Asked once, when a configuration names ``solver: gurobi``."""
    try:
        import gurobipy as gp
    except ImportError:
        return "gurobipy is not installed (pip install 'slurm-shockwave[gurobi]')"
    try:
        gp.Env(params={"OutputFlag": 0}).dispose()
    except gp.GurobiError as exc:
        code = int(getattr(exc, "errno", -1) or -1)
        return f"{LICENCE_ERRORS.get(code, 'Gurobi error')} ({code}: {exc})"
    return None


class GurobiBackend:
    name = "gurobi"

    def solve(self, model: Milp, options: SolveOptions) -> SolveResult:
        started = time.perf_counter()
        try:
            import gurobipy as gp
            from gurobipy import GRB
        except ImportError:
            return SolveResult(Status.LICENCE_LIMIT, None, float("nan"), float("inf"), 0.0,
                               self.name, "gurobipy is not installed (pip install "
                               "'slurm-shockwave[gurobi]')")
        try:
            env = gp.Env(params={"OutputFlag": 0})
            m = gp.Model(env=env)
            if options.time_limit_s is not None:
                m.Params.TimeLimit = max(options.time_limit_s, 0.01)
            if options.max_nodes is not None:
                m.Params.NodeLimit = float(options.max_nodes)
            m.Params.MIPGap = options.rel_gap
            if options.threads:
                m.Params.Threads = options.threads
            vtype = np.where(model.integer, GRB.INTEGER, GRB.CONTINUOUS)
            x = m.addMVar(model.shape[1], lb=model.col_lo, ub=model.col_hi, vtype=vtype)
            a = model.a.tocsr()
            finite_hi = np.isfinite(model.row_hi)
            finite_lo = np.isfinite(model.row_lo)
            if finite_hi.any():
                m.addMConstr(a[finite_hi], x, "<", model.row_hi[finite_hi])
            if finite_lo.any():
                m.addMConstr(a[finite_lo], x, ">", model.row_lo[finite_lo])
            m.setObjective(model.c @ x + model.offset, GRB.MAXIMIZE)
            if options.warm_start is not None:
                x.Start = options.warm_start  # type: ignore[assignment]
            m.optimize()
        except gp.GurobiError as exc:
            code = int(getattr(exc, "errno", -1) or -1)
            status = Status.LICENCE_LIMIT if code in LICENCE_ERRORS else Status.ERROR
            return SolveResult(status, None, float("nan"), float("inf"),
                               time.perf_counter() - started, self.name,
                               f"{LICENCE_ERRORS.get(code, 'Gurobi error')} ({code}: {exc})")
        wall = time.perf_counter() - started
        if m.Status == GRB.INFEASIBLE or m.Status == GRB.INF_OR_UNBD:
            return SolveResult(Status.INFEASIBLE, None, float("nan"), float("inf"), wall,
                               self.name, "infeasible")
        if m.SolCount == 0:
            return SolveResult(Status.NO_SOLUTION, None, float("nan"), float("inf"), wall,
                               self.name, f"status {m.Status}")
        st = Status.OPTIMAL if m.Status == GRB.OPTIMAL else Status.FEASIBLE
        is_mip = bool(model.integer.any())
        # a solve stopped by a limit reports no bound (its LP value is not one)
        bound = (float(m.ObjBound) if is_mip else float(m.ObjVal)) if st == Status.OPTIMAL \
            else float("inf")
        return SolveResult(st, np.asarray(x.X, dtype=float), float(m.ObjVal), bound, wall,
                           self.name, f"status {m.Status}"
                           + (f" ({int(m.NodeCount)} nodes)" if is_mip else ""))
