"""``shockwave queue``: the managed partition as the planner sees it."""

from __future__ import annotations

import json

import click

from slurm_shockwave.cli.errors import one_line_errors
from slurm_shockwave.cli.live_options import live_options, live_world
from slurm_shockwave.report.tables import console, rows_table


@click.command()
@live_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job.")
@one_line_errors
def queue(partition: str, slurm_conf: str | None, kind: str, as_json: bool) -> None:
    """Show the managed partition's jobs with their hints, phase and GPUs."""
    world = live_world(partition, slurm_conf, kind)
    view = world.observe()
    rows = [{"job_id": j.job_id, "user": j.spec.user, "phase": j.phase.value,
             "gpus": j.gpus, "model": j.spec.model, "bs": j.spec.init_bs,
             "mode": j.spec.mode.value, "epochs": j.spec.num_epochs}
            for j in sorted(view.jobs, key=lambda j: j.job_id)]
    bad = [{"job_id": jid, "bad_hint": msg} for jid, msg in sorted(world.bad_hints.items())]
    if as_json:
        for row in rows + bad:
            click.echo(json.dumps(row))
        return
    out = console()
    out.print(rows_table(f"{partition}: {len(rows)} jobs, {view.total_gpus} GPUs on "
                         f"{len(view.nodes)} usable nodes",
                         ("job", "user", "phase", "GPUs", "model", "bs", "mode", "epochs"),
                         [tuple(r.values()) for r in rows]))
    for b in bad:
        out.print(f"job {b['job_id']}: not planned, {b['bad_hint']}")
