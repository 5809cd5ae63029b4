"""The only code that reads time. Everything else is handed a clock or a timestamp."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class SimClock:
    """Simulated seconds since the trace's time 0 (its arrivals are on the same scale);
    advanced only by the simulator."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s

    def now(self) -> float:
        return self._now

    def advance_to(self, t_s: float) -> None:
        if t_s < self._now:
            raise ValueError(f"simulated time cannot go back ({t_s} < {self._now})")
        self._now = t_s


class WallClock:
    def now(self) -> float:
        return time.time()
