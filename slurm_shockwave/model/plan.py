"""What a policy decides, what placement makes of it, and the actions that follow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from slurm_shockwave.model.job import Job, JobId


class ReasonCode(str, Enum):
    SCHEDULED = "scheduled"
    KEPT_RUNNING = "kept_running"
    WAITING_CAPACITY = "waiting_capacity"
    WAITING_FRAGMENTATION = "waiting_fragmentation"
    PREEMPTED_PRIORITY = "preempted_priority"
    PREEMPTED_FAIRNESS = "preempted_fairness"
    BACKFILLED = "backfilled"
    REJECTED_TOO_LARGE = "rejected_too_large"
    BAD_HINT = "bad_hint"
    NOT_ELIGIBLE = "not_eligible"
    HELD_BY_ADMIN = "held_by_admin"
    HELD_BY_OWNER = "held_by_owner"
    ON_CLOSED_NODE = "on_closed_node"
    WITHOUT_GPUS = "without_gpus"
    NOT_REQUEUEABLE = "not_requeueable"
    HELD_BACK = "held_back"
    ENDING = "ending"
    SUSPENDED = "suspended"
    SOLVER_TIMEOUT_FALLBACK = "solver_timeout_fallback"


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.code.value}({self.detail})" if self.detail else self.code.value


@dataclass(frozen=True, slots=True)
class Plan:
    """A policy's decision for one round.

    ``order`` lists the jobs the policy wants to run, most important first; placement
    starts them greedily in that order while GPUs fit, so a plan never has to know
    about node boundaries. Jobs left out of ``order`` must not run this round.
    """

    order: tuple[JobId, ...]
    reasons: Mapping[JobId, Reason] = field(default_factory=dict)
    gpus: Mapping[JobId, int] = field(default_factory=dict)
    """The count an elastic job is to run on (one of ``spec.gpu_counts()``); a job not
    listed runs on its request. Placing a running job on another count resizes it: a
    checkpoint and a restart, like a migration (docs/elastic.md)."""
    moves_for: frozenset[JobId] = frozenset()
    """Jobs for which placement may move running jobs ranked above them when
    fragmentation leaves them out, to clear nodes (each moved job placed again the same
    round). Any other job displaces only running jobs ranked below it (unless
    ``avoid_idle``), so a policy that ranks its running jobs first (FIFO, Slurm alone)
    never moves one."""
    avoid_idle: bool = False
    """Placement keeps GPUs from idling where the plan's order alone would leave them
    (Shockwave; every baseline keeps its published placement): a job fragmentation
    leaves out although enough GPUs idle for it may have a node cleared of running jobs
    ranked above it (not those in ``moves_for``), each placed again the same round; and
    a running job the plan leaves out keeps its GPUs where the only jobs placed on them
    are starts that would use fewer of them, none further behind than it (``rho``). A
    move costs the moved job a restart, and idling costs GPUs the round."""
    rho: Mapping[JobId, float] = field(default_factory=dict)
    """How far behind its fair finish time the policy projects each job (Shockwave's
    rho); empty for a policy without one."""

    def gpus_of(self, job: Job, *, keep_running: bool = False) -> int:
        """The count ``job`` is to run on. ``keep_running`` (live): a policy that chooses
        no counts (every fixed baseline) keeps a running elastic job on the one it runs
        on; resized by another policy before a switch, or started narrower, its request
        restarted it where it might not fit at all (a red-team: FIFO stopped a job
        running on 8 of its 16 beside a drained node, to wait for 16). The simulator
        keeps the baselines' published behaviour: back to the request."""
        if job.job_id in self.gpus:
            return self.gpus[job.job_id]
        if keep_running and not self.gpus and job.is_running and job.spec.is_elastic:
            return job.current_gpus
        return job.gpus


Memory = Mapping[str, Any]
"""A policy's cross-round state: plain, serialisable values that the engine stores."""


@dataclass(frozen=True, slots=True)
class Planned:
    plan: Plan
    memory: Memory


class ActionKind(str, Enum):
    START = "start"
    KEEP = "keep"
    PREEMPT = "preempt"


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    job_id: JobId
    gpu_slots: tuple[str, ...] = ()


class Outcome(str, Enum):
    APPLIED = "applied"
    REJECTED = "rejected"
    DEFERRED = "deferred"


@dataclass(frozen=True, slots=True)
class ActionResult:
    action: Action
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True, slots=True)
class ApplyResult:
    results: tuple[ActionResult, ...]

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)
