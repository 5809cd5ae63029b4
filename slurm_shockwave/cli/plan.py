"""``shockwave plan``: one planning round against the live cluster, dry run by default.

With ``--apply`` it is one round of the service: the same store (policy memory and the
checkpoint intents that span rounds, so repeated calls complete a preemption) and the
same lock, so it never runs beside ``shockwave serve``.
"""

from __future__ import annotations

from typing import Any

import click

from slurm_shockwave.cli.checks import json_text, store_option
from slurm_shockwave.cli.errors import one_line_errors
from slurm_shockwave.cli.live_options import (
    check_job_submit_lua,
    live,
    live_options,
    running_config,
    service,
)
from slurm_shockwave.cli.serve import heartbeat_writable
from slurm_shockwave.engine.dry_run import DryRunActuator
from slurm_shockwave.engine.round import run_round
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import POLICIES
from slurm_shockwave.report.tables import console, rows_table
from slurm_shockwave.service.daemon import FailedAfterApply
from slurm_shockwave.service.lock import ServiceLock
from slurm_shockwave.service.records import job_rows
from slurm_shockwave.slurm.intents import MemoryIntents


@click.command()
@click.option("--policy", type=click.Choice(tuple(POLICIES)), default=None,
              help="[config service.policy: shockwave]")
@live_options
@store_option
@click.option("--apply", "do_apply", is_flag=True,
              help="Carry the plan out in Slurm (default: only show it).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job.")
@one_line_errors
def plan(policy: str | None, config_path: str | None, partition: str | None,
         slurm_conf: str | None, kind: str | None, store_path: str | None, do_apply: bool,
         as_json: bool) -> None:
    """Plan one round for the managed partition and show each job's action and reason."""
    env = live(config_path, partition, slurm_conf, kind)
    name = policy or env.settings.service.policy
    path = store_path or env.settings.service.store
    if do_apply:
        if (same := env.settings.service.own_files(store=store_path)) is not None:
            raise InputError(f"{same[0]}: {same[1]}")
        check_job_submit_lua(env, running_config(env),
                             "--partition" if partition else "slurm.partition")
        # as serve's start: a heartbeat it cannot write failed after the plan was applied,
        # and holds made before its uid line passed for the owner's (a docs review)
        heartbeat_writable(env.settings.service.heartbeat, source=env.settings.source)
        with ServiceLock(path, env.settings.service.heartbeat):
            one = service(env, env.store(store_path), name)
            one.name_uid()
            try:
                report = one.round_once().report
            except FailedAfterApply as late:  # a store that cannot be written, say
                raise InputError(f"its actions were carried out in Slurm, then: "
                                 f"{late.error}", field="service.store") from None
            left = one.world.left_out
    else:  # read the store if there is one, write nothing anywhere
        memory: dict[str, Any] = {}
        world = env.world()
        if (store := env.stored(store_path)) is not None:
            memory = store.memory(name)
            world = env.world(MemoryIntents(store.load_intents()), env.feed(store))
            # the round and time zero the stored memory counts from, as the service's
            world.round_index = store.next_round_index()
            world.origin_s = float(store.meta_value("origin_s") or 0.0)
        report = run_round(world, env.policy(name), memory, DryRunActuator())
        left = world.left_out
    rows = [{"job_id": r.job_id, "action": r.action, "outcome": r.outcome,
             "message": r.message, "reason": r.reason} for r in job_rows(report, left)]
    if as_json:
        for row in rows:
            click.echo(json_text(row))
        return
    mode = "applied" if do_apply else "dry run (--apply to carry it out)"
    console().print(rows_table(f"{env.partition}, policy {name}: {mode}",
                               ("job", "action", "outcome", "message", "reason"),
                               [tuple(r.values()) for r in rows]))
