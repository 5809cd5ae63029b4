"""Errors for bad input: one line naming the file, line and field, never a traceback."""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input (trace, throughput table, config, hint).

    The message is a single line ``file:line: field: problem`` so a CLI can print it
    as-is and exit 2.
    """

    def __init__(self, problem: str, *, source: str = "", line: int | None = None,
                 field: str = "") -> None:
        self.problem = problem
        self.source = source
        self.line = line
        self.field = field
        where = source
        if line is not None:
            where = f"{where}:{line}" if where else f"line {line}"
        parts = [p for p in (where, field) if p]
        super().__init__(": ".join([*parts, problem]))


class IllegalTransition(RuntimeError):
    """A job lifecycle transition that the state machine does not allow."""
