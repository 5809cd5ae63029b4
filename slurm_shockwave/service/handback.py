"""Handing the managed partition back to Slurm: what an admin runs when the service goes.

Removes the heartbeat (new jobs are no longer held at submit), releases every managed
job the service holds (not those an admin holds: the service never holds a job that way),
and unpins the priorities it set (a hold-release pair makes Slurm compute the job's
priority afresh, under basic and multifactor alike).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_shockwave.service.heartbeat import remove_heartbeat
from slurm_shockwave.slurm.hints import PREFIX
from slurm_shockwave.slurm.protocol import SlurmBackend
from slurm_shockwave.slurm.world import TOP_PRIORITY, each_job, held_by_admin

PINNED_BAND = 100_000
"""Priorities in (TOP_PRIORITY - PINNED_BAND, TOP_PRIORITY] are the planner's."""


@dataclass(frozen=True)
class HandBack:
    released: tuple[int, ...]
    unpinned: tuple[int, ...]
    errors: dict[int, str] = field(default_factory=dict)
    admin_held: tuple[int, ...] = ()
    """Held by an admin: left held."""


def hand_back(backend: SlurmBackend, partition: str, heartbeat: str, *,
              earlier_build: bool = False) -> HandBack:
    """``earlier_build``: the service's store was written by a build that held jobs with
    admin holds (``Store.held_by_earlier_build``), so every hold is taken for its own."""
    remove_heartbeat(heartbeat)
    pending = [j for j in backend.list_jobs(partition)
               if j.partition == partition and j.state == "PENDING"
               and j.admin_comment.startswith(PREFIX)]
    admins = [] if earlier_build else [j.job_id for j in pending if held_by_admin(j)]
    held = [j.job_id for j in pending if j.held and j.job_id not in admins]
    pinned = [j.job_id for j in pending
              if not j.held and TOP_PRIORITY - PINNED_BAND < j.priority <= TOP_PRIORITY]
    errors = {jid: err for jid, err in each_job(pinned, backend.hold).items() if err}
    errors.update({jid: err for jid, err in
                   each_job(held + [j for j in pinned if j not in errors],
                            backend.release).items() if err})
    return HandBack(tuple(j for j in held if j not in errors),
                    tuple(j for j in pinned if j not in errors), errors, tuple(admins))
