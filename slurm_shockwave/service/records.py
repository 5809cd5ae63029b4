"""What a round leaves in the store, made from its report: plain functions, no I/O."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from slurm_shockwave.engine.round import RoundReport
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import Job
from slurm_shockwave.model.plan import ActionKind, Outcome, ReasonCode
from slurm_shockwave.service.store import JobRow, RoundRecord
from slurm_shockwave.slurm.hints import Hint, parse_hint, split_hold_mark
from slurm_shockwave.slurm.job_gpus import job_slots
from slurm_shockwave.slurm.json_shapes import holds_alloc
from slurm_shockwave.slurm.listing import (
    ADMIN_HOLD,
    GIVE_BACK,
    OWNER_GIVES_BACK,
    first_submitted,
    hint_text,
)
from slurm_shockwave.slurm.protocol import SlurmJob
from slurm_shockwave.slurm.world import LeftOut


def where(slots: tuple[str, ...]) -> str:
    """``n2:0,n1:1,n1:0`` -> ``n1[0,1] n2[0]``: nodes and device indices, in order (a
    red-team: one job's GPUs read ``sw-node2[2,3] sw-node1[0,1]``, then the other way)."""
    by_node: dict[str, list[str]] = {}
    for slot in slots:
        node, idx = slot.rsplit(":", 1)
        by_node.setdefault(node, []).append(idx)
    return " ".join(f"{node}[{','.join(sorted(by_node[node], key=_natural))}]"
                    for node in sorted(by_node, key=_natural))


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """``n10`` after ``n9``, GPU 10 after GPU 9."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"(\d+)", text) if part)


def clock_time(at_s: float, *, date: bool = False, now: float | None = None) -> str:
    """A unix time as the local clock reads it: with its date when ``date`` or when it is
    not today's (found by a red-team: a ``--begin`` days away read as today). A time no
    clock can show (a damaged store's 1e300, NaN) is shown as the number it is."""
    try:
        at, today = time.localtime(at_s), time.localtime(time.time() if now is None else now)
    except (OverflowError, ValueError, OSError, TypeError):  # TypeError: text in a REAL
        return f"{at_s:g} s" if isinstance(at_s, float) else f"{at_s!s} s"
    same_day = (at.tm_year, at.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime("%H:%M:%S" if same_day and not date else "%Y-%m-%d %H:%M:%S", at)


def solved_in(memory: Mapping[str, Any], round_index: int) -> bool:
    """Whether the policy solved its window program in this round: it keeps a plan for
    rounds (``reopt_rounds``), and the memory holds the kept plan's solve in each."""
    plan = memory.get("plan")
    return isinstance(plan, Mapping) and isinstance(plan.get("solve"), Mapping) \
        and plan.get("start") == round_index


def solver_summary(memory: Mapping[str, Any]) -> tuple[str | None, float | None]:
    """The status and gap of the window program the policy's memory holds, if any: the
    plan that runs, solved in this round or kept from an earlier one."""
    plan = memory.get("plan")
    solve = plan.get("solve") if isinstance(plan, Mapping) else None
    if not isinstance(solve, Mapping):
        return None, None
    gap = solve.get("gap")
    return str(solve.get("status")), float(gap) if isinstance(gap, (int, float)) else None


def unplanned_rows(left: LeftOut) -> list[JobRow]:
    """Managed jobs the plan leaves out, so that queue and explain still show them: a bad
    hint (left to Slurm), pending jobs Slurm will not start before their eligible time
    (a requeued job's cred_expire + 1 s, a ``--begin``), out of the plan until then, jobs
    an admin or their owner holds, running jobs on a node Slurm gives no new work
    (drained, not responding), left to finish there, running jobs without GPUs, running
    jobs Slurm will not requeue, and pending jobs Slurm holds back (a dependency, a
    limit). Each with what Slurm lists for it (``left_row``)."""
    def row(jid: int, phase: str, code: ReasonCode, detail: str) -> JobRow:
        return left_row(left, jid, phase, f"{code.value}({detail})")

    rows = [row(jid, "not planned", ReasonCode.BAD_HINT, msg)
            for jid, msg in sorted(left.bad_hints.items())]
    rows += [row(jid, "pending", ReasonCode.NOT_ELIGIBLE, f"until {clock_time(at)}")
             for jid, at in sorted(left.not_eligible.items())]
    rows += [row(jid, "running", ReasonCode.ON_CLOSED_NODE,
                 f"{why}: left to Slurm, not moved or stopped")
             for jid, why in sorted(left.on_closed_node.items())]
    rows += [row(jid, "running", ReasonCode.WITHOUT_GPUS,
                 "asked for no GPU: left to Slurm until it ends")
             for jid in sorted(left.without_gpus)]
    rows += [row(jid, "running", ReasonCode.NOT_REQUEUEABLE,
                 "submitted --no-requeue: Slurm will not requeue it, so it is left to run "
                 "to its end")
             for jid in sorted(left.not_requeueable)]
    rows += [row(jid, "pending", ReasonCode.HELD_BACK,
                 f"{why}: left to Slurm, released, until it lets the job go")
             for jid, why in sorted(left.held_back.items())]
    rows += [row(jid, "requeuing", ReasonCode.ENDING,
                 "COMPLETING: requeued, back after its requeue delay")
             if jid in left.requeuing else
             row(jid, "ending", ReasonCode.ENDING,
                 "COMPLETING: Slurm ends its processes and runs its Epilog")
             for jid in sorted(left.ending)]
    rows += [row(jid, "ending", ReasonCode.ENDING,
                 f"killed by SIG{signal}, the checkpoint signal, before it could handle "
                 "it: run again from its last checkpoint")
             for jid, signal in sorted(left.killed.items())]
    rows += [row(jid, "suspended", ReasonCode.SUSPENDED, "by an admin: left to Slurm "
                 "until resumed")
             for jid in sorted(left.suspended)]
    # an operator's hold carries a user's mark too (job_submit.lua cannot tell an
    # operator from a coordinator): there `uhold` would leave the job a user's hold,
    # while a release clears the mark
    rows += [row(jid, "held", ReasonCode.HELD_BY_ADMIN,
                 (OWNER_GIVES_BACK if split_hold_mark(job.comment)[1] else GIVE_BACK)
                 .format(job=jid))
             for jid, job in sorted(left.admin_held.items())]
    return rows + [row(jid, "held", ReasonCode.HELD_BY_OWNER, OWNER_GIVES_BACK.format(job=jid))
                   for jid in sorted(left.owner_held)]


def left_row(left: LeftOut, job_id: int, phase: str, reason: str) -> JobRow:
    """A job the plan leaves out as Slurm lists it: its owner, its GPUs and, while it
    holds them, where, and when its hint reads, what it trains. Out of the plan is not
    out of Slurm (a red-team: a job running on a drained node read 0 GPUs, nowhere)."""
    job = left.listed.get(job_id)
    if job is None:
        return JobRow(job_id=job_id, user="", phase=phase, reason=reason)
    try:
        hint: Hint | None = parse_hint(hint_text(job))
    except InputError:
        hint = None
    # where only while Slurm lists it holding them (a review: a job the checkpoint
    # signal killed, FAILED, read where it had run)
    held = where(job_slots(job)) if holds_alloc(job.state, job.state_flags) else ""
    return JobRow(job_id=job_id, user=job.user, phase=phase, gpus=job.gpus,
                  where=held, model=hint.model if hint else "",
                  epochs=hint.epochs if hint else 0, bs=hint.bs if hint else 0,
                  reason=reason)


def job_rows(report: RoundReport, left: LeftOut | None = None,
             progress: Callable[[Iterable[int]], Mapping[int, Job]] | None = None
             ) -> list[JobRow]:
    """One row per managed job the round saw, with what was decided and what Slurm said;
    ``progress`` (``SlurmCluster.left_views``): the jobs the plan leaves out, or
    admission turned away, as the policies would see them, whose rows then say their
    epochs done and time left (a red-team: stored, a job in its requeue delay, then one
    waiting for capacity, read 0 and 0 in ``explain``, where ``queue`` showed its
    progress)."""
    plan = report.memory.get("plan")
    rho = plan.get("rho", {}) if isinstance(plan, Mapping) else {}
    per_job = plan.get("per_job", {}) if isinstance(plan, Mapping) else {}
    acted = {r.action.job_id: r for r in report.result.results}
    left = left or LeftOut()
    rows = []
    for job in report.view.jobs if report.view else ():
        jid = job.job_id
        r = acted.get(jid)
        # a start's row says where the plan starts the job (found by a red-team: an
        # elastic job started on 8 GPUs over two nodes read as its request of 4, nowhere);
        # one Slurm refused or did not answer, the count it holds (a review)
        planned = r is not None and r.action.kind == ActionKind.START \
            and r.outcome == Outcome.APPLIED and bool(r.action.gpu_slots) \
            and not job.is_running
        slots = r.action.gpu_slots if planned and r else job.gpu_slots
        rows.append(_with_progress(JobRow(
            job_id=jid, user=job.spec.user, model=job.spec.model, phase=job.phase.value,
            gpus=len(slots) or job.current_gpus,
            # the plan's GPUs, which Slurm may give it elsewhere on a node (a red-team)
            where=("plan: " if planned else "") + where(slots),
            rho=rho.get(str(jid)), planned_rounds=per_job.get(str(jid)),
            reason=str(report.reasons.get(jid, "")) + _held_running(left.listed.get(jid)),
            action=r.action.kind.value if r else "wait",
            outcome=r.outcome.value if r else "", message=r.message if r else ""), job))
    seen = {r.job_id for r in rows}
    # jobs admission turned away (say, larger than every usable node together) are not
    # in the view but must not vanish from queue and explain
    out = [left_row(left, jid, "not planned", str(reason))
           for jid, reason in sorted(report.reasons.items()) if jid not in seen]
    out += unplanned_rows(left)
    back = progress(row.job_id for row in out) if progress is not None else {}
    out = [row if (j := back.get(row.job_id)) is None else _with_progress(row, j)
           for row in out]
    # each row with its job's first submission: the store tells a reused id's job by it
    return [replace(row, submitted=first_submitted(listed) or 0)
            if (listed := left.listed.get(row.job_id)) is not None else row
            for row in rows + out]


def _with_progress(row: JobRow, job: Job) -> JobRow:
    """``row`` with the job's progress: epochs done, of how many, at which batch size, and
    the time left (a planned job's row and a left-out one's alike)."""
    return replace(row, epochs_done=round(job.progress.epochs_done, 3),
                   epochs=job.spec.num_epochs, bs=job.progress.bs or job.spec.init_bs,
                   remaining_s=round(job.remaining_s_now, 1))


def _held_running(job: SlurmJob | None) -> str:
    """A running job someone holds keeps running, but Slurm keeps the hold through a
    requeue: if the plan stops it, it waits held, out of the plan, until released (a
    red-team: such a job read plain ``kept_running``). Said on its row, with how."""
    if job is None or job.state != "RUNNING" or not job.reason.startswith("JobHeld"):
        return ""
    if job.reason == ADMIN_HOLD:
        return f"; held by an admin: if stopped, it stays held ({GIVE_BACK.format(job=job.job_id)})"
    return (f"; held by its owner: if stopped, it stays held "
            f"({OWNER_GIVES_BACK.format(job=job.job_id)})")


def kept_details(rows: list[JobRow], before: Mapping[int, JobRow]) -> list[JobRow]:
    """A fill step's rows: a job still being preempted keeps the round's detail, whom it
    was stopped for (found by a red-team: ``preempted_priority(for 4)`` read plain
    ``preempted_priority`` after a fill step, which names no one, since it stops no one).
    Only that: any other detail is the fill step's own to give (a review: a wait's
    ``the rest drained`` was kept after the node was back)."""
    return [replace(r, reason=old.reason)
            if (old := before.get(r.job_id)) is not None and "(" not in r.reason
            and r.reason.startswith("preempted")
            and old.reason.split("(", 1)[0] == r.reason else r for r in rows]


def round_record(report: RoundReport, *, policy: str, dry_run: bool,
                 phase_s: Mapping[str, float], origin_s: float = 0.0) -> RoundRecord:
    """``origin_s``: the view's time zero, so the record's time is wall-clock time."""
    status, gap = solver_summary(report.memory)
    res = report.result
    return RoundRecord(
        round_index=report.round_index, at_s=report.now_s + origin_s, policy=policy,
        dry_run=dry_run,
        jobs=len(report.view.jobs) if report.view else 0, phase_s=dict(phase_s),
        solver_status=status, solver_gap=gap, applied=res.count(Outcome.APPLIED),
        rejected=res.count(Outcome.REJECTED), deferred=res.count(Outcome.DEFERRED))


def action_rows(report: RoundReport) -> list[tuple[int, str, str, str]]:
    """Every action but KEEP (a running job left alone: the history row says it)."""
    return [(r.action.job_id, r.action.kind.value, r.outcome.value, r.message)
            for r in report.result.results if r.action.kind != ActionKind.KEEP]
