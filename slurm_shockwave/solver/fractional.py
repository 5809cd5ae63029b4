"""Fractional GPU allocations for the Gavel-family baselines, solved exactly.

Each allocation x_i in [0, 1] is the fraction of time job i holds its w_i GPUs, subject
to sum_i w_i x_i <= G. The optimisation problems Gavel states as convex programs have
closed forms or one-dimensional bisections here (one worker type, throughput linear in
x), which are exact and about a thousand times faster than a generic solver.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _arrays(*xs: Sequence[float]) -> list[np.ndarray]:
    return [np.asarray(x, dtype=float) for x in xs]


def water_fill(gpus: Sequence[float], weights: Sequence[float], capacity: float) -> list[float]:
    """Weighted max-min fair GPU shares: share_i = min(w_i, level * weight_i), x_i = share_i/w_i.

    The level is raised until capacity is used or every job holds all of its GPUs.
    """
    w, q = _arrays(gpus, weights)
    if w.size == 0:
        return []
    if w.sum() <= capacity:
        return [1.0] * int(w.size)
    caps = w / q  # level at which job i saturates
    order = np.argsort(caps)
    remaining, weight_left = capacity, q.sum()
    level = 0.0
    for i in order:
        if caps[i] * weight_left > remaining:
            level = remaining / weight_left
            break
        remaining -= w[i]
        weight_left -= q[i]
        level = caps[i]
    x = np.minimum(w, level * q) / w
    return [float(v) for v in x]


def min_max_ratio(gpus: Sequence[float], since_start_s: Sequence[float],
                  remaining_s: Sequence[float], fair_s: Sequence[float],
                  capacity: float, iterations: int = 60) -> tuple[list[float], float]:
    """Minimise max_i rho_i(x) with rho_i = (t_i + R_i / x_i) / D_i (Gavel's FTF policy).

    For a target rho each job needs x_i >= R_i / (rho D_i - t_i); bisect on the smallest
    rho whose needs fit in the capacity. Returns (allocations, rho*).
    """
    w, t, r, d = _arrays(gpus, since_start_s, remaining_s, fair_s)
    if w.size == 0:
        return [], 0.0
    d = np.maximum(d, 1e-9)
    lo = float(np.max((t + r) / d))  # every job at x = 1

    def need(rho: float) -> np.ndarray:
        slack = rho * d - t
        with np.errstate(divide="ignore"):
            return np.where(slack > 0, np.minimum(1.0, r / np.maximum(slack, 1e-12)), 1.0)

    if float(w @ need(lo)) <= capacity:
        return [float(v) for v in need(lo)], lo
    hi = max(lo, 1.0) * 2
    while float(w @ need(hi)) > capacity and hi < 1e12:
        hi *= 2
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if float(w @ need(mid)) <= capacity:
            hi = mid
        else:
            lo = mid
    return [float(v) for v in need(hi)], hi


def fractional_knapsack(gpus: Sequence[float], value_per_gpu: Sequence[float],
                        capacity: float) -> list[float]:
    """Maximise sum_i value_i x_i subject to sum_i w_i x_i <= G: fill by value per GPU."""
    w, v = _arrays(gpus, value_per_gpu)
    x = np.zeros_like(w)
    left = capacity
    for i in np.argsort(-v, kind="stable"):
        if left <= 0:
            break
        x[i] = min(1.0, left / w[i])
        left -= w[i] * x[i]
    return [float(val) for val in x]


def min_makespan(gpus: Sequence[float], remaining_s: Sequence[float],
                 capacity: float) -> tuple[list[float], float]:
    """Smallest T with x_i = R_i / T feasible: T* = max(max_i R_i, sum_i w_i R_i / G)."""
    w, r = _arrays(gpus, remaining_s)
    if w.size == 0:
        return [], 0.0
    horizon = max(float(r.max()), float(w @ r) / capacity, 1e-9)
    return [float(v) for v in r / horizon], horizon
