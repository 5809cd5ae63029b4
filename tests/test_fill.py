"""A fill step (engine/fill.py) starts waiting jobs on free GPUs and moves nothing else."""

from __future__ import annotations

from dataclasses import replace

from slurm_shockwave.engine.dry_run import DryRunActuator
from slurm_shockwave.engine.fill import fill_only, fill_plan
from slurm_shockwave.engine.placement import place
from slurm_shockwave.engine.round import run_round
from slurm_shockwave.model.cluster import ClusterView, GpuNode
from slurm_shockwave.model.job import Job
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import ActionKind, Plan, ReasonCode
from tests.builders import a_job, a_view
from tests.test_round_reasons import Fixed, Says


def test_a_fill_step_starts_only_waiting_jobs_on_free_gpus() -> None:
    """The plan runs 3 and 4 only (a round would preempt 1 and cancel 2's checkpoint); the
    fill keeps 1 where it runs, lets 2's checkpoint go on, starts 3 on the one free GPU,
    and 4 (two GPUs) waits with the reason to show for it."""
    running = a_job(1, gpus=2, running=True, slots=("pool:0", "pool:1"))
    checkpointing = replace(a_job(2, running=True, slots=("pool:2",)),
                            phase=Phase.CHECKPOINTING)
    view = a_view(running, checkpointing, a_job(3), a_job(4, gpus=2), gpus=4)
    plan = Says((3, 4), ReasonCode.SCHEDULED)
    full = run_round(Fixed(view), plan, {}, DryRunActuator())
    fill = run_round(Fixed(view), plan, {}, DryRunActuator(), fill=True)
    assert {(a.kind, a.job_id) for a in full.actions} >= {(ActionKind.PREEMPT, 1),
                                                           (ActionKind.START, 4)}
    assert sorted((a.kind.value, a.job_id, a.gpu_slots) for a in fill.actions) == [
        ("keep", 1, ("pool:0", "pool:1")), ("preempt", 2, ("pool:2",)),
        ("start", 3, ("pool:3",))]
    assert fill.reasons[1].code == ReasonCode.KEPT_RUNNING
    assert fill.reasons[4].code == ReasonCode.WAITING_CAPACITY


def test_a_fill_step_with_nothing_free_does_nothing_new() -> None:
    view = a_view(a_job(1, gpus=4, running=True, slots=tuple(f"pool:{i}" for i in range(4))),
                  a_job(2), gpus=4)
    fill = run_round(Fixed(view), Says((2,), ReasonCode.SCHEDULED), {}, DryRunActuator(),
                     fill=True)
    assert [(a.kind, a.job_id) for a in fill.actions] == [(ActionKind.KEEP, 1)]


def test_a_fill_step_places_the_rounds_waiting_starts_first() -> None:
    """Job 3 was started by this round and waits (live: released) for GPUs a checkpoint
    frees; a fill step whose re-plan ranks job 4 first, or leaves 3 out, still gives
    them to 3: they are the round's, and the next round re-plans. The simulator reserves
    nothing, so there the order is the plan's."""
    view = a_view(a_job(1, gpus=2, running=True, slots=("pool:0", "pool:1")),
                  a_job(3, gpus=2), a_job(4, gpus=2), gpus=4)
    reserved = replace(view, reserved=frozenset({3}))
    for order in ((4, 3), (4,)):
        fill = run_round(Fixed(reserved), Says(order, ReasonCode.SCHEDULED), {},
                         DryRunActuator(), fill=True)
        assert sorted((a.kind.value, a.job_id) for a in fill.actions) == [
            ("keep", 1), ("start", 3)]
    plain = run_round(Fixed(view), Says((4, 3), ReasonCode.SCHEDULED), {}, DryRunActuator(),
                      fill=True)
    assert sorted((a.kind.value, a.job_id) for a in plain.actions) == [("keep", 1), ("start", 4)]


def test_a_fill_step_keeps_free_gpus_for_a_reserved_job_that_does_not_fit_yet() -> None:
    """Job 3 (3 GPUs) was started by this round and waits for a checkpoint to free a
    third GPU; job 4 may not take one of the two free now: job 3 needs them."""
    busy = a_job(1, gpus=3, running=True, slots=("pool:0", "pool:1", "pool:2"))
    view = replace(a_view(busy, a_job(3, gpus=3), a_job(4), gpus=5), reserved=frozenset({3}))
    fill = run_round(Fixed(view), Says((3, 4), ReasonCode.SCHEDULED), {}, DryRunActuator(),
                     fill=True)
    assert [(a.kind.value, a.job_id) for a in fill.actions] == [("keep", 1)]


def test_a_fill_step_places_an_elastic_job_on_the_count_it_holds() -> None:
    """Found by a review: an elastic job grown (request 2, on 6 GPUs) or shrunk (request
    4, on 2) was placed at its request in the fill step's plan, so it moved, the waiting
    job fell on GPUs it holds, and nothing started on the free ones."""
    for request, holds, waiting in ((2, 6, 2), (4, 2, 6)):
        elastic = replace(a_job(1, gpus=request, running=True,
                                slots=tuple(f"pool:{i}" for i in range(holds))),
                          spec=replace(a_job(1, gpus=request).spec, gpus_range=(1, 8)))
        view = a_view(elastic, a_job(2, gpus=waiting), gpus=8)
        plan = Says((1, 2), ReasonCode.SCHEDULED)
        fill = run_round(Fixed(view), plan, {}, DryRunActuator(), fill=True)
        assert sorted((a.kind.value, a.job_id, len(a.gpu_slots)) for a in fill.actions) == [
            ("keep", 1, holds), ("start", 2, waiting)], (request, holds)


def test_a_reserved_elastic_job_waits_on_the_count_it_was_released_at() -> None:
    """Job 3 (elastic, request 1) was released by the round on 3 GPUs (live: its GRES)
    and waits for a checkpoint to free the third; the fill step neither places it at its
    request nor lets job 4 take a GPU of the 2 free: job 3 needs them at 3."""
    busy = a_job(1, gpus=3, running=True, slots=("pool:0", "pool:1", "pool:2"))
    three = a_job(3, gpus=1)
    three = replace(three, spec=replace(three.spec, gpus_range=(1, 4)),
                    progress=replace(three.progress, gpus=3))
    view = replace(a_view(busy, three, a_job(4), gpus=5), reserved=frozenset({3}))
    fill = run_round(Fixed(view), Says((3, 4), ReasonCode.SCHEDULED), {}, DryRunActuator(),
                     fill=True)
    assert [(a.kind.value, a.job_id) for a in fill.actions] == [("keep", 1)]


def test_a_resized_job_is_started_by_a_fill_step_at_the_count_the_round_planned() -> None:
    """Found by a red-team: a running elastic job the round grew (checkpointed and
    requeued, its GRES still the old count until it is started) was placed by the next
    fill step at the count it held: released at it, it ran on 2 again, and the next round
    grew it again, a checkpoint and restart every round (fill steps are on by default).
    The round's count (``ClusterView.moving_to``) is the fill step's."""
    grown = a_job(1, gpus=2)
    grown = replace(grown, spec=replace(grown.spec, gpus_range=(1, 8)))
    view = replace(a_view(grown, gpus=8), reserved=frozenset({1}), moving_to=((1, 8),))
    fill = run_round(Fixed(view), Says((1,), ReasonCode.SCHEDULED), {}, DryRunActuator(),
                     fill=True)
    assert [(a.kind.value, a.job_id, len(a.gpu_slots)) for a in fill.actions] == [
        ("start", 1, 8)]


def _live(*jobs: Job, nodes: int, per_node: int, reserved: set[int]) -> ClusterView:
    """A live-like view: nodes ``n0..``, exact slots, ``reserved`` started this round."""
    return ClusterView(now_s=0.0, round_index=13, round_s=10.0,
                       nodes=tuple(GpuNode(f"n{i}", per_node, tuple(range(per_node)))
                                   for i in range(nodes)),
                       jobs=jobs, reserved=frozenset(reserved), exact_slots=True)


def _given_beyond_released(view: ClusterView, plan: Plan) -> tuple[set[int], int]:
    """The fill step's starts, and the GPUs it gives out beyond the free ones that the
    released reserved jobs (pending, not held: Slurm starts them wherever they fit)
    take: at most 0 where every start it releases fits."""
    placement = fill_only(view, place(view, fill_plan(view, plan)))
    waiting = {j.job_id: j for j in view.jobs if not j.is_running}
    free = view.total_gpus - sum(len(j.gpu_slots) for j in view.jobs if j.is_running)
    released = {jid for jid, j in waiting.items()
                if jid in view.reserved and j.phase == Phase.PENDING}
    given = sum(len(s) for jid, s in placement.slots.items()
                if jid in waiting and jid not in released)
    return ({jid for jid in placement.slots if jid in waiting},
            given + sum(waiting[jid].current_gpus for jid in released) - free)


def test_a_fill_step_gives_no_gpu_a_released_job_will_take() -> None:
    """Live (32 jobs / 24 GPUs, fill step id 70 of round 13): job 14 (4 GPUs, started by
    the round) and 30, 5 and 23 (started by the fill step before) were released and
    waited for the 10 free GPUs; job 11, a move back from its requeue delay (held),
    ranked first in the re-plan. Ranked after 11, job 14 was cut by the GPU count, and
    30, 5, 23, 11 and the held 1-GPU jobs 12, 16 and 3 were placed; the count of GPUs
    kept for 14 (free less its 4) missed the 6 the released ones were placed on, so
    12, 16 and 3 were released too. Slurm started 14 and 30 on the one free node and
    three jobs waited a round. The released jobs come first, and no GPU they take is
    given out again."""
    view = _live(
        a_job(17, gpus=7, running=True, slots=("n1:0", *(f"n1:{i}" for i in range(2, 8)))),
        a_job(29, gpus=7, running=True, slots=(*(f"n2:{i}" for i in range(6)), "n2:7")),
        a_job(14, gpus=4), a_job(30, gpus=4), a_job(5), a_job(23),
        *(replace(a_job(j), phase=Phase.HELD) for j in (11, 12, 16, 3)),
        nodes=3, per_node=8, reserved={14, 30, 5, 23, 11})
    starts, over = _given_beyond_released(view, Plan((11, 30, 5, 23, 12, 16, 3, 14)))
    assert starts == {14, 30, 5, 23}
    assert over <= 0


def test_a_fill_step_counts_the_gpus_a_placed_released_job_takes() -> None:
    """Job 3 (``--gres=gpu:3``, released) fits on no node yet; job 4 (released) is placed
    on one of the 4 free GPUs and job 5 (held; or reserved too, a move back from its
    requeue delay) backfilled on another: 3 + 1 + 1 on 4. The GPUs kept for job 3 must
    not be the ones job 4 takes."""
    three = a_job(3, gpus=3)
    for reserved in ({3, 4}, {3, 4, 5}):
        view = _live(a_job(1, gpus=2, running=True, slots=("n0:0", "n0:1")),
                     a_job(2, gpus=2, running=True, slots=("n1:0", "n1:1")),
                     replace(three, spec=replace(three.spec, spreads=False)),
                     a_job(4), replace(a_job(5), phase=Phase.HELD),
                     nodes=2, per_node=4, reserved=reserved)
        starts, over = _given_beyond_released(view, Plan((3, 4, 5)))
        assert starts == {4}, reserved
        assert over <= 0, reserved


def test_a_fill_step_keeps_free_gpus_for_a_move_at_the_count_the_round_planned() -> None:
    """A move back from its requeue delay (held, reserved), grown by the round from 2 to
    4 GPUs, does not fit the 3 free yet: the GPUs kept for it are its planned 4, as it
    would be placed at (``fill_plan``), not the 2 it last ran on, which left one for a
    1-GPU job it would then wait behind."""
    grown = replace(a_job(2, gpus=2), phase=Phase.HELD)
    grown = replace(grown, spec=replace(grown.spec, gpus_range=(1, 8)))
    view = replace(_live(a_job(1, running=True, slots=("n0:0",)), grown, a_job(3),
                         nodes=1, per_node=4, reserved={2}), moving_to=((2, 4),))
    placement = fill_only(view, place(view, fill_plan(view, Plan((2, 3)))))
    assert set(placement.slots) == {1}


def test_a_fill_step_keeps_free_gpus_for_a_move_whose_epilog_runs() -> None:
    """Live (32 jobs / 24 GPUs, fill step id 69): two moves the round had started, their
    jobs requeued and still COMPLETING (out of the view, in ``returning``), had their
    GPUs given to other starts, so the moves waited for the next round. Their planned
    counts are kept free."""
    moved = a_job(2, gpus=2)
    view = replace(_live(a_job(1, running=True, slots=("n0:0",)), a_job(3),
                         nodes=1, per_node=4, reserved=set()),
                   returning=(moved,), moving_to=((2, 3),))
    placement = fill_only(view, place(view, fill_plan(view, Plan((3,)))))
    assert set(placement.slots) == {1}
    # a job the round only preempted (no move) keeps nothing
    view = replace(view, moving_to=())
    assert set(fill_only(view, place(view, fill_plan(view, Plan((3,))))).slots) == {1, 3}


def test_released_jobs_are_kept_whatever_the_gpus_kept_for_another() -> None:
    """Three released jobs want 2 + 2 + 4 of 4 free GPUs: the two placed are kept (Slurm
    starts them whatever this step says, and the store must say so), though the GPUs
    kept for the unplaced one leave no room by count."""
    view = _live(a_job(1, gpus=2), a_job(2, gpus=2), a_job(3, gpus=4),
                 nodes=1, per_node=4, reserved={1, 2, 3})
    placement = fill_only(view, place(view, fill_plan(view, Plan((1, 2, 3)))))
    assert set(placement.slots) == {1, 2}
