"""Reading the user's files with bounds: size, line length, UTF-8 and strict JSON.

A file that cannot be read, is too large, is not UTF-8 or holds JSON with duplicate keys
or absurd nesting is an InputError naming the file (and line), never a traceback or a
silently different value.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from slurm_shockwave.model.bounds import (
    MAX_FILE_BYTES,
    MAX_LINE_CHARS,
    PATH_PROBLEM,
    is_path_text,
)
from slurm_shockwave.model.errors import InputError


def _open_error(exc: OSError, source: str, field: str) -> InputError:
    return InputError(f"cannot read ({exc.strerror or exc})", source=source, field=field)


def _open(path: str | Path, field: str) -> BinaryIO:
    """Open for reading without blocking on a FIFO that has no writer (it reads as empty);
    a pipe that has one, such as ``<(shockwave trace generate)``, reads as usual. An
    empty path is refused (it opened ".", and the error named that)."""
    if not is_path_text(str(path)):
        raise InputError(PATH_PROBLEM, field=field)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_text(path: str | Path, *, field: str, limit: int = MAX_FILE_BYTES,
              lenient: bool = False) -> str:
    """A whole UTF-8 file of at most ``limit`` bytes; ``lenient``: bytes that are not
    UTF-8 read as U+FFFD (a file of Slurm's, which does not have to be UTF-8)."""
    source = str(path)
    try:
        with _open(path, field) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise _open_error(exc, source, field) from None
    if len(data) > limit:
        raise InputError(f"larger than {limit} bytes", source=source, field=field)
    if lenient:
        return data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text (byte {exc.start + 1})", source=source, line=line,
                         field=field) from None


def read_lines(path: str | Path, *, field: str,
               max_chars: int = MAX_LINE_CHARS) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file, streamed, each line at most ``max_chars``."""
    source = str(path)
    try:
        f = _open(path, field)
    except OSError as exc:
        raise _open_error(exc, source, field) from None
    with f:
        lineno = 0
        while True:
            try:
                raw = f.readline(4 * max_chars + 2)
            except OSError as exc:
                raise _open_error(exc, source, field) from None
            if not raw:
                return
            lineno += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if len(raw) > 4 * max_chars and exc.start >= len(raw) - 4:
                    text = ""  # a character cut by the read limit: the line is too long
                else:
                    raise InputError(f"not UTF-8 text (byte {exc.start + 1} of the line)",
                                     source=source, line=lineno, field=field) from None
            body = text.rstrip("\r\n")
            if lineno == 1:
                body = body.removeprefix("\ufeff")  # a byte-order mark some editors write
            if len(raw) > 4 * max_chars or len(body) > max_chars:
                raise InputError(f"line longer than {max_chars} characters", source=source,
                                 line=lineno, field=field)
            yield lineno, body


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:40]!r}")
        out[key] = value
    return out


def strict_json(text: str, *, source: str, line: int | None = None,
                field: str = "json") -> Any:
    """``json.loads`` refusing duplicate keys, deep nesting and numbers of 4300+ digits.

    NaN and Infinity parse (as float) so that the field they are in is named when its
    bounds reject them; every number a reader uses goes through ``bounded``.
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        where = line if line is not None else exc.lineno
        problem = exc.msg.removesuffix(" at")  # "Unterminated string starting at"
        raise InputError(f"not valid JSON ({problem} at column {exc.colno})", source=source,
                         line=where, field=field) from None
    except RecursionError:
        raise InputError("not valid JSON here (nested too deeply)", source=source, line=line,
                         field=field) from None
    except ValueError as exc:  # our hooks, or an integer of more than 4300 digits
        problem = str(exc) if "duplicate" in str(exc) else "a number too long"
        raise InputError(f"not valid JSON here ({problem})", source=source, line=line,
                         field=field) from None
