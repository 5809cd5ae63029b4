"""Shockwave's settings, with defaults that need no per-cluster tuning (docs/planner.md)."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_shockwave.model.bounds import MAX_SEED
from slurm_shockwave.solver.backends import BACKEND_NAMES
from slurm_shockwave.solver.gurobi import unavailable as gurobi_unavailable


@dataclass(frozen=True)
class ShockwaveConfig:
    window_rounds: int = 20
    """T: rounds planned ahead (20 x 120 s = 40 min, as in the paper)."""
    k: float = 10.0
    """Weight of the largest predicted remaining time (in windows) against the mean log."""
    lam: float = 5.0
    """Exponent of the priority rho^lambda used when fairness constraints are relaxed."""
    rho_max: float = 0.5
    """Finish-time-fairness bound of the constraints: each job aims to finish within
    rho_max x its fair time in the system (since arrival). Below 1 because the predictor
    under-estimates remaining time and the program ignores restore time (docs/planner.md)."""
    rescue_rho: float = 1.6
    """Jobs projected past this multiple of their fair time in the system run first in
    the window; at or below 1 every job projected past its fair time does (the paper's
    re-ranking)."""
    momentum: float = 0.9
    """Weight of the time-averaged fair finish time against the latest estimate."""
    reopt_rounds: int = 8
    """Re-solve at least this often even when no job arrives or leaves."""
    lease_overhead: float = 0.1
    """A started job keeps its GPUs for the fewest rounds that hold its restart cost (the
    world's ``restart_cost_s``) within this fraction of its run (the lease); 0: no lease."""
    critical_frac: float = 0.95
    """Jobs whose most remaining time (at the slowest batch size still ahead), run from
    now without a break, reaches this fraction of the makespan's lower bound run first
    and are packed first (the critical path); 0 turns it off."""
    lookahead: bool = True
    """Each round, run the order whose projection over the jobs present has the least
    average JCT among those within ``lookahead_tol`` of the least worst stretch: the
    market's, shortest remaining first, or earliest stretch-deadline first
    (policies/shockwave/lookahead.py); false: always the market's."""
    lookahead_tol: float = 0.02
    """How much worse than the least projected worst stretch a chosen order may be."""
    solver: str = "highs"
    """highs | gurobi (refused when gurobipy or its licence is missing; a model too large
    for a size-limited licence is solved by HiGHS) | auto (Gurobi when it solves, else
    HiGHS)."""
    max_nodes: int = 200
    """Branch-and-bound nodes per solve: a deterministic work limit, so a simulation gives
    the same results on a busy machine."""
    time_limit_s: float | None = None
    """Wall-clock limit per solve. None in simulation (results would depend on the
    machine's load); the service sets it from ``service.solver_time_limit_s``."""
    threads: int = 0
    rel_gap: float = 1e-3
    prediction_noise: float = 0.0
    """Multiply each job's predicted remaining time by a seeded factor in [1-e, 1+e]."""
    seed: int = 0

    def validate(self) -> tuple[str, str] | None:
        checks = (
            ("window_rounds", 1 <= self.window_rounds <= 1000, "must be from 1 to 1000"),
            ("k", self.k >= 0, "must be >= 0"),
            ("lam", 0 <= self.lam <= 100, "must be from 0 to 100"),
            ("rho_max", self.rho_max > 0, "must be > 0"),
            ("momentum", 0 <= self.momentum <= 1, "must be in [0, 1]"),
            ("reopt_rounds", self.reopt_rounds >= 1, "must be >= 1"),
            ("rescue_rho", self.rescue_rho > 0, "must be > 0"),
            ("lease_overhead", 0 <= self.lease_overhead < 1, "must be in [0, 1)"),
            ("critical_frac", 0 <= self.critical_frac <= 1, "must be in [0, 1]"),
            ("lookahead_tol", 0 <= self.lookahead_tol <= 10, "must be from 0 to 10"),
            ("solver", self.solver in BACKEND_NAMES, f"must be one of {', '.join(BACKEND_NAMES)}"),
            ("max_nodes", self.max_nodes >= 1, "must be >= 1"),
            ("time_limit_s", self.time_limit_s is None or 0 < self.time_limit_s <= 86400,
             "must be > 0 and <= 86400 (or null: no wall-clock limit)"),
            ("threads", 0 <= self.threads <= 1024, "must be from 0 to 1024"),
            ("rel_gap", self.rel_gap >= 0, "must be >= 0"),
            ("prediction_noise", 0 <= self.prediction_noise <= 1, "must be in [0, 1]"),
            ("seed", 0 <= self.seed <= MAX_SEED, f"must be from 0 to {MAX_SEED}"),
        )
        for name, ok, message in checks:
            if not ok:
                return name, message
        if self.solver == "gurobi":
            problem = gurobi_unavailable()
            if problem:
                return "solver", f"gurobi: {problem} (solver: auto falls back to HiGHS)"
        return None
