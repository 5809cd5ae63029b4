"""A fill step: GPUs freed between rounds go to waiting jobs at once, and nothing else moves.

Slurm alone starts the next job the moment a job ends or arrives (its scheduler runs on
those events); a round-based planner leaves freed GPUs idle until the next round, on
average half a round a job. In a fill step the policy plans as in any round (the job set
changed, so it re-plans), and of its placement only the starts of waiting jobs on GPUs
free now are kept: a running job keeps its GPUs (no preemption, move or resize) and a
checkpoint under way goes on (keeping that job would cancel it). The simulator
(``fill_freed``) and the service both take their fill steps through run_round(fill=True),
and both keep the policy's memory as the round left it: a fill step only gives out free
GPUs, and the next round re-plans with everything that changed, as without fills (a
policy's memory may count rounds, e.g. Gavel's credit; and re-planning at every fill
step, a variant measured while choosing, cost restarts: over live_screen's 20 traces, 37.5
against 29.9, makespan / bound 1.224 against 1.213).

One exception calls the next round early: a fill step (a job's end, or an arrival, which
wakes one even with no GPU free) that finds a job the plan must run now
(``Plan.moves_for``: Shockwave's critical path) which the round did not have, and which
waits. The round would stop a
job for it anyway, at its boundary (none, if the jobs holding its GPUs are finishing:
docs/planner.md, step 8); a new job whose remaining time sets the makespan
waited up to a round for it (live on t36, 100 trace seconds of its 7,350, level with
Slurm alone). Both drivers then end the round there and run the next one at once
(``round_due``).
"""

from __future__ import annotations

from dataclasses import replace

from slurm_shockwave.engine.placement import Placement
from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import JobId
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import Plan


def round_due(step_must_start: frozenset[JobId], round_must_start: frozenset[JobId]) -> bool:
    """A fill step found a job that must start now (RoundReport.must_start) that the
    round it belongs to did not: end that round and run the next at once. A job the
    round itself could not start does not call another round."""
    return bool(step_must_start - round_must_start)


def fill_plan(view: ClusterView, plan: Plan) -> Plan:
    """``plan`` with every job holding GPUs first, on the count it holds: placement keeps
    them where they are, so the waiting jobs in the plan's order are placed around them.

    Next come the jobs this round already started that still wait for GPUs
    (``view.reserved``; the round's, even where the fill step's re-plan leaves them out),
    on the count it was released at, then the rest in the plan's order. Re-planned with
    a new arrival, a fill step gave
    their GPUs to other jobs (seen live on 40 jobs / 16 GPUs: six of a round's seven
    starts displaced, held again by the next round, started two rounds late). Of them,
    the released ones (``Phase.PENDING``: Slurm starts them wherever they fit, whatever
    this step decides) come before those still held (a move back from its requeue
    delay): ranked after a held one, a released job was cut by the GPU count and its
    GPUs given out again (live, 32 jobs / 24 GPUs). The simulator starts jobs at once:
    nothing is reserved there and the order is the plan's."""
    holding = [j.job_id for j in view.jobs if j.is_running]
    held = set(holding)
    in_view = {j.job_id for j in view.jobs}
    reserved = [jid for jid in plan.order if jid in view.reserved and jid not in held]
    reserved += sorted(jid for jid in view.reserved
                       if jid in in_view and jid not in held and jid not in reserved)
    released = _released(view)
    reserved.sort(key=lambda jid: jid not in released)  # stable: else the plan's order
    first = held.union(reserved)
    # a fill step starts jobs on free GPUs only: it moves no running job
    return replace(plan, order=(*holding, *reserved,
                                *(jid for jid in plan.order if jid not in first)),
                   # an elastic job grown or shrunk holds another count than its
                   # request: placed at its request it moved, and the waiting jobs fell
                   # on GPUs it holds and were dropped
                   gpus={**{jid: n for jid, n in plan.gpus.items() if jid not in held},
                         **{j.job_id: len(j.gpu_slots) for j in view.jobs if j.is_running},
                         **_reserved_counts(view)},
                   moves_for=frozenset(), avoid_idle=False)


def _reserved_counts(view: ClusterView) -> dict[JobId, int]:
    """Each waiting reserved job's count: the one it was released at (live: its GRES),
    which Slurm starts it on, or for a move the count the round planned (its GRES is
    updated first). Placed at that count, and kept free at it while it is not placed."""
    moving = dict(view.moving_to)
    return {j.job_id: moving.get(j.job_id, j.current_gpus) for j in view.jobs
            if j.job_id in view.reserved and not j.is_running}


def _released(view: ClusterView) -> frozenset[JobId]:
    """Reserved jobs already released (live: pending, not held): Slurm starts each
    wherever its own selection fits it, whatever a fill step decides."""
    return frozenset(j.job_id for j in view.jobs
                     if j.job_id in view.reserved and j.phase == Phase.PENDING)


def fill_only(view: ClusterView, placement: Placement) -> Placement:
    """``placement`` cut to a fill step: running jobs where they run, and the waiting jobs
    it places on GPU slots no job holds. While a reserved job is not placed (the GPUs it
    waits for are not all free yet), the free GPUs it needs are kept for it: other jobs
    start only on GPUs beyond that count. A released job (``_released``) is kept
    whatever the count, and the GPUs it is placed on count too: the placement's slots
    for it are a prediction, and a job released now (a held reserved one too) starts
    only on GPUs beyond every released job's (live, 32 jobs / 24 GPUs: the GPUs three
    released jobs were placed on were counted as spare too, three held 1-GPU jobs were
    released on them, and an unplaced released 4-GPU job took their node: they waited a
    round). The count kept for a held reserved job binds the jobs the round did not
    start, as before, not another held one it started. A move still out of the view
    (``returning``: live, its Epilog runs) has its planned count kept too
    (``ClusterView.moving_to``)."""
    held = {s for j in view.jobs if j.is_running for s in j.gpu_slots}
    slots = {j.job_id: j.gpu_slots for j in view.jobs if j.phase == Phase.RUNNING}
    waiting = [j for j in view.jobs if not j.is_running]
    released = _released(view)
    count = _reserved_counts(view)
    unplaced = [jid for jid in count if placement.slots.get(jid) is None]
    back = {j.job_id for j in view.returning}
    coming = sum(n for jid, n in view.moving_to if jid in back)  # a move's Epilog runs
    spare = (sum(n.gpus for n in view.nodes) - len(held) - sum(count[j] for j in unplaced)
             - coming)
    kept_held = sum(count[j] for j in unplaced if j not in released)
    for job in sorted(waiting, key=lambda j: (j.job_id not in released,
                                              j.job_id not in view.reserved)):
        placed = placement.slots.get(job.job_id)
        if placed is None or held.intersection(placed):
            continue
        room = spare + (kept_held if job.job_id in view.reserved else 0)
        if job.job_id not in released and len(placed) > room:
            continue
        spare -= len(placed)
        held.update(placed)
        slots[job.job_id] = placed
    return Placement(slots, set(placement.fragmented))
