"""``shockwave queue`` and ``shockwave explain``: the managed jobs now, and one job's story.

``queue`` observes Slurm live (state, GPUs and where) and adds what the service's last
round decided (predicted remaining time, estimated rho, rounds planned in the window,
reason, action); ``explain`` reads a job's history from the store.
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

import click

from slurm_shockwave.cli.checks import Bounded, json_text, store_option
from slurm_shockwave.cli.errors import one_line_errors
from slurm_shockwave.cli.live_options import live, live_options, service_store
from slurm_shockwave.model.bounds import MAX_SLURM_ID
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import Job
from slurm_shockwave.model.plan import Outcome
from slurm_shockwave.report.tables import console, rows_table
from slurm_shockwave.service.heartbeat import read_heartbeat
from slurm_shockwave.service.records import clock_time, unplanned_rows, where
from slurm_shockwave.service.store import GONE, JobRow
from slurm_shockwave.slurm.intents import MemoryIntents

if TYPE_CHECKING:
    from slurm_shockwave.config import Settings

STALE_ROUNDS = 3
"""Rounds without a new one after which ``queue`` says its reasons may be stale, where
the service wrote no heartbeat (which says when it is stale)."""
_COLUMNS = ("job", "user", "model", "state", "GPUs", "where", "epochs", "bs", "remaining", "rho",
            "window", "reason")


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _epochs(done: float) -> str:
    """Epochs done as people read them: whole, or to two places (read forward between
    reports they are fractions: a user walkthrough read ``1.14299/4``)."""
    return f"{done:.0f}" if done == int(done) else f"{done:.2f}"


def _users(given: tuple[str, ...], me: bool) -> frozenset[str] | None:
    """The users whose jobs to show, as squeue's ``-u a,b`` and ``--me`` take them; None:
    everyone's."""
    names = [name.strip() for text in given for name in text.split(",")]
    if any(not name for name in names):
        raise InputError("expected user names separated by commas, got an empty one",
                         field="--user")
    names += [_name_of(int(name)) for name in names if _is_uid(name)]  # as squeue takes
    if me:
        names.append(_name_of(os.getuid()))
    return frozenset(names) if names else None


def _is_uid(name: str) -> bool:
    """A uid as squeue takes one in place of a name."""
    return name.isascii() and name.isdigit() and len(name) <= 10


def _is_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _name_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):  # a uid with no name (a container's): Slurm lists the number
        return str(uid)


@click.command()
@live_options
@store_option
@click.option("-u", "--user", "users", multiple=True, metavar="NAME[,NAME...]",
              help="Only these users' jobs, by name or uid (as squeue -u).")
@click.option("--me", is_flag=True, help="Only your own jobs (as squeue --me).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job.")
@one_line_errors
def queue(config_path: str | None, partition: str | None, slurm_conf: str | None,
          kind: str | None, store_path: str | None, users: tuple[str, ...], me: bool,
          as_json: bool) -> None:
    """Each managed job: state, GPUs and where, epochs, batch size, predicted remaining
    time, estimated rho, rounds planned in the window, and the last round's reason."""
    shown_users = _users(users, me)
    env = live(config_path, partition, slurm_conf, kind)
    planned: dict[int, JobRow] = {}
    intents = MemoryIntents()
    feed = None
    last_round: dict[str, Any] | None = None
    if (store := env.stored(store_path)) is not None:
        planned = store.jobs_now()
        intents = MemoryIntents(store.load_intents())
        feed = env.feed(store)
        last_round = next(iter(store.rounds(1)), None)
    world = env.world(intents, feed)
    view = world.observe()
    rows = [_row(j, planned.get(j.job_id)) for j in sorted(view.jobs, key=lambda j: j.job_id)]
    # a job out of the plan (in its requeue delay, held, suspended, on a drained node...)
    # still has its progress: its epochs done and time left (a researcher's walkthrough:
    # one in its requeue delay read "-" and 0 GPUs; a red-team: a held one 0 epochs);
    # its GPUs and where are Slurm's (``left_row``)
    left = unplanned_rows(world.left_out)
    back = world.left_views(row.job_id for row in left)
    rows += [row if (j := back.get(row.job_id)) is None else
             replace(_row(j, planned.get(j.job_id)), phase=row.phase, reason=row.reason,
                     gpus=row.gpus, where=row.where, action="", outcome="", message="")
             for row in left]
    everyone = len(rows)
    if unknown := sorted(name for name in shown_users or () if not _is_uid(name)
                         and name not in {row.user for row in rows} and not _is_user(name)):
        # squeue: "Invalid user"; an empty table read as "no jobs of theirs" (a red-team)
        raise InputError(f"no user {', '.join(unknown)} on this host or among the "
                         "partition's jobs", field="--user")
    if shown_users is not None:  # the title's counts stay the partition's: the contention
        rows = [row for row in rows if row.user in shown_users]
    if as_json:
        for row in rows:
            click.echo(json_text(asdict(row)))
        return
    out = console()
    out.print(rows_table(
        f"{env.partition}: {everyone} jobs ({len(view.jobs)} to plan), {view.total_gpus} "
        f"GPUs on {len(view.nodes)} nodes to plan, "
        f"{sum(len(j.gpu_slots) for j in view.jobs if j.is_running)} "
        "of them running its jobs" + ("" if shown_users is None else
                                     f"; {len(rows)} of the {everyone} jobs are "
                                     f"{', '.join(sorted(shown_users))}'s"), _COLUMNS,
        [(r.job_id, r.user, r.model or "-", r.phase, r.gpus, r.where,
          f"{_epochs(r.epochs_done)}/{r.epochs}" if r.epochs else "-", r.bs or "-",
          _hms(r.remaining_s) if r.remaining_s > 0 else "-",
          "-" if r.rho is None else f"{r.rho:.2f}",
          "-" if r.planned_rounds is None else r.planned_rounds, _reason(r)) for r in rows]))
    if store is None:
        out.print(f"no store at {env.settings.service.store}: no round of the service's "
                  "here (it writes its store where it runs; --store names another)")
    else:
        out.print(_round_age(last_round, _stale_after_s(env.settings), time.time()))


def _stale_after_s(settings: Settings) -> float:
    """How old the last round may be before its reasons are stale: the heartbeat's own
    limit, whatever rounds the service runs (``serve --round-s``); without one, three
    rounds of the config's."""
    svc = settings.service
    beat = read_heartbeat(svc.heartbeat) if svc.heartbeat else None
    return beat[1] if beat else STALE_ROUNDS * settings.slurm.round_s


def _row(j: Job, last: JobRow | None) -> JobRow:
    """A job as Slurm and its reports show it now, with the last round's estimate and
    reason (``last``, None before its first round)."""
    return JobRow(
        job_id=j.job_id, user=j.spec.user, model=j.spec.model, phase=j.phase.value,
        gpus=j.current_gpus, where=where(j.gpu_slots), epochs_done=j.progress.epochs_done,
        epochs=j.spec.num_epochs, bs=j.progress.bs or j.spec.init_bs,
        # a row the round wrote without an estimate (admission's) reads 0
        remaining_s=last.remaining_s if last and last.remaining_s > 0 else j.remaining_s_now,
        rho=last.rho if last else None,
        planned_rounds=last.planned_rounds if last else None,
        reason=last.reason if last else "not planned yet",
        action=last.action if last else "", outcome=last.outcome if last else "",
        message=last.message if last else "")


def _round_age(last: dict[str, Any] | None, stale_after_s: float, now: float) -> str:
    """When the round whose reasons the table shows ran, and a warning when that is
    longer ago than the service's heartbeat allows (its own limit, whatever rounds it
    runs: a review found three rounds of the config's length wrong for ``serve
    --round-s``; without a heartbeat, three rounds). Found by a red-team: the reasons of
    a service stopped for hours read as now."""
    if last is None:
        return "no round yet: the service has not planned this partition (reasons: none)"
    age = max(now - float(last["at_s"]), 0.0)
    line = (f"reasons from round {last['round_index']} at "
            f"{clock_time(last['at_s'], date=True)} "
            f"({_hms(age)} ago)")
    if age > stale_after_s:
        line += (f"; none since for over {_hms(stale_after_s)}: they are as the service "
                 "left them (is it running? shockwave doctor)")
    return line


def _reason(row: JobRow) -> str:
    """The round's reason, and for a job it started that is not running yet, why not:
    the world's note with Slurm's reason (a node's CPUs all taken, which the plan does
    not see, left such a job reading ``scheduled`` for ever); and an action not done as
    planned, refused, unanswered or waiting (a checkpoint in flight), with its outcome
    and message (found by a red-team: a job the round could not start read
    ``scheduled``, round after round)."""
    if row.action == "start" and row.phase == "pending" and row.message:
        return f"{row.reason}; {row.message}"
    if row.outcome in (Outcome.REJECTED.value, Outcome.DEFERRED.value) and row.action:
        return f"{row.reason}; {row.action} {row.outcome}: {row.message}"
    return row.reason


@click.command()
@click.argument("job_id", type=Bounded(1, MAX_SLURM_ID, integer=True))  # not int(): "1_2" is 12
@click.option("--config", "config_path", default=None, help="YAML settings file.")
@store_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@one_line_errors
def explain(job_id: int, config_path: str | None, store_path: str | None,
            as_json: bool) -> None:
    """A job's history across rounds: each change of state, reason and action, and
    every action with Slurm's answer."""
    from slurm_shockwave.config import load_settings

    settings = load_settings(config_path)
    store = service_store(settings, store_path, create=False)
    history = store.history(job_id)
    actions = store.actions(job_id)
    now = store.jobs_now().get(job_id)
    intent = store.load_intents().get(job_id)
    if not history and not actions and now is None:
        raise InputError(f"job {job_id} is not in the store (never managed, or older than "
                         "the retention)", source=store.path, field="job_id")
    if as_json:
        click.echo(json_text({"job_id": job_id, "now": asdict(now) if now else None,
                               "history": history, "actions": actions,
                               "checkpoint": asdict(intent) if intent else None}))
        return
    out = console()
    # a job id back after it left the queue is another job (Slurm gives ids out again;
    # the store forgets the earlier one's reports): each job's rows apart, the earlier
    # ones' first, each under its owner (a red-team: two users' jobs read as one story)
    parts: list[list[dict[str, Any]]] = [[]]
    for h in history:
        parts[-1].append(h)
        if h["phase"] == GONE:
            parts.append([])
    parts = [part for part in parts if part] or [[]]
    since = -1  # the round (id) the part before left in: its actions are before it
    for part in parts:
        ended = part[-1] if part and part[-1]["phase"] == GONE else None
        gone = ended["round"] if ended else None
        title = f"job {job_id}: history (a row when something changed)"
        if len(parts) > 1:
            who = f"job {job_id}, {part[0]['user'] or '?'}'s {part[0]['model'] or 'job'}"
            title = (f"{who}: the job now under this id" if gone is None else
                     f"{who}, gone at round {gone}: an earlier job under this id")
        out.print(rows_table(title, ("round", "at", "state", "GPUs", "where", "reason",
                                     "action", "outcome", "message"),
                             [(h["round"], clock_time(h["at_s"]), h["phase"], h["gpus"],
                               h["where"], h["reason"], h["action"], h["outcome"],
                               h["message"]) for h in part]))
        out.print(rows_table(
            f"job {job_id}: actions" if len(parts) == 1 else "its actions",
            ("round", "at", "action", "outcome", "message"),
            # by round id: a fill step shares its round's index (a review)
            [(a["round"], clock_time(a["at_s"]), a["kind"], a["outcome"], a["message"])
             for a in actions
             if since <= a["round_id"] and (ended is None or a["round_id"] < ended["round_id"])]))
        since = ended["round_id"] if ended else since
    if intent:
        out.print(f"checkpoint: SIG{intent.signal} sent; requeue after its ack or at "
                  f"{clock_time(intent.deadline_s, date=True)}")
    last = next(iter(store.rounds(1)), None)
    if now is not None:  # a job unchanged for longer than the retention has only this
        # as of the last round: a fill step since may have started it (an admin
        # walkthrough: a running job read "now: held"); queue asks Slurm itself
        seen_at = ("" if last is None else f" (as of round {last['round_index']} at "
                   f"{clock_time(float(last['at_s']))}; `shockwave queue` asks Slurm)")
        out.print(f"now: {now.phase}, {now.reason}{seen_at}" + (
            "" if history else " (unchanged since before the retention: no history kept)"))
        stale_s = _stale_after_s(settings)
        if last is not None and time.time() - float(last["at_s"]) > stale_s:
            # a red-team: a job of a service stopped for a while read as now
            out.print(_round_age(last, stale_s, time.time()))
    elif history and history[-1]["phase"] == GONE:  # the round that first missed it
        out.print(f"now: not in the partition's queue since round {history[-1]['round']} "
                  "(ended, cancelled or moved out)")
    elif last is not None:  # found by a red-team: an ended job read as still running
        seen = max((r["round"] for r in (*history, *actions)), default=None)
        out.print(f"now: not in the partition's queue at round {last['round_index']}, the "
                  f"last (ended, cancelled or moved out after round {seen})")
