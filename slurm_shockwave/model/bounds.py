"""Explicit bounds on what a user may give, and the checks that enforce them.

Every number read from a trace, a throughput table, a config file or an option passes
through ``bounded``: it must be of the right kind, finite and within its range, or it is
an InputError naming where it came from. The limits keep the work and memory a run takes
proportional to its input (docs/trace-format.md lists them).
"""

from __future__ import annotations

import datetime
import math
import os
import re
import reprlib
from collections.abc import Iterable
from typing import Any

from slurm_shockwave.model.errors import InputError

MAX_JOBS = 100_000
"""Jobs in one trace."""
MAX_EPOCHS = 100_000
"""Epochs of one job (the hint grammar's bound too)."""
MAX_TOTAL_EPOCHS = 10_000_000
"""Epochs over a whole trace: the simulator keeps each job's per-epoch batch sizes."""
MAX_STEPS = 10**12
MAX_BATCH_SIZE = 1_000_000
MAX_JOB_GPUS = 4_096
MAX_RANGE_GPUS = 1_024
"""The widest count an elastic job's range may name (the hint grammar's ``gpus=LO-HI``,
job_submit.lua's MAX_GPUS), in traces as in hints: one language."""
MAX_CLUSTER_GPUS = 100_000
MAX_ARRIVAL_S = 1e10
"""About 300 years: arrival times in seconds from the trace start."""
MAX_WEIGHT = 1e6
MIN_WEIGHT = 1e-6
"""A weight nearer 0 made a weighted-fair share's level overflow (Gavel's water-fill: inf,
then NaN allocations); 0 would starve the job forever."""
MAX_JOB_ID = 2**31 - 1
MAX_TEXT = 256
"""Characters of a free-text field (user, model label)."""
MAX_LINE_CHARS = 4_096
"""Characters of one trace line (a JSON line nests at most this deep)."""
MAX_FILE_BYTES = 64 * 1024 * 1024
"""Bytes of a throughput table or config file, read whole."""
MAX_EXCLUSIVE_S = 1e7
"""Runtime of one job alone on its GPUs (about 116 days): bounds the simulated rounds."""
MIN_THROUGHPUT, MAX_THROUGHPUT = 1e-6, 1e9
"""Steps per second of a runnable table entry (0 marks one that does not run)."""
MAX_ROUND_S = 86_400.0
MAX_FACTOR = 1_000.0
"""The largest --cutoff / deadline_factor."""
MAX_SEED = 2**32 - 1
MAX_ROUNDS = 100_000
"""Rounds a simulation may need at least (its GPU-seconds of work / the cluster's GPUs x
the round, its longest job's runtime / the round, or the time some job must be in the
cluster / the round, sim/rounds.py): more is refused up front. The paper's largest run
needs about a thousand."""

PARTITION_NAME = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]*")
"""What a managed partition may be called: job_submit.lua and the plugin scripts carry it
as a quoted string, and a comma or a space would name two partitions to Slurm; a leading
"-" would reach scontrol and squeue as an option."""
PARTITION_PROBLEM = "must be a partition name of [A-Za-z0-9._-], not starting with -"
LISTEN_PROBLEM = "must be HOST:PORT (port 0: any free port)"
PATH_PROBLEM = "must be a path, not empty, with no control characters"
"""An output or store path given as "": it was taken as the option left out; one with a
newline (a YAML block scalar ends in one) named another file than the admin meant."""
MAX_SLURM_ID = 2**32 - 1
"""Slurm's job ids and uids are 32-bit unsigned."""


def is_partition_name(text: str) -> bool:
    return PARTITION_NAME.fullmatch(text) is not None


def is_path_text(text: str) -> bool:
    return bool(text.strip()) and not any(ord(c) < 32 or ord(c) == 127 for c in text)


def is_host_port(text: str) -> bool:
    """HOST:PORT with a port of 0-65535 in ASCII digits (isdigit alone takes "²" and
    Arabic-Indic digits, which int() reads or refuses); an IPv6 host in brackets
    (``::1`` alone read as host ``:`` and port 1)."""
    host, sep, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    return bool(sep and host and (bracketed or ":" not in host) and port.isascii()
                and port.isdigit() and int(port) <= 65535)

_SHORT = reprlib.Repr()
_SHORT.maxstring = 40
_SHORT.maxother = 40
_SHORT.maxlong = 40
_SHORT.maxlevel = 2
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = 3


def key_name(key: Any) -> str:
    """A mapping key as an error's field: unquoted, short, and ``''`` for the empty key
    (which would otherwise vanish from the message)."""
    return shown(key).strip("'") or "''"


def shown(value: Any) -> str:
    """A value as an error message shows it: short whatever its size or nesting, and in
    the spelling of the JSON or YAML it came from, not Python's (a red-team: ``got True``,
    ``got datetime.date(2001, 12, 14)``, ``None: unknown section``)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    if isinstance(value, bytes | bytearray):
        return f"binary data of {len(value)} bytes"
    if isinstance(value, datetime.date):  # a datetime too
        return f"the date {value.isoformat()}"
    if isinstance(value, int) and abs(value) >= 10**30:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4000'}" \
               " digits"
    try:
        return _SHORT.repr(value)
    except (RecursionError, ValueError):
        return f"a {type(value).__name__}"


_INTEGER = re.compile(r"[+-]?[0-9]{1,38}")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)",
                     re.IGNORECASE)


def numeric_text(text: str) -> bool:
    """Whether ``text`` is a plain ASCII decimal number (as JSON or a TSV column writes it)."""
    return _NUMBER.fullmatch(text.strip()) is not None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def bounded(value: Any, *, field: str, lo: float, hi: float, integer: bool = False,
            source: str = "", line: int | None = None, lo_open: bool = False,
            strings: bool = True) -> Any:
    """``value`` as an int (``integer``) or a finite float within [lo, hi].

    Accepts numbers and, with ``strings``, ASCII numeric strings (a TSV trace's columns and
    options are text; a JSON value must be a number); never bool.
    """
    def bad(problem: str) -> InputError:
        return InputError(problem, source=source, line=line, field=field)

    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or (
            isinstance(value, str) and not strings):
        raise bad(f"expected {kind}, got {shown(value)}")
    text = value.strip() if isinstance(value, str) else None
    if text is not None and len(text) > 40:
        raise bad(f"expected {kind} of at most 40 characters, got {shown(value)}")
    try:
        if text is not None and (_INTEGER if integer else _NUMBER).fullmatch(text) is None:
            raise ValueError  # ASCII only: no '1_000', no other scripts' digits
        if integer:
            if isinstance(value, float):
                raise ValueError
            out: Any = int(text) if text is not None else value
        else:
            out = float(text if text is not None else value)
    except (ValueError, OverflowError):
        if isinstance(value, int):
            raise bad(f"must be from {_num(lo)} to {_num(hi)}, got {shown(value)}") from None
        raise bad(f"expected {kind}, got {shown(value)}") from None
    if not integer and not math.isfinite(out):
        raise bad(f"must be a finite number, got {shown(value)}")
    if out < lo or out > hi or (lo_open and out == lo):
        span = f"> {_num(lo)} and <= {_num(hi)}" if lo_open else f"from {_num(lo)} to {_num(hi)}"
        raise bad(f"must be {span}, got {shown(value)}")
    return out


def number_list(text: str, *, field: str, count: int | None = None,
                lo: float = -math.inf, hi: float = math.inf,
                integer: bool = False) -> list[float]:
    """Comma-separated finite numbers in [lo, hi], as ``bounded`` reads each (ASCII only;
    whole numbers, as ints, with ``integer``); exactly ``count`` of them when given."""
    parts = text.split(",")
    if count is not None and len(parts) != count:
        raise InputError(f"expected {count} comma-separated numbers, got {shown(text)}",
                         field=field)
    read = [bounded(p, field=field, lo=lo, hi=hi, integer=integer) for p in parts]
    return read if integer else [float(v) for v in read]


def name_list(text: str, known: Iterable[str], *, field: str) -> list[str]:
    """Comma-separated names, at least one, each of ``known`` and none twice."""
    known = tuple(known)
    wanted = [n.strip() for n in text.split(",") if n.strip()]
    if not wanted:
        raise InputError(f"expected at least one of {', '.join(known)}", field=field)
    for n in wanted:
        if n not in known:
            raise InputError(f"unknown {shown(n)} (known: {', '.join(known)})", field=field)
        if wanted.count(n) > 1:
            raise InputError(f"{shown(n)} named twice", field=field)
    return wanted


def text_field(value: Any, *, field: str, source: str = "", line: int | None = None,
               limit: int = MAX_TEXT) -> str:
    """A free-text field: a string of at most ``limit`` characters."""
    if not isinstance(value, str):
        raise InputError(f"expected a string, got {shown(value)}", source=source, line=line,
                         field=field)
    if len(value) > limit:
        raise InputError(f"longer than {limit} characters", source=source, line=line,
                         field=field)
    return value


def utf8_text(text: str) -> str:
    """``text`` as UTF-8 can carry it. A file name's bytes that are not UTF-8 come from
    Python as lone surrogates (``\\udcff``), which strict JSON parsers and matplotlib
    reject: they read as their bytes (``\\xff``) instead, and any other lone surrogate
    as ``\\ud800``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            return os.fsencode(text).decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate no file name decodes to
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
