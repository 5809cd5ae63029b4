"""Exit codes: bad input is one line and exit 2; a bug is exit 1, with its traceback.

Exit 2 is only for the user's input: an InputError (a file, a field, an option), a
click usage error, or Slurm refusing what we asked (SlurmError) or the service lock
being held; and for a machine that cannot take the output (stdout on a full disk).
A reader that closes the pipe early (``shockwave queue | head -1``) stops the command
quietly with 141, what a shell reports for a Unix tool killed by SIGPIPE. Anything
else is a bug: one line saying where it happened and where its traceback was
written, exit 1; with ``shockwave --debug`` (or SHOCKWAVE_DEBUG=1) the
traceback goes to stderr instead.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import signal
import stat
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from slurm_shockwave.model.bounds import PATH_PROBLEM, is_path_text
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.service.lock import AlreadyRunning
from slurm_shockwave.slurm.protocol import SlurmError

F = TypeVar("F", bound=Callable[..., Any])

INPUT_ERRORS: tuple[type[Exception], ...] = (InputError, SlurmError, AlreadyRunning)


def one_line(message: str) -> str:
    """``message`` on one line (a newline in it would read as two errors)."""
    return " ".join(str(message).split("\n")).strip()


def one_line_errors(fn: F) -> F:
    """Bad input (INPUT_ERRORS) raised by ``fn``: ``error: ...`` on stderr, exit 2."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except INPUT_ERRORS as exc:
            click.echo(f"error: {one_line(str(exc))}", err=True)
            raise SystemExit(2) from None

    return wrapper  # type: ignore[return-value]


def debugging() -> bool:
    return os.environ.get("SHOCKWAVE_DEBUG", "") not in ("", "0")


def _where(exc: BaseException) -> str:
    """The innermost frame of our own code the exception passed through."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "slurm_shockwave" in f.filename] or frames
    if not ours:
        return "an unknown place"
    f = ours[-1]
    name = f.filename
    if "slurm_shockwave" in name:
        name = name[name.rindex("slurm_shockwave"):]
    return f"{name}:{f.lineno}"


def report_bug(exc: BaseException) -> int:
    """One line about a bug on stderr, its traceback in a log file; returns exit code 1."""
    text = "".join(traceback.format_exception(exc))
    log = ""
    try:
        fd, name = tempfile.mkstemp(prefix="shockwave-bug-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        log = f"; traceback in {name}"
    except OSError:
        log = ""
    summary = one_line(f"{type(exc).__name__}: {exc}")[:200]
    click.echo(f"error: internal error (a bug, not your input): {summary} at {_where(exc)}"
               f"{log} (shockwave --debug shows it)", err=True)
    return 1


_NO_ARGS_IS_HELP: tuple[type[click.UsageError], ...] = tuple(
    t for t in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if t is not None)
"""click >= 8.2's error for a group run with no command: the user asked for its help."""


_MACHINE_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""Errors of the machine taking the output (stdout on a full disk): not a bug of ours.
A file named by an option says so itself (``output_errors``)."""


def _quiet(stream: Any) -> None:
    """Point ``stream`` (stdout) at /dev/null: what is left in its buffer goes there at exit."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


PIPE_CLOSED_EXIT = 128 + signal.SIGPIPE
"""141: the status a shell reports for a Unix tool killed by SIGPIPE (``seq 1e6 | head
-1``), so ``set -o pipefail`` treats us alike. Not 0: the command stopped at the write,
before the rest of its work. Not 1 (click's and rich's choice, as the Python docs'
example): that is a bug here."""


def _pipe_closed(exc: BaseException) -> bool:
    """``exc`` is a write to a reader that went away, or click's or rich's exit 1 on one
    (both call ``sys.exit(1)`` inside their ``except``, so it is the exit's context)."""
    if isinstance(exc, SystemExit) and exc.code == 1:
        exc = exc.__context__  # type: ignore[assignment]
    return isinstance(exc, OSError) and exc.errno == errno.EPIPE


def _flush_stdout() -> None:
    """Flush stdout now, not at exit, where a reader gone (EPIPE) can still be seen; any
    other error is left to the flush at exit."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise
    except ValueError:  # closed
        pass


def _exit_pipe_closed() -> NoReturn:
    """Exit 141 without a word: stdout and stderr to /dev/null first, else Python's flush
    at exit prints "Exception ignored ... BrokenPipeError" (stderr too: ``2>&1 | head``)."""
    for stream in (sys.stdout, sys.stderr):
        _quiet(stream)
    sys.exit(PIPE_CLOSED_EXIT)


def _open_standard_streams() -> None:
    """Started with stdin, stdout or stderr closed (``shockwave report >&-``), Python has
    None for it (every command ended in an AttributeError: found by a red-team, and
    ``report`` must never fail a job), and the next file opened would take its number, so
    a write meant for the terminal could land in the store. /dev/null in their place, as a
    daemon does."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: ``fd``
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115
    _buffered_stdout()


def _buffered_stdout() -> None:
    """Under ``PYTHONUNBUFFERED`` stdout writes straight to the file, and a write the pipe
    took only part of (its reader gone) lost the rest without an error: ``trace generate
    | head`` exited 0 (a docs audit). A buffer writes all or raises, so the reader gone
    is seen (exit 141); flushed at each line, as unbuffered output is meant to be."""
    out = sys.stdout
    if isinstance(getattr(out, "buffer", None), io.FileIO):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            sys.stdout = io.TextIOWrapper(io.BufferedWriter(out.buffer), encoding=out.encoding,
                                          errors=out.errors, line_buffering=True)


class OneLineGroup(click.Group):
    """The ``shockwave`` group: click's usage errors as one line (exit 2), bugs as one
    line and exit 1 (the traceback with --debug)."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        _open_standard_streams()
        try:
            try:
                self._standalone(args, prog_name, complete_var, **extra)
            finally:
                _flush_stdout()
        except BaseException as exc:
            if _pipe_closed(exc):
                _exit_pipe_closed()
            raise

    def _standalone(self, args: Sequence[str] | None, prog_name: str | None,
                    complete_var: str | None, **extra: Any) -> NoReturn:
        """Run the command; exit with its code, or one line and 2 (input) or 1 (a bug)."""
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as exc:
            if isinstance(exc, _NO_ARGS_IS_HELP) and exc.ctx is not None:
                click.echo(exc.ctx.get_help())  # ``shockwave`` alone asks for the help
                sys.exit(0)
            hint = ""
            if isinstance(exc, click.UsageError) and exc.ctx is not None and \
                    exc.ctx.command_path and not isinstance(exc, click.BadParameter):
                hint = f"{exc.ctx.command_path}: "
            click.echo(f"error: {hint}{one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        except (SystemExit, KeyboardInterrupt):
            raise
        except OSError as exc:
            if exc.errno not in _MACHINE_FULL or debugging():
                sys.exit(report_bug(exc))
            _quiet(sys.stdout)  # its unwritten buffer would fail again at exit
            click.echo(f"error: output: cannot write it ({exc.strerror or exc})", err=True)
            sys.exit(2)
        except Exception as exc:  # a bug: never exit 2, never a bare traceback
            if debugging():
                raise
            sys.exit(report_bug(exc))
        sys.exit(rv if isinstance(rv, int) else 0)


def set_debug(_ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        os.environ["SHOCKWAVE_DEBUG"] = "1"


def debug_option(fn: F) -> F:
    return click.option("--debug", is_flag=True, expose_value=False, is_eager=True,
                        callback=set_debug,
                        help="Show a bug's traceback (else it is written to a log file).")(fn)


def _probe(folder: Path, *, source: str, field: str) -> None:
    """Create and remove a file in ``folder``: the one sure test that it is writable."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise InputError(f"cannot write there ({exc.strerror or exc})", source=source,
                         field=field) from None


def _not_empty(path: str, option: str) -> None:
    """An empty path is not "no path": it was taken as the option left out, so the
    results went nowhere (or to stdout) without a word."""
    if not is_path_text(path):
        raise InputError(PATH_PROBLEM, field=option)


_HELD: list[int] = []
"""FIFOs ``writable_file`` found a reader on, kept open until the process ends."""


def _same_file(a: str, b: str) -> bool:
    """Both exist and are one file (a name too long or missing is not)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def is_input(path: str, inputs: Sequence[str | None]) -> str | None:
    """The one of ``inputs`` that is the file ``path``, if any."""
    return next((g for g in inputs if g is not None and _same_file(path, g)), None)


def writable_file(path: str | None, option: str, *, inputs: Sequence[str | None] = ()
                  ) -> None:
    """Fail now, before the run, if ``path`` cannot be written (its results would be lost):
    also a name the system refuses (too long), a FIFO no one reads, which would block, and
    one of the run's ``inputs`` (``simulate T --csv T`` overwrote the trace)."""
    if path is None:
        return
    _not_empty(path, option)
    p = Path(path)
    given = is_input(path, inputs)
    if given is not None:
        raise InputError(f"is an input of this run ({given}); results would overwrite it",
                         source=path, field=option)
    try:
        if p.is_dir():
            raise InputError("is a directory, expected a file", source=path, field=option)
        parent = p.parent
        if not parent.is_dir():
            raise InputError(f"its directory {parent} does not exist", source=path,
                             field=option)
        if p.exists():
            # O_NONBLOCK: a FIFO with no reader fails (ENXIO) instead of blocking
            fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                _HELD.append(fd)  # closed, it would end the reader's input before the results
            else:
                os.close(fd)
        else:
            _probe(parent, source=path, field=option)
    except OSError as exc:
        why = "a FIFO no one reads" if exc.errno == errno.ENXIO else exc.strerror or exc
        raise InputError(f"cannot write it ({why})", source=path, field=option) from None


@contextlib.contextmanager
def output_errors(option: str, path: str | None = None) -> Iterator[None]:
    """A file of ``option``'s (``path``) that cannot be written after all (a full disk, a
    path taken by a directory): one line naming the option, exit 2; the writes are
    whole-file (report/outputs.py), so what was there before is kept."""
    try:
        yield
    except OSError as exc:
        where = str(exc.filename) if exc.filename else (path or "")
        raise InputError(f"cannot write it ({exc.strerror or exc})", source=where,
                         field=option) from None


def writable_dir(path: str | None, option: str) -> None:
    """Fail now if the directory ``path`` cannot be made or written."""
    if path is None:
        return
    _not_empty(path, option)
    p = Path(path)
    try:
        probe = p
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if not probe.is_dir():
            raise InputError(f"{probe} is not a directory", source=path, field=option)
    except OSError as exc:  # a name the system refuses (too long)
        raise InputError(f"cannot write there ({exc.strerror or exc})", source=path,
                         field=option) from None
    _probe(probe, source=path, field=option)
