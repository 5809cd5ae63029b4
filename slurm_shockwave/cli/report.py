"""``shockwave report``: a training job's (or its epilog's) report to the service.

Always exits 0, even on a bad option value: a job must never fail because the scheduler
could not be told. A bad value (not a plain ASCII number, or outside the bounds the service
enforces, ``reporter.INT_LIMITS``/``FLOAT_LIMITS``) drops the report it belongs to, with
one warning line on stderr naming the option; a bad ``--job-id`` drops everything. One
exception: ``--flush-spool DIR`` with no directory DIR is one line and exit 2 (after the
call's other reports): the folder was named by hand, and "sent 0" read as nothing left to
send. No job calls it; the epilog calls it only for a spool it found, and exits 0.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat

import click

from slurm_shockwave.client import reporter

# plain ASCII numbers only: int() and float() also take other scripts' digits ("\uff15"
# is 5), underscores ("1_0"), "nan" and "inf"
_INT = re.compile(r"\s*[+-]?\d+\s*", re.ASCII)
_FLOAT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", re.ASCII)


def _warn(text: str) -> None:
    """One line on stderr; nothing where stderr cannot be written (closed, full): the
    job must not fail for a warning."""
    with contextlib.suppress(OSError):
        click.echo(text, err=True)


class _NeverFails(click.Command):
    """A usage error is a warning and exit 0 too: ``--epoch $E`` with E empty and
    unquoted leaves ``--epoch`` without a value, and a script under ``set -e`` died."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            _warn(f"shockwave report: {exc.format_message().rstrip('.')}: nothing is sent")
            ctx.exit(0)


class _Bad:
    """A value given but not usable (already warned about)."""


BAD = _Bad()

FLUSH_S = 3.0
"""All the spools of one call (the epilog's: up to 16) are flushed within this: with the
end report's own timeout the epilog ends within seconds whatever the service does."""


def _value(option: str, field: str, text: str | None, dropped: str,
           ) -> int | float | _Bad | None:
    """The option's value checked against the service's bounds for ``field``; None when
    the option was not given; BAD when it is no good, with one warning line naming the
    option and saying what is ``dropped``."""
    if text is None:
        return None
    integer = field in reporter.INT_LIMITS
    value: int | float | None = None
    why: str | None = "must be an integer" if integer else "must be a number"
    if (_INT if integer else _FLOAT).fullmatch(text):
        try:
            value = int(text) if integer else float(text)
        except ValueError:  # an int of more digits than Python converts
            why = "has too many digits"
        else:
            why = reporter.check(field, value)
    if why is None and value is not None:
        return value
    _warn(f"shockwave report: {option} {text!r} {why}: {dropped}")
    return BAD


def _progress(done: int | float | _Bad | None, size: int | float | _Bad | None,
              rate: int | float | _Bad | None) -> None:
    """Send the progress report, unless a value of it was bad (each said so) or none was
    given; print `checkpoint` when the service asks this run for one."""
    if isinstance(done, _Bad) or isinstance(size, _Bad) or isinstance(rate, _Bad):
        return
    if done is not None or size is not None or rate is not None:
        reporter.report(done, None if size is None else int(size), rate)
        if reporter.should_checkpoint():  # the service waits for a checkpoint
            click.echo("checkpoint")


@click.command(cls=_NeverFails, context_settings={"ignore_unknown_options": True})
@click.option("--epoch", default=None, help="Epochs done over the whole job (float).")
@click.option("--batch-size", default=None, help="The batch size now (integer).")
@click.option("--samples-per-s", default=None, help="Throughput now (float).")
@click.option("--checkpointed", is_flag=True,
              help="The checkpoint after the signal is saved.")
@click.option("--end", "exit_code", default=None,
              help="The job ended with this exit code (the epilog).")
@click.option("--flush-spool", "spool_dirs", multiple=True,
              help="Send the spooled reports of --job-id found in this directory (the "
                   "epilog, as root); may be repeated, all within "
                   f"{FLUSH_S:g} s. With --end, the end is not sent when the service "
                   "did not answer.")
@click.option("--job-id", default=None, help="The job [default: $SLURM_JOB_ID].")
@click.argument("ignored", nargs=-1, type=click.UNPROCESSED)
def report(epoch: str | None, batch_size: str | None, samples_per_s: str | None,
           checkpointed: bool, exit_code: str | None, spool_dirs: tuple[str, ...],
           job_id: str | None, ignored: tuple[str, ...]) -> None:
    """Tell the service about this job (found through $SHOCKWAVE_URL or
    $SHOCKWAVE_ENDPOINT_FILE; the job is $SLURM_JOB_ID): progress, --checkpointed,
    --end EXIT, or --flush-spool DIR. Spools to $SHOCKWAVE_SPOOL when the service is
    unreachable. Prints `checkpoint` when the service answers a progress report asking
    this run to checkpoint (its signal, $SHOCKWAVE_SIGNAL, may have come before the
    script's trap). A bad value drops its report, with a warning on stderr. Always
    exits 0, but 2 for a --flush-spool DIR that is no directory."""
    bad_input = False
    try:
        if ignored:
            _warn(f"shockwave report: ignoring {' '.join(ignored)}")
        job = _value("--job-id", "job_id", job_id, "nothing is sent")
        if isinstance(job, _Bad):
            return  # which job is meant is unknown: tell nothing about any
        if job is not None:
            os.environ["SLURM_JOB_ID"] = str(job)
        reachable = True
        folders = []
        for spool_dir in spool_dirs:
            missing = _not_a_folder(spool_dir)
            if missing is None:
                folders.append(spool_dir)
            else:
                _warn(f"error: {spool_dir}: --flush-spool: {missing}")
                bad_input = True
        if folders:
            sent, reachable = reporter.flush_spools(
                folders, int(job) if job is not None else None, seconds=FLUSH_S)
            _warn(f"shockwave report: sent {sent} spooled reports" + (
                "" if reachable else "; the service did not answer: the rest stay spooled"))
        # in the order they happened: the progress, the checkpoint after it, the end last
        # (an end sent first made the service drop the job's last progress)
        dropped = "the progress report is not sent"
        done = _value("--epoch", "epoch", epoch, dropped)
        size = _value("--batch-size", "batch_size", batch_size, dropped)
        rate = _value("--samples-per-s", "samples_per_s", samples_per_s, dropped)
        _progress(done, size, rate)
        if checkpointed:
            reporter.checkpointed()
        code = _value("--end", "exit_code", exit_code, "the end report is not sent")
        if code is not None and not isinstance(code, _Bad):
            if reachable:
                reporter.end(int(code))
            else:  # it would wait out its timeout too; the service sees the end in Slurm's queue
                _warn("shockwave report: the service did not take the spool: the end "
                      "report is not sent")
    except Exception as exc:  # never fail the job
        _warn(f"shockwave report: {exc}")
    if bad_input:
        raise SystemExit(2)


def _not_a_folder(path: str) -> str | None:
    """Why ``path`` is no spool folder to flush (none there, a file), or None."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such directory"
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    return None if stat.S_ISDIR(mode) else "not a directory"
