"""``shockwave serve`` and ``shockwave handback``: run the service; give the partition back."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from slurm_shockwave.cli.checks import HOST_PORT, PATH_TEXT, Bounded, store_option
from slurm_shockwave.cli.errors import one_line_errors
from slurm_shockwave.cli.live_options import (
    check_handback,
    check_job_submit_lua,
    live,
    live_options,
    running_config,
    service,
)
from slurm_shockwave.model.bounds import MAX_ROUND_S, MAX_SLURM_ID
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import POLICIES
from slurm_shockwave.service.handback import hand_back, requeued_by_service
from slurm_shockwave.service.lock import AlreadyRunning, ServiceLock
from slurm_shockwave.service.metrics import ServiceMetrics
from slurm_shockwave.service.progress_api import ProgressAPI
from slurm_shockwave.slurm.intents import CheckpointIntent
from slurm_shockwave.slurm.protocol import SlurmError

log = logging.getLogger("shockwave.service")


@click.command()
@click.option("--policy", type=click.Choice(tuple(POLICIES)), default=None,
              help="[config service.policy: shockwave]")
@live_options
@store_option
@click.option("--round-s", type=Bounded(1, MAX_ROUND_S), default=None,
              help="Seconds per round [config slurm.round_s: 120].")
@click.option("--dry-run", is_flag=True,
              help="Plan and record every round; change nothing in Slurm, hold nothing "
                   "(its progress API on any free port, no endpoint file unless named).")
@click.option("--rounds", type=click.IntRange(1), default=None,
              help="Stop after this many rounds (default: until SIGTERM/SIGINT/SIGHUP).")
@click.option("--listen", type=HOST_PORT, default=None,
              help="HOST:PORT of the progress API, port 0 for any free port "
                   "[config service.listen: 127.0.0.1:7817].")
@click.option("--endpoint-file", type=PATH_TEXT, default=None,
              help="Where the progress API writes its URL [config service.endpoint_file].")
@click.option("--admin-uid", "admin_uids", type=Bounded(0, MAX_SLURM_ID, integer=True),
              multiple=True,
              help="A uid that may report for any job (repeatable; root always may), "
                   "e.g. the SlurmUser's for the epilog.")
@one_line_errors
def serve(policy: str | None, config_path: str | None, partition: str | None,
          slurm_conf: str | None, kind: str | None, store_path: str | None,
          round_s: float | None, dry_run: bool, rounds: int | None, listen: str | None,
          endpoint_file: str | None, admin_uids: tuple[int, ...]) -> None:
    """Plan the managed partition every round, until SIGTERM, SIGINT or SIGHUP (exit 0)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    env = live(config_path, partition, slurm_conf, kind, round_s)
    svc = env.settings.service
    name = policy or svc.policy
    path = store_path or svc.store
    period = env.settings.slurm.round_s
    if (same := svc.own_files(store=store_path, endpoint_file=endpoint_file,
                              dry_run=dry_run)) is not None:
        raise InputError(f"{same[0]}: {same[1]}")
    conf = None if dry_run else running_config(env)  # None: Slurm does not answer
    if not dry_run:
        check_job_submit_lua(env, conf, "--partition" if partition else "slurm.partition")
        heartbeat_writable(svc.heartbeat, source=env.settings.source)
    with ServiceLock(path, None if dry_run else svc.heartbeat) as lock:
        loop = service(env, env.store(store_path), name, round_s=period, dry_run=dry_run)
        loop.check_lock = lock.check
        stop = threading.Event()

        def on_signal(signum: int, _frame: Any) -> None:
            log.info("%s: finishing the current round, then exiting",
                     signal.Signals(signum).name)
            stop.set()

        # SIGHUP too: `serve` run from a terminal that goes away (an SSH session) was
        # killed mid-round by its default action (found by a review)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, on_signal)
        # a dry run beside the running service must not take its port or point the jobs'
        # endpoint file at itself: any free port, and no endpoint file unless one is named
        default_listen = f"{svc.listen.rsplit(':', 1)[0]}:0" if dry_run else svc.listen
        api = ProgressAPI(path, listen=listen or default_listen,
                          endpoint_file=endpoint_file or (None if dry_run
                                                          else svc.endpoint_file),
                          admin_uids={0, *admin_uids}, on_checkpointed=loop.checkpointed,
                          on_ended=loop.ended, listed_by=loop.store.last_round_id())
        metrics = ServiceMetrics(policy=name, partition=env.partition,
                                 backend=env.backend_in_use,
                                 heartbeat=svc.heartbeat,  # the partition's, dry or not
                                 counts=lambda: api.counts,
                                 slurm_user=None if conf is None else conf.get("SlurmUser") or None)
        api.metrics = metrics.exposition
        try:
            url = api.start()
        except InputError:
            raise  # names its own field (service.endpoint_file)
        except (OSError, ValueError) as exc:
            raise InputError(f"progress API cannot listen there: {exc}",
                             source=listen or default_listen,
                             field="--listen" if listen else "service.listen") from None
        # after the listen: an address refused is the one line on stderr, no banner first
        log.info("shockwave serve: policy %s, partition %s, backend %s [%s], round %g s, "
                 "store %s, heartbeat %s%s", name, env.partition, env.backend_in_use,
                 env.backend_reason, period,
                 path, "none (dry run)" if dry_run else
                 f"{svc.heartbeat} (stale after {loop.stale_after_s:g} s)",
                 ", DRY RUN" if dry_run else "")
        log.info("progress API at %s (endpoint file %s), metrics at %s/metrics", url,
                 api.endpoint_file or "none (dry run)", url)
        try:
            done = loop.run(stop, max_rounds=rounds, observer=metrics)
        finally:
            api.stop()
        log.info("stopped after %d rounds; progress API: %d reports accepted, %d refused, "
                 "%d answered busy", done, api.counts.accepted, api.counts.rejected,
                 api.counts.busy)


@click.command()
@live_options
@store_option
@one_line_errors
def handback(config_path: str | None, partition: str | None, slurm_conf: str | None,
             kind: str | None, store_path: str | None) -> None:
    """Hand the managed partition back to Slurm: new jobs are no longer held at submit,
    every job the service holds is released (an admin's holds stay) and the priorities it
    pinned are unpinned. Stop the service first (it would take the partition again)."""
    env = live(config_path, partition, slurm_conf, kind)
    check_handback(env)
    path = store_path or env.settings.service.store
    try:
        # held throughout: a service starting now waits for us
        with ServiceLock(path, env.settings.service.heartbeat):
            earlier = False
            requeued: set[int] | None = None  # no store: every job completing is waited for
            intents: dict[int, CheckpointIntent] = {}
            # never made here: a hand-back writes no store (an empty file is none yet)
            if Path(path).exists() and Path(path).stat().st_size > 0:
                with contextlib.closing(env.store(store_path, create=False)) as store:
                    earlier = store.held_by_earlier_build()
                    intents = store.load_intents()
                    requeued = requeued_by_service(store.jobs_now(), intents)
            try:
                result = hand_back(env.backend, env.partition,
                                   env.settings.service.heartbeat, earlier_build=earlier,
                                   requeued=requeued, intents=intents)
            except SlurmError as exc:  # a red-team: it did not say what was left undone
                raise SlurmError(f"{exc} (the heartbeat is removed, so new jobs run "
                                 "unheld, but no job was released: run handback again "
                                 "once Slurm answers)") from None
    except AlreadyRunning as exc:
        raise AlreadyRunning(f"the service is running (lock {exc.path}): stop it first, "
                             "e.g. systemctl stop slurm-shockwave", exc.path) from None
    click.echo(f"{env.partition}: handed back to Slurm"
               f"{' (not all: below)' if result.errors else ''}; released "
               f"{len(result.released)} held jobs, unpinned {len(result.unpinned)} "
               f"priorities; heartbeat {env.settings.service.heartbeat} removed")
    if result.rerun:
        click.echo(f"run again (killed by the checkpoint signal before they could handle "
                   f"it): {', '.join(map(str, result.rerun))}")
    if result.restored:
        click.echo(f"given back the GPUs and nodes they were submitted with (elastic, "
                   f"as the service may have resized them): "
                   f"{', '.join(map(str, result.restored))}")
    if result.resized_running:
        click.echo(f"running on another count than they asked (elastic; Slurm keeps it if "
                   f"it requeues them): {', '.join(map(str, result.resized_running))}")
    if result.admin_held:
        click.echo(f"left held by an admin: {', '.join(map(str, result.admin_held))}")
    if result.owner_held:
        click.echo(f"left held by their owners (scontrol release N, as the owner, lets it "
                   f"run): {', '.join(map(str, result.owner_held))}")
    for jid, err in sorted(result.errors.items()):
        click.echo(f"job {jid}: {err}", err=True)
    if any(jid not in result.rerun for jid in result.errors):
        click.echo("a job still held is its owner's to release now (scontrol release N): "
                   "with the heartbeat gone, job_submit.lua no longer refuses it", err=True)
    if result.errors:
        raise SystemExit(1)


def heartbeat_writable(path: str, *, source: str) -> None:
    """The heartbeat is written after the first round, into a temporary file beside it:
    a path naming a folder, or a folder that is not there or not writable, failed every
    round after its plan was applied, with a traceback, the partition failing open
    (found by a review)."""
    beat = Path(path)
    folder = beat.parent
    why = ("is a directory" if beat.is_dir()
           else f"its folder {folder} is not there" if not folder.is_dir()
           else f"its folder {folder} is not writable" if not os.access(folder, os.W_OK)
           else None)
    if why is not None:
        raise InputError(f"cannot be written there: {why}", source=source,
                         field="service.heartbeat")
