"""The only place a round happens; the simulator and the service both loop around it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_shockwave.engine.admission import admit
from slurm_shockwave.engine.diff import diff
from slurm_shockwave.engine.fill import fill_only, fill_plan
from slurm_shockwave.engine.placement import Placement, place
from slurm_shockwave.engine.ports import Actuator, ClusterSource
from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import JobId
from slurm_shockwave.model.plan import (
    Action,
    ActionKind,
    ApplyResult,
    Memory,
    Plan,
    Reason,
    ReasonCode,
)
from slurm_shockwave.policies.base import Policy


@dataclass(frozen=True)
class RoundReport:
    round_index: int
    now_s: float
    actions: tuple[Action, ...]
    result: ApplyResult
    reasons: dict[JobId, Reason]
    memory: Memory
    view: ClusterView | None = None
    """What the round saw (after admission): the service stores it for queue/explain."""
    phase_s: dict[str, float] = field(default_factory=dict)
    """Seconds spent in observe, plan (admit, policy, placement, diff) and apply."""
    must_start: frozenset[JobId] = frozenset()
    """Jobs the plan must run now (``Plan.moves_for``: Shockwave's critical path) that
    wait after it, started by no round yet (a released job waiting for the GPUs a
    checkpoint frees is not): a fill step that finds one the round did not have calls
    the next round at once (engine/fill.py::round_due)."""

    @property
    def gpus_busy(self) -> int:
        return sum(len(a.gpu_slots) for a in self.actions if a.kind != ActionKind.PREEMPT)


_STARTED = (ReasonCode.SCHEDULED, ReasonCode.BACKFILLED, ReasonCode.SOLVER_TIMEOUT_FALLBACK)
_WAITING = (ReasonCode.WAITING_CAPACITY, ReasonCode.WAITING_FRAGMENTATION)


MOVED = "restarts on other GPUs"
"""The reason's words for a running job the plan moves or resizes (a checkpoint and a
restart elsewhere): what the hand-back reads in the store to know the service requeued
it (service/handback.py)."""


def _reasons(view: ClusterView, plan: Plan, placement: Placement,
             rejected: dict[JobId, Reason], *, fill: bool = False) -> dict[JobId, Reason]:
    """Every observed job gets the reason for what actually happens to it this round.

    The policy's reason is kept only where it agrees with the outcome (a job placed to
    start may read "backfilled"; one that keeps running never reads "preempted"; one that
    waits never reads "scheduled" or "backfilled"); its detail survives either way, marked
    as the plan's where the outcome differs (``waiting_capacity(planned backfilled:
    remaining~24s)``: a red-team read the job's own remaining time as its wait), and a job
    placed on fewer GPUs than the plan's count says so (an elastic job fragmentation
    kept at a smaller count read ``gpus=4`` on 2).
    """
    out = dict(rejected)
    rank = {jid: i for i, jid in enumerate(plan.order)}
    unranked = len(rank)
    # who takes GPUs this round (a start, a move or a grow: GPUs it did not hold), in the
    # plan's order; a fill step stops nobody (a job it leaves out was stopped before)
    taking = [] if fill else sorted((j.job_id for j in view.jobs if placement.takes(j)),
                                    key=lambda jid: rank.get(jid, unranked))
    for job in view.jobs:
        jid = job.job_id
        given = plan.reasons.get(jid)
        if jid in placement.slots:
            got = len(placement.slots[jid])
            want = plan.gpus_of(job, keep_running=view.exact_slots)
            if placement.moves(job):  # a node cleared for a wide job, or a resize
                why = MOVED + (f" for {placement.moved_for[jid]}"
                               if jid in placement.moved_for else "")
                detail = _outcome(ReasonCode.KEPT_RUNNING, given).detail
                reason = Reason(ReasonCode.KEPT_RUNNING, f"{why}; {detail}" if detail else why)
            elif job.is_running:
                reason = _outcome(ReasonCode.KEPT_RUNNING, given)
            else:
                reason = given if given and given.code in _STARTED else \
                    _outcome(ReasonCode.SCHEDULED, given)
            out[jid] = _narrower(reason, got, want)
        elif jid in placement.fragmented:
            out[jid] = Reason(ReasonCode.WAITING_FRAGMENTATION, f"gpus={job.gpus}")
        elif job.is_running:
            reason = (given if given and given.code.value.startswith("preempted")
                      else _outcome(ReasonCode.PREEMPTED_PRIORITY, given))
            out[jid] = _naming(reason, [t for t in taking
                                        if rank.get(t, unranked) < rank.get(jid, unranked)])
        else:
            out[jid] = given if given and given.code in _WAITING else \
                _outcome(ReasonCode.WAITING_CAPACITY, given)
    return out


def _kind(code: ReasonCode) -> str:
    """What a reason says happens: the job waits, stops, or runs (starts or keeps)."""
    return ("waits" if code in _WAITING else
            "stops" if code.value.startswith("preempted") else "runs")


def _outcome(code: ReasonCode, given: Reason | None) -> Reason:
    """The outcome's code with the policy's detail, marked as the plan's when the plan
    said otherwise (``planned scheduled: rounds=2/20 rho~1.66`` on a job that waits)."""
    if given is None or not given.detail or _kind(given.code) == _kind(code):
        return Reason(code, given.detail if given else "")
    return Reason(code, f"planned {given.code.value}: {given.detail}")


def _narrower(reason: Reason, got: int, want: int) -> Reason:
    """A job placed on fewer GPUs than the plan's count (an elastic job at the widest of
    its smaller counts that fits) says on how many, and why."""
    if got >= want:
        return reason
    note = f"on {got} GPUs: the plan's {want} do not fit"
    return replace(reason, detail=f"{reason.detail}; {note}" if reason.detail else note)


def _naming(reason: Reason, ahead: list[JobId], shown: int = 3) -> Reason:
    """A preempted job's reason names the jobs ranked above it that take GPUs this round
    (``for 22, 14``): what an owner asks first when a job stops a round after it began."""
    if not ahead:
        return reason
    more = f" and {len(ahead) - shown} more" if len(ahead) > shown else ""
    named = f"for {', '.join(map(str, ahead[:shown]))}{more}"
    return replace(reason, detail=f"{named}; {reason.detail}" if reason.detail else named)


def _no_timer() -> float:
    return 0.0


def run_round(source: ClusterSource, policy: Policy[Any], memory: Memory,
              actuator: Actuator, *, timer: Callable[[], float] = _no_timer,
              fill: bool = False) -> RoundReport:
    """observe -> admit -> plan -> place -> diff -> apply; ``timer`` (a monotonic clock,
    injected so the simulator reads none) times the phases. ``fill``: a fill step between
    rounds (engine.fill), which only starts waiting jobs on free GPUs."""
    t0 = timer()
    view = source.observe()
    t1 = timer()
    view, rejected = admit(view)
    planned = policy.plan(view, memory)
    placement = (fill_only(view, place(view, fill_plan(view, planned.plan))) if fill
                 else place(view, planned.plan))
    actions = diff(view, placement)
    t2 = timer()
    result = actuator.apply(actions)
    t3 = timer()
    jobs = view.by_id()
    must_start = frozenset(jid for jid in planned.plan.moves_for if jid in jobs
                           and jid not in placement.slots and not jobs[jid].is_running
                           and jid not in view.reserved)  # started, waiting for its GPUs
    return RoundReport(round_index=view.round_index, now_s=view.now_s, actions=tuple(actions),
                       result=result,
                       reasons=_reasons(view, planned.plan, placement, rejected, fill=fill),
                       memory=planned.memory, view=view,
                       phase_s={"observe": t1 - t0, "plan": t2 - t1, "apply": t3 - t2},
                       must_start=must_start)
