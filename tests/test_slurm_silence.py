"""Slurm that stops answering part-way through a step of the service: each request asked
after that waits its own timeout live (9-30 s), so the step asks no more, and what it did
not ask it says so (deferred), never leaving a job half preempted. Found by a red-team of
partial failures (FakeSlurm with requests failing on a script)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from slurm_shockwave.model.plan import Outcome
from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.service.daemon import Service
from slurm_shockwave.service.store import Store
from slurm_shockwave.slurm.fake import FakeSlurm
from slurm_shockwave.slurm.listing import TOP_PRIORITY
from slurm_shockwave.slurm.protocol import SlurmJob, SlurmNode, SlurmUnanswered
from slurm_shockwave.slurm.until_silent import asking_anyway, until_silent
from slurm_shockwave.slurm.world import SlurmCluster
from tests.builders import WallLikeClock as Clock
from tests.test_service_loop import SIGNAL, job, service

ASKED = ("list_jobs", "list_nodes", "partition_state", "set_priority", "hold", "release",
         "signal", "requeue", "update_gpus")


class Silent(FakeSlurm):
    """Records every request; from ``down_at`` (the first request named so) on, none is
    answered (``done``: that first one takes effect all the same) until ``up_at``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self.down_at: str | None = None
        self.up_at: str | None = None
        self.done = False
        self.down = False

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name not in ASKED:
            return attr

        def asked(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if self.down and name == self.up_at:
                self.down = False
            if not self.down and name == self.down_at:
                self.down = True
                if self.done:
                    attr(*args, **kwargs)
            if self.down:
                raise SlurmUnanswered(f"{name}: no answer (test)")
            return attr(*args, **kwargs)
        return asked


class Instant(threading.Event):
    def wait(self, timeout: float | None = None) -> bool:
        return False


def _running(jid: int, node: str, idx: tuple[int, ...]) -> SlurmJob:
    return SlurmJob(jid, f"j{jid}", "alice", "shockwave", "RUNNING", gpus=len(idx),
                    node_count=1, admin_comment=SIGNAL.format(e=400), submit_time=900 + jid,
                    nodes=node, gpu_alloc=((node, idx),), start_time=950,
                    priority=TOP_PRIORITY)


def _eight_running_and_a_wide_one(kind: type[Silent] = Silent) -> tuple[Silent, Service]:
    fake = kind([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    for i in range(8):
        fake.add(_running(i + 1, "n1", (i,)))
    fake.add(job(9, 8, epochs=1))
    return fake, service(fake, Store(":memory:"), Clock(), "srtf")


def test_a_round_asks_no_more_once_a_signal_goes_unanswered() -> None:
    """SRTF stops eight jobs for a short 8-GPU one; the first checkpoint signal goes
    unanswered. Before, the round sent seven more signals and released and listed, each
    waiting its timeout (minutes in a round of two), and recorded a checkpoint intent for
    jobs never signalled, which were then requeued at the deadline without a checkpoint."""
    fake, svc = _eight_running_and_a_wide_one()
    fake.down_at = "signal"
    done = svc.round_once()
    assert fake.calls.count("signal") == 1 and fake.calls[-1] == "signal"
    outcomes = {r.action.job_id: r for r in done.report.result.results
                if r.action.kind.value == "preempt"}
    assert outcomes[1].outcome == Outcome.DEFERRED and "perhaps not sent" in outcomes[1].message
    assert all(outcomes[j].outcome == Outcome.DEFERRED
               and outcomes[j].message.startswith("not asked: Slurm stopped answering")
               for j in range(2, 9))
    assert set(svc.world.intents) == {1}  # only the one perhaps signalled waits for it


def test_a_signal_left_unanswered_reads_perhaps_sent_at_the_next_round() -> None:
    """The next round does not signal again (its intent stays), and it said "SIGUSR1
    sent 5s ago": read as delivered, where Slurm never said it was (a review)."""
    fake, svc = _eight_running_and_a_wide_one()
    fake.down_at = "signal"
    svc.round_once()
    fake.down, fake.down_at = False, None
    svc.world.clock.t += 5  # type: ignore[attr-defined]
    done = svc.round_once()
    first = next(r for r in done.report.result.results
                 if r.action.job_id == 1 and r.action.kind.value == "preempt")
    assert first.message.startswith("SIGUSR1 perhaps sent 5s ago, not again"), first.message
    assert fake.calls.count("signal") == 8  # the other seven, asked now; not job 1 again


def test_a_signal_an_earlier_process_sent_reads_perhaps_sent_after_a_restart() -> None:
    """Its intent is written before the signal goes out, so the process that reads it
    from the store cannot tell a signal Slurm took from one never sent (left unanswered,
    or the first process stopped in between): before, it read "sent" after a restart."""
    fake, svc = _eight_running_and_a_wide_one()
    svc.round_once()  # the eight are signalled
    assert fake.calls.count("signal") == 8
    again = service(fake, svc.store, svc.world.clock, "srtf")  # the service restarted
    again.world.clock.t += 5  # type: ignore[attr-defined]
    done = again.round_once()
    first = next(r for r in done.report.result.results
                 if r.action.job_id == 1 and r.action.kind.value == "preempt")
    assert first.message.startswith("SIGUSR1 perhaps sent 5s ago, not again"), first.message


def test_acknowledgements_with_slurm_gone_ask_once() -> None:
    """Eight jobs acknowledge their checkpoints while slurmctld is gone: each asked a
    requeue and a listing, 16 unanswered requests (minutes) before the next round. The
    first one's two are asked (its requeue may have been done with its reply lost)."""
    fake, svc = _eight_running_and_a_wide_one()
    svc.round_once()  # the eight are signalled
    assert len(svc.world.intents) == 8
    fake.down_at = "requeue"
    fake.calls.clear()
    for jid in range(1, 9):
        svc.checkpointed(ProgressReport(jid, ReportKind.CHECKPOINTED, 1005.0, epoch=1))
    svc.requeue_acknowledged()
    assert fake.calls == ["requeue", "list_jobs"]  # was it done? then no more


def test_an_acknowledged_requeue_whose_listing_is_lost_is_held() -> None:
    """The requeue answered, the listing after it lost: the job was left requeued and
    unheld at its pinned priority, and Slurm ran it again ahead of the plan."""
    class ListingLost(Silent):
        lose = False

        def list_jobs(self, partition: str | None = None) -> list[SlurmJob]:
            if self.lose:
                self.lose = False
                raise SlurmUnanswered("squeue: no answer (test)")
            return super().list_jobs(partition)

    fake, svc = _eight_running_and_a_wide_one(ListingLost)
    svc.round_once()
    fake.lose = True  # type: ignore[attr-defined]
    for jid in (1, 2):
        svc.checkpointed(ProgressReport(jid, ReportKind.CHECKPOINTED, 1005.0, epoch=1))
    fake.calls.clear()
    svc.requeue_acknowledged()
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].held
    # the hold asked anyway, then no more: job 2's waits for the round (a review)
    assert fake.calls == ["requeue", "list_jobs", "hold"] and 1 not in svc.world.intents


def test_a_job_requeued_unheld_at_its_pinned_priority_is_held_while_it_waits() -> None:
    """A job the planner started and Slurm requeued (its hold lost, or a node failure)
    waits out its requeue delay at the pinned priority: left so, Slurm starts it ahead of
    the plan. The next apply holds it; once eligible it is planned as any other."""
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))], cred_expire_s=300)
    fake.now = 1000  # the world's clock
    fake.add(_running(1, "n1", (0, 1)))
    fake.requeue([1])
    assert fake.jobs[1].state == "PENDING" and not fake.jobs[1].held
    svc = service(fake, Store(":memory:"), Clock())
    svc.round_once()
    assert fake.jobs[1].held


def test_the_step_asks_again_only_inside_asking_anyway() -> None:
    fake = Silent([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    fake.add(replace(_running(1, "n1", (0,)), state="PENDING", held=True, nodes="",
                     gpu_alloc=()))
    backend = until_silent(fake)
    fake.down_at = "hold"
    with pytest.raises(SlurmUnanswered):
        backend.hold([1])
    fake.down, fake.down_at = False, None  # it answers again; the step does not know
    with pytest.raises(SlurmUnanswered, match=r"^not asked"):
        backend.release([1])
    with asking_anyway(backend):
        backend.release([1])
    backend.hold([1])  # answered again: asked as before
    assert fake.calls == ["hold", "release", "hold"]


def test_a_fill_poll_with_slurm_gone_is_not_asked_again_before_the_round() -> None:
    """With fill steps on, a poll for new jobs unanswered was asked again at once, each
    waiting its timeout: four in a wait of 120 s, the round late."""
    fake, _ = _eight_running_and_a_wide_one()
    store = Store(":memory:")
    clock = Clock()

    def timer() -> float:  # each look at the time: a second on
        clock.t += 1
        return clock.t

    world = SlurmCluster(fake, clock, round_s=120.0, intents=store, fill_freed=True)
    svc = Service(world, make_policy("fifo", None), "fifo", store, round_s=120.0,
                  timer=timer, fill_poll_s=5.0, fill_freed=True)
    svc._wake = Instant()  # no real waiting: the loop only looks at the time
    fake.down_at = "list_jobs"
    real = world.arrived

    def slow(**kw: Any) -> bool:
        clock.t += 30  # an unanswered request waits its timeout
        return real(**kw)

    world.arrived = slow  # type: ignore[method-assign]
    svc._wait(threading.Event(), clock.t + 120)
    assert fake.calls.count("list_jobs") == 1


def test_a_round_holds_what_it_requeued_though_the_listing_after_is_lost() -> None:
    """The round's requeue answered and the listing after it lost: the hold is asked all
    the same (a lost reply is not a silent Slurm), or the job runs again at its pinned
    priority ahead of the plan."""
    from slurm_shockwave.model.plan import Action, ActionKind

    fake, svc = _eight_running_and_a_wide_one()
    svc.round_once()  # the eight are signalled
    world = svc.world
    world.clock.t += 60  # type: ignore[attr-defined]  # past the grace: requeued now
    world.observe()
    fake.down_at, fake.up_at = "list_jobs", "hold"  # it answers again by the hold
    fake.calls.clear()
    world.apply([Action(ActionKind.PREEMPT, jid) for jid in range(1, 9)])
    assert fake.calls[:3] == ["requeue", "list_jobs", "hold"]
    assert all(fake.jobs[j].held for j in range(1, 9))


def test_an_acknowledged_requeue_is_not_asked_after_a_silence() -> None:
    """Its batch not asked (an earlier request of the round went unanswered), a job that
    acknowledged was still requeued alone, as after a lost reply: one more timeout."""
    from slurm_shockwave.model.plan import Action, ActionKind

    fake = Silent([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    fake.add(_running(1, "n1", (0,)))
    fake.add(_running(2, "n1", (1,)))
    acks: set[int] = set()
    world = SlurmCluster(fake, Clock(), acked=lambda jid, _s, _run: jid in acks)
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, 2)])  # signalled
    acks.add(2)
    world.observe()
    fake.calls.clear()
    fake.down_at = "signal"
    done = world.apply([Action(ActionKind.PREEMPT, 1), Action(ActionKind.PREEMPT, 2)])
    assert fake.calls == ["signal"]
    assert [r.outcome for r in done.results] == [Outcome.DEFERRED, Outcome.DEFERRED]
    assert 2 in world.intents  # its acknowledgement still counts next round


def test_a_start_whose_release_went_unanswered_is_not_waited_for_since() -> None:
    """The note's round is the first whose start took effect: a release unanswered (the
    job still held) is not "started since" that round."""
    fake = Silent([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    fake.add(job(1, 4, epochs=5))
    object.__setattr__(fake, "_candidates", lambda job, named_only: [])  # never starts
    svc = service(fake, Store(":memory:"), Clock())
    world = svc.world
    fake.down_at = "release"
    notes = []
    for _ in range(3):
        done = svc.round_once()
        notes += [r.message for r in done.report.result.results if r.action.job_id == 1]
        fake.down, fake.down_at = False, None
        fake.tick(20)
        world.clock.t += 60  # type: ignore[attr-defined]
    assert notes[2] == "started since round 1, not running yet: Slurm says Resources"
