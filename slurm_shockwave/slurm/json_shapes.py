"""Reading ``squeue --json`` / ``sinfo --json`` / ``scontrol show node --json`` in both shapes.

22.05 (openapi/v0.0.38): plain numbers (null when unset), state strings, per-node
``sinfo`` objects, GRES prefix ``gres:gpu:N``. 24.x (data_parser/v0.0.40+): numbers as
``{set, infinite, number}``, state lists, grouped ``sinfo`` rows (we read nodes from
``scontrol show node --json`` there), GRES prefix ``gres/gpu:N``. Samples of both are in
shared/reference/slurm-json; the tests read them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from slurm_shockwave.model.cluster import SEVERAL_TYPES
from slurm_shockwave.slurm.hostlist import expand_hostlist, expand_indices
from slurm_shockwave.slurm.protocol import MAX_NODE_GPUS, SlurmError, SlurmJob, SlurmNode

# one item of a TRES request (tres_per_node / tres_per_job), comma-separated:
# gres:gpu:4, gres/gpu:a100:4, gres:gpu:a100_3g.20gb:2 (MIG), gres:gpu and gres:gpu:a100
# (one GPU, as Slurm reads a GRES without a count); job_submit.lua's shockwave_gpus_in
# reads the same grammar, case for case (tests/test_hints.py)
_GPU_TYPE = re.compile(r"[A-Za-z0-9_.\-]+")
_GPU_COUNT = re.compile(r"[0-9]{1,7}")
_DIGITS = re.compile(r"[0-9]+")
# one GPU item of a node's gres / gres_used or a job's per-node GRES: gpu:8,
# gpu:a100:4(IDX:0-3), gpu:(null):3(IDX:0-2), gpu:3(IDX:0,2,5), gpu:v100:0(IDX:N/A),
# gpu:4(S:0-1) (sockets, not indices)
_GRES_ITEM = re.compile(
    r"(?<![A-Za-z0-9_])gpu(?::(?P<type>\(null\)|[A-Za-z0-9_.-]+))?:(?P<count>\d+)"
    r"(?:\(IDX:(?P<idx>[^)]*)\)|\([^)]*\))?")
# states whose job still holds its allocation
_HOLDS_ALLOC = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED"}
_INFINITE_MINUTES = 0xFFFFFFFE
T = TypeVar("T")


def is_count(text: str) -> bool:
    """ASCII digits only: ``isdigit`` takes "²", which ``int`` then refuses (a traceback
    from a listing with one in it: found by a red-team)."""
    return _DIGITS.fullmatch(text) is not None


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


# Slurm prints a job's state flag first where it has one (job_state_string): a running
# job whose nodes boot or whose PrologSlurmctld runs reads CONFIGURING, which squeue -t R
# does not list (its filter compares a base state with the whole state, flags and all:
# squeue/print.c), so the listings ask for CF too (a review). Its base state, and the
# flag after it, as 24.x's JSON lists them.
_FLAG_FIRST = {"CONFIGURING": "RUNNING", "SPECIAL_EXIT": "PENDING"}
"""SPECIAL_EXIT: a job ``scontrol requeuehold State=SpecialExit`` put back (or a
RequeueExit exit code), pending and held; its own state in squeue and pyslurm, so that a
partition's listing left it out and its owner's release was refused for good (a
red-team)."""


def job_state(state: str) -> tuple[str, ...]:
    """A job's printed state as (base state, flags...)."""
    upper = state.strip().upper()
    base = _FLAG_FIRST.get(upper)
    return (base, upper) if base else (upper,)


def _gpu_item(item: str) -> int:
    """GPUs in one item of a TRES request: ``gres[:/]gpu[:TYPE][:COUNT]`` (0 otherwise)."""
    if item[:8] not in ("gres:gpu", "gres/gpu"):
        return 0
    rest = item[8:]
    if not rest:
        return 1
    fields = rest[1:].split(":") if rest[0] == ":" else []
    if len(fields) == 1:
        if is_count(fields[0]):  # a count (at most 7 digits), never a type
            return int(fields[0]) if _GPU_COUNT.fullmatch(fields[0]) else 0
        return 1 if _GPU_TYPE.fullmatch(fields[0]) else 0
    if len(fields) == 2 and _GPU_TYPE.fullmatch(fields[0]) and _GPU_COUNT.fullmatch(fields[1]):
        return int(fields[1])
    return 0


def gpus_in(spec: str) -> int:
    """GPUs in a TRES request such as gres:gpu:4 or gres/gpu:a100:4,gres/gpu:v100:2 (all
    types summed; 0 if none). From 23.x a per-task request reads ``name=count``
    (cpu=2,gres/gpu:a100=1; measured on 25.11): the same with ``=`` for ``:``."""
    return sum(_gpu_item(item) for item in (spec or "").replace("=", ":").split(","))


def _one_type(types: set[str]) -> str:
    """The one GPU type named, or "" (none, or several)."""
    return next(iter(types)) if len(types) == 1 else ""


def gpu_gres(gpus: int, gpu_type: str = "") -> str:
    """A GRES request of ``gpus`` GPUs per node, of ``gpu_type`` if named
    (``gpu:a100:4``): what a resize writes, naming the type, since Slurm replaces a job's
    GRES with what it is given."""
    return f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}"


def gpu_type_in(*specs: str) -> str:
    """The GPU type a job's TRES requests name (``gres:gpu:v100:4``, ``gres/gpu:a100=1``):
    "" when they name none, or several (a job asking two types is not given one)."""
    types: set[str] = set()
    for spec in specs:
        for item in (spec or "").replace("=", ":").split(","):
            if item not in ("gres:gpu", "gres/gpu") and item[:9] not in ("gres:gpu:",
                                                                      "gres/gpu:"):
                continue  # not a GPU (gpumem, shard, cpu: a review)
            fields = item[9:].split(":")
            named = fields[0] if len(fields) > 1 or not is_count(fields[0]) else ""
            types.add(named if named and _GPU_TYPE.fullmatch(named) else "")
    return _one_type(types)


def node_gpu_type(names: Iterable[str | None]) -> str:
    """A node's GPU type from the type named by each of its GPU GRES (None or
    ``(null)``: untyped): the one type, "" when untyped or none, ``SEVERAL_TYPES`` when
    several (a MIG node's ``gpu:a100:4,gpu:1g.10gb:7``). Both backends' rule."""
    types = {"" if name in (None, "(null)") else str(name) for name in names}
    return SEVERAL_TYPES if len(types) > 1 else _one_type(types)


def gres_gpu_type(text: str) -> str:
    """The GPU type of a node's gres string (``gpu:a100:8(S:0-1)``): ``node_gpu_type``."""
    return node_gpu_type(m["type"] for m in _GRES_ITEM.finditer(text or ""))


def gres_gpu_count(text: str) -> int:
    """GPUs in a node's gres/gres_used or a per-node GRES string (all types summed)."""
    return sum(int(m["count"]) for m in _GRES_ITEM.finditer(text or ""))


def gres_gpu_indices(text: str) -> tuple[int, ...] | None:
    """The GPU indices named by ``(IDX:...)`` in such a string, sorted (all types
    together); None when GPUs are counted without indices (untyped GRES in 22.05's
    ``gres_used`` says ``gpu:7``). Raises ValueError on a malformed index list."""
    found: set[int] = set()
    for m in _GRES_ITEM.finditer(text or ""):
        if m["idx"] is None:
            if int(m["count"]):
                return None
            continue
        found.update(expand_indices(m["idx"], most=MAX_NODE_GPUS))
    if len(found) > MAX_NODE_GPUS:  # the union of several types' lists, as one list
        raise ValueError(f"more than {MAX_NODE_GPUS} GPU indices")
    return tuple(sorted(found))


def alloc_from(node_names: Sequence[str], per_node_gres: Sequence[str]
               ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Pair node names with their per-node GRES strings (gres_detail) -> gpu_alloc;
    nodes without GPUs are left out, and () when the two lists do not line up."""
    if len(node_names) != len(per_node_gres):
        return ()
    out = []
    try:
        for name, gres in zip(node_names, per_node_gres, strict=True):
            idx = gres_gpu_indices(gres)
            if idx:
                out.append((name, idx))
    except ValueError:
        return ()
    return tuple(out)


def holds_alloc(state: str, flags: Iterable[str] = ()) -> bool:
    """Whether a job in this state still holds its nodes and GPUs."""
    return state in _HOLDS_ALLOC or "COMPLETING" in flags


def time_limit_s(minutes: Any) -> int:
    """JSON ``time_limit`` (minutes; null, INFINITE or 24.x's object) -> seconds, 0=none."""
    value = number(minutes)
    return 0 if value <= 0 or value >= _INFINITE_MINUTES else value * 60


def _alloc_nodes(obj: Mapping[str, Any]) -> list[str]:
    """Allocated node names in order: 22.05 job_resources.allocated_nodes, 24.x
    job_resources.nodes.allocation, else the expanded ``nodes`` host list."""
    res = obj.get("job_resources")
    if isinstance(res, Mapping):
        listed = res.get("allocated_nodes")
        nodes = res.get("nodes")
        if not listed and isinstance(nodes, Mapping):
            listed = nodes.get("allocation")
        if isinstance(listed, list) and listed:
            names = [str(n.get("nodename") or n.get("name") or "") for n in listed
                     if isinstance(n, Mapping)]
            if names and all(names):
                return names
    try:
        return expand_hostlist(str(obj.get("nodes") or ""))
    except ValueError:
        return []


REQUEUED_HELD = ("job requeued in held state", "job_requeued_in_held_state",
                 "job requeued in special exit state", "job_requeued_in_special_exit_state")
"""``scontrol requeuehold`` (its owner's or an admin's: Slurm records no requester; the
planner requeues, then holds as a user) and a RequeueExitHold exit: user holds someone
chose, which its owner may release, kept out of the plan until released (world.py's
``requeue_held``: the service marks them ``held=requeue`` so that job_submit.lua, which
never sees a requeue, lets the owner's release through)."""
_REQUEUE_HELD = (*REQUEUED_HELD,
                 # a batch launch that failed (BatchStartTimeout under load, a prolog, the
                 # user's environment not read): Slurm requeues the job held, and only a
                 # release lets it run again (job_mgr.c's descriptions)
                 "launch failed requeued held", "launch_failed_requeued_held",
                 "user env retrieval failed requeued held",
                 "user_env_retrieval_failed_requeued_held")


def is_held(state: str, priority: int, reason: str) -> bool:
    """Slurm marks a hold as priority 0 with reason JobHeldUser or JobHeldAdmin, and a
    job ``scontrol requeuehold`` put back as priority 0 with reason "job requeued in held
    state" (measured on 22.05; it too rejects a priority update until released)."""
    return state == "PENDING" and priority == 0 and (
        reason.startswith("JobHeld") or reason in _REQUEUE_HELD)


_NO_VAL = 4294967294
"""Slurm's "not set" for a 32-bit count (slurm.h), which squeue prints as a number."""


def job_gpus(tres_per_node: str, tres_per_job: str, node_count: int,
             tres_per_task: str = "", tasks: int = 0) -> int:
    """GPUs for the whole job: --gpus (per job) plus --gres=gpu:N on each node; or, when
    it asks --gpus-per-task=M, M for each task, which Slurm makes the other counts agree
    with (``--gpus=8 --gpus-per-task=1`` is 8 tasks of 1, ``-n 2 --gres=gpu:4
    --gpus-per-task=2`` 4 GPUs: measured on 22.05; summed, a review found them read as 16
    and 8). A task count not given is derived as Slurm does: the per-job or per-node GPUs
    over M, else a task per node (sbatch refuses --gpus-per-task without -n, -N or
    --gpus). A pending --gpus-per-task job read as none was planned as 1 GPU."""
    nodes = max(node_count, 1)
    whole = gpus_in(tres_per_job) + gpus_in(tres_per_node) * nodes
    each = gpus_in(tres_per_task)
    if not each:
        return whole
    if not 1 <= tasks < _NO_VAL:
        tasks = whole // each if whole >= each else nodes
    return each * tasks


def may_spread(per_node_gpus: int, other_gpus: int, max_nodes: int) -> bool:
    """``SlurmJob.per_job``, the one rule of all three backends: a job with GPUs asked
    for the job or its tasks (``other_gpus``: ``--gpus``, ``--gpus-per-task``), none per
    node (``--gres=gpu:N``), that may have them on several nodes (``max_nodes`` not 1:
    ``-N 1 --gpus=8`` is one node's)."""
    return max_nodes != 1 and not per_node_gpus and other_gpus > 0


def asked_per_job(tres_per_node: str, tres_per_job: str, tres_per_task: str = "",
                  max_nodes: int = 0) -> bool:
    """``may_spread`` of a job's TRES requests as squeue and Slurm's JSON print them; with
    ``max_nodes`` 0, whatever its node limit (``SlurmJob.asks_per_job``)."""
    return may_spread(gpus_in(tres_per_node), gpus_in(tres_per_job) + gpus_in(tres_per_task),
                      max_nodes)


def exit_signal(value: Any) -> int:
    """The signal that ended a job: 22.05 gives the wait status (10 for SIGUSR1, 768 for
    exit 3; measured), 23.02+ an object whose ``signal.id`` is it."""
    if isinstance(value, Mapping):
        sig = value.get("signal")
        return number(sig.get("id")) if isinstance(sig, Mapping) else 0
    status = number(value)
    return status & 0x7F if status & 0x7F not in (0, 0x7F) else 0


def job_from(obj: Mapping[str, Any]) -> SlurmJob:
    state = states(obj.get("job_state"))
    if state:
        state = (*job_state(state[0]), *state[1:])
    node_count = number(obj.get("node_count"), 1)
    priority = number(obj.get("priority"))
    reason = str(obj.get("state_reason") or "")
    desc = str(obj.get("state_description") or "")
    if desc in _REQUEUE_HELD:
        # a held requeue says what it is only here ("JobHeldUser" in state_reason, as for
        # the planner's own hold), as scontrol and pyslurm show it: read as the planner's,
        # an admin's `scontrol requeuehold` was released (measured on 22.05)
        reason = desc
    # JSON's hold is priority 0, which a suspended or held running job has too: held is
    # a pending job's, as squeue's and pyslurm's listings read it (a red-team)
    first = state[0] if state else ""
    held = (bool(obj.get("hold")) and first == "PENDING") or is_held(first, priority, reason)
    gres_detail = tuple(str(g) for g in obj.get("gres_detail") or ())
    alloc = (alloc_from(_alloc_nodes(obj), gres_detail)
             if state and holds_alloc(state[0], state[1:]) and gres_detail else ())
    return SlurmJob(
        job_id=number(obj.get("job_id")), name=str(obj.get("name") or ""),
        user=str(obj.get("user_name") or ""), partition=str(obj.get("partition") or ""),
        state=state[0] if state else "UNKNOWN", state_flags=state[1:], reason=reason,
        priority=priority, held=held, comment=str(obj.get("comment") or ""),
        admin_comment=str(obj.get("admin_comment") or ""),
        gpus=job_gpus(obj.get("tres_per_node", ""), obj.get("tres_per_job", ""), node_count,
                      obj.get("tres_per_task", ""), number(obj.get("tasks"))),
        node_count=node_count,
        nodes=str(obj.get("nodes") or ""),
        gres_detail=gres_detail,
        restart_count=number(obj.get("restart_cnt")),
        submit_time=number(obj.get("submit_time")), start_time=number(obj.get("start_time")),
        eligible_time=number(obj.get("eligible_time")),
        gpu_alloc=alloc, time_limit_s=time_limit_s(obj.get("time_limit")),
        exit_signal=exit_signal(obj.get("exit_code")),
        gpu_type=gpu_type_in(*(str(obj.get(k) or "") for k in
                               ("tres_per_node", "tres_per_job", "tres_per_task"))),
        requeue=obj.get("requeue") is not False,
        dependency=str(obj.get("dependency") or ""),
        max_nodes=number(obj.get("max_nodes")),
        per_job=asked_per_job(str(obj.get("tres_per_node") or ""),
                              str(obj.get("tres_per_job") or ""),
                              str(obj.get("tres_per_task") or ""),
                              number(obj.get("max_nodes"))),
        asks_per_job=asked_per_job(str(obj.get("tres_per_node") or ""),
                                   str(obj.get("tres_per_job") or "")),
    )


def _objects(doc: Any, key: str) -> list[Mapping[str, Any]]:
    """``doc[key]`` as the list of objects Slurm's JSON has there; any other shape is
    Slurm's fault, not a bug of ours: one line (SlurmError), not a traceback."""
    items = doc.get(key) if isinstance(doc, Mapping) else None
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise SlurmError(f"unexpected JSON from Slurm: {key!r} is not a list of objects")
    return items


_ODD = (TypeError, ValueError, AttributeError, OverflowError)
"""What reading a field of another shape raises (``"state": 5``, ``"partitions": 5``, a
number of Infinity): Slurm's fault, one line naming the object (found by a red-team: a
traceback, and in the service every round failed with one)."""


def _each(doc: Any, key: str, read: Callable[[Mapping[str, Any]], T]) -> list[T]:
    out = []
    for i, obj in enumerate(_objects(doc, key)):
        try:
            out.append(read(obj))
        except _ODD as exc:
            raise SlurmError(f"unexpected JSON from Slurm: {key}[{i}]: {exc}") from None
    return out


def jobs_from(doc: Mapping[str, Any]) -> list[SlurmJob]:
    if isinstance(doc, Mapping) and "jobs" not in doc:
        return []
    return _each(doc, "jobs", job_from)


def _node_from(obj: Mapping[str, Any]) -> SlurmNode:
    state = states(obj.get("state")) + states(obj.get("state_flags"))
    gres_used = str(obj.get("gres_used") or "")
    try:
        used_idx = gres_gpu_indices(gres_used) or ()
    except ValueError:
        used_idx = ()
    partitions = obj.get("partitions") or ()
    return SlurmNode(name=str(obj.get("name") or obj.get("hostname") or ""), state=state,
                     gpus=gres_gpu_count(str(obj.get("gres") or "")),
                     gpus_used=gres_gpu_count(gres_used), partitions=tuple(partitions),
                     gpus_used_idx=used_idx, gpu_type=gres_gpu_type(str(obj.get("gres") or "")))


def nodes_from(doc: Mapping[str, Any]) -> list[SlurmNode] | None:
    """Per-node objects (22.05 sinfo, 24.x scontrol show node); None for 24.x sinfo rows."""
    if isinstance(doc, Mapping) and "nodes" not in doc:
        return None
    return _each(doc, "nodes", _node_from)


def version_of(doc: Mapping[str, Any]) -> tuple[int, int]:
    meta = doc.get("meta", {})
    ver = (meta.get("Slurm") or meta.get("slurm") or {}).get("version", {})
    return int(ver.get("major", 0)), int(ver.get("minor", 0))
