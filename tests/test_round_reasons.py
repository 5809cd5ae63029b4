"""A round's reasons say what happened to each job, whatever the policy wrote."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slurm_shockwave.engine.dry_run import DryRunActuator
from slurm_shockwave.engine.round import run_round
from slurm_shockwave.model.cluster import ClusterView, GpuNode
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import Memory, Plan, Planned, Reason, ReasonCode
from slurm_shockwave.policies.base import Policy
from tests.builders import a_job, a_view


class Says(Policy[Any]):
    """Runs ``order``; gives every job the reason ``code`` (right or wrong)."""

    name = "says"

    def __init__(self, order: tuple[int, ...], code: ReasonCode) -> None:
        super().__init__()
        self.order, self.code = order, code

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        return Planned(Plan(self.order, {j.job_id: Reason(self.code, "rho~1.2")
                                         for j in view.jobs}), memory)


class Fixed:
    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def observe(self) -> ClusterView:
        return self.view


def reasons(order: tuple[int, ...], code: ReasonCode) -> dict[int, Reason]:
    view = a_view(a_job(1, running=True, slots=("pool:0",)), a_job(2), a_job(3, gpus=4), gpus=4)
    return run_round(Fixed(view), Says(order, code), {}, DryRunActuator()).reasons


def test_a_kept_job_never_reads_preempted() -> None:
    got = reasons((1,), ReasonCode.PREEMPTED_FAIRNESS)
    assert got[1] == Reason(ReasonCode.KEPT_RUNNING, "planned preempted_fairness: rho~1.2")


def test_a_waiting_job_never_reads_backfilled_or_scheduled() -> None:
    """The plan's detail stays, marked as the plan's: a red-team read
    ``waiting_capacity(remaining~24s)``, the job's own remaining time, as its wait."""
    for code in (ReasonCode.BACKFILLED, ReasonCode.SCHEDULED):
        got = reasons((1,), code)
        assert got[2] == Reason(ReasonCode.WAITING_CAPACITY, f"planned {code.value}: rho~1.2")


def test_a_detail_that_agrees_with_the_outcome_is_not_marked() -> None:
    got = reasons((1, 2), ReasonCode.SCHEDULED)
    assert got[1] == Reason(ReasonCode.KEPT_RUNNING, "rho~1.2")
    assert got[3] == Reason(ReasonCode.WAITING_CAPACITY, "planned scheduled: rho~1.2")
    got = reasons((1,), ReasonCode.WAITING_CAPACITY)
    assert got[2] == Reason(ReasonCode.WAITING_CAPACITY, "rho~1.2")


def test_a_started_job_keeps_a_start_reason_and_a_stopped_one_reads_preempted() -> None:
    got = reasons((3,), ReasonCode.BACKFILLED)
    assert got[3].code == ReasonCode.BACKFILLED
    assert got[1] == Reason(ReasonCode.PREEMPTED_PRIORITY, "for 3; planned backfilled: rho~1.2")
    got = reasons((3,), ReasonCode.PREEMPTED_FAIRNESS)
    assert got[1] == Reason(ReasonCode.PREEMPTED_FAIRNESS, "for 3; rho~1.2")
    assert got[3].code == ReasonCode.SCHEDULED


def test_phases_are_timed_only_with_a_timer() -> None:
    view = a_view(a_job(1), gpus=4)
    ticks = iter(range(10))
    report = run_round(Fixed(view), Says((1,), ReasonCode.SCHEDULED), {}, DryRunActuator(),
                       timer=lambda: float(next(ticks)))
    assert report.phase_s == {"observe": 1.0, "plan": 1.0, "apply": 1.0}


def test_a_moved_job_says_it_restarts_on_other_gpus() -> None:
    """A node cleared for a wide job moves a running one: it keeps running, through a
    checkpoint and a restart elsewhere, and its reason says so and for whom (queue and
    explain)."""
    view = a_view(a_job(1, running=True, slots=("n0:0",)), a_job(2, running=True,
                  slots=("n1:0",)), a_job(3, gpus=4), gpus=8, gpus_per_node=4)
    got = run_round(Fixed(view), Says((3, 1, 2), ReasonCode.SCHEDULED), {},
                    DryRunActuator()).reasons
    moved = [j for j in (1, 2) if "restarts on other GPUs" in got[j].detail]
    assert len(moved) == 1 and got[moved[0]] == Reason(
        ReasonCode.KEPT_RUNNING, "restarts on other GPUs for 3; rho~1.2")
    assert got[3].code == ReasonCode.SCHEDULED


def test_a_preempted_job_names_only_the_jobs_ranked_above_it_that_take_gpus() -> None:
    """Job 1 stops for job 4, which starts ahead of it; job 2 keeps running and job 3,
    ranked below job 1, starts on the GPU left over: neither is named."""
    view = a_view(a_job(1, running=True, slots=("pool:0", "pool:1"), gpus=2),
                  a_job(2, running=True, slots=("pool:2",)), a_job(3), a_job(4, gpus=3),
                  gpus=5)
    got = run_round(Fixed(view), Says((2, 4, 1, 3), ReasonCode.SCHEDULED), {},
                    DryRunActuator()).reasons
    assert got[1] == Reason(ReasonCode.PREEMPTED_PRIORITY, "for 4; planned scheduled: rho~1.2")
    assert got[3].code == ReasonCode.SCHEDULED and got[2].code == ReasonCode.KEPT_RUNNING


def test_a_preempted_job_names_at_most_three() -> None:
    view = a_view(a_job(1, running=True, slots=("pool:0", "pool:1", "pool:2", "pool:3"),
                        gpus=4), *(a_job(j) for j in range(2, 7)), gpus=4)
    got = run_round(Fixed(view), Says((6, 5, 4, 3, 1), ReasonCode.SCHEDULED), {},
                    DryRunActuator()).reasons
    assert got[1].detail == "for 6, 5, 4 and 1 more; planned scheduled: rho~1.2"


class Sized(Says):
    """``Says`` with elastic counts in the plan."""

    def __init__(self, order: tuple[int, ...], gpus: dict[int, int]) -> None:
        super().__init__(order, ReasonCode.SCHEDULED)
        self.gpus = gpus

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        planned = super().plan(view, memory)
        return Planned(replace(planned.plan, gpus=self.gpus), memory)


def test_a_job_that_shrinks_in_place_is_not_named() -> None:
    """Job 1 keeps two of its own GPUs: it gives GPUs up and takes none."""
    view = a_view(a_job(1, running=True, slots=GpuNode("n0", 4).slots(), gpus=4),
                  a_job(2, running=True, slots=GpuNode("n1", 4).slots(), gpus=4),
                  a_job(3, gpus=2), a_job(4, gpus=2), gpus=8, gpus_per_node=4)
    got = run_round(Fixed(view), Sized((1, 3, 4, 2), {1: 2}), {}, DryRunActuator()).reasons
    assert got[2] == Reason(ReasonCode.PREEMPTED_PRIORITY, "for 3, 4; planned scheduled: rho~1.2")


def test_a_fill_step_names_nobody() -> None:
    """A fill step stops no job: one it leaves out (here, checkpointing after last
    round's preemption) was not stopped for the jobs it starts on free GPUs."""
    stopping = replace(a_job(1, running=True, slots=("pool:0", "pool:1"), gpus=2),
                       phase=Phase.CHECKPOINTING)
    view = a_view(stopping, a_job(2), gpus=4)
    got = run_round(Fixed(view), Says((2, 1), ReasonCode.SCHEDULED), {}, DryRunActuator(),
                    fill=True).reasons
    assert "for " not in got[1].detail


def test_an_elastic_job_placed_on_fewer_gpus_than_planned_says_so() -> None:
    """Found by a red-team: an elastic job the plan grew to 4 that fragmentation kept on
    its 2 read ``kept_running(... gpus=4)`` round after round; one started narrower read
    ``scheduled(... gpus=4)`` on 2."""
    def elastic(job_id: int, **kw: Any) -> Any:
        job = a_job(job_id, gpus=2, **kw)
        return replace(job, spec=replace(job.spec, gpus_range=(1, 4)))

    running = elastic(1, running=True, slots=("n0:0", "n0:1"))
    others = (a_job(2, gpus=2, running=True, slots=("n0:2", "n0:3")),
              a_job(3, gpus=2, running=True, slots=("n1:0", "n1:1")))
    view = a_view(running, *others, gpus=8, gpus_per_node=4)
    got = run_round(Fixed(view), Sized((2, 3, 1), {1: 4}), {}, DryRunActuator()).reasons
    assert got[1] == Reason(ReasonCode.KEPT_RUNNING,
                            "rho~1.2; on 2 GPUs: the plan's 4 do not fit")
    view = a_view(elastic(1), *others, gpus=8, gpus_per_node=4)
    got = run_round(Fixed(view), Sized((2, 3, 1), {1: 4}), {}, DryRunActuator()).reasons
    assert got[1] == Reason(ReasonCode.SCHEDULED, "rho~1.2; on 2 GPUs: the plan's 4 do not fit")
    fits = run_round(Fixed(a_view(elastic(1), gpus=4, gpus_per_node=4)), Sized((1,), {1: 4}),
                     {}, DryRunActuator()).reasons
    assert fits[1] == Reason(ReasonCode.SCHEDULED, "rho~1.2")
