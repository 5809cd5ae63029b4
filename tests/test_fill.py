"""A fill step (engine/fill.py) starts waiting jobs on free GPUs and moves nothing else."""

from __future__ import annotations

from dataclasses import replace

from slurm_shockwave.engine.dry_run import DryRunActuator
from slurm_shockwave.engine.round import run_round
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import ActionKind, ReasonCode
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
