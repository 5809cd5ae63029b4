"""``shockwave report``: a training job's (or its epilog's) report to the service.

Always exits 0, even on a bad option value (it is dropped with a warning): a job must never
fail because the scheduler could not be told.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TypeVar

import click

from slurm_shockwave.client import reporter

T = TypeVar("T", int, float)


def _value(name: str, text: str | None, kind: Callable[[str], T]) -> T | None:
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value):
        click.echo(f"shockwave report: ignoring {name} {text!r}", err=True)
        return None
    return value


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--epoch", default=None, help="Epochs done over the whole job (float).")
@click.option("--batch-size", default=None, help="The batch size now (integer).")
@click.option("--samples-per-s", default=None, help="Throughput now (float).")
@click.option("--checkpointed", is_flag=True,
              help="The checkpoint after the signal is saved.")
@click.option("--end", "exit_code", default=None,
              help="The job ended with this exit code (the epilog).")
@click.option("--flush-spool", "spool_dir", default=None,
              help="Send the spooled reports of --job-id found in this directory (the "
                   "epilog, as root).")
@click.option("--job-id", default=None, help="The job [default: $SLURM_JOB_ID].")
@click.argument("ignored", nargs=-1, type=click.UNPROCESSED)
def report(epoch: str | None, batch_size: str | None, samples_per_s: str | None,
           checkpointed: bool, exit_code: str | None, spool_dir: str | None,
           job_id: str | None, ignored: tuple[str, ...]) -> None:
    """Tell the service about this job (found through $SHOCKWAVE_URL or
    $SHOCKWAVE_ENDPOINT_FILE; the job is $SLURM_JOB_ID): progress, --checkpointed,
    --end EXIT, or --flush-spool DIR. Spools to $SHOCKWAVE_SPOOL when the service is
    unreachable. Prints `checkpoint` when the service answers a progress report asking
    this run to checkpoint (its signal, $SHOCKWAVE_SIGNAL, may have come before the
    script's trap). Always exits 0."""
    try:
        if ignored:
            click.echo(f"shockwave report: ignoring {' '.join(ignored)}", err=True)
        job = _value("--job-id", job_id, int)
        if job is not None:
            os.environ["SLURM_JOB_ID"] = str(job)
        if spool_dir is not None:
            sent = reporter.flush_spool(spool_dir, job)
            click.echo(f"shockwave report: sent {sent} spooled reports", err=True)
        if checkpointed:
            reporter.checkpointed()
        code = _value("--end", exit_code, int)
        if code is not None:
            reporter.end(code)
        progress = (_value("--epoch", epoch, float), _value("--batch-size", batch_size, int),
                    _value("--samples-per-s", samples_per_s, float))
        if any(v is not None for v in progress):
            reporter.report(*progress)
            if reporter.should_checkpoint():  # the service waits for a checkpoint
                click.echo("checkpoint")
    except Exception as exc:  # never fail the job
        click.echo(f"shockwave report: {exc}", err=True)
