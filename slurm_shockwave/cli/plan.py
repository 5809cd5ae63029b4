"""``shockwave plan``: one planning round against the live cluster, dry run by default."""

from __future__ import annotations

import json

import click

from slurm_shockwave.cli.errors import one_line_errors
from slurm_shockwave.cli.live_options import live_options, live_world
from slurm_shockwave.config import load_settings
from slurm_shockwave.engine.dry_run import DryRunActuator
from slurm_shockwave.engine.ports import Actuator
from slurm_shockwave.engine.round import run_round
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.report.tables import console, rows_table


@click.command()
@click.option("--policy", default="shockwave", show_default=True,
              help=f"One of: {', '.join(POLICIES)}.")
@click.option("--config", "config_path", default=None, help="YAML settings file.")
@live_options
@click.option("--apply", "do_apply", is_flag=True,
              help="Carry the plan out in Slurm (default: only show it).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job.")
@one_line_errors
def plan(policy: str, config_path: str | None, partition: str, slurm_conf: str | None,
         kind: str, do_apply: bool, as_json: bool) -> None:
    """Plan one round for the managed partition and show each job's action and reason."""
    settings = load_settings(config_path)
    chosen = make_policy(policy, settings.policies.get(policy), source=settings.source)
    world = live_world(partition, slurm_conf, kind, settings.simulator.round_s)
    actuator: Actuator = world if do_apply else DryRunActuator()
    report = run_round(world, chosen, {}, actuator)
    acted = {r.action.job_id: r for r in report.result.results}
    rows = []
    for jid, reason in sorted(report.reasons.items()):
        r = acted.get(jid)
        rows.append({"job_id": jid, "action": r.action.kind.value if r else "wait",
                     "outcome": r.outcome.value if r else "", "message": r.message if r else "",
                     "reason": str(reason)})
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    mode = "applied" if do_apply else "dry run (--apply to carry it out)"
    console().print(rows_table(f"{partition}, policy {policy}: {mode}",
                               ("job", "action", "outcome", "message", "reason"),
                               [tuple(r.values()) for r in rows]))
