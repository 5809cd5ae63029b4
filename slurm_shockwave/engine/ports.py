"""The two ports every world implements: the simulator and the live Slurm cluster."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Action, ApplyResult


class ClusterSource(Protocol):
    def observe(self) -> ClusterView: ...


class Actuator(Protocol):
    def apply(self, actions: Sequence[Action]) -> ApplyResult: ...
