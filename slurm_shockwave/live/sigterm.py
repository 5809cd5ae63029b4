"""SIGTERM as an exception, so a run's clean-ups (``with`` and ``finally``) run when it is
stopped: a process killed by SIGTERM's default action runs none."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType


@contextlib.contextmanager
def sigterm_raises(error: Callable[[int], BaseException]) -> Iterator[None]:
    """While the block runs, SIGTERM raises ``error(signum)`` in the main thread; the
    handler before it is put back after. Off the main thread (where Python takes no
    signal) nothing changes."""
    def handler(signum: int, _frame: FrameType | None) -> None:
        raise error(signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
