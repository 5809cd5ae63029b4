"""The policy interface every scheduler implements, baselines and Shockwave alike."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.plan import Memory, Planned
from slurm_shockwave.model.typed_config import build_config


@dataclass(frozen=True)
class NoConfig:
    """For policies with nothing to tune."""


C = TypeVar("C")


class Policy(ABC, Generic[C]):
    """A policy reads the view and its memory and returns a plan plus new memory.

    It does no I/O, reads no clock and mutates nothing, so a run can be replayed.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    Config: ClassVar[type[Any]] = NoConfig

    def __init__(self, config: C | None = None) -> None:
        self.config: C = config if config is not None else self.Config()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, *, source: str = "",
                     path: str | None = None) -> Policy[C]:
        """The policy with ``data`` as its settings; errors name ``path`` (default: the
        policy's name; a config file's section is ``policies.<name>``)."""
        return cls(build_config(cls.Config, data, path=path or cls.name, source=source))

    @abstractmethod
    def plan(self, view: ClusterView, memory: Memory) -> Planned: ...
