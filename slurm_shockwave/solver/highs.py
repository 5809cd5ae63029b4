"""The HiGHS backend (highspy): the default, needs no licence. The only highspy importer."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

from slurm_shockwave.solver.milp import Milp, SolveOptions, SolveResult, Status

_constructed = False
_pool_threads: int | None = None
"""The ``threads`` the last solve ran with (None: no solve yet in this process)."""


def _new_highs() -> Any:
    """A Highs instance. The first one in a process prints a banner from C++ to stdout
    whatever the options say, which would corrupt ``--json`` output; send it to
    /dev/null at the file-descriptor level, once."""
    global _constructed
    import highspy

    if _constructed:
        return highspy.Highs()  # type: ignore[no-untyped-call]
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 1)
            h = highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    _constructed = True
    return h


def _pool_for(threads: int) -> None:
    """HiGHS keeps one pool of threads per process, started by the first solve; a solve
    asking for another count than the pool's fails (model status "Not Set"), and the
    planner fell back to greedy plans for the rest of the process (after any solve with
    another ``threads``, the default's 0 included). Restart the pool when the count
    changes: solves are never concurrent here (one round loop)."""
    global _pool_threads
    import highspy

    if _pool_threads is not None and _pool_threads != threads:
        highspy.Highs.resetGlobalScheduler(True)
    _pool_threads = threads


class HighsBackend:
    name = "highs"

    def solve(self, model: Milp, options: SolveOptions) -> SolveResult:
        import highspy

        started = time.perf_counter()
        _pool_for(int(options.threads))  # before any instance of this solve exists
        h = _new_highs()
        h.setOptionValue("output_flag", False)
        if options.time_limit_s is not None:
            h.setOptionValue("time_limit", float(max(options.time_limit_s, 0.01)))
        if options.max_nodes is not None:
            h.setOptionValue("mip_max_nodes", int(options.max_nodes))
        h.setOptionValue("mip_rel_gap", float(options.rel_gap))
        if options.threads:
            h.setOptionValue("threads", int(options.threads))
        rows, cols = model.shape
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = cols, rows
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.offset_ = float(model.offset)
        lp.col_cost_ = model.c.astype(float)
        lp.col_lower_ = model.col_lo.astype(float)
        lp.col_upper_ = model.col_hi.astype(float)
        lp.row_lower_ = model.row_lo.astype(float)
        lp.row_upper_ = model.row_hi.astype(float)
        a = model.a.tocsc()
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = a.indptr
        lp.a_matrix_.index_ = a.indices
        lp.a_matrix_.value_ = a.data.astype(float)
        is_mip = bool(model.integer.any())
        if is_mip:
            lp.integrality_ = [highspy.HighsVarType.kInteger if z
                               else highspy.HighsVarType.kContinuous for z in model.integer]
        h.passModel(lp)
        if is_mip and options.warm_start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = list(map(float, options.warm_start))
            sol.value_valid = True
            h.setSolution(sol)
        h.run()
        wall = time.perf_counter() - started
        status = h.getModelStatus()
        info = h.getInfo()
        ms = highspy.HighsModelStatus
        has_primal = info.primal_solution_status == 2  # kSolutionStatusFeasible
        if status == ms.kOptimal:
            st = Status.OPTIMAL
        elif status in (ms.kInfeasible, ms.kUnboundedOrInfeasible):
            st = Status.INFEASIBLE
        elif has_primal:
            st = Status.FEASIBLE
        elif status in (ms.kTimeLimit, ms.kIterationLimit, ms.kSolutionLimit, ms.kInterrupt):
            st = Status.NO_SOLUTION
        else:
            st = Status.ERROR
        x = np.asarray(h.getSolution().col_value, dtype=float) if st.has_solution else None
        objective = float(info.objective_function_value) if x is not None else float("nan")
        # a solve stopped by a limit reports no bound (its LP value is not one)
        if st != Status.OPTIMAL:
            bound = float("inf")
        else:
            bound = float(info.mip_dual_bound) if is_mip else objective
        message = h.modelStatusToString(status)
        if is_mip:
            message += f" ({int(info.mip_node_count)} nodes)"
        return SolveResult(st, x, objective, bound, wall, self.name, message)
