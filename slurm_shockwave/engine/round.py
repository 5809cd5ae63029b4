"""The only place a round happens; the simulator and the service both loop around it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurm_shockwave.engine.admission import admit
from slurm_shockwave.engine.diff import diff
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

    @property
    def gpus_busy(self) -> int:
        return sum(len(a.gpu_slots) for a in self.actions if a.kind != ActionKind.PREEMPT)


def _reasons(view: ClusterView, plan: Plan, placement: Placement,
             rejected: dict[JobId, Reason]) -> dict[JobId, Reason]:
    """Every observed job gets a reason: the policy's, else one derived from placement."""
    out = dict(rejected)
    for job in view.jobs:
        jid = job.job_id
        given = plan.reasons.get(jid)
        if jid in placement.slots:
            out[jid] = given or Reason(ReasonCode.KEPT_RUNNING if job.is_running
                                       else ReasonCode.SCHEDULED)
        elif jid in placement.fragmented:
            out[jid] = Reason(ReasonCode.WAITING_FRAGMENTATION, f"gpus={job.gpus}")
        elif job.is_running:
            out[jid] = (given if given and given.code.value.startswith("preempted")
                        else Reason(ReasonCode.PREEMPTED_PRIORITY))
        else:
            out[jid] = (given if given and given.code != ReasonCode.SCHEDULED
                        else Reason(ReasonCode.WAITING_CAPACITY))
    return out


def run_round(source: ClusterSource, policy: Policy[Any], memory: Memory,
              actuator: Actuator) -> RoundReport:
    view = source.observe()
    view, rejected = admit(view)
    planned = policy.plan(view, memory)
    placement = place(view, planned.plan)
    actions = diff(view, placement)
    result = actuator.apply(actions)
    return RoundReport(round_index=view.round_index, now_s=view.now_s, actions=tuple(actions),
                       result=result, reasons=_reasons(view, planned.plan, placement, rejected),
                       memory=planned.memory)
