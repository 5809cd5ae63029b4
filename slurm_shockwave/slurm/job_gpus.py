"""A Slurm job's GPUs: its request, the nodes it spreads them over, the GPU slots it holds,
the GPUs a node offers the planner, and the GRES that gives a pending job a count."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from slurm_shockwave.model.cluster import slot_node
from slurm_shockwave.slurm.hints import Hint, asked_gpus, asked_min_nodes
from slurm_shockwave.slurm.hostlist import expand_hostlist
from slurm_shockwave.slurm.protocol import SlurmBackend, SlurmJob, SlurmNode


def asked_nodes(job: SlurmJob) -> int:
    """The nodes Slurm spreads the job's GPUs over, evenly (``-N 2 --gres=gpu:4``: 4 on
    each of 2), for placement to do the same; 0 on one node, or for GPUs asked per job,
    which Slurm does not split evenly (``JobSpec.min_nodes``)."""
    nodes = job.node_count
    return nodes if (nodes > 1 and not job.per_job and job.gpus > 0
                     and job.gpus % nodes == 0) else 0


def fewest_nodes(job: SlurmJob) -> int:
    """The fewest nodes a job may run on (``JobSpec.min_nodes``): the listing's count, no
    more than job_submit.lua's ``asked_nodes=`` stamp. The listing alone says a
    requeued job's last run's count (a ``--gpus=8`` that ran 7 + 1 lists 2, then runs on
    one), the stamp alone is the submission's (an owner's ``scontrol update
    NumNodes=1-2`` lowers the listing, not the stamp; a review)."""
    stamp = asked_min_nodes(job.admin_comment)
    listed = max(job.node_count, 1)
    return listed if stamp is None else min(stamp, listed)


def request_gpus(job: SlurmJob, hint: Hint) -> int:
    """The count the planner takes for the job's request: for an elastic job the GPUs it
    was submitted with (job_submit.lua's ``asked_gpus`` stamp), since the service
    changes its GRES as it resizes it and a requeue by Slurm (a node failure, an admin's)
    keeps the changed count, which read as the request moved its fair finish time and
    its counts; else (a fixed job, or one submitted before the stamp) the count Slurm
    holds for it: the GPUs a running job was given where its request reads fewer (a
    request the listing cannot count: read as 1 GPU on 2, it was moved every other
    round; found by a review)."""
    asked = asked_gpus(job.admin_comment) if hint.gpus_range else None
    given = len(job_slots(job)) if job.state == "RUNNING" else 0
    return asked or max(job.gpus, given, 1)


def job_slots(job: SlurmJob) -> tuple[str, ...]:
    """The GPUs a running job holds, as ``node:index``. Without Slurm's per-node detail,
    the job's GPUs are spread over its nodes from index 0 (stable from round to round);
    never a COMPLETING job's (``SlurmCluster._with_last_alloc``): 22.05 lists no indices
    for a requeued one, and guessed from 0 they named another partition's GPUs, which
    the plan then gave out (found by a red-team)."""
    if job.gpu_alloc:
        return tuple(f"{node}:{i}" for node, idx in job.gpu_alloc for i in idx)
    if not job.nodes or job.gpus <= 0 or job.state == "COMPLETING":
        return ()
    try:
        names = expand_hostlist(job.nodes)
    except ValueError:
        return ()
    per = max(job.gpus // max(len(names), 1), 1)
    return tuple(f"{node}:{i}" for node in names for i in range(per))[:job.gpus]


def with_found_alloc(jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode],
                     listed: Sequence[SlurmJob]) -> list[SlurmJob]:
    """``jobs`` (of ``listed``, every job the listing has) with each running job the
    listing gave no GPU indices (its detail could not be read this round: a timeout,
    pyslurm's layout of an odd host list) given indices its nodes use that no listed job
    holds, else free ones, never a listed job's: ``job_slots`` counted from 0 took another
    job's GPUs, and the plan moved or stopped one of them (found by a red-team)."""
    held: dict[str, set[int]] = {}
    for j in listed:
        for node, idx in j.gpu_alloc:
            held.setdefault(node, set()).update(idx)
    by_name = {n.name: n for n in nodes}
    out = []
    for j in jobs:
        guessed = job_slots(j) if j.state == "RUNNING" and not j.gpu_alloc else ()
        if not guessed:
            out.append(j)
            continue
        alloc = []
        for node, count in Counter(slot_node(s) for s in guessed).items():
            n = by_name.get(node)
            taken = held.setdefault(node, set())
            used = [i for i in (n.gpus_used_idx if n else ()) if i not in taken]
            spare = [i for i in range(n.gpus if n else count) if i not in taken and i not in used]
            idx = tuple(sorted((used + spare)[:count]))
            taken.update(idx)
            alloc.append((node, idx))
        out.append(replace(j, gpu_alloc=tuple(alloc)))
    return out


def usable_gpus(node: SlurmNode, planned: set[int]) -> tuple[int, ...]:
    """The node's GPU indices the planner may count: all but those held by jobs it does not
    plan (other partitions sharing the node, or this partition's unplanned jobs). On a node
    Slurm lists ALLOCATED (every CPU taken) where a job the planner does not plan holds
    GPUs, or no planned job runs, only the planned jobs' GPUs: Slurm starts nothing on
    its free ones, and stopping the planned jobs would not free them (found by a
    red-team: a job planned there waited while its GPUs idled). Where planned jobs alone
    hold it, all count as before: stopping one frees its CPUs (a review found the
    planner's own whole-node jobs never stopped for a job that would fit)."""
    if node.gpus_used_idx or not node.gpus_used:
        others = set(node.gpus_used_idx) - planned
    else:  # a count without indices: the others hold that many, outside our own
        free = [i for i in reversed(range(node.gpus)) if i not in planned]
        others = set(free[:max(node.gpus_used - len(planned), 0)])
    if node.state[:1] == ("ALLOCATED",) and (others or not planned):
        return tuple(i for i in range(node.gpus) if i in planned)
    return tuple(i for i in range(node.gpus) if i not in others)


def gres_count(job: SlurmJob, count: int, nodes: int) -> int:
    """The GRES count Slurm holds for ``count`` GPUs on ``nodes`` nodes: per job (``--gpus``)
    the count, else per node."""
    return count if job.asks_per_job else count // nodes


def set_gpus(backend: SlurmBackend, job: SlurmJob, count: int, nodes: int, *,
             max_nodes: int | None = None) -> None:
    """Give a pending job ``count`` GPUs on ``nodes`` nodes (the node count only where it
    changes; with ``max_nodes``, the range ``nodes``-``max_nodes`` always), as it asked
    them: per job (``--gpus=N``) a count per job, which Slurm splits over nodes itself
    (12 on two free nodes of 8: 8 + 4, measured on 22.05), for Slurm refuses such a job a
    GRES per node (before, every resize of it was); else ``count`` / ``nodes`` on each,
    which the caller has made whole. The service's resizes and the hand-back's return to
    a job's request."""
    same = max_nodes is None and nodes == max(job.node_count, 1)
    backend.update_gpus(job.job_id, gres_count(job, count, nodes),
                        nodes=None if same else nodes, max_nodes=max_nodes,
                        gpu_type=job.gpu_type, per_job=job.asks_per_job)
