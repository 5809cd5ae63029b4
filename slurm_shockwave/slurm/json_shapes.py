"""Reading ``squeue --json`` / ``sinfo --json`` / ``scontrol show node --json`` in both shapes.

22.05 (openapi/v0.0.38): plain numbers (null when unset), state strings, per-node
``sinfo`` objects, GRES prefix ``gres:gpu:N``. 24.x (data_parser/v0.0.40+): numbers as
``{set, infinite, number}``, state lists, grouped ``sinfo`` rows (we read nodes from
``scontrol show node --json`` there), GRES prefix ``gres/gpu:N``. Samples of both are in
shared/reference/slurm-json; the tests read them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from slurm_shockwave.slurm.protocol import SlurmJob, SlurmNode

_GPU_SPEC = re.compile(r"gres[:/]gpu(?::[A-Za-z0-9_-]+)?:(\d+)")
_NODE_GRES = re.compile(r"gpu(?::[A-Za-z0-9_-]+)?:(\d+)")


def number(value: Any, default: int = 0) -> int:
    """A plain number, null, or 24.x's {set, infinite, number} as an int."""
    if value is None:
        return default
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return default
        value = value.get("number", default)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def states(value: Any) -> tuple[str, ...]:
    """"RUNNING" or ["RUNNING", "COMPLETING"] or "idle" + flags -> upper-case tuple."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value.upper(),)
    return tuple(str(v).upper() for v in value)


def gpus_in(spec: str) -> int:
    """GPUs in a TRES/GRES request such as gres:gpu:4 or gres/gpu:a100:4 (0 if none)."""
    return sum(int(m) for m in _GPU_SPEC.findall(spec or ""))


def is_held(state: str, priority: int, reason: str) -> bool:
    """Slurm marks a hold as priority 0 with reason JobHeldUser or JobHeldAdmin."""
    return state == "PENDING" and priority == 0 and reason.startswith("JobHeld")


def job_gpus(tres_per_node: str, tres_per_job: str, node_count: int) -> int:
    """GPUs for the whole job: --gpus (per job) plus --gres=gpu:N on each node."""
    return gpus_in(tres_per_job) + gpus_in(tres_per_node) * max(node_count, 1)


def job_from(obj: Mapping[str, Any]) -> SlurmJob:
    state = states(obj.get("job_state"))
    node_count = number(obj.get("node_count"), 1)
    priority = number(obj.get("priority"))
    reason = str(obj.get("state_reason") or "")
    held = bool(obj.get("hold")) or is_held(state[0] if state else "", priority, reason)
    return SlurmJob(
        job_id=number(obj.get("job_id")), name=str(obj.get("name") or ""),
        user=str(obj.get("user_name") or ""), partition=str(obj.get("partition") or ""),
        state=state[0] if state else "UNKNOWN", state_flags=state[1:], reason=reason,
        priority=priority, held=held, comment=str(obj.get("comment") or ""),
        admin_comment=str(obj.get("admin_comment") or ""),
        gpus=job_gpus(obj.get("tres_per_node", ""), obj.get("tres_per_job", ""), node_count),
        node_count=node_count,
        nodes=str(obj.get("nodes") or ""),
        gres_detail=tuple(obj.get("gres_detail") or ()),
        restart_count=number(obj.get("restart_cnt")),
        submit_time=number(obj.get("submit_time")), start_time=number(obj.get("start_time")),
        eligible_time=number(obj.get("eligible_time")),
    )


def jobs_from(doc: Mapping[str, Any]) -> list[SlurmJob]:
    return [job_from(j) for j in doc.get("jobs", [])]


def _node_from(obj: Mapping[str, Any]) -> SlurmNode:
    state = states(obj.get("state")) + states(obj.get("state_flags"))
    total = sum(int(m) for m in _NODE_GRES.findall(str(obj.get("gres") or "")))
    used = sum(int(m) for m in _NODE_GRES.findall(str(obj.get("gres_used") or "")))
    partitions = obj.get("partitions") or ()
    return SlurmNode(name=str(obj.get("name") or obj.get("hostname") or ""), state=state,
                     gpus=total, gpus_used=used, partitions=tuple(partitions))


def nodes_from(doc: Mapping[str, Any]) -> list[SlurmNode] | None:
    """Per-node objects (22.05 sinfo, 24.x scontrol show node); None for 24.x sinfo rows."""
    if "nodes" not in doc:
        return None
    return [_node_from(n) for n in doc["nodes"]]


def version_of(doc: Mapping[str, Any]) -> tuple[int, int]:
    meta = doc.get("meta", {})
    ver = (meta.get("Slurm") or meta.get("slurm") or {}).get("version", {})
    return int(ver.get("major", 0)), int(ver.get("minor", 0))
