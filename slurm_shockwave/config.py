"""The YAML configuration file, parsed once into typed per-component configs.

```yaml
simulator: {round_s: 120, restore_s: 20, deadline_factor: null}
slurm: {partition: shockwave, round_s: 120, backend: auto, slurm_conf: null}
service: {policy: shockwave, store: /var/lib/slurm-shockwave/state.db, retention_days: 14,
          listen: "127.0.0.1:7817", endpoint_file: /var/lib/slurm-shockwave/endpoint}
policies:
  las: {queue_thresholds_gpu_s: [3600, 36000]}
  allox: {alpha: 0.2}
```
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from slurm_shockwave.model.bounds import (
    LISTEN_PROBLEM,
    MAX_FACTOR,
    MAX_ROUND_S,
    PARTITION_PROBLEM,
    PATH_PROBLEM,
    is_host_port,
    is_partition_name,
    is_path_text,
    key_name,
    shown,
)
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.typed_config import build_config
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.slurm.backend_choice import BACKENDS
from slurm_shockwave.workloads.input_files import read_text

MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class SimulatorConfig:
    round_s: float = 120.0
    restore_s: float = 20.0
    deadline_factor: float | None = None
    """Force-complete a job after this many times its exclusive runtime (paper: 1.5)."""
    requeue_delay_s: float = 0.0
    """A preempted job may start again only this much later (a live Slurm: cred_expire+1)."""
    fill_freed: bool = False
    """Fill steps between rounds, as the service takes them (engine/fill.py); off is the
    paper's model, where a GPU freed mid-round idles until the round ends."""

    def simulate_kwargs(self) -> dict[str, Any]:
        """The keywords of ``sim.run.simulate`` this section sets: one mapping, so no
        driver of the simulator can drop one (benchmarks.scale once dropped two)."""
        return {"round_s": self.round_s, "restore_s": self.restore_s,
                "deadline_factor": self.deadline_factor,
                "requeue_delay_s": self.requeue_delay_s, "fill_freed": self.fill_freed}

    def validate(self) -> tuple[str, str] | None:
        if not 1 <= self.round_s <= MAX_ROUND_S:
            return "round_s", f"must be from 1 to {MAX_ROUND_S:g} seconds"
        if not 0 <= self.restore_s < self.round_s:
            if self.restore_s == SimulatorConfig.restore_s:  # not set: round_s is too short
                return "round_s", f"must be longer than restore_s ({self.restore_s:g} s)"
            return "restore_s", "must be >= 0 and < round_s"
        if not 0 <= self.requeue_delay_s <= MAX_ROUND_S:
            return "requeue_delay_s", f"must be from 0 to {MAX_ROUND_S:g} seconds"
        if self.deadline_factor is not None and not 1 < self.deadline_factor <= MAX_FACTOR:
            return "deadline_factor", f"must be > 1 and <= {MAX_FACTOR:g}"
        return None


@dataclass(frozen=True)
class SlurmConfig:
    """How the live commands reach Slurm and which partition they manage."""

    partition: str = "shockwave"
    round_s: float = 120.0
    backend: str = "auto"
    """auto (pyslurm where it imports and matches the running Slurm, else cli), cli or
    pyslurm: slurm/backend_choice.py."""
    slurm_conf: str | None = None
    prior_epoch_s: float = 600.0
    """Epoch time of a job whose model the throughput table does not know and that has
    no time limit, until it reports its own."""
    restart_cost_s: float = 60.0
    """Seconds a job loses at each (re)start: its checkpoint restore plus Slurm's start
    latency (prolog, the next scheduling pass). Shockwave leases a started job enough
    rounds to pay for it (docs/planner.md)."""
    throughputs: str = "builtin:tacc"
    """The throughput table the planner's estimates start from before a job reports
    (a Gavel-format JSON file, or builtin:tacc / builtin:wisr, the bundled V100 tables):
    a site of other GPUs measures its own, and the jobs' reports correct it either way."""
    time_scale: float = 1.0
    """The jobs train this many times faster than the throughput table says (emulated
    jobs at ``--time-scale X``); the table's epoch times are divided by it, so they are
    wall time like the round, the clock and what jobs report. 1 on a real cluster."""

    def validate(self) -> tuple[str, str] | None:
        if not is_partition_name(self.partition):
            return "partition", PARTITION_PROBLEM
        if not (math.isfinite(self.round_s) and 1 <= self.round_s <= 86400):
            return "round_s", "must be from 1 to 86400 seconds"
        if self.slurm_conf is not None and not is_path_text(self.slurm_conf):
            return "slurm_conf", PATH_PROBLEM
        if self.backend not in BACKENDS:
            return "backend", f"must be one of {', '.join(BACKENDS)}"
        if not 1e-3 <= self.prior_epoch_s <= 1e7:
            return "prior_epoch_s", "must be from 0.001 to 10000000 seconds"
        if not (math.isfinite(self.restart_cost_s) and 0 <= self.restart_cost_s <= 86400):
            return "restart_cost_s", "must be from 0 to 86400 seconds"
        if not 1e-6 <= self.time_scale <= 1e6:
            return "time_scale", "must be from 0.000001 to 1000000"
        if not self.throughputs.strip():
            return "throughputs", "must name a Gavel-format JSON file or builtin:tacc|wisr"
        return None


def _default_heartbeat() -> str:
    return os.environ.get("SHOCKWAVE_HEARTBEAT") or "/var/lib/slurm-shockwave/heartbeat"


def _default_endpoint_file() -> str:
    beat = os.environ.get("SHOCKWAVE_HEARTBEAT")
    return (str(Path(beat).parent / "endpoint") if beat
            else "/var/lib/slurm-shockwave/endpoint")


@dataclass(frozen=True)
class ServiceConfig:
    """The long-running service: its policy, store and fail-open heartbeat."""

    policy: str = "shockwave"
    store: str = "/var/lib/slurm-shockwave/state.db"
    retention_days: float = 14.0
    heartbeat: str = field(default_factory=_default_heartbeat)
    """File job_submit.lua reads: new jobs are held only while it is fresh."""
    stale_after_s: float = 0.0
    """Heartbeat age after which new jobs run under Slurm alone (0: three rounds)."""
    solver_time_limit_s: float = 1.5
    """The service caps a policy's solver time at this wall-clock limit, so a round of
    2,000 jobs fits in seconds (the simulator has none: its results must not depend on
    the machine's load)."""
    listen: str = "127.0.0.1:7817"
    """HOST:PORT of the progress API (port 0: any free port; the endpoint file says which)."""
    endpoint_file: str = field(default_factory=_default_endpoint_file)
    """Where the progress API writes its URL, for a TaskProlog to export to jobs."""
    fill_freed: bool = True
    """Between rounds, give GPUs that a job's end frees, or that a new job finds idle, to
    waiting jobs at once (a fill step, engine/fill.py) instead of at the next round."""
    fill_poll_s: float = 5.0
    """Between rounds, look this often for new jobs (one squeue); while GPUs are idle,
    also for requeued jobs whose eligible time has come."""

    def validate(self) -> tuple[str, str] | None:
        if self.policy not in POLICIES:
            return "policy", f"unknown policy (known: {', '.join(POLICIES)})"
        if not is_path_text(self.store):  # as --store: " " was opened as a file named so
            return "store", PATH_PROBLEM
        if not (math.isfinite(self.retention_days) and self.retention_days > 0):
            return "retention_days", "must be > 0"
        if not (math.isfinite(self.stale_after_s) and self.stale_after_s >= 0):
            return "stale_after_s", "must be >= 0"
        if not (math.isfinite(self.solver_time_limit_s) and self.solver_time_limit_s > 0):
            return "solver_time_limit_s", "must be > 0"
        if not is_host_port(self.listen):
            return "listen", LISTEN_PROBLEM
        if not is_path_text(self.endpoint_file):
            return "endpoint_file", PATH_PROBLEM
        if not is_path_text(self.heartbeat):
            return "heartbeat", PATH_PROBLEM
        if not (math.isfinite(self.fill_poll_s) and 0.1 <= self.fill_poll_s <= 3600):
            return "fill_poll_s", "must be from 0.1 to 3600 seconds"
        same = self.own_files()
        return None if same is None else (same[0].removeprefix("service."), same[1])

    def own_files(self, *, store: str | None = None, endpoint_file: str | None = None,
                  dry_run: bool = False) -> tuple[str, str] | None:
        """``shared_file`` of the three, and of a command's ``store`` or
        ``endpoint_file`` given on its command line: neither may be a file the running
        service uses for something else (a dry run's ``--endpoint-file`` naming the live
        store wrote the URL over it: found by a review), whatever its own files are; a dry
        run's endpoint file not the live service's either (the jobs' reports went to the
        dry run, then nowhere). (the name, its problem) or None."""
        files = [("service.store", "store", self.store),
                 ("service.heartbeat", "heartbeat", self.heartbeat),
                 ("service.endpoint_file", "endpoint_file", self.endpoint_file)]
        if store:
            files.append(("--store", "store", store))
        if endpoint_file:
            role = "dry run's endpoint_file" if dry_run else "endpoint_file"
            files.append(("--endpoint-file", role, endpoint_file))
        same = shared_file(files)
        return None if same is None else \
            (same[0], f"is the file {same[1]} names: each needs its own")


def shared_file(files: Sequence[tuple[str, str, str]]) -> tuple[str, str] | None:
    """The first of the service's files (name, role, path) that is a file named earlier
    for another role, and that one's name: one typo wrote the URL over the store."""
    seen: dict[str, tuple[str, str]] = {}
    for name, role, path in files:
        # as the files are opened: "~" is not expanded there, nor here
        other = seen.setdefault(os.path.realpath(path), (name, role))
        if other[1] != role:
            return name, other[0]
    return None


@dataclass(frozen=True)
class Settings:
    simulator: SimulatorConfig = field(default_factory=SimulatorConfig)
    policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: str = ""
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    service: ServiceConfig = field(default_factory=ServiceConfig)


def parse_settings(data: Any, *, source: str, round_s: float | None = None) -> Settings:
    """``round_s``: the round length given on the command line (``serve --round-s``), over
    the file's ``slurm.round_s``: the settings that depend on it are checked against it."""
    if data is None:  # an empty file: every section its defaults
        data = {}
    if not isinstance(data, Mapping):
        raise InputError("expected a mapping at the top level", source=source, field="config")
    unknown = sorted((k for k in set(data) - {"simulator", "policies", "slurm", "service"}),
                     key=str)
    if unknown:
        raise InputError("unknown section (known: policies, service, simulator, slurm)",
                         source=source, field=key_name(unknown[0]))
    sim = build_config(SimulatorConfig, data.get("simulator"), path="simulator", source=source)
    slurm = build_config(SlurmConfig, data.get("slurm"), path="slurm", source=source)
    if round_s is not None:
        slurm = replace(slurm, round_s=round_s)
    service = build_config(ServiceConfig, data.get("service"), path="service", source=source)
    stale_problem(service.stale_after_s, slurm.round_s, source=source)
    policies = data.get("policies")
    if policies is None:
        policies = {}
    if not isinstance(policies, Mapping):  # [] or false was silently "no settings"
        raise InputError(f"expected a mapping of policy name to settings, got "
                         f"{shown(policies)}", source=source, field="policies")
    for name, section in policies.items():
        if name not in POLICIES:
            raise InputError(f"unknown policy (known: {', '.join(POLICIES)})", source=source,
                             field=f"policies.{key_name(name)}")
        POLICIES[name].from_mapping(section, source=source,  # validate now, fail early
                                    path=f"policies.{name}")
    return Settings(sim, dict(policies), source, slurm, service)


def stale_problem(stale_after_s: float, round_s: float, *, source: str,
                  field: str = "service.stale_after_s") -> None:
    """A heartbeat goes stale between two rounds if ``stale_after_s`` is not longer than
    a round: job_submit.lua then runs new jobs unheld for most of every round (and
    doctor fails a healthy service). 0 means three rounds."""
    if 0 < stale_after_s <= round_s:
        raise InputError(f"must be 0 (three rounds) or longer than a round ({round_s:g} s): "
                         "the heartbeat is written once a round", source=source, field=field)


def live_policy(settings: Settings, name: str) -> Policy[Any]:
    """The policy as configured, for live rounds: its solver time limit (if it has one)
    capped at ``service.solver_time_limit_s``."""
    section = dict(settings.policies.get(name) or {})
    cls = POLICIES.get(name)
    cap = settings.service.solver_time_limit_s
    if cls is not None and "time_limit_s" in {f.name for f in fields(cls.Config)}:
        own = section.get("time_limit_s")
        section["time_limit_s"] = cap if own is None else min(float(own), cap)
    return make_policy(name, section, source=settings.source, path=f"policies.{name}")


_MERGE = "tag:yaml.org,2002:merge"
_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_ZERO_PADDED = re.compile(r"[-+]?0[0-9_]+")
"""YAML 1.1 reads ``0120`` as octal (80): a zero-padded number is refused, not misread."""
_BASE_60 = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?")
"""YAML 1.1 reads ``2:00`` as 120 (base 60): refused too, a time is written in seconds."""


def _misread(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str | None:
    """What YAML 1.1 makes of a number that a reader of YAML 1.2 (or of a clock) takes
    otherwise, as the problem to report; None for any other scalar."""
    if node.tag not in (_INT, _FLOAT):
        return None
    read = loader.construct_yaml_int if node.tag == _INT else loader.construct_yaml_float
    if _BASE_60.fullmatch(node.value):
        return f"is base 60 to YAML 1.1 ({read(node):g}): write it in seconds"
    if node.tag == _INT and _ZERO_PADDED.fullmatch(node.value):
        return f"is octal to YAML 1.1 ({read(node)}): write it without leading zeros"
    return None


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML where a key given twice in one mapping is an error, not the last value.

    Only a mapping's own keys count: one a merge key (``<<``) brings in may be given again,
    and the given one wins, as YAML's merge key says. Each mapping is checked as it is
    flattened, so a mapping merged in is checked too (it is never constructed alone)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._flat: set[int] = set()
        """ids of the mappings flattened: the document's nodes live while it is built."""
        self._keys: dict[int, str] = {}
        """The key of each value node in a mapping, by id, to name it in an error."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A scalar its tag cannot hold (``2025-02-30``, ``!!int abc``, an integer of
        5,000 digits) is a YAML error at its line, not a ValueError from int() or date();
        so is a number YAML 1.1 reads otherwise than it looks (``_misread``)."""
        problem = _misread(self, node) if isinstance(node, yaml.ScalarNode) else None
        if problem is not None:
            key = self._keys.get(id(node))
            raise yaml.constructor.ConstructorError(
                None, None, f"{f'{key}: ' if key else ''}{node.value} {problem}",
                node.start_mark)
        try:
            return super().construct_object(node, deep)
        except (ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            kind = str(node.tag).rsplit(":", 1)[-1]
            why = "" if isinstance(exc, KeyError) else f" ({str(exc).split(';')[0]})"
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {shown(node.value)} as {kind}{why}",
                node.start_mark) from None

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        if id(node) in self._flat:  # once: flattened, its own keys and merged ones mix
            return
        own = [key_node for key_node, _value in node.value if key_node.tag != _MERGE]
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = shown(key_node.value)[1:-1]
                self._keys[id(value_node)] = key
                if isinstance(value_node, yaml.SequenceNode):
                    for i, item in enumerate(value_node.value):
                        self._keys[id(item)] = f"{key}[{i}]"
        super().flatten_mapping(node)  # merged mappings come through here first
        self._flat.add(id(node))
        seen: dict[Any, Any] = {}
        for key_node in own:
            key = self.construct_object(key_node)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: SafeLoader's own error follows
            if first is not key_node:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {shown(key)}", key_node.start_mark)


def parse_yaml(text: str, *, source: str) -> Any:
    """YAML text as plain data; bad YAML, a duplicate key or absurd nesting is one line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"not valid YAML ({problem})", source=source,
                         line=mark.line + 1 if mark else None, field="yaml") from None
    except RecursionError:
        raise InputError("not valid YAML here (nested too deeply)", source=source,
                         field="yaml") from None


def load_settings(path: str | Path | None, *, round_s: float | None = None) -> Settings:
    """The settings file (none: the defaults), with ``round_s`` over its round length
    (``parse_settings``)."""
    if path is None:
        return parse_settings(None, source="", round_s=round_s)
    text = read_text(path, field="config", limit=MAX_CONFIG_BYTES)
    return parse_settings(parse_yaml(text, source=str(path)), source=str(path),
                          round_s=round_s)
