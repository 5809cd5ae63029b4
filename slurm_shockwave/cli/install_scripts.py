"""``shockwave install-scripts``: the packaged plugin scripts, where slurm.conf points."""

from __future__ import annotations

import os

import click

from slurm_shockwave.cli.checks import PARTITION, PATH_TEXT
from slurm_shockwave.cli.errors import one_line_errors
from slurm_shockwave.config import load_settings
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.service.lock import heartbeat_identity
from slurm_shockwave.slurm.plugin_files import (
    ScriptSettings,
    Target,
    check,
    check_service_url,
    install,
    render,
    settings_in,
    shockwave_bin,
    targets,
    version_of,
)
from slurm_shockwave.slurm.root_only import root_only_problem
from slurm_shockwave.slurm.slurm_conf import (
    DEFAULT_CONF,
    SlurmSettings,
    read_slurm_conf,
    slurm_user_uid,
)


@click.command("install-scripts")
@click.option("--config", "config_path", default=None,
              help="The service's YAML settings (partition, heartbeat, endpoint file).")
@click.option("--partition", type=PARTITION, default=None,
              help="The managed partition [config slurm.partition: shockwave].")
@click.option("--slurm-conf", type=PATH_TEXT, default=None,
              help=f"slurm.conf [config slurm.slurm_conf, else $SLURM_CONF, else {DEFAULT_CONF}].")
@click.option("--dest", default=None, type=click.Path(file_okay=False),
              help="Put prolog.sh, epilog.sh, task_prolog.sh and events.sh here instead of "
                   "where slurm.conf's Prolog/Epilog/TaskProlog name them.")
@click.option("--service-url", default="",
              help="The service's URL (http://HOST:PORT) for nodes that cannot read its "
                   "endpoint file: the service on another host, no shared file system.")
@click.option("--service-uid", type=click.IntRange(0, 2**31 - 1), default=None,
              help="The uid the service runs as, when not root, for --service-url: the "
                   "jobs believe the service's answers only from root or this uid.")
@click.option("--events-dir", default=ScriptSettings.events_dir, show_default=True,
              help="The Prolog's and Epilog's audit trail on each node (a root-only "
                   "folder, one per host: a second cluster on the host needs its own).")
@click.option("--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@click.option("--force", is_flag=True,
              help="Replace files there that are not ours, and a job_submit.lua of ours "
                   "that manages another partition or reads another heartbeat.")
@one_line_errors
def install_scripts(config_path: str | None, partition: str | None, slurm_conf: str | None,
                    dest: str | None, service_url: str, service_uid: int | None,
                    events_dir: str, dry_run: bool, force: bool) -> None:
    """Install the plugin scripts as Slurm needs them (root-owned, writable by root only;
    job_submit.lua beside slurm.conf), with the service's settings written into them.
    Run as root on the slurmctld host and on every node (Prolog, Epilog, TaskProlog)."""
    check_service_url(service_url)
    if service_uid is not None and not service_url:
        raise InputError("goes with --service-url (where the nodes read the endpoint "
                         "file, the jobs believe its owner)", field="--service-uid")
    settings = load_settings(config_path)
    conf_path = (slurm_conf or settings.slurm.slurm_conf or os.environ.get("SLURM_CONF")
                 or DEFAULT_CONF)
    # a node of a configless cluster has no slurm.conf (slurmd fetches it): with --dest,
    # the node's scripts need none; job_submit.lua goes on the slurmctld host
    nodes_only = not slurm_conf and not os.path.exists(conf_path)
    if nodes_only and dest is None:
        raise InputError(f"{conf_path}: not found (on a node of a configless cluster, "
                         "pass --dest DIR for the node's scripts)", field="--slurm-conf")
    conf = SlurmSettings({}, source=conf_path) if nodes_only else read_slurm_conf(conf_path)
    part = partition or settings.slurm.partition
    is_default = conf.partitions.get(part, {}).get("default", "no").lower() == "yes"
    values = ScriptSettings(partition=part, heartbeat=settings.service.heartbeat,
                            endpoint_file=settings.service.endpoint_file,
                            is_default=is_default, service_url=service_url,
                            service_uid="" if service_uid is None else str(service_uid),
                            shockwave_bin=shockwave_bin(), events_dir=events_dir)
    problem = root_only_problem(values.shockwave_bin) if values.shockwave_bin else None
    if problem:
        raise InputError(f"{problem}: the Epilog runs {values.shockwave_bin} as root on every "
                         "node, so whoever can change it, its Python or slurm_shockwave gets "
                         "root; install slurm-shockwave where only root can write",
                         field="shockwave")
    if dest and not os.path.isabs(dest):
        raise InputError("must be an absolute path (slurm.conf names it)", field="--dest")
    if not dry_run and os.geteuid() != 0:
        raise InputError("run as root: Slurm runs these scripts only if root owns them",
                         field="install-scripts")
    places, missing = targets(conf, dest)
    if nodes_only:
        places = [t for t in places if t.name != "job_submit.lua"]
        missing.append(f"job_submit.lua: no {conf_path} here (a configless node?): "
                       "install it on the slurmctld host")
    # every script can be written, or none is; what is there now is read here, once
    slurm_uid = slurm_user_uid(conf)
    olds = [check(target, force=force, writing=not dry_run, slurm_uid=slurm_uid)
            for target in places]
    for target, old in zip(places, olds, strict=True):
        retarget = _retarget(target, old, values, "--partition" if partition else
                             "slurm.partition")
        if retarget and not force:
            raise retarget
        if retarget:
            was = settings_in(old or "")
            click.echo(f"warning: --force: {target.path} managed partition "
                       f"{was.get('partition')} on heartbeat {was.get('heartbeat')}; it "
                       f"now manages {values.partition} on {values.heartbeat}", err=True)
    if part not in conf.partitions and not nodes_only:  # the partition may come later
        click.echo(f"warning: {conf_path} defines no partition {part!r} (PartitionName=); "
                   "the scripts act on that partition's jobs only, so add it, or pass "
                   "--partition", err=True)
    changed = False
    for target, old in zip(places, olds, strict=True):
        text = render(target.name, values)
        if dry_run:
            click.echo(f"would install {target.path} ({oct(target.mode)[2:]}, root:root)")
        else:
            wrote, done = install(target, text, old)
            changed |= wrote
            click.echo(done)
    for line in missing:
        click.echo(f"skipped: {line}", err=True)
    needed = []
    if "lua" not in conf.plugins("JobSubmitPlugins"):
        needed.append("JobSubmitPlugins=lua")
    for setting, name in (("Prolog", "prolog.sh"), ("Epilog", "epilog.sh"),
                          ("TaskProlog", "task_prolog.sh")):
        path = next((t.path for t in places if t.name == name), None)
        if path and path not in conf.paths(setting):
            needed.append(f"{setting}={path}")
    if nodes_only:
        click.echo(f"then: slurm.conf (on the slurmctld host) names them: Prolog={dest}/"
                   f"prolog.sh Epilog={dest}/epilog.sh TaskProlog={dest}/task_prolog.sh")
    elif needed:
        click.echo(f"then add to {conf_path}: {' '.join(needed)} and restart slurmctld "
                   "(plugin changes need a restart)")
    elif changed:
        # an admin walkthrough: said after every run, all unchanged too, and on a first
        # install, where section 4 of docs/admin.md restarts slurmctld
        click.echo("then: scontrol reconfigure (slurmctld rereads job_submit.lua), or restart "
                   "slurmctld if it has not loaded the lua plugin yet (a new plugin needs a "
                   "restart)")
    elif not dry_run:
        click.echo("nothing changed on disk (if an earlier run changed job_submit.lua, "
                   "scontrol reconfigure once)")


def _retarget(target: Target, old: str | None, values: ScriptSettings,
              partition_field: str) -> InputError | None:
    """Why writing ``values`` into an installed job_submit.lua of ours would take it from
    another service, or None. Slurm loads one job_submit.lua, and it manages one
    partition on one heartbeat: rewriting it for a second partition (a copy of the
    config) silently stopped validating and holding the first one's jobs, and held the
    new partition's on the first service's fresh heartbeat with nobody to plan them."""
    if target.name != "job_submit.lua" or old is None or version_of(target.name, old) \
            == "not ours":
        return None
    found = settings_in(old)
    owner, beat = found.get("partition"), found.get("heartbeat")
    if owner is not None and owner != values.partition:
        return InputError(f"manages partition {owner} (heartbeat {beat}), not "
                          f"{values.partition}: the plugin manages one partition per "
                          f"cluster; stop {owner}'s service and hand it back, then --force "
                          f"to move it", source=target.path, field=partition_field)
    if beat is not None and heartbeat_identity(beat) != heartbeat_identity(values.heartbeat):
        return InputError(f"holds {owner}'s new jobs on heartbeat {beat}, not "
                          f"{values.heartbeat}: the service writing {beat} would plan jobs "
                          f"no longer held for it; stop it, then --force to change the "
                          f"heartbeat", source=target.path, field="service.heartbeat")
    return None
