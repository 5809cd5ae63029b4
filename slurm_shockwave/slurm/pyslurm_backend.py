"""The Slurm backend over pyslurm's Job/Jobs API (design card), chosen by config.

pyslurm on PyPI exists only for Slurm 25.11, and ``import pyslurm`` ends the whole
process when no slurm.conf is found. So nothing imports pyslurm at module load: the
backend first checks for a slurm.conf, then probes the import in a child process, and
only then imports it here; each failure becomes one SlurmError line saying what is
missing. The contract tests (tests/test_slurm_contract.py) run it against a Slurm 25.11
cluster built from source (tests/run-25.11.sh, in CI), where it lists the same jobs and
nodes as the CLI backend; on Debian's 22.05 they skip with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slurm_shockwave.slurm.backend_choice import (
    BACKENDS,
    BackendChoice,
    probe_pyslurm,
    resolve_backend,
)
from slurm_shockwave.slurm.cli_backend import CliBackend, slurm_conf_problem
from slurm_shockwave.slurm.hostlist import expand_indices
from slurm_shockwave.slurm.json_shapes import (
    gpu_type_in,
    gpus_in,
    holds_alloc,
    is_held,
    job_state,
    may_spread,
    node_gpu_type,
)
from slurm_shockwave.slurm.protocol import (
    LISTED_STATES,
    MAX_NODE_GPUS,
    SlurmError,
    SlurmJob,
    SlurmNode,
    slurm_failure,
)

Alloc = tuple[tuple[str, tuple[int, ...]], ...]


def _is_gpu_key(key: Any) -> bool:
    """pyslurm's GRES dict keys: gpu, gpu:a100, gres/gpu, gres/gpu:a100 (gres: stripped)."""
    name = str(key).removeprefix("gres/").removeprefix("gres:")
    return name == "gpu" or name.startswith("gpu:")


def gres_gpu_type_of(value: Any) -> str:
    """The GPU type in pyslurm's GRES dict (``{'gpu:a100': 4}``: ``node_gpu_type`` of its
    GPU keys) or string (a job's request: ``gpu_type_in``)."""
    if isinstance(value, Mapping):
        keys = [str(k).removeprefix("gres/").removeprefix("gres:") for k in value
                if _is_gpu_key(k)]
        return node_gpu_type(k.split(":", 1)[1] if ":" in k else None for k in keys)
    if value is None:
        return ""
    text = str(value)
    return gpu_type_in(text if text.startswith("gres") else "gres/" + text)


def gres_gpus(value: Any) -> int:
    """GPUs in pyslurm's ``gres_per_node``: a dict ({'gres/gpu': 2}, {'gpu:a100': 4}, or
    {'gpu': {'count': 2, 'indexes': '0-1'}}), a string (gpu:2, gres/gpu:2) or None."""
    if value is None:
        return 0
    if isinstance(value, Mapping):
        total = 0
        for key, count in value.items():
            if not _is_gpu_key(key):
                continue
            if isinstance(count, Mapping):
                count = count.get("count", 0)
            try:
                total += int(count)
            except (TypeError, ValueError):
                continue
        return total
    text = str(value)
    return gpus_in(text if text.startswith("gres") else "gres/" + text)


def alloc_from_layout(layout: Any) -> Alloc:
    """pyslurm's ``Job.get_resource_layout_per_node()`` ({node: {'gres': {'gpu':
    {'count': 2, 'indexes': '0-1'}}, ...}}, in node order) -> gpu_alloc."""
    if not isinstance(layout, Mapping):
        return ()
    out = []
    for node, info in layout.items():
        gres = info.get("gres") if isinstance(info, Mapping) else None
        found: set[int] = set()
        for key, val in (gres or {}).items():
            if _is_gpu_key(key) and isinstance(val, Mapping):
                try:
                    found.update(expand_indices(str(val.get("indexes") or ""),
                                                most=MAX_NODE_GPUS))
                except ValueError:
                    continue
        if found:
            out.append((str(node), tuple(sorted(found))))
    return tuple(out)


def pyslurm_problem(slurm_conf: str | None = None) -> str | None:
    """Why pyslurm cannot drive this cluster, in one line; None if it can."""
    return slurm_conf_problem(slurm_conf) or probe_pyslurm(slurm_conf).problem()


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return default


def _max_nodes(job: Any) -> int:
    """pyslurm's ``max_nodes``; 0 when none (no limit) or not an integer."""
    value = _get(job, "max_nodes", default=0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def dependency_text(deps: Any) -> str:
    """pyslurm's dict of a job's dependencies written back as Slurm writes them
    (``afterok:5(unfulfilled)``: pyslurm keeps the mark with the id), kinds in the
    dict's order; empty when it has none (None: Slurm clears them once satisfied).

    pyslurm 25.11 reads ``singleton`` only without a mark, and Slurm lists it as
    ``singleton(unfulfilled)``: the dict then holds nothing, though Slurm listed a
    dependency. Every other kind Slurm 25.11 has is parsed, so a dict with nothing in it
    is that singleton, written as Slurm wrote it (before, such a job was planned and
    released, and seen as held back by its reason only a round later)."""
    if not isinstance(deps, dict):
        return ""
    kinds = [k for k, v in deps.items() if isinstance(v, list) and v]
    out = [":".join([kind, *map(str, deps[kind])]) for kind in kinds]
    if deps.get("singleton"):
        out.append("singleton")
    if not out:
        return "singleton(unfulfilled)"
    return ("?" if deps.get("satisfy") == "any" else ",").join(out)


class PyslurmBackend:
    def __init__(self, slurm_conf: str | None = None) -> None:
        problem = pyslurm_problem(slurm_conf)
        if problem:
            raise SlurmError(problem)
        import pyslurm

        self._ps: Any = pyslurm
        # what pyslurm's API lacks or gets wrong goes through the CLI: sbatch's option
        # parsing, per-job GPUs (TresPerJob), a partition's state and the user hold
        self._cli = CliBackend(slurm_conf=slurm_conf)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # pyslurm.RPCError carries Slurm's message
            raise slurm_failure(f"{what}: {exc}") from None

    def list_jobs(self, partition: str | None = None) -> list[SlurmJob]:
        jobs = self._call("load jobs", self._ps.Jobs.load)
        out = []
        asked_otherwise: set[int] = set()
        for j in jobs.values():
            state, *flags = job_state(str(_get(j, "state", default="UNKNOWN")))
            if partition is not None and not (_get(j, "partition") == partition
                                              and state in LISTED_STATES):
                continue
            reason = str(_get(j, "state_reason", default="") or "")
            priority = int(_get(j, "priority", default=0) or 0)
            nodes = int(_get(j, "num_nodes", default=1) or 1)
            state_ok = holds_alloc(state)
            layout: Any = {}
            if state_ok and hasattr(j, "get_resource_layout_per_node"):
                try:
                    layout = j.get_resource_layout_per_node()
                except Exception:  # pyslurm raises ValueError on an odd host list
                    layout = {}
            alloc = alloc_from_layout(layout)
            per_node = gres_gpus(_get(j, "gres_per_node"))
            given = sum(len(idx) for _, idx in alloc)
            if not per_node:  # asked per job or per task, or none: squeue tells (below)
                asked_otherwise.add(int(j.id))
            max_nodes = _max_nodes(j)
            limit = _get(j, "time_limit", default=0)
            out.append(SlurmJob(
                job_id=int(j.id), name=str(_get(j, "name", default="")),
                user=str(_get(j, "user_name", default="")),
                partition=str(_get(j, "partition", default="")), state=state,
                state_flags=tuple(flags), reason=reason, priority=priority,
                held=is_held(state, priority, reason),
                comment=str(_get(j, "comment", default="") or ""),
                admin_comment=str(_get(j, "admin_comment", default="") or ""),
                # --gres=gpu:N per node; a running --gpus=N job: what it was given
                gpus=per_node * nodes or given,
                # a pending job's GPUs asked per job come from squeue (below)
                max_nodes=max_nodes,
                per_job=may_spread(per_node, given, max_nodes),
                asks_per_job=False,  # read from squeue (below)
                node_count=nodes,
                nodes=str(_get(j, "allocated_nodes", default="") or "") if state_ok else "",
                restart_count=int(_get(j, "requeue_count", default=0) or 0),
                submit_time=int(_get(j, "submit_time", default=0) or 0),
                start_time=int(_get(j, "start_time", default=0) or 0) if state_ok else 0,
                eligible_time=int(_get(j, "eligible_time", default=0) or 0),
                gpu_alloc=alloc,
                gpu_type=gres_gpu_type_of(_get(j, "gres_per_node")),
                time_limit_s=int(limit) * 60 if isinstance(limit, int) and limit > 0 else 0,
                exit_signal=int(_get(j, "exit_code_signal", default=0) or 0),
                requeue=_get(j, "is_requeueable", default=True) is not False,
                dependency=dependency_text(_get(j, "dependencies"))))
        return self._with_per_job_gpus(out, asked_otherwise)

    def _with_per_job_gpus(self, jobs: list[SlurmJob], per_job_ids: set[int]
                           ) -> list[SlurmJob]:
        """pyslurm 25.11 does not read a job's TresPerJob (``gres/gpu:N``, from
        ``--gpus=N``: its TRES parser expects ``name=count``) or its per-task GPUs, and
        the job's requested TRES count GPUs only where slurmdbd tracks gres/gpu. So the
        pending and running jobs that ask no GPUs per node (``per_job_ids``) are asked of
        squeue, all in one call: a pending one's count, whether GPUs were asked for the
        job (as the CLI backend says of every listed job), and the GPU type they name
        (``--gpus=a100:4`` read as untyped was placed on any node, and a running,
        suspended or completing one moved onto any)."""
        unknown = [j.job_id for j in jobs if j.job_id in per_job_ids
                   and j.state in LISTED_STATES]
        if not unknown:
            return jobs
        per_job = self._cli.gpus_per_job(unknown)
        out = []
        for j in jobs:
            gpus, kind, for_job = per_job.get(j.job_id, (0, "", False))
            if j.state == "PENDING" and not j.gpus and gpus:
                j = replace(j, gpus=gpus, per_job=may_spread(0, gpus, j.max_nodes))
            if for_job:
                j = replace(j, asks_per_job=True)
            out.append(replace(j, gpu_type=kind) if kind and not j.gpu_type else j)
        return out

    def partition_state(self, partition: str) -> str:
        return self._cli.partition_state(partition)

    def list_nodes(self) -> list[SlurmNode]:
        nodes = self._call("load nodes", self._ps.Nodes.load)
        # A node's allocated TRES count GPUs only where slurmdbd tracks gres/gpu, and never
        # say which: both come from the jobs holding nodes, of every partition.
        used: dict[str, set[int]] = {}
        for job in self.list_jobs():
            for node, idx in job.gpu_alloc:
                used.setdefault(node, set()).update(idx)
        out: list[SlurmNode] = []
        for n in nodes.values():
            state = tuple(str(s).upper() for s in str(_get(n, "state", default="")).split("+"))
            idx = tuple(sorted(used.get(str(n.name), ())))
            out.append(SlurmNode(
                name=str(n.name), state=state,
                gpus=gres_gpus(_get(n, "configured_gres")),
                gpus_used=max(gres_gpus(_get(n, "allocated_gres")), len(idx)),
                gpus_used_idx=idx,
                partitions=tuple(_get(n, "partitions", default=()) or ()),
                gpu_type=gres_gpu_type_of(_get(n, "configured_gres"))))
        return out

    def set_priority(self, job_id: int, priority: int) -> None:
        desc = self._ps.JobSubmitDescription(priority=priority)
        self._call(f"priority {job_id}", self._ps.Job(job_id).modify, desc)

    def hold(self, job_ids: Sequence[int]) -> None:
        # The planner's holds are user holds (an admin's own stay apart). pyslurm
        # 25.11.2's Job.hold(mode="user") sets the hold flag on a descriptor it has not
        # yet allocated and kills the process (SIGSEGV), so: scontrol uhold.
        self._cli.hold(job_ids)

    def release(self, job_ids: Sequence[int]) -> None:
        for jid in job_ids:
            self._call(f"release {jid}", self._ps.Job(jid).release)

    def set_comment(self, job_id: int, comment: str) -> None:
        desc = self._ps.JobSubmitDescription(comment=comment)
        self._call(f"comment {job_id}", self._ps.Job(job_id).modify, desc)

    def signal(self, job_id: int, signal: str) -> None:
        # scancel: pyslurm's send_signal does not retry Slurm's "Job can not be altered
        # now, try again later", which a job just started or signalled a moment before
        # gets (a red-team: 5 and 6 of 6 signals in quick succession refused), and it
        # signals a job that stopped running since the listing (cli_backend.signal)
        self._cli.signal(job_id, signal)

    def requeue(self, job_ids: Sequence[int]) -> None:
        # pyslurm's Job.requeue has no "running jobs only" (Incomplete) flag, and would run
        # a job that finished since the listing again
        self._cli.requeue(job_ids)

    def requeue_ended(self, job_id: int) -> None:
        self._call(f"requeue {job_id}", self._ps.Job(job_id).requeue)

    def update_gpus(self, job_id: int, gpus: int, *, nodes: int | None = None,
                    gpu_type: str = "", per_job: bool = False,
                    max_nodes: int | None = None) -> None:
        # scontrol: pyslurm 25.11 reads a description's node count only at submit
        # (``_create_job_submit_desc``: ``if not self.is_update``), so a resize onto two
        # nodes kept one (found by the contract test), and the count and the GRES must
        # change in one request
        self._cli.update_gpus(job_id, gpus, nodes=nodes, gpu_type=gpu_type, per_job=per_job,
                              max_nodes=max_nodes)

    def submit(self, script: str, args: Sequence[str] = ()) -> int:
        # sbatch's option parsing is not in pyslurm's API: submission goes through sbatch
        return self._cli.submit(script, args)

    def cancel(self, job_id: int) -> None:
        self._call(f"cancel {job_id}", self._ps.Job(job_id).cancel)


def make_backend(kind: str = "auto", *, slurm_conf: str | None = None) -> Any:
    """``auto`` (default: pyslurm where it imports and matches the running Slurm, else
    the CLI), ``cli`` or ``pyslurm``; a bad name, a missing slurm.conf or an unusable
    pyslurm is one SlurmError line."""
    return open_backend(kind, slurm_conf=slurm_conf)[0]


def open_backend(kind: str = "auto", *, slurm_conf: str | None = None
                 ) -> tuple[Any, BackendChoice]:
    """make_backend's backend, and which one ``kind`` resolved to and why
    (backend_choice.resolve_backend), for the service's first log line."""
    if kind not in BACKENDS:
        raise SlurmError(f"slurm.backend: unknown backend {kind!r} ({', '.join(BACKENDS)})")
    problem = slurm_conf_problem(slurm_conf)
    if problem:
        raise SlurmError(problem)
    if slurm_conf:
        os.environ["SLURM_CONF"] = slurm_conf
    choice = resolve_backend(_Target(kind, slurm_conf))
    if choice.backend == "cli":
        return CliBackend(slurm_conf=slurm_conf), choice
    return PyslurmBackend(slurm_conf), choice


@dataclass(frozen=True)
class _Target:
    backend: str
    slurm_conf: str | None
