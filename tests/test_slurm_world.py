"""Actuation logic against the in-memory fake (the real daemons: test_slurm_cluster.py)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import Action, ActionKind, Outcome
from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.slurm.fake import FakeSlurm
from slurm_shockwave.slurm.hints import parse_hint
from slurm_shockwave.slurm.intents import CheckpointIntent, MemoryIntents
from slurm_shockwave.slurm.listing import managed
from slurm_shockwave.slurm.protocol import SlurmError, SlurmJob, SlurmNode, SlurmUnanswered
from slurm_shockwave.slurm.table_progress import table_progress
from slurm_shockwave.slurm.world import SlurmCluster
from slurm_shockwave.workloads.bundled import bundled_table
from tests.builders import WallLikeClock as Clock
from tests.test_slurm_silence import Silent

HINT = "shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=gns signal=USR1 grace=30"



def cluster(*jobs: SlurmJob) -> tuple[SlurmCluster, FakeSlurm, Clock]:
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave", "other")),
                      SlurmNode("n2", ("IDLE", "DRAIN"), 4, 0, ("shockwave",))])
    for j in jobs:
        fake.add(j)
    clock = Clock()
    return SlurmCluster(fake, clock), fake, clock


def held(jid: int, gpus: int = 1, partition: str = "shockwave") -> SlurmJob:
    return SlurmJob(jid, f"j{jid}", "alice", partition, "PENDING", held=True, gpus=gpus,
                    admin_comment=HINT if partition == "shockwave" else "", submit_time=900)


def running(jid: int, gpus: int = 1) -> SlurmJob:
    return SlurmJob(jid, f"j{jid}", "alice", "shockwave", "RUNNING", gpus=gpus,
                    admin_comment=HINT, nodes="n1", submit_time=900)


def test_observe_reads_managed_jobs_hints_and_usable_nodes() -> None:
    world, _, _ = cluster(held(1), running(2, 2), held(3, partition="other"),
                          SlurmJob(4, "bad", "bob", "shockwave", "PENDING", held=True,
                                   comment="model=gpt bs=0 epochs=1"))
    view = world.observe()
    assert [n.name for n in view.nodes] == ["n1"]  # n2 is drained
    jobs = {j.job_id: j for j in view.jobs}
    assert set(jobs) == {1, 2}
    assert jobs[1].phase == Phase.HELD and jobs[2].phase == Phase.RUNNING
    assert jobs[2].spec.model == "ResNet-18" and jobs[2].spec.num_epochs == 9
    assert jobs[2].gpus == 2 and len(jobs[2].gpu_slots) == 2
    assert "'bs'" in world.bad_hints[4] or "bs:" in world.bad_hints[4]


@pytest.mark.parametrize("flag", ["DRAIN", "NOT_RESPONDING"])
def test_a_job_on_a_node_slurm_gives_no_new_work_is_left_to_finish_there(flag: str) -> None:
    """A drain lets running jobs finish, and a node not responding for a moment still runs
    them: such a job is left out of the plan, neither moved nor stopped (found by a
    review: it was checkpointed off the node, and with no room elsewhere a job on a
    healthy node was stopped for it), and its GPUs on other nodes go to no other job."""
    plain = HINT.replace(" signal=USR1 grace=30", "")
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave",)) for i in (1, 2, 3)])
    fake.add(SlurmJob(1, "j1", "alice", "shockwave", "RUNNING", gpus=2, nodes="n2",
                      admin_comment=plain, submit_time=900))
    fake.add(SlurmJob(2, "j2", "alice", "shockwave", "RUNNING", gpus=4, nodes="n1",
                      admin_comment=plain, submit_time=901))
    fake.add(SlurmJob(3, "j3", "bob", "shockwave", "RUNNING", gpus=4, nodes="n[2-3]",
                      node_count=2, admin_comment=plain, submit_time=902))
    fake.add(held(4, gpus=4))
    world = SlurmCluster(fake, Clock())
    world.observe()
    fake.nodes[1] = replace(fake.nodes[1], state=("ALLOCATED", flag))
    view = world.observe()
    assert {j.job_id for j in view.jobs} == {2, 4}
    assert world.left_out.on_closed_node == {1: f"n2 is ALLOCATED+{flag}",
                                             3: f"n2 is ALLOCATED+{flag}"}
    assert [(n.name, n.gpus) for n in view.nodes] == [("n1", 4), ("n3", 2)]  # job 3's 2
    result = world.apply([Action(ActionKind.KEEP, 2), Action(ActionKind.START, 4)])
    assert all(r.outcome == Outcome.APPLIED for r in result.results)
    assert [fake.jobs[j].state for j in (1, 2, 3)] == ["RUNNING"] * 3
    assert fake.signals == [] and fake.jobs[1].restart_count == 0


def test_only_a_running_job_that_holds_no_gpu_is_left_to_slurm_without_gpus() -> None:
    """Found by a review: a job holding GPUs whose request reads 0 (`--gpus-per-task`,
    which the listing does not count) was left out of the plan for good as 'asked for no
    GPU'; one that holds none is, and a requeued job in its delay whose hint does not
    read is one row (not eligible), not also a bad hint."""
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(SlurmJob(1, "j1", "alice", "shockwave", "RUNNING", gpus=0, nodes="n1",
                      gpu_alloc=(("n1", (0, 1)),), admin_comment=HINT, submit_time=900))
    fake.add(SlurmJob(2, "j2", "alice", "shockwave", "RUNNING", gpus=0, nodes="n1",
                      admin_comment=HINT, submit_time=900))
    clock = Clock()
    fake.add(SlurmJob(3, "j3", "alice", "shockwave", "PENDING", comment="my run",
                      restart_count=1, eligible_time=int(clock.now()) + 60, gpus=1))
    world = SlurmCluster(fake, clock)
    view = world.observe()
    assert [j.job_id for j in view.jobs] == [1] and view.jobs[0].gpu_slots == ("n1:0", "n1:1")
    assert view.jobs[0].gpus == 2  # its request, as given: read as 1, it was moved to 1
    assert world.left_out.without_gpus == frozenset({2}) and not view.returning
    assert set(world.left_out.not_eligible) == {3} and not world.left_out.bad_hints


def test_a_node_whose_cpus_are_all_taken_offers_only_the_planned_jobs_gpus() -> None:
    """Found by a red-team: a node Slurm lists ALLOCATED (an ``--exclusive`` job of
    another partition, or jobs that took every core) still offered its free GPUs, and a
    job planned there waited while they idled. Only the GPUs of the planned jobs that
    hold them count where a job the plan does not hold is there too, or no planned job
    runs; where planned jobs alone take it all count (stopping one frees its CPUs), and
    a MIXED node's free GPUs still do."""
    plain = HINT.replace(" signal=USR1 grace=30", "")
    fake = FakeSlurm([SlurmNode("n1", ("ALLOCATED",), 8, 0, ("shockwave", "other")),
                      SlurmNode("n2", ("ALLOCATED",), 8, 0, ("shockwave",)),
                      SlurmNode("n3", ("MIXED",), 8, 0, ("shockwave",))])
    fake.add(SlurmJob(1, "x", "bob", "other", "RUNNING", gpus=3, nodes="n1"))
    fake.add(SlurmJob(2, "j2", "alice", "shockwave", "RUNNING", gpus=2, nodes="n2",
                      admin_comment=plain, submit_time=900))
    fake.add(SlurmJob(3, "j3", "alice", "shockwave", "RUNNING", gpus=2, nodes="n3",
                      admin_comment=plain, submit_time=900))
    fake.add(held(4, gpus=4))
    fake.nodes.append(SlurmNode("n4", ("ALLOCATED",), 8, 0, ("shockwave",)))  # CPU jobs
    view = SlurmCluster(fake, Clock()).observe()
    # n2: only the planned job 2 there, which the plan may stop to free its CPUs: all 8
    assert [(n.name, n.gpus) for n in view.nodes] == [("n2", 8), ("n3", 8)]


def test_a_job_on_a_node_taken_out_of_the_partition_is_left_to_finish_there() -> None:
    """Found by a review: a node taken out of the partition (scontrol update partition
    nodes=...) keeps running its jobs, but the view knew no such node, so even FIFO
    preempted the job there, for nothing."""
    plain = HINT.replace(" signal=USR1 grace=30", "")
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave",)) for i in (1, 2)])
    fake.add(SlurmJob(1, "j1", "alice", "shockwave", "RUNNING", gpus=2, nodes="n2",
                      admin_comment=plain, submit_time=900))
    fake.add(held(2, gpus=4))
    world = SlurmCluster(fake, Clock())
    world.observe()
    fake.nodes[1] = replace(fake.nodes[1], partitions=("other",))
    view = world.observe()
    assert {j.job_id for j in view.jobs} == {2}
    assert world.left_out.on_closed_node == {1: "n2 is no longer in partition shockwave"}
    del fake.nodes[1]  # and out of slurm.conf
    world.observe()
    assert world.left_out.on_closed_node == {1: "n2 is no longer in partition shockwave"}


@pytest.mark.parametrize(("flags", "usable"), [(("IDLE", "POWERED_DOWN"), True),
                                               (("IDLE", "RESERVED"), False)])
def test_power_saving_nodes_are_planned_and_reserved_ones_not(flags: tuple[str, ...],
                                                             usable: bool) -> None:
    """Found by a review: with power saving (SuspendTime) idle nodes are powered down,
    and left out of the view the partition had no GPUs: every job stayed held. Slurm
    powers a node up for a job it starts there. A node in a reservation runs only the
    reservation's jobs."""
    fake = FakeSlurm([SlurmNode("n1", flags, 4, 0, ("shockwave",))])
    fake.add(held(2, gpus=4))
    view = SlurmCluster(fake, Clock()).observe()
    assert sum(n.gpus for n in view.nodes) == (4 if usable else 0)


def test_a_requeued_job_keeps_its_first_arrival() -> None:
    """Slurm moves a requeued job's submit time to the requeue: the view keeps the first
    one, from job_submit.lua's stamp (which a restarted service reads too), else from
    the earliest submit time this world has seen."""
    stamped = replace(running(1), admin_comment=f"{HINT} submitted=800")
    world, fake, _ = cluster(stamped, running(2))
    assert {j.job_id: j.spec.arrival_s for j in world.observe().jobs} == {1: 800, 2: 900}
    assert world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.PREEMPT, 2)])
    fake.requeue([1, 2])
    assert fake.jobs[1].submit_time > 900 and fake.jobs[2].submit_time > 900
    fake.tick(fake.cred_expire_s + 1)
    arrivals = {j.job_id: j.spec.arrival_s for j in world.observe().jobs}
    assert arrivals == {1: 800, 2: 900}
    restarted = SlurmCluster(fake, Clock())  # a service restart: only the stamp is left
    assert {j.job_id: j.spec.arrival_s for j in restarted.observe().jobs}[1] == 800
    assert world.observe().jobs[0].spec.model == "ResNet-18"  # the hint without the stamp
    # Slurm gives id 1 to a new job between two observations (found by a review: the new
    # job took the old one's arrival): its own stamp, not the earliest seen, is its arrival
    fake.jobs[1] = replace(held(1), admin_comment=f"{HINT} submitted=5000", submit_time=5000)
    assert {j.job_id: j.spec.arrival_s for j in world.observe().jobs}[1] == 5000


def test_start_releases_then_pins_priority_in_plan_order() -> None:
    world, fake, _ = cluster(held(1), held(2), held(3))
    world.observe()
    result = world.apply([Action(ActionKind.START, 2), Action(ActionKind.START, 1)])
    assert result.count(Outcome.APPLIED) == 2
    assert fake.jobs[2].priority > fake.jobs[1].priority > 0
    assert fake.jobs[3].held  # not in the plan: stays held
    fake.tick()
    assert fake.jobs[2].state == "RUNNING" and fake.jobs[1].state == "RUNNING"


def test_a_fill_step_sees_the_rounds_waiting_starts_as_reserved() -> None:
    """Job 2 is started by round 5 while job 1's checkpoint holds the GPUs: a fill step of
    round 5 (same index) sees job 2 reserved, the next round does not."""
    world, _, _ = cluster(running(1, 4), held(2, 4))
    world.round_index = 5
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.START, 2)])
    assert world.observe().reserved == frozenset({2})
    world.round_index = 6
    assert world.observe().reserved == frozenset()


def test_a_job_released_by_its_owner_is_held_again() -> None:
    world, fake, _ = cluster(held(1))
    fake.release([1])  # the owner, behind the planner's back
    world.observe()
    world.apply([])
    assert fake.jobs[1].held


def test_the_planners_hold_is_a_user_hold_and_it_releases_it() -> None:
    world, fake, _ = cluster(replace(held(1), reason="JobHeldUser"))
    fake.release([1])
    world.observe()
    world.apply([])  # not started: held again, as job_submit.lua holds (a user hold)
    assert fake.jobs[1].held and fake.jobs[1].reason == "JobHeldUser"
    world.observe()
    result = world.apply([Action(ActionKind.START, 1)])
    assert result.results[0].outcome == Outcome.APPLIED and not fake.jobs[1].held


def test_a_job_an_admin_holds_stays_held_and_out_of_the_plan_until_released() -> None:
    """`scontrol hold` as root is an admin hold, which the planner never makes: the job is
    left out of the view (so never started), never released, listed for queue and
    explain; once the admin releases it, the planner holds it as its own again."""
    world, fake, _ = cluster(replace(held(1), reason="JobHeldAdmin"), held(2))
    view = world.observe()
    assert [j.job_id for j in view.jobs] == [2]
    assert set(world.left_out.admin_held) == {1} and 1 not in world.left_out.not_eligible
    world.apply([Action(ActionKind.START, 1), Action(ActionKind.START, 2)])
    assert fake.jobs[1].held and fake.jobs[1].reason == "JobHeldAdmin"
    fake.release([1])  # the admin
    assert world.arrived()  # a fill step plans it at once
    assert [j.job_id for j in world.observe().jobs] == [1, 2]
    world.apply([])
    assert fake.jobs[1].held and fake.jobs[1].reason == "JobHeldUser"


def test_jobs_an_earlier_build_held_as_admin_become_the_planners_once() -> None:
    from slurm_shockwave.slurm.hints import PREFIX

    ours = replace(held(1), reason="JobHeldAdmin", admin_comment=f"{PREFIX} bs=32 epochs=2")
    unmanaged = replace(held(2), reason="JobHeldAdmin", admin_comment="")
    preempted = replace(ours, job_id=3, reason="job requeued in held state")
    world, fake, _ = cluster(ours, unmanaged, preempted)
    assert world.take_over_admin_holds() == [1, 3]
    assert fake.jobs[1].reason == "JobHeldUser" and fake.jobs[2].reason == "JobHeldAdmin"
    assert fake.jobs[3].held and fake.jobs[3].reason == "JobHeldUser"


def test_a_requeuehold_is_its_owners_kept_marked_and_the_planners_preemption_a_user_hold(
) -> None:
    """`scontrol requeuehold` leaves "job requeued in held state", which stays through any
    later hold: the planner never makes it (it requeues, then holds as a user). Slurm
    records no requester and lets the owner release it (a user hold), so the job is its
    owner's: left out of the plan, never released, and marked `held=requeue` in its
    comment, once, so that job_submit.lua lets the owner's release through. Slurm's own
    hold after a failed launch is the planner's to release."""
    world, fake, clock = cluster(running(1), running(2))
    fake.jobs[1] = replace(fake.jobs[1], admin_comment=HINT.replace(" signal=USR1 grace=30", ""))
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1)])
    assert fake.jobs[1].held and fake.jobs[1].reason == "JobHeldUser"
    fake.jobs[2] = replace(fake.jobs[2], state="PENDING", held=True, comment="bs=32 epochs=9",
                           reason="job requeued in held state")  # its owner's requeuehold
    fake.add(replace(held(3), reason="launch failed requeued held"))
    clock.t += 60
    view = world.observe()
    assert {j.job_id for j in view.jobs} == {1, 3} and set(world.left_out.owner_held) == {2}
    assert not world.left_out.admin_held
    marks: list[tuple[int, str]] = []
    set_comment = fake.set_comment
    fake.set_comment = lambda jid, text: (marks.append((jid, text)),  # type: ignore[method-assign]
                                          set_comment(jid, text))[1]
    world.apply([Action(ActionKind.START, 2), Action(ActionKind.START, 3)])
    assert fake.jobs[2].held and fake.jobs[2].comment == "bs=32 epochs=9 held=requeue"
    assert not fake.jobs[3].held
    world.observe()
    world.apply([])
    assert marks == [(2, "bs=32 epochs=9 held=requeue")]  # once


def test_a_job_its_owner_holds_stays_held_and_out_of_the_plan_until_they_release_it(
) -> None:
    """job_submit.lua marks an owner's `scontrol hold` in the job's comment: the world
    leaves the job out of the view (never started, never released, even when a plan names
    it), lists it for queue and explain, and reads its hint without the mark. Once the
    owner releases it (job_submit.lua clears the mark and leaves the planner's hold), the
    planner plans it again and releases it when it starts it."""
    raw = "model=ResNet-18 bs=32 epochs=9"
    world, fake, _ = cluster(replace(held(1), reason="JobHeldUser", comment=f"{raw} held=owner"),
                             replace(held(2), reason="JobHeldUser", admin_comment="",
                                     comment=f"{raw} held=owner"),
                             held(3))
    view = world.observe()
    assert [j.job_id for j in view.jobs] == [3]
    assert set(world.left_out.owner_held) == {1, 2} and not world.left_out.admin_held
    assert not world.left_out.not_eligible and not world.bad_hints
    assert managed(fake.jobs[2])  # its hint is its comment without the mark
    world.apply([Action(ActionKind.START, 1), Action(ActionKind.START, 2),
                 Action(ActionKind.START, 3)])
    assert fake.jobs[1].held and fake.jobs[2].held and not fake.jobs[3].held
    assert fake.jobs[1].comment == f"{raw} held=owner"  # the service never touches it
    fake.jobs[1] = replace(fake.jobs[1], comment=raw)  # the owner's release, as the lua does
    assert [j.job_id for j in world.observe().jobs] == [1, 3]
    world.apply([Action(ActionKind.START, 1)])
    assert not fake.jobs[1].held
    # an admin's hold of a job its owner holds comes first: the admin's to give back
    fake.jobs[2] = replace(fake.jobs[2], reason="JobHeldAdmin")
    world.observe()
    assert set(world.left_out.admin_held) == {2} and not world.left_out.owner_held


def test_preemption_signals_waits_for_grace_then_requeue_holds() -> None:
    world, fake, clock = cluster(running(1))
    world.observe()
    first = world.apply([Action(ActionKind.PREEMPT, 1)])
    assert fake.signals == [(1, "USR1")]
    assert first.results[0].outcome == Outcome.DEFERRED
    assert fake.jobs[1].state == "RUNNING"
    view = world.observe()
    assert view.jobs[0].phase == Phase.CHECKPOINTING
    clock.t += 31  # past the hint's 30 s grace
    world.observe()
    second = world.apply([Action(ActionKind.PREEMPT, 1)])
    assert second.results[0].outcome == Outcome.APPLIED
    assert fake.signals == [(1, "USR1")]  # signalled once
    job = fake.jobs[1]
    assert job.state == "PENDING" and job.held and job.restart_count == 1
    assert job.eligible_time == fake.now + fake.cred_expire_s + 1


def test_a_job_the_checkpoint_signal_killed_is_requeued_not_lost() -> None:
    """Seen live: a job preempted 81 ms after its start died of SIGUSR1 before its script
    ignored it (WTERMSIG 10); Slurm counted it FAILED, and it was lost. The service keeps
    the intent while the job completes, then runs it again, held for the plan."""
    world, fake, _ = cluster(running(1), running(2))
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.PREEMPT, 2)])
    assert fake.signals == [(1, "USR1"), (2, "USR1")]
    fake.jobs[1] = replace(fake.jobs[1], state="COMPLETING")
    fake.jobs[2] = replace(fake.jobs[2], state="COMPLETING")
    world.observe()
    world.apply([])  # a round while they complete forgets neither intent
    assert set(world.intents) == {1, 2}
    fake.finish(1, "FAILED", signal=10)
    fake.finish(2, "FAILED", signal=9)  # not the checkpoint signal: its own end
    world.observe()  # observing changes nothing in Slurm (a dry run observes too)
    assert fake.jobs[1].state == "FAILED" and set(world.intents) == {1}
    done = world.apply([])
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].held
    assert fake.jobs[1].restart_count == 1
    assert fake.jobs[2].state == "FAILED" and world.intents == {}
    # and the round's actions say so, for explain (a user walkthrough: only the service's
    # log said why the job had died)
    [rerun] = done.results
    assert (rerun.action, rerun.outcome) == (Action(ActionKind.PREEMPT, 1), Outcome.APPLIED)
    assert rerun.message == ("killed by SIGUSR1, the checkpoint signal, before it could "
                             "handle it: requeued, to restart from its last checkpoint")


def test_a_signalled_job_slurm_has_purged_is_named_not_forgotten_silently(caplog) -> None:
    """A job the checkpoint signal killed while the service was down, purged by Slurm
    (MinJobAge) before it came back, cannot be run again: the log names it, once."""
    log = MemoryIntents({7: CheckpointIntent(7, "USR1", 500.0, 530.0, 0)})
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    world = SlurmCluster(fake, Clock(), intents=log)
    with caplog.at_level("WARNING"):
        world.observe()
        world.observe()
    named = [r.getMessage() for r in caplog.records if "job 7:" in r.getMessage()]
    assert len(named) == 1 and "no longer lists it" in named[0]
    assert log.load_intents() == {}

    class Unwritable(MemoryIntents):  # a full disk: the intent stays, said when forgotten
        def forget_intent(self, job_id):  # type: ignore[no-untyped-def]
            raise OSError("disk full")

    caplog.clear()
    world = SlurmCluster(fake, Clock(), intents=Unwritable(
        {7: CheckpointIntent(7, "USR1", 500.0, 530.0, 0)}))
    with caplog.at_level("WARNING"):
        world.observe()
        world.observe()
    assert not [r for r in caplog.records if "no longer lists it" in r.getMessage()]


def test_an_intent_is_not_taken_for_another_job_given_the_same_id() -> None:
    """Slurm's state reset while the service was down gives ids out again: a new job 1,
    started after the stored intent's signal, at the same restart count (0), was taken
    for the signalled run and requeued at the intent's deadline."""
    log = MemoryIntents({1: CheckpointIntent(1, "USR1", 500.0, 530.0, 0)})
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(replace(running(1), start_time=900))  # after the signal at 500
    world = SlurmCluster(fake, Clock(), intents=log)
    view = world.observe()
    assert view.jobs[0].phase == Phase.RUNNING and log.load_intents() == {}
    world.apply([Action(ActionKind.START, 1)])
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].restart_count == 0
    # but a clock of slurmctld's up to MUNGE's 300 s ahead is the same run: with 60 s, a
    # review saw a job 120 s ahead signalled again every round
    clock = Clock()
    fake.jobs[2] = replace(running(2), start_time=int(clock.t) + 120)
    world = SlurmCluster(fake, clock)
    for _ in range(3):
        world.observe()
        world.apply([Action(ActionKind.PREEMPT, 2)])
        clock.t += 10
    assert fake.signals == [(2, "USR1")]


def test_a_job_cancelled_or_timed_out_by_the_checkpoint_signal_stays_ended() -> None:
    """With ``signal=TERM`` a job its owner cancels, or that reaches its time limit, while
    its checkpoint is in flight has the signal's status too (found by a review): only a
    FAILED job is one the service's signal killed."""
    term = HINT.replace("signal=USR1", "signal=TERM")
    for end in ("CANCELLED", "TIMEOUT"):
        world, fake, _ = cluster(replace(running(1), admin_comment=term))
        world.observe()
        world.apply([Action(ActionKind.PREEMPT, 1)])
        fake.finish(1, end, signal=15)
        world.observe()
        world.apply([])
        assert fake.jobs[1].state == end and world.intents == {}


def test_another_partitions_job_the_signal_killed_keeps_its_intent() -> None:
    """On a shared store, a round of another partition leaves the intent of a job the
    signal killed to the service of its own partition, which runs it again (found by a
    review: it was forgotten, and the job lost)."""
    world, fake, clock = cluster(running(1))
    log = MemoryIntents()
    world = SlurmCluster(fake, clock, intents=log)
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1)])
    fake.finish(1, "FAILED", signal=10)
    other = SlurmCluster(fake, clock, partition="other", intents=log)
    other.observe()
    other.apply([])
    assert set(log.load_intents()) == {1} and fake.jobs[1].state == "FAILED"
    again = SlurmCluster(fake, clock, intents=log)
    again.observe()
    again.apply([])
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].held and log.load_intents() == {}


def test_a_preemption_does_not_run_a_job_that_ended_since_the_round_saw_it(
        caplog: pytest.LogCaptureFixture) -> None:
    """A plain ``scontrol requeue`` runs a finished batch job again (measured on 22.05);
    the planner's requeue is for running jobs only, and says the job had ended, with no
    hold tried (a review found "requeued but not held" logged for it)."""
    plain = HINT.replace(" signal=USR1 grace=30", "")
    world, fake, _ = cluster(replace(running(1), admin_comment=plain), running(2))
    world.observe()
    fake.finish(1)  # between the observation and the requeue
    result = world.apply([Action(ActionKind.PREEMPT, 1)])
    assert fake.jobs[1].state == "COMPLETED" and fake.jobs[1].restart_count == 0
    assert [(r.outcome, r.message) for r in result.results] == [
        (Outcome.REJECTED, "ended before its requeue (gone)")]
    assert "not held" not in caplog.text
    # a checkpoint acknowledged as the job ends: no requeue reported, the intent kept
    world.apply([Action(ActionKind.PREEMPT, 2)])  # signalled
    fake.jobs[2] = replace(fake.jobs[2], state="COMPLETING")
    ack = ProgressReport(2, ReportKind.CHECKPOINTED, world.clock.now() + 1)
    assert not world.complete_checkpoint(ack) and set(world.intents) == {2}
    assert "not held" not in caplog.text


def test_a_round_of_another_partition_on_the_same_store_keeps_the_checkpoint_in_flight(
) -> None:
    """A one-shot `plan --apply --partition other` (or a service started with another
    partition) on the store of a service that has signalled job 1: it must not forget
    that intent (job 1 is not in its listing but still checkpointing), or the service,
    restarted, would signal the job a second time."""
    world, fake, clock = cluster(running(1))
    log = MemoryIntents()
    world = SlurmCluster(fake, clock, intents=log)
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1)])
    assert fake.signals == [(1, "USR1")] and set(log.load_intents()) == {1}
    other = SlurmCluster(fake, clock, partition="other", intents=log)
    other.observe()
    other.apply([])
    assert set(log.load_intents()) == {1} and fake.jobs[1].state == "RUNNING"
    again = SlurmCluster(fake, clock, intents=log)  # the service, restarted
    again.observe()
    assert again.apply([Action(ActionKind.PREEMPT, 1)]).results[0].outcome == Outcome.DEFERRED
    clock.t += 31
    again.observe()
    assert again.apply([Action(ActionKind.PREEMPT, 1)]).results[0].outcome == Outcome.APPLIED
    assert fake.signals == [(1, "USR1")]  # once
    fake.cancel(1)  # gone from Slurm: the other partition's round now confirms it
    log.record_intent(CheckpointIntent(1, "USR1", clock.t, clock.t + 30, 0))
    other.observe()
    assert log.load_intents() == {}


def test_a_partition_an_admin_took_down_is_left_as_it_is(
        caplog: pytest.LogCaptureFixture) -> None:
    """Slurm starts nothing in a DOWN partition: preempting a running job for a waiting one
    would only idle the GPUs. Nothing is signalled, released or requeued until it is UP.
    The log says each change (a red-team: INACTIVE to DRAIN was said "DRAIN again")."""
    world, fake, _ = cluster(running(1, 4), held(2, 4))
    fake.partition_states["shockwave"] = "INACTIVE"
    with caplog.at_level(logging.WARNING):
        world.observe()
        fake.partition_states["shockwave"] = "DRAIN"
        world.observe()
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "partition shockwave is INACTIVE", "partition shockwave is DRAIN, no longer INACTIVE"]
    fake.partition_states["shockwave"] = "DOWN"
    world.observe()
    result = world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.START, 2)])
    assert [r.outcome for r in result.results] == [Outcome.DEFERRED, Outcome.DEFERRED]
    assert "partition shockwave is DOWN" in result.results[0].message
    assert fake.signals == [] and fake.jobs[1].state == "RUNNING" and fake.jobs[2].held
    fake.partition_states["shockwave"] = "UP"
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.START, 2)])
    assert fake.signals == [(1, "USR1")]


def test_an_acknowledged_checkpoint_requeues_at_once() -> None:
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(running(1))
    world = SlurmCluster(fake, Clock(), acked=lambda jid, _since, _run: jid == 1)
    world.observe()
    assert world.apply([Action(ActionKind.PREEMPT, 1)]).results[0].outcome == Outcome.APPLIED
    assert fake.jobs[1].state == "PENDING"


def test_other_partitions_are_never_touched() -> None:
    world, fake, _ = cluster(held(5, partition="other"),
                             SlurmJob(6, "x", "bob", "other", "PENDING"))
    before = dict(fake.jobs)
    world.observe()
    world.apply([Action(ActionKind.START, 5)])
    assert fake.jobs == before


def test_one_bad_job_does_not_block_a_batch() -> None:
    world, fake, _ = cluster(held(1), held(2))
    world.observe()
    del fake.jobs[1]  # vanished between observe and apply
    result = world.apply([Action(ActionKind.START, 1), Action(ActionKind.START, 2)])
    outcomes = {r.action.job_id: r.outcome for r in result.results}
    assert outcomes == {1: Outcome.REJECTED, 2: Outcome.APPLIED}
    assert "Invalid job id" in next(r.message for r in result.results if r.action.job_id == 1)


def test_a_batch_requeue_one_job_of_which_is_gone_holds_every_job_it_requeued() -> None:
    """Slurm goes on past a job it refuses to requeue (scontrol) or stops at it (pyslurm),
    and a requeue cannot be sent twice: after the failed call the queue is read again, a
    job the call requeued is held, one gone is left, one still running is requeued
    alone. Before, job 1 was retried, refused as pending, and left unheld: Slurm started
    it again on its own."""
    plain = HINT.replace(" signal=USR1 grace=30", "")  # preempted by requeue at once
    world, fake, _ = cluster(*(replace(running(j), admin_comment=plain) for j in (1, 2, 3)))
    world.observe()
    del fake.jobs[2]  # ended and purged between the observation and the apply
    result = world.apply([Action(ActionKind.PREEMPT, j) for j in (1, 2, 3)])
    outcomes = {r.action.job_id: r.outcome for r in result.results}
    assert outcomes == {1: Outcome.APPLIED, 2: Outcome.REJECTED, 3: Outcome.APPLIED}
    assert "ended before its requeue (gone)" in next(
        r.message for r in result.results if r.action.job_id == 2)
    for j in (1, 3):
        assert fake.jobs[j].state == "PENDING" and fake.jobs[j].held
        assert fake.jobs[j].restart_count == 1


def test_a_model_the_table_does_not_know_is_planned_from_a_prior() -> None:
    limit = SlurmJob(5, "own", "bob", "shockwave", "PENDING", held=True, gpus=2,
                     admin_comment="shockwave:v1 model=my-gpt bs=16 epochs=10 mode=static",
                     time_limit_s=36000)
    none = replace(limit, job_id=6, time_limit_s=0)
    world, _, _ = cluster(limit, none)
    jobs = {j.job_id: j for j in world.observe().jobs}
    assert jobs[5].spec.model == "my-gpt" and jobs[5].progress.epoch_s == 3600.0
    assert jobs[6].progress.epoch_s == 600.0  # slurm.prior_epoch_s


def test_a_batch_size_the_table_lacks_takes_the_nearest_epoch_time() -> None:
    odd = SlurmJob(7, "odd", "bob", "shockwave", "PENDING", held=True, gpus=1,
                   admin_comment="shockwave:v1 model=ResNet-18 bs=33 epochs=10 mode=static")
    near = replace(odd, job_id=8,
                   admin_comment="shockwave:v1 model=ResNet-18 bs=32 epochs=10 mode=static")
    world, _, _ = cluster(odd, near)
    jobs = {j.job_id: j for j in world.observe().jobs}
    assert jobs[7].progress.epoch_s == jobs[8].progress.epoch_s > 0


def test_table_epoch_times_are_wall_time_under_a_time_scale() -> None:
    """Emulated jobs train X times faster than the table: a job that has not reported
    must not look X times longer than one that has (what the jobs report is wall time)."""
    table = bundled_table("tacc")
    job = held(1)
    hint = parse_hint(HINT)
    full = table_progress(table)(job, hint)
    fast = table_progress(table, time_scale=60.0)(job, hint)
    assert fast.epoch_s == pytest.approx(full.epoch_s / 60.0)
    assert dict(fast.epoch_s_by_bs) == pytest.approx(
        {bs: s / 60.0 for bs, s in full.epoch_s_by_bs})
    # a prior is wall time already (a time limit, or slurm.prior_epoch_s)
    own = replace(job, admin_comment="shockwave:v1 model=my-gpt bs=16 epochs=10 mode=static")
    assert table_progress(table, 600.0, 60.0)(own, parse_hint(own.admin_comment)).epoch_s \
        == 600.0


ELASTIC = "shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=static gpus=1-4 signal=USR1 grace=30"


def test_a_pending_elastic_job_gets_its_gres_before_its_release(
        caplog: pytest.LogCaptureFixture) -> None:
    world, fake, _ = cluster(replace(held(1, gpus=2), admin_comment=ELASTIC))
    view = world.observe()
    assert view.jobs[0].spec.gpus_range == (1, 4)
    assert dict(view.jobs[0].progress.rate_by_gpus)[2] == 1.0
    with caplog.at_level(logging.INFO, logger="slurm_shockwave"):
        result = world.apply([Action(ActionKind.START, 1, ("n1:0", "n1:1", "n1:2", "n1:3"))])
    assert result.count(Outcome.APPLIED) == 1
    assert fake.jobs[1].gpus == 4 and not fake.jobs[1].held
    # the service's log says so (a live run: GRES updates seen only in slurmctld.log)
    assert "job 1: resized from 2 to 4 GPUs (its range 1-4)" in caplog.text
    fake.tick()
    assert len(fake.jobs[1].gpu_alloc[0][1]) == 4


def test_an_elastic_jobs_request_is_the_count_it_was_submitted_with() -> None:
    """The service grew a job from 2 to 4 GPUs (its GRES), then Slurm requeued it (a node
    failure): Slurm holds 4 for it, but its request stays the 2 job_submit.lua stamped,
    so its fair finish time and its counts do not drift; it is pending at 4. Without the
    stamp (a job submitted before it), and for a fixed job, Slurm's count, as before."""
    stamp = " submitted=800 asked_gpus=2"
    fixed = HINT + stamp
    world, _, _ = cluster(replace(held(1, gpus=4), admin_comment=ELASTIC + stamp),
                          replace(held(2, gpus=4), admin_comment=ELASTIC),
                          replace(held(3, gpus=4), admin_comment=fixed),
                          replace(running(4, 4), admin_comment=ELASTIC + stamp))
    jobs = {j.job_id: j for j in world.observe().jobs}
    assert {jid: (j.gpus, j.current_gpus) for jid, j in jobs.items()} == {
        1: (2, 4), 2: (4, 4), 3: (4, 4), 4: (2, 4)}
    assert jobs[1].spec.gpu_counts() == (1, 2, 4)
    rates = dict(jobs[1].progress.rate_by_gpus)
    assert rates[2] == 1.0 and rates[4] > rates[2] > rates[1]
    assert jobs[1].spec.arrival_s == 800


def test_a_running_elastic_job_is_resized_by_checkpoint_requeue_and_gres() -> None:
    world, fake, clock = cluster(replace(running(1, 2), admin_comment=ELASTIC))
    fake.now = int(clock.t)  # one clock: the requeue's eligible time is the world's future
    world.observe()
    four = ("n1:0", "n1:1", "n1:2", "n1:3")
    resize = [Action(ActionKind.PREEMPT, 1, ("n1:0", "n1:1")), Action(ActionKind.START, 1, four)]
    first = world.apply(resize)
    assert [r.outcome for r in first.results] == [Outcome.DEFERRED, Outcome.DEFERRED]
    assert fake.signals == [(1, "USR1")] and 1 in world.intents  # a move: not "kept"
    clock.t += 31
    fake.now = int(clock.t)
    world.observe()
    world.apply(resize)  # the grace is over: requeue-hold
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].held
    assert fake.jobs[1].eligible_time > clock.t  # Slurm would not start it yet...
    view = world.observe()  # ...but the move is the plan's: it stays in the view
    assert view.jobs[0].gpus == 2 and not view.jobs[0].is_running
    world.apply([Action(ActionKind.START, 1, four)])
    assert fake.jobs[1].gpus == 4 and not fake.jobs[1].held
    assert fake.signals == [(1, "USR1")]


def test_a_multi_node_resize_updates_the_node_count(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave",)) for i in (1, 2)])
    fake.add(replace(held(1, gpus=4), admin_comment=ELASTIC.replace("1-4", "2-8"),
                     node_count=1))
    world = SlurmCluster(fake, Clock())
    world.observe()
    slots = tuple(f"n{i}:{k}" for i in (1, 2) for k in range(4))
    with caplog.at_level(logging.INFO, logger="slurm_shockwave"):
        world.apply([Action(ActionKind.START, 1, slots)])
    assert fake.jobs[1].gpus == 8 and fake.jobs[1].node_count == 2
    assert "job 1: resized from 4 to 8 GPUs on 2 nodes (its range 2-8)" in caplog.text


def test_a_requeued_job_resized_onto_two_nodes_is_read_at_its_new_count_until_it_runs(
        caplog: pytest.LogCaptureFixture) -> None:
    """squeue lists a requeued job with its last run's node count until it runs again
    (tests/test_slurm_contract.py): a job run on 1 node and given 4 GPUs on each of 2
    read as 4 on 1, so a fill step's start set its GRES a second time and logged a
    resize from 4 (seen live), and the view took it as 4 GPUs where Slurm starts it on 8."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave",)) for i in (1, 2)])
    fake.add(replace(running(1, 4), admin_comment=ELASTIC.replace("1-4", "2-8")))
    clock = Clock()
    fake.now = int(clock.t)
    world = SlurmCluster(fake, clock)
    world.observe()
    eight = tuple(f"n{i}:{k}" for i in (1, 2) for k in range(4))
    move = [Action(ActionKind.PREEMPT, 1, tuple(f"n1:{k}" for k in range(4))),
            Action(ActionKind.START, 1, eight)]
    world.apply(move)  # the checkpoint signal
    clock.t += 31
    fake.now = int(clock.t)
    world.observe()
    world.apply(move)  # requeue-hold
    world.observe()
    calls: list[tuple[int, int]] = []
    update = fake.update_gpus

    def counted(job_id: int, gpus: int, **kw: object) -> None:
        calls.append((job_id, gpus))
        update(job_id, gpus, **kw)  # type: ignore[arg-type]

    fake.update_gpus = counted  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="slurm_shockwave"):
        world.apply([Action(ActionKind.START, 1, eight)])  # GRES, release
        assert [(j.gpus, j.node_count) for j in fake.list_jobs()] == [(4, 1)]  # as squeue
        view = world.observe()  # a fill step, before Slurm starts it
        assert [j.current_gpus for j in view.jobs] == [8]
        world.apply([Action(ActionKind.START, 1, eight)])
    assert calls == [(1, 4)]  # 4 per node, once
    assert caplog.text.count("resized from") == 1
    assert "job 1: resized from 4 to 8 GPUs on 2 nodes" in caplog.text
    fake.tick(fake.cred_expire_s + 1)  # its requeue delay
    assert [(n, len(i)) for n, i in fake.jobs[1].gpu_alloc] == [("n1", 4), ("n2", 4)]


def test_a_move_whose_epilog_runs_has_its_planned_count_in_the_view() -> None:
    """A job the round grew from 2 to 4 GPUs, requeued and COMPLETING (its Epilog runs):
    out of the view's jobs, in ``returning``, and its planned 4 in ``moving_to``, which a
    fill step keeps free (engine/fill.py)."""
    world, fake, clock = cluster(replace(running(1, 2), admin_comment=ELASTIC))
    fake.now = int(clock.t)
    world.observe()
    four = ("n1:0", "n1:1", "n1:2", "n1:3")
    resize = [Action(ActionKind.PREEMPT, 1, ("n1:0", "n1:1")), Action(ActionKind.START, 1, four)]
    world.apply(resize)  # the checkpoint signal
    clock.t += 31
    fake.now = int(clock.t)
    world.observe()
    world.apply(resize)  # requeue-hold
    fake.jobs[1] = replace(fake.jobs[1], state="COMPLETING", gpu_alloc=(("n1", (0, 1)),),
                           nodes="n1")
    view = world.observe()
    assert [j.job_id for j in view.returning] == [1] and not view.jobs
    assert view.moving_to == ((1, 4),)
    # the next round planned without it: its fill steps keep nothing for it (a hung
    # Epilog kept those GPUs from every fill step for ever; a review)
    world.round_index += 1
    assert world.observe().moving_to == ()


def test_a_requeued_job_another_process_resized_gets_its_node_count_with_its_gres() -> None:
    """Found by a review: the service resized requeued jobs and restarted before they
    ran. Listed at their last run's node count (4 GPUs on 1 node for 8 on 2), a plan of
    8 on one node sent the GRES alone and Slurm held 16 GPUs on 2 nodes; a plan of 4 on
    one node, read as no change, sent nothing and it ran 8 on 2. A requeued job whose
    last run this process did not see gets its node count with its GRES."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",)) for i in (1, 2)])
    for jid in (1, 2):
        fake.add(replace(held(jid, gpus=8), admin_comment=ELASTIC.replace("1-4", "2-8"),
                         node_count=2, restart_count=1))
        fake._last_nodes[jid] = 1  # as the requeue of its run on one node left it
    world = SlurmCluster(fake, Clock())
    view = world.observe()
    assert [j.current_gpus for j in view.jobs] == [4, 4]  # as squeue lists them
    world.apply([Action(ActionKind.START, 1, tuple(f"n2:{k}" for k in range(8))),
                 Action(ActionKind.START, 2, tuple(f"n1:{k}" for k in range(4)))])
    assert [(fake.jobs[j].gpus, fake.jobs[j].node_count) for j in (1, 2)] == [(8, 1), (4, 1)]


def test_the_fake_lists_a_job_run_again_at_its_last_runs_node_count() -> None:
    """As squeue: an ended job requeued (``requeue_ended``) is listed with the node count
    of the run that ended, not 1 (a review: the fake took it after freeing the GPUs)."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave",)) for i in (1, 2)])
    fake.add(replace(running(1, 8), nodes="", node_count=2))
    fake.finish(1, "FAILED", signal=10)
    fake.requeue_ended(1)
    assert [(j.gpus, j.node_count) for j in fake.list_jobs()] == [(8, 2)]


def test_a_requeued_job_this_process_saw_run_is_not_resized_again() -> None:
    """The other side: one it saw run, released at the count it ran on, is not updated
    (its listing is its own)."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",)) for i in (1, 2)])
    fake.add(replace(running(1, 4), admin_comment=ELASTIC.replace("1-4", "2-8")))
    world = SlurmCluster(fake, Clock())
    world.observe()
    fake.hold([1])
    fake.requeue([1])
    world.observe()
    calls: list[int] = []
    fake.update_gpus = lambda job_id, gpus, **kw: calls.append(job_id)  # type: ignore[method-assign]
    world.apply([Action(ActionKind.START, 1, tuple(f"n1:{k}" for k in range(4)))])
    assert calls == []


def test_an_uneven_multi_node_start_is_refused_before_slurm_is_asked() -> None:
    """Slurm gives every node of a job the same count; placement splits evenly, and a
    start that does not (8 as 3 + 4 + 1) is refused here, as Slurm could not run it so,
    its GRES left as it was, and the count no longer asked for while it is queued."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave",)) for i in (1, 2, 3)])
    fake.add(replace(held(1, gpus=2), admin_comment=ELASTIC.replace("1-4", "2-8")))
    world = SlurmCluster(fake, Clock())
    world.observe()
    slots = ("n1:0", "n1:1", "n1:2", "n2:0", "n2:1", "n2:2", "n2:3", "n3:0")
    result = world.apply([Action(ActionKind.START, 1, slots)])
    assert result.results[0].outcome == Outcome.REJECTED
    assert "evenly" in result.results[0].message
    assert (fake.jobs[1].gpus, fake.jobs[1].node_count) == (2, 0) and fake.jobs[1].held
    assert world.observe().jobs[0].spec.gpus_range == (2, 2)


def test_an_elastic_job_placed_on_fewer_nodes_at_its_count_gets_its_node_count() -> None:
    """An elastic job Slurm holds as 4 GPUs on each of 2 nodes, placed as 8 on one node:
    the count is the same, but the nodes are not. Before, its GRES was left as it was and
    Slurm ran it over 2 nodes, on GPUs the plan had given other jobs."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",)) for i in (1, 2)])
    fake.add(replace(held(1, gpus=8), admin_comment=ELASTIC.replace("1-4", "2-8"),
                     node_count=2))
    world = SlurmCluster(fake, Clock())
    world.observe()
    result = world.apply([Action(ActionKind.START, 1, tuple(f"n1:{k}" for k in range(8)))])
    assert result.count(Outcome.APPLIED) == 1
    assert (fake.jobs[1].gpus, fake.jobs[1].node_count) == (8, 1)
    fake.tick()
    assert [(n, len(i)) for n, i in fake.jobs[1].gpu_alloc] == [("n1", 8)]


def test_a_fixed_multi_node_job_is_planned_on_the_nodes_it_asked_for() -> None:
    """``-N 2 --gres=gpu:4``: Slurm lists 8 GPUs on 2 nodes, and the view says 2 nodes
    (placement spreads it 4 + 4, as Slurm does); an elastic job's nodes are the
    planner's to choose, and a count that does not split evenly is Slurm's split."""
    jobs = [replace(held(1, gpus=8), node_count=2),
            replace(held(2, gpus=8), node_count=2, admin_comment=ELASTIC),
            replace(held(3, gpus=3), node_count=2), held(4, gpus=4)]
    world, _, _ = cluster(*jobs)
    assert {j.job_id: j.spec.nodes for j in world.observe().jobs} == {1: 2, 2: 0, 3: 0, 4: 0}


def test_a_migration_signals_once_and_completes_the_checkpoint() -> None:
    """The plan moves a running job (preempt + start in one round, e.g. to clear a node
    for a wide job). Live that is checkpoint, requeue, start: the start waits, and the
    checkpoint is not forgotten as if the plan had kept the job (seen live: the job was
    signalled again every round and never moved)."""
    world, fake, clock = cluster(running(1))
    world.observe()
    move = [Action(ActionKind.PREEMPT, 1), Action(ActionKind.START, 1, ("n1:1",))]
    first = {r.action.kind: r.outcome for r in world.apply(move).results}
    assert first == {ActionKind.PREEMPT: Outcome.DEFERRED, ActionKind.START: Outcome.DEFERRED}
    clock.t += 4
    world.observe()
    again = {r.action.kind: r.outcome for r in world.apply(move).results}
    assert again[ActionKind.PREEMPT] == Outcome.DEFERRED
    assert fake.signals == [(1, "USR1")]  # signalled once, not every round
    clock.t += 31
    world.observe()
    world.apply(move)
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].restart_count == 1


def test_a_moved_job_keeps_its_place_through_the_requeue_delay_a_preempted_one_does_not(
) -> None:
    """A requeued job joins the view at its eligible time (the GPUs kept for it would
    idle), except one the plan moved or resized: its new GPUs are the plan's, and a fill
    step woken by its requeue must not give them to another job meanwhile. The preempted
    one is ``returning`` meanwhile (its work counts for the critical path); a job that
    has never run, pending with a later ``--begin``, is not."""
    plain = replace(running(2), admin_comment=HINT.replace(" signal=USR1 grace=30", ""))
    world, fake, clock = cluster(replace(running(1), admin_comment=plain.admin_comment), plain)
    fake.now = int(clock.t)
    fake.add(replace(held(3), held=False, eligible_time=int(clock.t) + 600))
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.START, 1, ("n1:3",)),
                 Action(ActionKind.PREEMPT, 2)])  # no signal named: both requeued at once
    assert all(fake.jobs[j].state == "PENDING" and fake.jobs[j].eligible_time > clock.t
               for j in (1, 2))
    view = world.observe()
    assert {j.job_id for j in view.jobs} == {1}
    assert [(j.job_id, j.phase) for j in view.returning] == [(2, Phase.HELD)]
    assert set(world.left_out.not_eligible) == {2, 3}
    world.apply([Action(ActionKind.START, 1, ("n1:3",))])  # released: Slurm starts it later
    assert {j.job_id for j in world.observe().jobs} == {1}
    clock.t += 11
    fake.tick(11)  # eligible now: the fake starts the released job 1
    assert fake.jobs[1].state == "RUNNING"
    view = world.observe()
    assert {j.job_id for j in view.jobs} == {1, 2} and not view.returning
    world.apply([Action(ActionKind.PREEMPT, 1)])  # now a plain preemption: no move left
    assert {j.job_id for j in world.observe().jobs} == {2}


def test_a_slurm_that_stops_answering_is_asked_no_more_in_the_round() -> None:
    """Found by a review: every failed batch fell back to one call per job, each
    waiting its 30 s timeout: 308 calls, a round of hours, against a controller gone
    mid-round."""
    fake = Silent([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    for jid in range(1, 7):
        fake.add(held(jid))
    world = SlurmCluster(fake, Clock())
    world.observe()
    fake.down_at = "release"
    result = world.apply([Action(ActionKind.START, jid) for jid in range(1, 7)])
    assert fake.calls.count("release") == 1 and fake.calls.count("set_priority") == 0
    # one release of all six, not answered: it may have been done (read as rejected,
    # the store said a release that took was refused)
    assert all(r.outcome == Outcome.DEFERRED and r.message.endswith("(perhaps done)")
               for r in result.results if r.action.kind == ActionKind.START)


def test_a_signal_slurm_did_not_answer_keeps_its_checkpoint_intent() -> None:
    """Found by a review: the intent was dropped when `scancel --signal` timed out,
    though the signal may have arrived: the job's acknowledgement then found no intent,
    and the next round signalled it again (two checkpoints, a round lost)."""
    fake = Silent([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(running(1))
    acks: set[int] = set()
    world = SlurmCluster(fake, Clock(), acked=lambda jid, _since, _run: jid in acks)
    world.observe()
    fake.down_at, fake.done, fake.up_at = "signal", True, "list_jobs"  # sent, unanswered
    first = world.apply([Action(ActionKind.PREEMPT, 1)])
    assert first.results[0].outcome == Outcome.DEFERRED and 1 in world.intents
    acks.add(1)  # the job got it, saved, and acknowledged
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1)])
    assert fake.calls.count("signal") == 1 and fake.jobs[1].restart_count == 1


def test_every_row_of_a_job_left_out_names_its_owner() -> None:
    """Found by a review: rows of jobs left out of the plan (on a drained node, a bad
    hint, not eligible) named no owner, and none was written for a job COMPLETING: the
    progress API, which accepts a report only for a job the store shows as the sender's,
    refused the running job's reports (403) and the ending job's end report (404)."""
    from slurm_shockwave.service.records import unplanned_rows

    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",)),
                      SlurmNode("n2", ("ALLOCATED", "DRAIN"), 4, 0, ("shockwave",))])
    fake.add(replace(running(1), nodes="n2"))
    fake.add(replace(running(2), state="COMPLETING"))
    fake.add(replace(held(3), admin_comment="", comment="bs=x"))
    world = SlurmCluster(fake, Clock())
    world.observe()
    rows = {r.job_id: r for r in unplanned_rows(world.left_out)}
    assert {j: (r.user, r.phase) for j, r in rows.items()} == {
        1: ("alice", "running"), 2: ("alice", "ending"), 3: ("alice", "not planned")}


def test_a_store_that_cannot_be_written_defers_the_preemption_not_the_round() -> None:
    """Found by a review: an intent the store could not write (a full disk) raised out
    of apply before any release: round after round nothing started, free GPUs idle."""
    import sqlite3

    from slurm_shockwave.slurm.intents import MemoryIntents

    class Full(MemoryIntents):
        def record_intent(self, intent):  # type: ignore[no-untyped-def]
            raise sqlite3.OperationalError("database or disk is full")

    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(running(1))
    fake.add(held(2))
    world = SlurmCluster(fake, Clock(), intents=Full())
    world.observe()
    result = world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.START, 2)])
    outcomes = {r.action.job_id: r.outcome for r in result.results}
    assert outcomes == {1: Outcome.DEFERRED, 2: Outcome.APPLIED}
    assert fake.signals == [] and not fake.jobs[2].held


def test_an_acknowledged_requeue_whose_reply_is_lost_is_still_held() -> None:
    """Found by a review: between rounds, a requeue Slurm did but whose reply was lost
    left the job requeued, unheld and at its pinned top priority: Slurm ran it again
    before the job it was stopped for."""
    from slurm_shockwave.model.report import ProgressReport, ReportKind

    fake = Silent([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(running(1))
    clock = Clock()
    world = SlurmCluster(fake, clock)
    world.observe()
    assert world.apply([Action(ActionKind.PREEMPT, 1)]).results[0].outcome == \
        Outcome.DEFERRED  # signalled
    fake.down_at, fake.done, fake.up_at = "requeue", True, "list_jobs"  # done, reply lost
    clock.t += 5
    ack = ProgressReport(1, ReportKind.CHECKPOINTED, clock.t, restart_count=0)
    assert world.complete_checkpoint(ack)
    assert fake.jobs[1].restart_count == 1 and fake.jobs[1].held


class _LostReply(FakeSlurm):
    """The batch requeue is done but its reply lost (no answer), and the listing after it
    too; a running job of ``no_requeue`` is refused as Slurm refuses a ``--no-requeue``
    one ("Requested operation is presently disabled", measured on 22.05)."""

    def __init__(self, *args, no_requeue: frozenset[int] = frozenset(),
                 **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.no_requeue = no_requeue
        self.lost = False
        self.requeues = 0

    def requeue(self, job_ids):  # type: ignore[no-untyped-def]
        self.requeues += 1
        refused = [j for j in job_ids if j in self.no_requeue
                   and self.jobs[j].state == "RUNNING"]
        super().requeue([j for j in job_ids if j not in refused])
        if len(job_ids) > 1:
            self.lost = True  # the reply is lost, and the next listing too
            raise SlurmUnanswered("scontrol requeue: no answer within 30 s")
        if refused:
            raise SlurmError(f"Requested operation is presently disabled for job {refused[0]}")

    def list_jobs(self, partition=None):  # type: ignore[no-untyped-def]
        if self.lost:
            self.lost = False
            raise SlurmUnanswered("squeue: no answer within 30 s")
        return super().list_jobs(partition)


def _two_preempted(fake: _LostReply) -> dict[int, Outcome]:
    plain = HINT.removesuffix(" signal=USR1 grace=30")  # requeued at once, no signal
    fake.add(replace(running(1), admin_comment=plain))
    fake.add(replace(running(2), admin_comment=plain))
    world = SlurmCluster(fake, Clock())
    world.observe()
    result = world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.PREEMPT, 2)])
    return {r.action.job_id: r.outcome for r in result.results}


def test_a_requeue_whose_reply_and_relisting_are_lost_still_holds_the_job() -> None:
    """Found by a review: the batch requeue was applied but its reply lost, and the queue
    could not be read after it, and the job was left requeued, unheld, at its pinned
    priority. Each job's own ``requeue Incomplete`` then passes without an error (Slurm
    leaves a job no longer running as it is: measured on 22.05), so the preemption is
    applied and the job held. A controller that stops answering is asked no more."""
    fake = _LostReply([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    assert _two_preempted(fake) == {1: Outcome.APPLIED, 2: Outcome.APPLIED}
    assert all(fake.jobs[j].held and fake.jobs[j].restart_count == 1 for j in (1, 2))
    assert fake.requeues == 3  # the batch, then each alone (no error: not running)


def test_a_job_slurm_will_not_requeue_is_rejected_not_held_when_the_listing_is_lost(
        ) -> None:
    """Found by a review: with the batch's reply and the listing after it lost, a job whose
    own requeue Slurm refused was held and its preemption reported applied, a hold taken
    for proof of a requeue. ``requeue Incomplete`` refuses only a job still running that
    cannot be requeued, and Slurm holds a running job too (measured on 22.05): it ran on,
    held."""
    fake = _LostReply([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))],
                      no_requeue=frozenset({2}))
    assert _two_preempted(fake) == {1: Outcome.APPLIED, 2: Outcome.REJECTED}
    assert fake.jobs[1].held and fake.jobs[1].restart_count == 1
    assert (fake.jobs[2].state, fake.jobs[2].held) == ("RUNNING", False)


def test_a_gpu_count_the_table_lacks_is_planned_from_its_nearest_measured_count() -> None:
    """Found by a review: a job on a count the table lacks (16, an elastic job's grown
    count; 3) was planned from the 600 s prior, so a job grown from 8 to 16 GPUs read 71
    times longer. It takes the nearest measured count's throughput scaled by the prior
    (``fill_rates``, as the simulator's elastic jobs); measured counts are unchanged."""
    from slurm_shockwave.workloads.profile import epoch_seconds
    from slurm_shockwave.workloads.scaling import SCALING_EXPONENT

    table = bundled_table("tacc")
    progress = table_progress(table)
    hint = parse_hint(HINT)

    def epoch_s(gpus: int) -> float:
        return progress(replace(running(1), gpus=gpus), hint).epoch_s

    eight = epoch_seconds(hint.model, hint.bs, 8, table)
    assert epoch_s(8) == eight
    assert epoch_s(16) == pytest.approx(eight / 2 ** SCALING_EXPONENT)
    two = epoch_seconds(hint.model, hint.bs, 2, table)
    four = epoch_seconds(hint.model, hint.bs, 4, table)
    assert four < epoch_s(3) < two


def test_an_admins_hold_of_a_running_job_stays_through_the_planners_preemption() -> None:
    """`scontrol hold` as root of a running job: Slurm shows it RUNNING, priority 0,
    JobHeldAdmin, and keeps the hold through a requeue (measured on 22.05). The planner's
    `uhold` after its requeue made it the planner's, released at the next plan (found,
    and left, last stop): it is left an admin's hold, out of the plan."""
    plain = HINT.replace(" signal=USR1 grace=30", "")
    world, fake, clock = cluster(replace(running(1), admin_comment=plain, priority=0,
                                         reason="JobHeldAdmin"),
                                 replace(running(2), admin_comment=plain))
    fake.now = int(clock.t)
    world.observe()
    result = world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.PREEMPT, 2)])
    assert all(r.outcome == Outcome.APPLIED for r in result.results)
    assert (fake.jobs[1].state, fake.jobs[1].held, fake.jobs[1].reason) == (
        "PENDING", True, "JobHeldAdmin")
    assert fake.jobs[2].held and fake.jobs[2].reason == "JobHeldUser"  # the planner's
    clock.t += 11
    fake.tick(11)
    view = world.observe()
    assert [j.job_id for j in view.jobs] == [2] and set(world.left_out.admin_held) == {1}


def test_an_admins_hold_made_while_a_job_checkpoints_survives_its_requeue() -> None:
    """Found by a review: whether the hold is an admin's was read from the observation
    before it; root's `scontrol hold` of a job while it checkpoints for the plan was
    then made the planner's by the acknowledged requeue's `uhold`. The listing read
    after the requeue says."""
    world, fake, clock = cluster(running(1))
    fake.now = int(clock.t)
    world.observe()
    assert world.apply([Action(ActionKind.PREEMPT, 1)]).results[0].outcome == Outcome.DEFERRED
    fake.jobs[1] = replace(fake.jobs[1], priority=0, reason="JobHeldAdmin")  # the admin
    clock.t += 5
    ack = ProgressReport(1, ReportKind.CHECKPOINTED, clock.t, restart_count=0)
    assert world.complete_checkpoint(ack)
    assert (fake.jobs[1].state, fake.jobs[1].reason) == ("PENDING", "JobHeldAdmin")
    clock.t += 11
    fake.tick(11)
    world.observe()
    assert set(world.left_out.admin_held) == {1}


def test_a_job_slurm_is_requeueing_is_returning_one_that_ends_is_not() -> None:
    """Requeued, a job is COMPLETING while its Epilog runs, its restart count already
    grown: out of the view and of ``returning`` then, its work left the critical path's
    bound for that moment, and a round or fill step there could put a shorter job on the
    path (the simulator's preempted jobs are ``returning`` at once). A job that ends is
    COMPLETING too, at the same restart count: not returning."""
    world, fake, _ = cluster(running(1), running(2))
    world.observe()
    fake.jobs[1] = replace(fake.jobs[1], state="COMPLETING", restart_count=1)
    fake.jobs[2] = replace(fake.jobs[2], state="COMPLETING")
    for _ in range(2):  # and still, seen COMPLETING again
        view = world.observe()
        assert not view.jobs and [j.job_id for j in view.returning] == [1]
        assert world.left_out.ending == frozenset({1, 2})


def test_a_moved_job_stays_moved_while_completing_and_not_once_the_round_drops_it() -> None:
    """A job the plan moves (a preemption and a start in one round) is requeued, then
    COMPLETING while its Epilog runs, out of the view: a round then has no action for it
    and must not end its move, or the fill step that should start it once it is pending
    (on the round's count: ``moving_to``) would not. Pending again, in the view, a round
    that no longer starts it ends the move (a fill step would have started it ahead of
    the plan's order)."""
    plain = HINT.removesuffix(" signal=USR1 grace=30")
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(replace(running(1), admin_comment=plain, gpu_alloc=(("n1", (0,)),)))
    world = SlurmCluster(fake, Clock())
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.START, 1, ("n1:1",))])
    assert fake.jobs[1].restart_count == 1
    fake.jobs[1] = replace(fake.jobs[1], state="COMPLETING")
    world.observe()
    world.apply([])  # the round's: job 1 is out of its view
    fake.jobs[1] = replace(fake.jobs[1], state="PENDING")
    view = world.observe()
    assert 1 in view.reserved and dict(view.moving_to) == {1: 1}
    world.apply([])  # a round that no longer starts it
    assert 1 not in world.observe().reserved


def test_requeue_due_says_exactly_when_an_acknowledgement_asks_slurm() -> None:
    """The between-rounds loop counts a job's try by ``requeue_due`` and the world
    requeues by it, one rule: an acknowledgement older than the signal, one of another
    run, one while the partition is DOWN or one of a job in its last epoch asks Slurm
    nothing; a fresh one of the signalled run requeues the job."""

    class Counting(FakeSlurm):
        requeues = 0

        def requeue(self, job_ids):  # type: ignore[no-untyped-def]
            self.requeues += 1
            super().requeue(job_ids)

    fake = Counting([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(running(1))
    clock = Clock()
    world = SlurmCluster(fake, clock)
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 1)])  # signalled, waiting for its checkpoint
    clock.t += 5
    stale = ProgressReport(1, ReportKind.CHECKPOINTED, clock.t - 10, restart_count=0)
    other_run = ProgressReport(1, ReportKind.CHECKPOINTED, clock.t, restart_count=1)
    fresh = ProgressReport(1, ReportKind.CHECKPOINTED, clock.t, restart_count=0)
    for ack in (stale, other_run):
        assert not world.requeue_due(ack) and not world.complete_checkpoint(ack)
    fake.partition_states["shockwave"] = "DOWN"
    world.observe()
    assert not world.requeue_due(fresh) and not world.complete_checkpoint(fresh)
    assert fake.requeues == 0 and fake.jobs[1].state == "RUNNING"
    fake.partition_states["shockwave"] = "UP"
    world.observe()
    world.epochs_reported = lambda _job, _run: 1e9  # in its last epoch: it ends on its own
    assert not world.requeue_due(fresh) and not world.complete_checkpoint(fresh)
    assert fake.requeues == 0
    world.epochs_reported = lambda _job, _run: 0.0
    assert world.requeue_due(fresh) and world.complete_checkpoint(fresh)
    assert fake.requeues == 1 and fake.jobs[1].held


def test_a_job_being_requeued_is_told_from_one_ending() -> None:
    """A job seen running, then COMPLETING with its restart count grown, is being
    requeued (back after its delay): ``LeftOut.requeuing``, which its row says (a
    red-team: rows said "ending(COMPLETING: its Epilog runs)"); one COMPLETING with its
    count unchanged is ending."""
    world, fake, _ = cluster(running(1), running(2))
    world.observe()
    fake.jobs[1] = replace(fake.jobs[1], state="COMPLETING", restart_count=1)
    fake.jobs[2] = replace(fake.jobs[2], state="COMPLETING")
    world.observe()
    left = world.left_out
    assert (left.ending, left.requeuing) == ({1, 2}, {1})


PLAIN_GNS = "shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=gns"


@pytest.mark.parametrize("seen_running", [True, False])
def test_a_requeued_job_completing_never_gives_out_another_partitions_gpus(
        seen_running: bool) -> None:
    """Found by a red-team (live, two partitions on one node): Slurm 22.05 lists a job
    being requeued COMPLETING with no GPU indices, and the view guessed them from 0, which
    were another partition's: a fill step released a job there, and it waited in Slurm
    (PENDING Resources) for as long as the requeued job took to end, up to KillWait.
    Seen running, it claims the GPUs it held then; not seen (a service restarted since),
    none: the node offers what no other job holds either way."""
    fake = FakeSlurm([SlurmNode("n1", ("MIXED",), 4, 0, ("shockwave", "other"))])
    fake.add(SlurmJob(1, "o1", "bob", "other", "RUNNING", gpus=2, nodes="n1"))
    fake.add(SlurmJob(2, "a", "alice", "shockwave", "RUNNING", gpus=2, nodes="n1",
                      admin_comment=PLAIN_GNS, submit_time=900))
    assert fake.jobs[1].gpu_alloc == (("n1", (0, 1)),)
    assert fake.jobs[2].gpu_alloc == (("n1", (2, 3)),)
    world = SlurmCluster(fake, Clock())
    if seen_running:
        view = world.observe()
        assert [(n.name, n.indices) for n in view.nodes] == [("n1", (2, 3))]
    # requeued: COMPLETING, its restart count grown, and as 22.05 lists it, no indices
    fake.jobs[2] = replace(fake.jobs[2], state="COMPLETING", restart_count=1, gpu_alloc=())
    view = world.observe()
    assert [(n.name, n.indices) for n in view.nodes] == [("n1", (2, 3))]
    listed = world.left_out.listed[2]
    assert listed.gpu_alloc == ((("n1", (2, 3)),) if seen_running else ())


def test_an_elastic_job_moved_out_gets_its_request_back_with_its_hold() -> None:
    """Found by a live red-team: an elastic job the service resized (8 GPUs on two nodes,
    asked 2) and held, moved out by its owner, had the planner's hold given back but kept
    the resize, waiting for (and billed for) 8 GPUs in a partition nobody resizes. It is
    given its request first, as ``shockwave handback`` gives it; a fixed job keeps its
    count."""
    elastic = ("shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=static gpus=1-8 "
               "submitted=900 asked_gpus=2 asked_nodes=1")
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave", "other"))
                      for i in (1, 2)])
    fake.add(SlurmJob(2, "j2", "alice", "shockwave", "PENDING", held=True, priority=0,
                      gpus=8, node_count=2, reason="JobHeldUser", admin_comment=elastic,
                      submit_time=901))
    fake.add(SlurmJob(3, "j3", "alice", "shockwave", "PENDING", held=True, priority=0,
                      gpus=4, reason="JobHeldUser", admin_comment=PLAIN_GNS, submit_time=902))
    world = SlurmCluster(fake, Clock())
    world.observe()
    world.apply([])
    fake.jobs[2] = replace(fake.jobs[2], partition="other")
    fake.jobs[3] = replace(fake.jobs[3], partition="other")
    world.observe()
    world.apply([])
    assert not fake.jobs[2].held and not fake.jobs[3].held
    assert (fake.jobs[2].gpus, fake.jobs[2].node_count) == (2, 1)
    assert fake.jobs[3].gpus == 4
