"""Admission: which observed jobs a policy may consider this round."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from slurm_shockwave.model.cluster import SEVERAL_TYPES, ClusterView
from slurm_shockwave.model.job import Job, JobId
from slurm_shockwave.model.plan import Reason, ReasonCode


def admit(view: ClusterView) -> tuple[ClusterView, dict[JobId, Reason]]:
    """Drop jobs that cannot be placed, with a reason, so policies need not care: never
    (wider than the partition's GPUs, or a shape no set of its nodes can give:
    ``rejected_too_large``), or not while nodes are drained, down or another partition's
    (``waiting_capacity``, live only)."""
    widths = [(n.gpu_type, n.gpus) for n in view.nodes]
    now = _by_type(widths)
    ever_widths = list(view.configured) or widths
    ever = _by_type(ever_widths)
    rejected: dict[JobId, Reason] = {}
    kept = []
    for job in view.jobs:
        kind = job.spec.gpu_type
        # an elastic job fits on its fewest (the GPUs usable shrink whenever a node is
        # drained or another partition's job runs there: reviews)
        asked = job.spec.gpu_counts()[0]  # ascending; a fixed job's is its request
        if job.is_running and job.gpus >= 1:
            kept.append(job)  # it holds its GPUs: dropped, they were given to another job
        elif asked > _room(ever, kind) or job.gpus < 1:
            rejected[job.job_id] = Reason(ReasonCode.REJECTED_TOO_LARGE,
                                          f"gpus={asked} {kind or 'cluster'}="
                                          f"{_room(ever, kind)}")
        elif asked > _room(now, kind):
            rejected[job.job_id] = Reason(
                ReasonCode.WAITING_CAPACITY,
                f"gpus={asked} usable{f' {kind}' if kind else ''}={_room(now, kind)} of "
                f"{_room(ever, kind)}: the rest drained, down or held by jobs outside the "
                "plan")
        elif (shape := _asked_shape(job, asked)) and (
                never := shape.misfit(asked, _widths(ever_widths, kind), kind)):
            rejected[job.job_id] = Reason(ReasonCode.REJECTED_TOO_LARGE, never)
        elif shape and (usable := shape.room(_widths(widths, kind))) < shape.needs:
            rejected[job.job_id] = Reason(
                ReasonCode.WAITING_CAPACITY,
                f"gpus={asked} {shape.words} usable{f' {kind}' if kind else ''}={usable} of "
                f"{shape.room(_widths(ever_widths, kind))}: the rest drained, down or held "
                "by jobs outside the plan")
        else:
            kept.append(job)
    if not rejected:
        return view, rejected
    return replace(view, jobs=tuple(kept)), rejected


@dataclass(frozen=True)
class _Shape:
    """A node shape a job asked for: in words, the room a set of node widths gives it,
    and the room it needs."""

    words: str
    room: Callable[[list[int]], int]
    needs: int

    def misfit(self, asked: int, widths: list[int], kind: str) -> str:
        """Why no set of these nodes holds the shape ("" when one does)."""
        got = self.room(widths)
        return "" if got >= self.needs else \
            f"gpus={asked} {self.words}{f' {kind}' if kind else ''}={got}"


def _asked_shape(job: Job, asked: int) -> _Shape | None:
    """The node shape a fixed job asked for, beyond a count of GPUs anywhere: its count
    on each of ``-N`` nodes, or over at least ``min_nodes`` (``-N 2 --gpus=7``), or on
    at most one node (``--gres=gpu:N``, ``-N 1 --gpus=N``) or ``max_nodes`` nodes (``-N
    1-2 --gpus=N``). None for an elastic job (the service sets its nodes with its count)
    or one spread as far as it takes. Found by a red-team: such a job wider than any node
    (``--gres=gpu:8`` on nodes of 4) was told ``waiting_fragmentation`` for ever, which
    reads as a wait, not a refusal."""
    spec = job.spec
    if spec.is_elastic:
        return None
    if spec.nodes > 1:
        per = asked // spec.nodes
        return _Shape(f"on {spec.nodes} nodes of {per}: nodes of {per}+",
                      lambda widths: sum(w >= per for w in widths), spec.nodes)
    if spec.min_nodes > 1:
        return _Shape(f"on {spec.min_nodes}+ nodes: nodes", lambda widths: sum(
            w >= 1 for w in widths), spec.min_nodes)
    most = 1 if not spec.spreads else spec.max_nodes
    if not most:
        return None
    return _Shape(f"on {'one node' if most == 1 else f'at most {most} nodes'}: room",
                  lambda widths: sum(sorted(widths, reverse=True)[:most]), asked)


def _widths(pairs: Iterable[tuple[str, int]], kind: str) -> list[int]:
    """The GPUs of each node a job asking ``kind`` may use (``_room``'s nodes)."""
    return [gpus for k, gpus in pairs if not kind or k in (kind, SEVERAL_TYPES)]


def _by_type(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind, gpus in pairs:
        out[kind] = out.get(kind, 0) + gpus
    return out


def _room(of_type: dict[str, int], kind: str) -> int:
    """The GPUs a job asking ``kind`` may have: all for "", else its type's and those of
    nodes of several types."""
    return of_type.get(kind, 0) + of_type.get(SEVERAL_TYPES, 0) if kind \
        else sum(of_type.values())
