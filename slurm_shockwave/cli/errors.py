"""Turning bad input into one line on stderr and exit code 2."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.service.lock import AlreadyRunning
from slurm_shockwave.slurm.protocol import SlurmError

F = TypeVar("F", bound=Callable[..., Any])


def one_line_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (InputError, ValueError, SlurmError, AlreadyRunning) as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(2) from None

    return wrapper  # type: ignore[return-value]
