"""Options shared by the commands that talk to a live cluster, and what they build.

Each option defaults to the config file's ``slurm:``/``service:`` sections, so the
service and the one-shot commands read the same settings.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from slurm_shockwave.cli.checks import PARTITION, PATH_TEXT
from slurm_shockwave.clock import WallClock
from slurm_shockwave.config import Settings, live_policy, load_settings
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.throughputs import ThroughputTable
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.service.daemon import Service
from slurm_shockwave.service.doctor import lua_mismatch
from slurm_shockwave.service.feed import ReportFeed
from slurm_shockwave.service.lock import heartbeat_identity
from slurm_shockwave.service.store import Store
from slurm_shockwave.slurm.backend_choice import BACKENDS, BackendChoice
from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.intents import IntentLog, MemoryIntents
from slurm_shockwave.slurm.plugin_files import ScriptSettings, installed_lua
from slurm_shockwave.slurm.protocol import SlurmBackend, SlurmError
from slurm_shockwave.slurm.pyslurm_backend import open_backend
from slurm_shockwave.slurm.slurm_conf import SlurmSettings
from slurm_shockwave.slurm.table_progress import ProgressFn, table_progress
from slurm_shockwave.slurm.world import SlurmCluster
from slurm_shockwave.workloads.bundled import bundled_table, load_table


def live_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed((
        click.option("--config", "config_path", default=None,
                     help="YAML settings file (slurm:, service:, policies: sections)."),
        click.option("--partition", type=PARTITION, default=None,
                     help="The managed partition [config slurm.partition: shockwave]."),
        click.option("--slurm-conf", type=PATH_TEXT, default=None,
                     help="slurm.conf [config slurm.slurm_conf, else $SLURM_CONF]."),
        click.option("--backend", "kind", type=click.Choice(BACKENDS), default=None,
                     help="How Slurm is reached: auto takes pyslurm where it imports and "
                          "matches the running Slurm, else cli [config slurm.backend: auto]."),
    )):
        fn = opt(fn)
    return fn


@dataclass(frozen=True)
class Live:
    settings: Settings
    backend: SlurmBackend
    choice: BackendChoice | None = None
    """Which backend the config's slurm.backend resolved to, and why."""
    throughputs: ThroughputTable | None = None
    """The config's ``slurm.throughputs``, read before Slurm is reached (None: the
    bundled tacc table)."""

    @property
    def partition(self) -> str:
        return self.settings.slurm.partition

    @property
    def backend_in_use(self) -> str:
        """The backend that reaches Slurm (its class says which), and the config's
        choice when that differs (``auto``)."""
        name = type(self.backend).__name__.removesuffix("Backend").lower()
        configured = self.settings.slurm.backend
        return name if name == configured else f"{name} (config: {configured})"

    @property
    def backend_reason(self) -> str:
        """Why that backend, in one line (``auto: pyslurm does not import ...``)."""
        if self.choice is None:  # built around a given backend (tests)
            return f"slurm.backend is {self.settings.slurm.backend}"
        return self.choice.reason

    def policy(self, name: str) -> Policy[Any]:
        return live_policy(self.settings, name)

    def store(self, given: str | None = None, *, create: bool = True) -> Store:
        """``service_store`` of these settings."""
        return service_store(self.settings, given, create=create)

    def stored(self, given: str | None) -> Store | None:
        """The store a command that only reads it shows beside Slurm: ``--store`` (which
        must exist) or the config's (None when the service has not run yet), and only
        this partition's. Found by a red-team: ``queue --partition other`` over the
        service's store showed its rows as the other partition's, and a mistyped
        ``--store`` every job "not planned yet"."""
        if not given and not Path(self.settings.service.store).exists():
            return None
        store = self.store(given, create=False)
        store.claim_partition(self.partition, claim=False)
        return store

    def table(self) -> ProgressFn:
        """Progress before a job reports: the bundled table, scaled, or the prior."""
        s = self.settings.slurm
        return table_progress(self.throughputs or bundled_table("tacc"), s.prior_epoch_s,
                              s.time_scale)

    def feed(self, store: Store, *, record: bool = False) -> ReportFeed:
        """What the jobs reported, read from ``store`` once per round (refresh), with the
        GPU count of each run of an elastic job; ``record``: runs seen are written back,
        and an earlier job's reports and runs under a reused id forgotten (the service's;
        a command that only reads writes nothing)."""
        feed = ReportFeed(lambda since: store.reports(since_id=since), self.table(),
                          clock=time.time,  # the progress API dates reports by it
                          runs=store.load_runs(),
                          record_run=store.record_run if record else None,
                          forget=store.forget_earlier_job if record else None,
                          startup_s=self.settings.slurm.restart_cost_s)
        feed.refresh()
        return feed

    def world(self, intents: IntentLog | None = None,
              feed: ReportFeed | None = None) -> SlurmCluster:
        """The live world; with ``feed``, progress and acknowledgements from the reports."""
        s = self.settings.slurm
        world = SlurmCluster(self.backend, WallClock(), partition=s.partition,
                             round_s=s.round_s, progress=self.table(), intents=intents,
                             restart_cost_s=s.restart_cost_s,
                             fill_freed=self.settings.service.fill_freed)
        if feed is not None:
            world.progress, world.acked = feed.progress, feed.acked
        return world


def service(env: Live, store: Store, policy_name: str, *, round_s: float | None = None,
            dry_run: bool = False) -> Service:
    """The service over ``store``: the world reads the jobs' reports and keeps its
    checkpoint intents in the store (in memory for a dry run, which writes none)."""
    svc = env.settings.service
    period = round_s or env.settings.slurm.round_s
    feed = env.feed(store, record=True)
    world = env.world(MemoryIntents(store.load_intents()) if dry_run else store, feed)
    world.round_s = period
    world.epochs_reported = store.epochs_reported
    return Service(world, env.policy(policy_name), policy_name, store, round_s=period,
                   dry_run=dry_run, feed=feed, heartbeat=svc.heartbeat,
                   stale_after_s=svc.stale_after_s, fill_freed=svc.fill_freed,
                   fill_poll_s=svc.fill_poll_s)


def service_store(settings: Settings, given: str | None, *, create: bool) -> Store:
    """The service's store: ``--store`` where given, else the config's, each refusal
    naming where the path came from. A reader's (``create=False``) must be there."""
    svc = settings.service
    path, field = (given, "--store") if given else (svc.store, "service.store")
    if not create and not Path(path).exists():
        raise InputError("no store here (has the service run?)", source=path, field=field)
    return Store(path, retention_s=svc.retention_days * 86400.0, create=create, field=field)


def live(config_path: str | None, partition: str | None, slurm_conf: str | None,
         kind: str | None, round_s: float | None = None) -> Live:
    """The live settings: the file's, with the command line's options over them."""
    settings = load_settings(config_path, round_s=round_s)
    s = settings.slurm
    s = replace(s, partition=partition or s.partition, slurm_conf=slurm_conf or s.slurm_conf,
                backend=kind or s.backend)
    settings = replace(settings, slurm=s)
    table = load_table(s.throughputs, field="slurm.throughputs")  # bad input before Slurm
    env = Live(settings, *open_backend(s.backend, slurm_conf=s.slurm_conf),
               throughputs=table)
    _check_partition(env.backend, s.partition, "--partition" if partition else
                     "slurm.partition", settings.source)
    return env


def running_config(env: Live) -> SlurmSettings | None:
    """The running Slurm's settings (``scontrol show config``); None when Slurm does not
    answer: the checks that read job_submit.lua then have nothing to compare."""
    try:
        return CliBackend(slurm_conf=env.settings.slurm.slurm_conf).running_config()
    except SlurmError:
        return None


def check_job_submit_lua(env: Live, conf: SlurmSettings | None,
                         partition_field: str = "slurm.partition") -> None:
    """Refuse to serve (or ``plan --apply``) where the installed job_submit.lua, ours,
    is set for another partition or heartbeat than this service (doctor's FAIL of it,
    ``service/doctor.py::lua_mismatch``): another partition's script neither validates
    nor holds this partition's new jobs, and one on another heartbeat holds them on
    another service's (a second service of the partition) or its settings are out of
    date. Nothing to compare (no lua beside slurm.conf, one Slurm does not load, a
    site's own, Slurm not answering: ``conf`` None) is doctor's to report, not a reason
    to stop."""
    s, svc = env.settings.slurm, env.settings.service
    if conf is None:
        return
    found = lua_mismatch(conf, ScriptSettings(partition=s.partition, heartbeat=svc.heartbeat,
                                              endpoint_file=svc.endpoint_file))
    if found is not None:
        field, problem = found
        raise InputError(problem, source=env.settings.source,
                         field=partition_field if field == "slurm.partition" else field)


def handback_problem(conf: SlurmSettings, partition: str, heartbeat: str) -> str | None:
    """Why handing ``partition`` back would break another partition's hand-over, or None:
    the installed job_submit.lua holds another partition's new jobs on this same
    heartbeat, which a hand-back removes, while that partition's held jobs stay held."""
    found = installed_lua(conf)
    if found is None:
        return None
    path, lua = found
    owner, beat = lua.get("partition"), lua.get("heartbeat")
    if owner is None or owner == partition or beat is None \
            or heartbeat_identity(beat) != heartbeat_identity(heartbeat):
        return None
    return (f"{path} holds partition {owner}'s new jobs on heartbeat {heartbeat}: handing "
            f"back {partition} would remove it and leave {owner}'s held jobs held (hand "
            f"back {owner})")


def check_handback(env: Live) -> None:
    """Refuse a hand-back that would take another partition's heartbeat away
    (``handback_problem``); nothing to compare (Slurm not answering, no lua of ours) is
    no reason to refuse."""
    conf = running_config(env)
    if conf is None:
        return
    problem = handback_problem(conf, env.settings.slurm.partition,
                               env.settings.service.heartbeat)
    if problem:
        raise InputError(problem, source=env.settings.source, field="slurm.partition")


def _check_partition(backend: SlurmBackend, partition: str, field: str, source: str) -> None:
    """A partition Slurm does not have is a typo: refused now, not planned as empty
    round after round while job_submit.lua, seeing the heartbeat, holds the real
    partition's new jobs. A Slurm that does not answer is the rounds' to report."""
    try:
        nodes = backend.list_nodes()
    except SlurmError:
        return
    if not any(partition in n.partitions for n in nodes):
        known = sorted({p for n in nodes for p in n.partitions})
        raise InputError(f"Slurm has no partition {partition!r} with nodes (it has: "
                         f"{', '.join(known) or 'none'})", source=source, field=field)
