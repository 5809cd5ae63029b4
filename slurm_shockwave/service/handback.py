"""Handing the managed partition back to Slurm: what an admin runs when the service goes.

Removes the heartbeat (new jobs are no longer held at submit), runs again each job the
checkpoint signal killed before it could handle it (the service's next round would
have), gives each pending elastic job back the GPUs and nodes it was submitted with (the
service resized it; Slurm alone never will), releases every managed job the service
holds (not those an admin holds, nor those their owner holds or requeue-held: the
service never holds a job either way), and unpins the priorities it set, running jobs'
too: root's release of a job that is not held makes Slurm compute its priority afresh
(job_mgr.c: a privileged release clears the admin-set priority; measured on 22.05 for a
pending and a running job).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from slurm_shockwave.engine.round import MOVED
from slurm_shockwave.service.heartbeat import remove_heartbeat
from slurm_shockwave.service.store import JobRow
from slurm_shockwave.slurm.asked import asked_request, restore_request
from slurm_shockwave.slurm.intents import CheckpointIntent, killed_by
from slurm_shockwave.slurm.listing import (
    held_by_admin,
    held_by_owner,
    managed,
    pinned,
    requeue_held,
)
from slurm_shockwave.slurm.protocol import SlurmBackend, SlurmError
from slurm_shockwave.slurm.world import each_job


@dataclass(frozen=True)
class HandBack:
    released: tuple[int, ...]
    unpinned: tuple[int, ...]
    errors: dict[int, str] = field(default_factory=dict)
    admin_held: tuple[int, ...] = ()
    """Held by an admin: left held."""
    owner_held: tuple[int, ...] = ()
    """Held by their owner (or requeue-held): left held, for the owner to release."""
    restored: tuple[int, ...] = ()
    """Pending elastic jobs given back the GPUs and nodes they were submitted with: those
    whose listing differs, or may (``Asked.differs``)."""
    resized_running: tuple[int, ...] = ()
    """Running elastic jobs on another count than they asked: left running (Slurm keeps
    that count if it requeues them)."""
    rerun: tuple[int, ...] = ()
    """Jobs the checkpoint signal killed, run again."""


def hand_back(backend: SlurmBackend, partition: str, heartbeat: str, *,
              earlier_build: bool = False, requeued: Collection[int] | None = None,
              intents: Mapping[int, CheckpointIntent] | None = None, wait_s: float = 120.0,
              sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> HandBack:
    """``earlier_build``: the service's store was written by a build that held jobs with
    admin holds (``Store.held_by_earlier_build``), so every hold is taken for its own.
    A managed job still COMPLETING that the service requeued (``requeued``, from its
    store: its hold takes effect once it is pending again; None: any) is waited for, up
    to ``wait_s``; one still completing then is an error (run it again), never left held
    in silence. Another, which ended, is not waited for (a red-team: one stuck
    completing failed every hand-back). ``intents``: the store's checkpoints in flight,
    whose jobs the signal may have killed."""
    remove_heartbeat(heartbeat)
    rerun, errors = _rerun_killed(backend, partition, intents or {})
    deadline = clock() + wait_s
    while True:
        listed = [j for j in backend.list_jobs(partition)
                  if j.partition == partition and managed(j)]
        completing = [j.job_id for j in listed if j.state == "COMPLETING"
                      and (requeued is None or j.job_id in requeued)]
        if not completing or clock() >= deadline:
            break
        sleep(1.0)
    pending = [j for j in listed if j.state == "PENDING"]
    restored: list[int] = []
    asked = {j.job_id: a for j in listed if (a := asked_request(j)) is not None}
    nodes_in_partition = sum(partition in n.partitions for n in backend.list_nodes()) \
        if asked else 0
    for job in pending:  # before the release: Slurm starts it at once
        try:
            if job.job_id in asked and restore_request(backend, job, asked[job.job_id],
                                                       nodes_in_partition):
                restored.append(job.job_id)
        except SlurmError as exc:
            errors[job.job_id] = f"not given back the GPUs it asked for: {exc}"
    admins = [] if earlier_build else [j.job_id for j in pending if held_by_admin(j)]
    # an earlier build's requeue-holds were its own; an owner's marked hold never is
    owners = [j.job_id for j in pending
              if held_by_owner(j) and not (earlier_build and requeue_held(j))]
    held = [j.job_id for j in pending if j.held and j.job_id not in admins + owners]
    unpin = [j.job_id for j in listed if pinned(j)]
    errors.update({jid: str(err) for jid, err
                   in each_job(held + unpin, backend.release).items() if err})
    errors.update({jid: f"still completing after {wait_s:g} s: run handback again once "
                        "it is pending" for jid in completing})
    return HandBack(tuple(j for j in held if j not in errors),
                    tuple(j for j in unpin if j not in errors), errors, tuple(admins),
                    tuple(owners), tuple(sorted(restored)),
                    tuple(j.job_id for j in listed if j.state == "RUNNING"
                          and j.job_id in asked
                          and asked[j.job_id].differs(j, nodes_in_partition)),
                    rerun)


def requeued_by_service(rows: Mapping[int, JobRow],
                        intents: Mapping[int, CheckpointIntent]) -> set[int]:
    """The jobs the service's store says its last round stopped, whose requeue may still
    be completing: preempted (a checkpoint in flight, or its row's action or reason), or
    moved or resized (``engine.round.MOVED``)."""
    return set(intents) | {jid for jid, row in rows.items()
                           if row.action == "preempt" or row.reason.startswith("preempted")
                           or MOVED in row.reason}


def _rerun_killed(backend: SlurmBackend, partition: str,
                  intents: Mapping[int, CheckpointIntent]
                  ) -> tuple[tuple[int, ...], dict[int, str]]:
    """Run again each of the partition's jobs the checkpoint signal of ``intents`` killed
    before it could handle it (``killed_by``), unheld: the service's next round would
    have (``SlurmCluster._rerun_killed``), and without it the job was lost (a red-team).
    The ids run again, and the refusals."""
    if not intents:
        return (), {}
    everyone = {j.job_id: j for j in backend.list_jobs()}
    rerun, errors = [], {}
    for jid, ck in sorted(intents.items()):
        job = everyone.get(jid)
        if job is None or job.partition != partition or not killed_by(job, ck):
            continue
        try:
            backend.requeue_ended(jid)
            rerun.append(jid)
        except SlurmError as exc:
            errors[jid] = (f"killed by SIG{ck.signal}, the checkpoint signal, before it "
                           f"could handle it, and not run again: {exc}")
    return tuple(rerun), errors
