"""GPU counts for elastic jobs: the facts and the greedy step every elastic policy shares.

A job's throughput at each count comes from its progress (``rate_by_gpus``: the
throughput table or its own reports, with the prior of ``workloads/scaling.py`` for
counts nobody measured). Its remaining time at another count is the remaining time now
scaled by the throughput ratio. A resize of a running job is a checkpoint and a
restart, so it must save more than it costs (``worth_resizing``); a waiting job starts
at whatever count is chosen for free (it pays its restore either way).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import Job, JobId
from slurm_shockwave.model.plan import Reason
from slurm_shockwave.workloads.scaling import relative_rates

SHRINK_SLOPE = 0.45
"""A waiting job is started below its request only where that raises its throughput per
GPU by at least 1 + SHRINK_SLOPE x (its remaining time at its request / the longest
job's): a near-linear job gains the cluster nothing by shrinking, and only runs longer
against a finish-time target set at its request; a short job shrunk frees GPUs soon, a
long one holds its slower count to near the end (the threshold was 1.15 for every job
until 2026-12-07: docs/evaluation.md, "Elastic jobs")."""
RESIZE_MARGIN = 2.0
"""A running job is resized only when the time it saves over the horizon is at least
this many times the resize's cost: estimates are noisy, and a resize is not undone."""
RUNNING_SHRINK_SLOPE = 0.9
"""While the waiting jobs' counts exceed the GPUs no running job holds, a running elastic
job shrinks to its most efficient smaller count where that raises its throughput per GPU
by at least 1 + RUNNING_SHRINK_SLOPE x (its remaining time at its request / the longest
job's): twice a waiting job's slope, since the shrink costs it a restart
(``shrink_running``; docs/evaluation.md, "Elastic jobs")."""
RUNNING_SHRINK_MARGIN = 4.0
"""... and where the GPU-seconds the shrink saves over the job's remaining run are at
least this many times its GPUs x the restart cost: it holds the job slower to its end."""


def usable_counts(job: Job, view: ClusterView) -> tuple[int, ...]:
    """The job's counts that the cluster can place: at most one node's GPUs, or whole
    nodes, and never more than the cluster (the current count always stays usable)."""
    k, total = view.gpus_per_node, view.total_gpus
    fits = tuple(c for c in job.spec.gpu_counts()
                 if c <= total and (c <= k or (k > 0 and c % k == 0)))
    return fits or (job.current_gpus,)


def rates(job: Job) -> dict[int, float]:
    """Throughput at each of the job's counts, its current one and its request (which
    a user may have put outside the range: ``--gres=gpu:4`` with ``gpus=1-2``): its
    progress's own figures where they cover them all, else the prior scaled from the
    count it runs on, relative to its request."""
    known = dict(job.progress.rate_by_gpus)
    counts = (*job.spec.gpu_counts(), job.current_gpus, job.spec.gpus)
    if all(c in known for c in counts):
        return known
    return relative_rates(known or {job.current_gpus: 1.0}, counts, job.spec.gpus)


def remaining_at(job: Job, count: int, remaining_now_s: float) -> float:
    """Remaining runtime on ``count`` GPUs, from the remaining runtime on its current count."""
    r = rates(job)
    return remaining_now_s * r[job.current_gpus] / r[count]


def at_count(job: Job, count: int) -> Job:
    """The job as a fixed-count job on ``count`` GPUs: what a fixed-count planner sees.
    Epoch times are scaled by the throughput ratio; slots are kept (placement resizes)."""
    if count == job.current_gpus:
        return replace(job, spec=replace(job.spec, gpus=count))
    r = rates(job)
    f = r[job.current_gpus] / r[count]
    p = job.progress
    progress = replace(p, epoch_s=p.epoch_s * f, gpus=count,
                       epoch_s_by_bs=tuple((b, s * f) for b, s in p.epoch_s_by_bs))
    return replace(job, spec=replace(job.spec, gpus=count), progress=progress)


def longest_at_request(view: ClusterView, remaining_s: Mapping[JobId, float]) -> float:
    """The longest remaining time of any job at its request: the bound no shrink may
    push a job past (shrinking the longest jobs lengthens the makespan), and the length
    the shrink slopes measure each job against."""
    return max((remaining_at(j, j.gpus, remaining_s[j.job_id]) for j in view.jobs),
               default=0.0)


def base_counts(view: ClusterView, remaining_s: Mapping[JobId, float],
                critical: float = 1.0, *, shrink: bool = True) -> dict[JobId, int]:
    """Every job's count before any growth: a running job keeps the count it runs on (a
    shrink would cost it a restart to benefit others); a waiting elastic job takes its
    usable count with the most throughput per GPU where that beats its request's by the
    gain SHRINK_SLOPE asks of its length, so a busy cluster runs the most work, unless
    at that count it would need longer than ``critical`` x the longest remaining time of
    any job at its request: shrinking the longest jobs lengthens the makespan. A fixed
    job its request.
    ``shrink=False``: a waiting elastic job takes its request (growth only)."""
    longest = longest_at_request(view, remaining_s)
    out: dict[JobId, int] = {}
    for job in view.jobs:
        if job.is_running or not job.spec.is_elastic:
            out[job.job_id] = job.current_gpus if job.spec.is_elastic else job.gpus
            continue
        r = rates(job)
        usable = usable_counts(job, view)
        request = job.gpus if job.gpus in usable else max(usable, key=lambda c: (r[c] / c, -c))
        at_request = remaining_at(job, request, remaining_s[job.job_id])
        gain = 1.0 + SHRINK_SLOPE * (at_request / longest if longest > 0 else 0.0)
        ok = [c for c in usable if c == request or (
            shrink and
            r[c] / c >= gain * r[request] / request
            and remaining_at(job, c, remaining_s[job.job_id]) <= critical * longest)]
        out[job.job_id] = max(ok, key=lambda c: (r[c] / c, -c))
    return out


def shrink_running(counts: dict[JobId, int], view: ClusterView,
                   remaining_s: Mapping[JobId, float]) -> None:
    """While the waiting jobs' counts in ``counts`` exceed the GPUs no running job holds,
    shrink each running elastic job to its most efficient smaller count where that gains
    the throughput per GPU RUNNING_SHRINK_SLOPE asks of its length, saves
    RUNNING_SHRINK_MARGIN x its GPUs x the restart cost in GPU-seconds, and does not make
    it longer than the longest job at its request (``base_counts``' rule): the GPUs go to
    waiting jobs at the cluster's best work per GPU. Updates ``counts``."""
    free = view.total_gpus - sum(j.current_gpus for j in view.jobs if j.is_running)
    if sum(counts[j.job_id] for j in view.jobs if not j.is_running) <= free:
        return
    longest = longest_at_request(view, remaining_s)
    if longest <= 0:
        return
    for job in view.jobs:
        rem, now = remaining_s[job.job_id], job.current_gpus
        if not (job.is_running and job.spec.is_elastic) or rem <= 0:
            continue
        r = rates(job)
        gain = 1.0 + RUNNING_SHRINK_SLOPE * remaining_at(job, job.gpus, rem) / longest
        floor = RUNNING_SHRINK_MARGIN * now * view.restart_cost_s
        at = {c: remaining_at(job, c, rem) for c in usable_counts(job, view) if c < now}
        ok = [c for c, t in at.items() if r[c] / c >= gain * r[now] / now
              and t <= longest and now * rem - c * t >= floor]
        if ok:
            counts[job.job_id] = max(ok, key=lambda c: (r[c] / c, -c))


def count_note(job: Job, count: int, base: int, view: ClusterView) -> str:
    """An elastic job's count as its plan reason says it (queue, plan, explain): ``gpus=N``,
    and where N is not what the job asked, why; ``base`` is its count before growth."""
    asked = job.gpus
    if count == asked:
        return f"gpus={count}"
    if count > base:
        why = "grown into GPUs that would idle"
    elif job.is_running and count == job.current_gpus:
        why = "the count it runs on"
    elif asked not in usable_counts(job, view):
        why = f"{asked} fits no node layout here"
    else:
        r = rates(job)
        why = f"{(r[count] / count) / (r[asked] / asked):.2f}x the throughput per GPU"
    return f"gpus={count} (asked {asked}: {why})"


def with_count_notes(reasons: Mapping[JobId, Reason], view: ClusterView,
                     counts: Mapping[JobId, int], base: Mapping[JobId, int]
                     ) -> dict[JobId, Reason]:
    """``reasons`` with each elastic job's ``count_note`` at the end of its detail, as
    queue, plan and explain show it; ``base``: each one's count before growth."""
    jobs = view.by_id()
    return {jid: replace(r, detail=f"{r.detail} "
                         f"{count_note(jobs[jid], counts[jid], base[jid], view)}".strip())
            if jid in jobs and jobs[jid].spec.is_elastic else r
            for jid, r in reasons.items()}


def worth_resizing(job: Job, count: int, remaining_now_s: float, horizon_s: float,
                   cost_s: float) -> bool:
    """A waiting job: always (its start pays the restore anyway). A running one: when
    the time it saves within the horizon exceeds RESIZE_MARGIN x the cost."""
    if not job.is_running or count == job.current_gpus:
        return True
    before = remaining_now_s
    after = remaining_at(job, count, remaining_now_s)
    if after >= before:
        return False
    span = min(horizon_s, before)
    saved = span * (1.0 - after / before)
    return saved >= RESIZE_MARGIN * cost_s


def grow(counts: dict[JobId, int], jobs: Sequence[Job], view: ClusterView, spare: int,
         remaining_s: Mapping[JobId, float], horizon_s: float, cost_s: float, *,
         longest_first: bool = False) -> int:
    """Give ``spare`` GPUs to the jobs in ``jobs``, one step up at a time, each time to the
    step that saves the most remaining time per extra GPU (greedy marginal gain), or with
    ``longest_first`` to the job with the most remaining time at its count (the one that
    would finish last: a makespan's order); a running job only where the resize is worth
    its cost. Updates ``counts``; returns the GPUs left over."""
    while spare > 0:
        best: tuple[tuple[float, float, int], JobId, int] | None = None
        for job in jobs:
            jid = job.job_id
            now = counts[jid]
            up = [c for c in usable_counts(job, view) if now < c <= now + spare]
            if not up or remaining_s[jid] <= 0:
                continue
            nxt = up[0]
            r = rates(job)
            at_now = remaining_at(job, now, remaining_s[jid])
            gain = at_now * (1.0 - r[now] / r[nxt]) / (nxt - now)
            if gain <= 0 or not worth_resizing(job, nxt, remaining_s[jid], horizon_s, cost_s):
                continue
            key = (at_now if longest_first else 0.0, gain, -jid)
            if best is None or key > best[0]:
                best = (key, jid, nxt)
        if best is None:
            break
        _, jid, nxt = best
        spare -= nxt - counts[jid]
        counts[jid] = nxt
    return spare
