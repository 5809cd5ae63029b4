"""``shockwave doctor``: is this cluster set up as the service needs? (exit 1 if not)."""

from __future__ import annotations

from dataclasses import replace

import click

from slurm_shockwave.cli.checks import json_text, store_option
from slurm_shockwave.cli.errors import one_line_errors
from slurm_shockwave.cli.live_options import Live, live_options
from slurm_shockwave.config import load_settings
from slurm_shockwave.service.doctor import Check, Expected, Status, ok, script_checks, slurm_checks
from slurm_shockwave.service.doctor_host import (
    listen_check,
    munge_check,
    service_checks,
    store_check,
)
from slurm_shockwave.slurm.cli_backend import CliBackend, slurm_conf_problem
from slurm_shockwave.slurm.protocol import SlurmError
from slurm_shockwave.slurm.pyslurm_backend import open_backend
from slurm_shockwave.slurm.slurm_conf import parse_show_partitions

_MARK = {Status.OK: " ok ", Status.WARN: "warn", Status.FAIL: "FAIL", Status.SKIP: "skip"}


def _slurm(env_conf: str | None, want: Expected) -> tuple[list[Check], str | None]:
    """The Slurm checks, and SlurmUser (who reads the heartbeat; None: unknown)."""
    try:
        cli = CliBackend(slurm_conf=env_conf)
        conf = cli.running_config()
        partitions = parse_show_partitions(cli.scontrol("-o", "show", "partition"))
        nodes = cli.list_nodes()
    except SlurmError as exc:
        return [Check("slurmctld", Status.FAIL, f"cannot read the running configuration: "
                      f"{exc}", "start slurmctld; set SLURM_CONF or --slurm-conf")], None
    head = ok("slurmctld", f"Slurm {conf.get('SLURM_VERSION', '?')} answers; configuration "
              f"{conf.conf_path}")
    return ([head, *slurm_checks(conf, partitions, nodes, want), *script_checks(conf, want)],
            conf.get("SlurmUser") or None)


@click.command()
@live_options
@store_option
@click.option("--json", "as_json", is_flag=True, help="The checks as one JSON object.")
@one_line_errors
def doctor(config_path: str | None, partition: str | None, slurm_conf: str | None,
           kind: str | None, store_path: str | None, as_json: bool) -> None:
    """Check the running cluster against what the service needs: each check says ok,
    warn or FAIL and what to change. Run it on the slurmctld host, as the service's user.
    Exits 1 when a required setting is missing."""
    settings = load_settings(config_path)
    s = settings.slurm
    s = replace(s, partition=partition or s.partition, slurm_conf=slurm_conf or s.slurm_conf,
                backend=kind or s.backend)
    svc = settings.service
    want = Expected(partition=s.partition, round_s=s.round_s, heartbeat=svc.heartbeat,
                    endpoint_file=svc.endpoint_file, store=store_path or svc.store)
    try:
        made, choice = open_backend(s.backend, slurm_conf=s.slurm_conf)
        backend = Live(replace(settings, slurm=s), made).backend_in_use
        checks = [ok("backend", f"{backend} [{choice.reason}]")]
    except SlurmError as exc:
        checks = [Check("backend", Status.SKIP, "needs the Slurm configuration (below)")
                  if slurm_conf_problem(s.slurm_conf) else
                  Check("backend", Status.FAIL, str(exc),
                        "slurm.backend: cli, or make the one named usable")]
    found, slurm_user = _slurm(s.slurm_conf, want)
    checks += found
    checks += [munge_check(), store_check(want.store),
               *service_checks(want, slurm_user=slurm_user)]
    if (port_zero := listen_check(svc.listen)) is not None:
        checks.append(port_zero)
    failed = [c for c in checks if c.status == Status.FAIL]
    if as_json:
        click.echo(json_text({"ok": not failed, "checks": [c.as_dict() for c in checks]},
                             indent=1))
    else:
        for c in checks:
            click.echo(f"[{_MARK[c.status]}] {c.name}: {c.detail}")
            if c.fix and c.status != Status.OK:
                click.echo(f"       change: {c.fix}")
        counts = {st: sum(c.status == st for c in checks) for st in Status}
        click.echo(f"{len(checks)} checks: {counts[Status.OK]} ok, {counts[Status.WARN]} warn, "
                   f"{counts[Status.FAIL]} failed")
    if failed:
        raise SystemExit(1)
