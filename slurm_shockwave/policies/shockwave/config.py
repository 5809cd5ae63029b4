"""Shockwave's settings, with defaults that need no per-cluster tuning (docs/planner.md)."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_shockwave.solver.backends import BACKEND_NAMES


@dataclass(frozen=True)
class ShockwaveConfig:
    window_rounds: int = 20
    """T: rounds planned ahead (20 x 120 s = 40 min, as in the paper)."""
    k: float = 10.0
    """Weight of the largest predicted remaining time (in windows) against the mean log."""
    lam: float = 5.0
    """Exponent of the priority rho^lambda used when fairness constraints are relaxed."""
    rho_max: float = 0.6
    """Finish-time-fairness bound of the constraints. Below 1 because the predictor
    under-estimates remaining time and the program ignores restore time (docs/planner.md)."""
    rescue_rho: float = 1.6
    """Jobs projected past this multiple of their fair finish time run first in the
    window; at or below rho_max every job behind does (the paper's re-ranking)."""
    momentum: float = 0.9
    """Weight of the time-averaged fair finish time against the latest estimate."""
    reopt_rounds: int = 8
    """Re-solve at least this often even when no job arrives or leaves."""
    solver: str = "highs"
    """highs | gurobi | auto (Gurobi when licensed, else HiGHS)."""
    time_limit_s: float = 15.0
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
            ("solver", self.solver in BACKEND_NAMES, f"must be one of {', '.join(BACKEND_NAMES)}"),
            ("time_limit_s", 0 < self.time_limit_s <= 86400, "must be > 0 and <= 86400"),
            ("threads", 0 <= self.threads <= 1024, "must be from 0 to 1024"),
            ("rel_gap", self.rel_gap >= 0, "must be >= 0"),
            ("prediction_noise", 0 <= self.prediction_noise <= 1, "must be in [0, 1]"),
        )
        for name, ok, message in checks:
            if not ok:
                return name, message
        return None
