"""One listed job as the service reads it: its hint, whether the service plans it, who
holds it, and why Slurm holds it back whatever the plan."""

from __future__ import annotations

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.slurm.hints import Hint, parse_hint, split_admin_comment, split_hold_mark
from slurm_shockwave.slurm.json_shapes import REQUEUED_HELD
from slurm_shockwave.slurm.protocol import SlurmJob

ADMIN_HOLD = "JobHeldAdmin"
"""The reason Slurm gives a job an admin held (``scontrol hold`` as root or operator)."""
GIVE_BACK = "scontrol uhold {job} returns it to the plan"
"""How an admin gives a job it holds back to the planner: ``uhold`` makes an admin hold the
planner's user hold with no moment unheld (a release would let Slurm start it before the
planner holds it; measured on 22.05)."""
OWNER_GIVES_BACK = "scontrol release {job} returns it to the plan"
"""How the owner of a job they hold gives it back: job_submit.lua clears the mark and, while
the service is alive, leaves the planner's hold (a requeue-held job is released: its
reason stays through any hold, so only a release ends it)."""
TOP_PRIORITY = 1_000_000
"""Priorities the planner pins are TOP_PRIORITY - rank; hand-back unpins them."""
PINNED_BAND = 100_000
"""Priorities in (TOP_PRIORITY - PINNED_BAND, TOP_PRIORITY] are the planner's (``pinned``)."""


def hint_text(job: SlurmJob) -> str:
    """The job's hint as job_submit.lua normalised it (else its raw comment, without the
    hold mark the comment may end with)."""
    return split_admin_comment(job.admin_comment)[0] or split_hold_mark(job.comment)[0]


def first_submitted(job: SlurmJob) -> int | None:
    """When the job was first submitted (job_submit.lua's ``submitted=`` stamp, which a
    requeue does not move): with its id, what tells it from an earlier job Slurm gave
    the id (the service's store keeps reports and runs by id). None for a job submitted
    before the plugin stamped it."""
    return split_admin_comment(job.admin_comment)[1]


def read_hint(text: str) -> Hint | str:
    """A hint's text read: the hint, or why it does not read. A job whose hint reads is
    one the service plans (and so one a hand-back gives back)."""
    try:
        return parse_hint(text)
    except InputError as exc:
        return str(exc)


def managed(job: SlurmJob) -> bool:
    """A job the service plans, by the world's own rule: its hint reads (the admin
    comment job_submit.lua wrote, else the raw comment of a job submitted while the
    plugin was not loaded)."""
    return not isinstance(read_hint(hint_text(job)), str)


def held_by_admin(job: SlurmJob) -> bool:
    """A pending job an admin holds (``scontrol hold`` as root or an operator): the
    planner's own holds are plain user holds, so this one is the admin's, kept out of the
    plan (and out of a hand-back) until the admin gives it back (GIVE_BACK)."""
    return job.state == "PENDING" and job.held and job.reason == ADMIN_HOLD


def requeue_held(job: SlurmJob) -> bool:
    """A pending job ``scontrol requeuehold`` put back held (whose reason the backends
    read from its state description "job requeued in held state"; a RequeueExitHold
    exit's likewise). Slurm records no requester, and its owner may release it (a user
    hold), so it is its owner's: the planner never makes one (it requeues, then holds).
    Slurm's own hold after a failed launch is not one: the planner releases it."""
    return job.state == "PENDING" and job.held and job.reason in REQUEUED_HELD


def held_by_owner(job: SlurmJob) -> bool:
    """A pending job its owner holds, kept out of the plan (and out of a hand-back) until
    they release it (OWNER_GIVES_BACK): a user hold its comment marks (``held=owner``,
    job_submit.lua's record of a user's ``scontrol hold``: the owner's, or their account
    coordinator's, which Slurm lets the owner release too; ``held=requeue``), or a
    requeue-hold. An admin's hold of it comes first (``held_by_admin``)."""
    return job.state == "PENDING" and job.held and not held_by_admin(job) and (
        requeue_held(job) or split_hold_mark(job.comment)[1] is not None)


def held_by_someone(job: SlurmJob) -> bool:
    """Held by an admin or by its owner: never the planner's to release."""
    return held_by_admin(job) or held_by_owner(job)


def pinned(job: SlurmJob) -> bool:
    """Queued, not held, at a priority the planner set (``TOP_PRIORITY - rank``)."""
    return (job.state in ("PENDING", "RUNNING") and not job.held
            and TOP_PRIORITY - PINNED_BAND < job.priority <= TOP_PRIORITY)


HELD_BACK_REASONS = ("Dependency", "QOS", "Assoc", "Licenses", "Reservation",
                     "ReqNodeNotAvail", "PartitionTimeLimit", "PartitionNodeLimit",
                     "InvalidQOS", "InvalidAccount", "AccountNotAllowed", "BadConstraints",
                     "MaxMemPer")
"""Reasons Slurm gives a released job it will not start for what the plan cannot see or
change: a dependency, a QOS or association limit (``QOSMaxGRESPerUser``), licences, a
reservation, nodes it asked for that are unavailable, a limit of the partition, a bad
account or constraint."""


def held_back(job: SlurmJob) -> str | None:
    """Why Slurm will not start a pending job whatever the plan says, or None. Found by a
    red-team: such a job was planned, its GPUs kept idle round after round (a job waiting
    for another that the plan held behind it never ran at all), and a held job's
    dependency is never tested, so it is read from the listing. Such a job is left out
    of the plan and to Slurm, released, until Slurm lets it go: then it is planned as
    any other."""
    if job.state != "PENDING":
        return None
    if job.dependency:
        return f"waits for its dependency {job.dependency}"
    if not job.held and job.reason.startswith(HELD_BACK_REASONS):
        return f"Slurm holds it back: {job.reason}"
    return None
