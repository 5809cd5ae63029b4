"""Option types with explicit bounds, the trace argument's note, and JSON output that is
always valid JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from slurm_shockwave.model.bounds import (
    LISTEN_PROBLEM,
    PARTITION_PROBLEM,
    PATH_PROBLEM,
    bounded,
    is_host_port,
    is_partition_name,
    is_path_text,
    shown,
    utf8_text,
)
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.sim.inputs import shadows_local

if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]
else:  # click < 8.2 has no generic ParamType
    _ParamType = click.ParamType


class Bounded(_ParamType):
    """A finite number (or an integer) in a closed range (or open at the bottom)."""

    def __init__(self, lo: float, hi: float, *, integer: bool = False,
                 lo_open: bool = False) -> None:
        self.lo, self.hi, self.integer, self.lo_open = lo, hi, integer, lo_open
        self.name = "integer" if integer else "number"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if not isinstance(value, str) and value is not None and not isinstance(value, bool):
            if isinstance(value, int if self.integer else (int, float)):
                text: Any = value
            else:
                text = str(value)
        else:
            text = value
        try:
            return bounded(text, field="value", lo=self.lo, hi=self.hi, integer=self.integer,
                           lo_open=self.lo_open)
        except InputError as exc:
            self.fail(exc.problem, param, ctx)


class Checked(_ParamType):
    """A string ``ok`` accepts; otherwise ``problem``, the words the config file's own
    check uses for the same setting."""

    def __init__(self, name: str, ok: Callable[[str], bool], problem: str) -> None:
        self.name, self.ok, self.problem = name, ok, problem

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if not self.ok(str(value)):
            self.fail(f"{self.problem}, got {shown(str(value))}", param, ctx)
        return str(value)


PARTITION = Checked("partition", is_partition_name, PARTITION_PROBLEM)
HOST_PORT = Checked("HOST:PORT", is_host_port, LISTEN_PROBLEM)
PATH_TEXT = Checked("path", is_path_text, PATH_PROBLEM)
"""A path option: an empty one was taken as the option left out (``--store``'s default
store opened, ``--slurm-conf``'s default slurm.conf read)."""
store_option = click.option("--store", "store_path", type=PATH_TEXT, default=None,
                            help="State file [config service.store].")
"""``--store`` of every command that opens the service's store: an empty path was taken
as the option left out, and the configured store opened instead."""


def note_bundled(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Callback of a trace argument: a bundled trace's name while a file or directory of
    that name is here reads the bundled trace, which one note on stderr says (it did so
    silently, and ./demo holding garbage went unnoticed)."""
    if value is not None and shadows_local(value):
        click.echo(f"note: {value}: the bundled trace of that name is used; ./{value} names "
                   "the one in this directory", err=True)
    return value


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, str):
        return utf8_text(obj)
    if isinstance(obj, dict):
        return {_json_safe(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def json_text(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` where NaN and infinities become null and text is UTF-8 (``utf8_text``):
    the output is always JSON that strict parsers read."""
    return json.dumps(_json_safe(obj), allow_nan=False, **kwargs)
