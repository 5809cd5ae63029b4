"""Bisection over a monotone feasibility test, shared by the fluid bounds and stretch_edf.

No clock and a fixed rule for when to stop, so the same inputs take the same steps on any
machine: bounds and plans replay exactly.
"""

from __future__ import annotations

from collections.abc import Callable


def narrow(ok: Callable[[float], bool], lo: float, hi: float, *, rel_tol: float = 0.0,
           abs_tol: float = 0.0) -> tuple[float, float]:
    """The bracket [lo, hi] halved until hi - lo <= max(abs_tol, rel_tol x hi), keeping
    ``ok(hi)`` true and ``ok(lo)`` false where they were (``ok`` monotone: false below
    some value, true from it on)."""
    while hi - lo > max(abs_tol, rel_tol * hi):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return lo, hi
