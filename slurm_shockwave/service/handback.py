"""Handing the managed partition back to Slurm: what an admin runs when the service goes.

Removes the heartbeat (new jobs are no longer held at submit), releases every managed
job the service holds (not those an admin holds, nor those their owner holds or
requeue-held: the service never holds a job either way),
and unpins the priorities it set, running jobs' too: root's release of a job that is not
held makes Slurm compute its priority afresh (job_mgr.c: a privileged release clears the
admin-set priority; measured on 22.05 for a pending and a running job).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slurm_shockwave.service.heartbeat import remove_heartbeat
from slurm_shockwave.slurm.protocol import SlurmBackend
from slurm_shockwave.slurm.world import (
    each_job,
    held_by_admin,
    held_by_owner,
    managed,
    pinned,
    requeue_held,
)


@dataclass(frozen=True)
class HandBack:
    released: tuple[int, ...]
    unpinned: tuple[int, ...]
    errors: dict[int, str] = field(default_factory=dict)
    admin_held: tuple[int, ...] = ()
    """Held by an admin: left held."""
    owner_held: tuple[int, ...] = ()
    """Held by their owner (or requeue-held): left held, for the owner to release."""


def hand_back(backend: SlurmBackend, partition: str, heartbeat: str, *,
              earlier_build: bool = False, wait_s: float = 120.0,
              sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> HandBack:
    """``earlier_build``: the service's store was written by a build that held jobs with
    admin holds (``Store.held_by_earlier_build``), so every hold is taken for its own.
    A managed job still COMPLETING (the last round requeued it: its hold takes effect
    once it is pending again) is waited for, up to ``wait_s``; one still completing then
    is an error (run it again), never left held in silence."""
    remove_heartbeat(heartbeat)
    deadline = clock() + wait_s
    while True:
        listed = [j for j in backend.list_jobs(partition)
                  if j.partition == partition and managed(j)]
        completing = [j.job_id for j in listed if j.state == "COMPLETING"]
        if not completing or clock() >= deadline:
            break
        sleep(1.0)
    pending = [j for j in listed if j.state == "PENDING"]
    admins = [] if earlier_build else [j.job_id for j in pending if held_by_admin(j)]
    # an earlier build's requeue-holds were its own; an owner's marked hold never is
    owners = [j.job_id for j in pending
              if held_by_owner(j) and not (earlier_build and requeue_held(j))]
    held = [j.job_id for j in pending if j.held and j.job_id not in admins + owners]
    unpin = [j.job_id for j in listed if pinned(j)]
    errors = {jid: str(err) for jid, err in each_job(held + unpin, backend.release).items()
              if err}
    errors.update({jid: f"still completing after {wait_s:g} s: run handback again once "
                        "it is pending" for jid in completing})
    return HandBack(tuple(j for j in held if j not in errors),
                    tuple(j for j in unpin if j not in errors), errors, tuple(admins),
                    tuple(owners))
