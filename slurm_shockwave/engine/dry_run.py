"""An actuator that changes nothing: what the planner would do, and why."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_shockwave.model.plan import Action, ActionResult, ApplyResult, Outcome


class DryRunActuator:
    def apply(self, actions: Sequence[Action]) -> ApplyResult:
        return ApplyResult(tuple(ActionResult(a, Outcome.DEFERRED, "dry run") for a in actions))
