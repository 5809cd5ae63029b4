"""A backend that stops asking once Slurm stops answering, for one step of the service."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, cast

from slurm_shockwave.slurm.protocol import SlurmBackend, SlurmNotAsked, SlurmUnanswered

NOT_ASKED = "not asked: Slurm stopped answering"
"""How a request not made reads (SlurmNotAsked's message, and a deferred action's)."""


class UntilSilent:
    """``backend`` for one apply: after a request Slurm leaves unanswered, every later one
    raises SlurmNotAsked at once instead of waiting out its own timeout (9-30 s each live;
    a red-team counted ten more in the round whose first signal went unanswered), until a
    request asked anyway (``asking_anyway``) is answered. Callers tell the two apart: an
    unanswered request may have taken effect, one not asked did not (a job never
    signalled must not be requeued at its deadline as if it had been)."""

    def __init__(self, backend: SlurmBackend) -> None:
        self._backend = backend
        self.silent: SlurmUnanswered | None = None
        self.forcing = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._backend, name)
        if not callable(attr):
            return attr
        return self._guarded(attr)

    def _guarded(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.silent is not None and not self.forcing:
                raise SlurmNotAsked(f"{NOT_ASKED} ({self.silent})")
            try:
                out = call(*args, **kwargs)
            except SlurmUnanswered as exc:
                self.silent = exc
                raise
            self.silent = None  # it answers again
            return out
        return guarded


def until_silent(backend: SlurmBackend) -> SlurmBackend:
    return cast(SlurmBackend, UntilSilent(backend))


@contextlib.contextmanager
def asking_anyway(backend: SlurmBackend) -> Iterator[None]:
    """Requests inside are made even after one went unanswered: for the one step a lost
    reply must not leave half done (a job requeued and not held runs again at the
    planner's pinned priority, ahead of the plan)."""
    if not isinstance(backend, UntilSilent):
        yield
        return
    was, backend.forcing = backend.forcing, True
    try:
        yield
    finally:
        backend.forcing = was
