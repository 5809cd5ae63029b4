"""The YAML configuration file, parsed once into typed per-component configs.

```yaml
simulator: {round_s: 120, restore_s: 20, deadline_factor: null}
policies:
  las: {queue_thresholds_gpu_s: [3600, 36000]}
  allox: {alpha: 0.2}
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.typed_config import build_config
from slurm_shockwave.policies.registry import POLICIES


@dataclass(frozen=True)
class SimulatorConfig:
    round_s: float = 120.0
    restore_s: float = 20.0
    deadline_factor: float | None = None
    """Force-complete a job after this many times its exclusive runtime (paper: 1.5)."""

    def validate(self) -> tuple[str, str] | None:
        if self.round_s <= 0:
            return "round_s", "must be > 0"
        if not 0 <= self.restore_s < self.round_s:
            return "restore_s", "must be >= 0 and < round_s"
        if self.deadline_factor is not None and self.deadline_factor <= 1:
            return "deadline_factor", "must be > 1"
        return None


@dataclass(frozen=True)
class Settings:
    simulator: SimulatorConfig = field(default_factory=SimulatorConfig)
    policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: str = ""


def parse_settings(data: Any, *, source: str) -> Settings:
    if data is None:
        return Settings(source=source)
    if not isinstance(data, Mapping):
        raise InputError("expected a mapping at the top level", source=source, field="config")
    unknown = sorted(set(data) - {"simulator", "policies"})
    if unknown:
        raise InputError("unknown section (known: policies, simulator)", source=source,
                         field=unknown[0])
    sim = build_config(SimulatorConfig, data.get("simulator"), path="simulator", source=source)
    policies = data.get("policies") or {}
    if not isinstance(policies, Mapping):
        raise InputError("expected a mapping of policy name to settings", source=source,
                         field="policies")
    for name, section in policies.items():
        if name not in POLICIES:
            raise InputError(f"unknown policy (known: {', '.join(POLICIES)})", source=source,
                             field=f"policies.{name}")
        POLICIES[name].from_mapping(section, source=source)  # validate now, fail early
    return Settings(sim, dict(policies), source)


def load_settings(path: str | Path | None) -> Settings:
    if path is None:
        return Settings()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", source=str(path),
                         field="config") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(f"not valid YAML ({getattr(exc, 'problem', exc)})", source=str(path),
                         line=mark.line + 1 if mark else None, field="yaml") from None
    return parse_settings(data, source=str(path))
