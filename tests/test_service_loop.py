"""The service loop over the in-memory fake and a real SQLite store (logic only; the
real daemons: tests/test_service_live.py)."""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
import time
from dataclasses import replace as with_state
from pathlib import Path
from typing import Any

import pytest

from slurm_shockwave.model.plan import ActionKind, Outcome
from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.service.daemon import Service
from slurm_shockwave.service.feed import ReportFeed
from slurm_shockwave.service.heartbeat import read_heartbeat
from slurm_shockwave.service.records import unplanned_rows
from slurm_shockwave.service.store import Store
from slurm_shockwave.slurm.fake import FakeSlurm
from slurm_shockwave.slurm.listing import PINNED_BAND, TOP_PRIORITY
from slurm_shockwave.slurm.protocol import SlurmError, SlurmJob, SlurmNode
from slurm_shockwave.slurm.table_progress import table_progress
from slurm_shockwave.slurm.world import WAITING_BAND, SlurmCluster
from slurm_shockwave.workloads.bundled import bundled_table
from tests.builders import WallLikeClock as Clock

SIGNAL = "shockwave:v1 model=ResNet-18 bs=32 epochs={e} mode=static signal=USR1 grace=30"
PLAIN = "shockwave:v1 model=ResNet-18 bs=32 epochs={e} mode=static"



def job(jid: int, gpus: int, epochs: int = 9, *, hint: str = SIGNAL, nodes: int = 1,
        partition: str = "shockwave") -> SlurmJob:
    return SlurmJob(jid, f"j{jid}", "alice", partition, "PENDING", held=True, gpus=gpus,
                    node_count=nodes, reason="JobHeldUser",
                    admin_comment=hint.format(e=epochs) if partition == "shockwave" else "",
                    submit_time=900 + jid)


def fake_cluster(nodes: int = 2, gpus: int = 8) -> FakeSlurm:
    return FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), gpus, 0, ("shockwave", "other"))
                      for i in range(1, nodes + 1)])


def service(fake: FakeSlurm, store: Store, clock: Clock, policy: str = "fifo",
            config: dict[str, object] | None = None, **kw: object) -> Service:
    world = SlurmCluster(fake, clock, round_s=60.0, intents=store)
    return Service(world, make_policy(policy, config), policy, store, round_s=60.0,
                   **kw)  # type: ignore[arg-type]


def rounds(fake: FakeSlurm, tmp_path: Path, n: int, policy: str = "fifo") -> Store:
    """``n`` rounds a minute apart over a fresh store, Slurm acting between them."""
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, policy=policy)
    for _ in range(n):
        svc.round_once()
        fake.tick()
        clock.t += 60
    return store


def srtf_preempting_job_1(tmp_path: Path, hint: str = SIGNAL
                          ) -> tuple[FakeSlurm, Store, Clock, Service]:
    """A whole-cluster long job 1 running, then a short job 2 arrives: SRTF preempts 1."""
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(job(1, 4, epochs=500, hint=hint))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, policy="srtf")
    svc.round_once()
    fake.tick()
    fake.add(job(2, 4, epochs=1, hint=hint))
    clock.t += 60
    svc.round_once()
    return fake, store, clock, svc


def test_fifo_never_signals_jobs_it_keeps(tmp_path: Path) -> None:
    """Two jobs on one node, a two-node job and another partition's job on a shared node:
    the real slots keep every running job where it is, round after round."""
    fake = fake_cluster()
    fake.add(job(9, 2, partition="other"))
    fake.release([9])
    fake.tick()
    for j in (job(1, 1), job(2, 2), job(3, 8, nodes=2), job(4, 4)):
        fake.add(j)
    store = rounds(fake, tmp_path, 6)
    assert fake.signals == []
    kinds = {a["kind"] for jid in (1, 2, 3, 4) for a in store.actions(jid)}
    assert kinds == {"start"}
    running = {j.job_id for j in fake.list_jobs() if j.state == "RUNNING"}
    assert {1, 2, 9} <= running
    # capacity: never more GPUs running than the nodes have
    assert sum(j.gpus for j in fake.list_jobs() if j.state == "RUNNING") <= 16


def test_a_restarted_service_does_not_signal_again_and_requeues_at_the_deadline(
        tmp_path: Path) -> None:
    fake, store, clock, _ = srtf_preempting_job_1(tmp_path)
    assert fake.signals == [(1, "USR1")]
    assert 1 in store.load_intents()
    # "kill -9": a new service over the same store and cluster
    store2 = Store(tmp_path / "s.db")
    svc2 = service(fake, store2, clock, policy="srtf")
    clock.t += 10  # before the 30 s grace
    done = svc2.round_once()
    assert fake.signals == [(1, "USR1")]
    assert [r.outcome.value for r in done.report.result.results if r.action.job_id == 1] \
        == ["deferred"]
    clock.t += 30  # past the deadline: requeue-hold, intent confirmed
    svc2.round_once()
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].restart_count == 1
    assert store2.load_intents() == {}
    assert fake.signals == [(1, "USR1")]


@pytest.mark.parametrize("acked", [False, True])
def test_a_checkpoint_no_round_followed_for_hours_is_asked_for_again(
        tmp_path: Path, acked: bool) -> None:
    """Found by a red-team: stopped with a checkpoint in flight (or its partition down, or
    Slurm unreachable) and back hours later, the service requeued the job at once on the
    stored intent, its deadline long past: the job, which trained on from that checkpoint
    as the client tells it to, restarted from it and lost the hours between. An intent no
    round followed for a whole round past its deadline asks for a fresh checkpoint, and
    the job is requeued once that one is acknowledged or its grace runs out."""
    fake, store, clock, _ = srtf_preempting_job_1(tmp_path)
    signalled = clock.t
    store.close()
    clock.t += 3 * 3600  # the service stopped for three hours
    fake.tick(3 * 3600)
    store = Store(tmp_path / "s.db")
    # acknowledged: the first signal's checkpoint, made within its grace
    world = SlurmCluster(fake, clock, round_s=60.0, intents=store,
                         acked=lambda jid, since, _run: acked and since <= signalled)
    again = Service(world, make_policy("srtf", None), "srtf", store, round_s=60.0)
    done = again.round_once()
    assert fake.signals == [(1, "USR1"), (1, "USR1")]
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].restart_count == 0
    assert [r.outcome for r in done.report.result.results if r.action.job_id == 1] == \
        [Outcome.DEFERRED]
    clock.t += 31  # the fresh checkpoint's grace: requeued, once
    again.round_once()
    assert fake.jobs[1].restart_count == 1 and fake.jobs[1].held
    assert len(fake.signals) == 2


@pytest.mark.parametrize("late_s", [6, 200])
def test_late_rounds_never_ask_for_a_checkpoint_twice(tmp_path: Path, late_s: float) -> None:
    """Found by a review of the rule above: with the staleness counted from the deadline,
    rounds 6 s late and a 5 s grace signalled the job every round and never requeued it.
    It counts from when a step last looked at the checkpoint, at least five minutes:
    rounds later than their period, even over three times it, requeue it once."""
    hint = SIGNAL.replace("grace=30", "grace=5")
    fake, _, clock, svc = srtf_preempting_job_1(tmp_path, hint)
    for _ in range(3):
        clock.t += 60 + late_s
        svc.round_once()
    assert fake.signals == [(1, "USR1")]
    assert fake.jobs[1].restart_count == 1 and fake.jobs[1].held


def test_a_job_without_a_signal_is_requeued_as_slurm_would(tmp_path: Path) -> None:
    fake, _, _, _ = srtf_preempting_job_1(tmp_path, PLAIN)
    assert fake.signals == []
    assert fake.jobs[1].restart_count == 1 and fake.jobs[1].held


def test_one_bad_job_never_stops_the_round(tmp_path: Path) -> None:
    fake = fake_cluster()
    fake.add(job(1, 1))
    fake.add(SlurmJob(2, "bad", "bob", "shockwave", "PENDING", held=True, gpus=1,
                      comment="bs=" + "9" * 5000 + " epochs=1"))
    store, clock = Store(tmp_path / "s.db"), Clock()
    done = service(fake, store, clock).round_once()
    assert [a.job_id for a in done.report.actions] == [1]
    assert store.jobs_now()[2].reason.startswith("bad_hint(")


def test_dry_run_changes_nothing_and_writes_no_heartbeat(tmp_path: Path) -> None:
    fake = fake_cluster()
    fake.add(job(1, 1))
    store, clock = Store(tmp_path / "s.db"), Clock()
    beat = tmp_path / "heartbeat"
    svc = service(fake, store, clock, dry_run=True, heartbeat=str(beat))
    svc.round_once()
    assert fake.jobs[1].held and not beat.exists()
    assert store.rounds()[0]["dry_run"] == 1


def test_heartbeat_after_each_round(tmp_path: Path) -> None:
    fake = fake_cluster()
    store, clock = Store(tmp_path / "s.db"), Clock()
    beat = tmp_path / "hb" / "heartbeat"
    service(fake, store, clock, heartbeat=str(beat)).round_once()
    assert read_heartbeat(beat) == (1000, 180)  # three rounds by default


class Flaky(FakeSlurm):
    """Slurm down for a few calls, and again for ``later[n]`` calls after ``n`` answered."""

    down = 0
    answered = 0
    later: dict[int, int] | None = None

    def list_jobs(self, partition: str | None = None) -> list[SlurmJob]:
        self.down += (self.later or {}).pop(self.answered, 0)
        if self.down > 0:
            self.down -= 1
            raise SlurmError("squeue: error: Unable to contact slurm controller")
        self.answered += 1
        return super().list_jobs(partition)


def test_an_outage_is_one_log_line_and_the_loop_goes_on(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    fake = Flaky([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(job(1, 1))
    fake.down, fake.later = 3, {1: 2}  # down at the start, and again after a round
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock)
    svc.round_s = 0.01
    stop = threading.Event()
    waits: list[float] = []
    stop.wait = lambda t=None: waits.append(t or 0.0) or False  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="shockwave.service"):
        assert svc.run(stop, max_rounds=3) == 3
    errors = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(errors) == 2
    # down since before the first round: how long is not known (a red-team: "again
    # after" counted from the service's start)
    back = [re.sub(r"\d+ s", "N s", r.getMessage()) for r in caplog.records
            if "reachable " in r.getMessage()]
    assert back == ["Slurm reachable N s after this service's first round tried it",
                    "Slurm reachable again after N s"], back
    assert waits[:3] == [0.01, 0.01, 0.01]  # backoff capped at the round
    assert not fake.jobs[1].held


def test_an_overrun_is_logged_with_its_phases_and_the_next_round_starts_at_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake = fake_cluster()
    fake.add(job(1, 1))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock)
    ticks = iter(float(t) * 30 for t in range(1000))  # every phase "takes" 30 s
    svc.timer = lambda: next(ticks)
    stop = threading.Event()
    waits: list[float] = []
    stop.wait = lambda t=None: waits.append(t or 0.0) or False  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="shockwave.service"):
        assert svc.run(stop, max_rounds=2) == 2
    over = [r.getMessage() for r in caplog.records if "overran" in r.getMessage()]
    assert len(over) == 2 and "observe 30.00s plan 30.00s apply 30.00s persist" in over[0]
    assert waits == []  # no sleep after an overrun
    assert store.rounds()[0]["total_s"] > 60


def test_a_checkpointing_job_whose_hint_turned_unreadable_still_completes(
        tmp_path: Path) -> None:
    from dataclasses import replace

    fake, store, clock, svc = srtf_preempting_job_1(tmp_path)
    assert 1 in store.load_intents()
    fake.jobs[1] = replace(fake.jobs[1], admin_comment="bs=banana")  # an admin's edit
    clock.t += 60  # past the grace
    svc.round_once()  # no KeyError: the stored intent is enough to requeue
    assert fake.jobs[1].state == "PENDING" and store.load_intents() == {}


def test_the_view_counts_time_from_the_store_origin(tmp_path: Path) -> None:
    """Times reach the policies as seconds since the store's origin, as the simulator's
    run from the trace's start (no policy depends on it: test_replayable.py)."""
    fake = fake_cluster()
    fake.add(job(1, 1))
    store, clock = Store(tmp_path / "s.db"), Clock()
    done = service(fake, store, clock).round_once()
    assert done.report.view is not None and done.report.view.now_s == 0.0
    assert done.report.view.jobs[0].spec.arrival_s == -99.0  # submitted at 901
    assert done.record.at_s == 1000.0  # the store keeps wall-clock time
    clock.t += 500
    again = service(fake, Store(tmp_path / "s.db"), clock).round_once()  # a restart
    assert again.report.view is not None and again.report.view.now_s == 500.0


def test_an_acknowledged_checkpoint_is_requeued_between_rounds(tmp_path: Path) -> None:
    """The progress API's thread reports the acknowledgement; the loop, sleeping to its
    next round, requeues the job at once (the GPUs it holds would idle a whole round)."""
    fake, store, _clock, svc = srtf_preempting_job_1(tmp_path)
    assert fake.jobs[1].state == "RUNNING" and 1 in store.load_intents()
    sent = store.load_intents()[1].sent_s
    stop = threading.Event()
    ticks = iter(float(t) for t in range(100))  # each look at the clock: one more second
    svc.timer = lambda: next(ticks)

    def ack(job_id: int, at_s: float) -> ProgressReport:
        return ProgressReport(job_id, ReportKind.CHECKPOINTED, at_s)

    svc.checkpointed(ack(1, sent - 5))  # older than the signal (a late spool): not it
    svc.checkpointed(ack(99, sent + 1))  # no checkpoint of it in flight: nothing happens
    svc._wait(stop, boundary=3.0)
    assert fake.jobs[1].state == "RUNNING" and 1 in store.load_intents()
    svc.checkpointed(ack(1, sent + 1))
    svc._wait(stop, boundary=6.0)  # the boundary: still ahead
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].held
    assert fake.jobs[1].restart_count == 1 and store.load_intents() == {}
    assert fake.signals == [(1, "USR1")]
    # and explain shows it (found by a red-team: a requeue between rounds left no trace)
    last = store.actions(1)[-1]
    assert (last["kind"], last["outcome"]) == ("preempt", "applied"), last
    assert last["message"].startswith("requeued between rounds at ") and \
        last["message"].endswith("after its checkpoint's acknowledgement"), last


def _acknowledged_at(tmp_path: Path, epoch: float
                     ) -> tuple[FakeSlurm, Store, Clock, Service, float]:
    """Job 1 of 500 epochs signalled for its checkpoint, having reported ``epoch``, then
    acknowledging: the loop woken at once, as the progress API wakes it, and waited."""
    fake, store, clock, svc = srtf_preempting_job_1(tmp_path)
    svc.world.epochs_reported = store.epochs_reported  # as cli/live_options.service wires it
    sent = store.load_intents()[1].sent_s
    ticks = iter(float(t) for t in range(100))
    svc.timer = lambda: next(ticks)
    store.add_report(ProgressReport(1, ReportKind.PROGRESS, sent - 5, epoch=epoch,
                                    batch_size=32))
    ack = ProgressReport(1, ReportKind.CHECKPOINTED, sent + 1)
    store.add_report(ack)
    svc.checkpointed(ack)  # the acknowledgement first: the loop wakes at once
    svc._wait(threading.Event(), boundary=6.0)
    return fake, store, clock, svc, sent


def test_a_job_that_reported_its_last_epoch_after_its_acknowledgement_is_let_end(
        tmp_path: Path) -> None:
    """Found by a user walkthrough: a job acknowledged its checkpoint at its last epoch's
    last step, trained on as it is told to, reported that epoch 7 ms later and printed
    "done", and the requeue 60 ms after the acknowledgement ran the epoch again from the
    checkpoint. A job in its last epoch is not requeued between rounds (its report may
    follow its acknowledgement: a review); the round lets it end once it has reported
    every epoch its hint asks for, and its grace's end requeues it if it has not ended."""
    fake, store, clock, svc, sent = _acknowledged_at(tmp_path, epoch=499.0)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].restart_count == 0
    store.add_report(ProgressReport(1, ReportKind.PROGRESS, sent + 1.007, epoch=500.0,
                                    batch_size=32))
    svc.world.acked = lambda _job, _since, _run: True  # the feed has the acknowledgement too
    clock.t += 10  # a round within the grace: let end
    svc.round_once()
    assert fake.jobs[1].state == "RUNNING" and 1 in store.load_intents()
    clock.t += 30  # past the grace, still running: requeued
    svc.round_once()
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].restart_count == 1


def test_a_job_in_its_last_epoch_that_acknowledges_is_requeued_by_the_round(
        tmp_path: Path) -> None:
    """Not between rounds (its last report may be on its way), but by the next round when
    it has not reported its last epoch by then (a job with epochs to go is requeued at
    once: ``test_an_acknowledged_checkpoint_is_requeued_between_rounds``)."""
    fake, _store, clock, svc, _sent = _acknowledged_at(tmp_path, epoch=499.5)
    assert fake.jobs[1].state == "RUNNING"
    svc.world.acked = lambda _job, _since, _run: True
    clock.t += 10
    svc.round_once()
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].restart_count == 1


def test_the_service_reads_each_runs_epochs_from_its_store(tmp_path: Path) -> None:
    from slurm_shockwave.cli.live_options import Live
    from slurm_shockwave.cli.live_options import service as live_service
    from slurm_shockwave.config import Settings

    env = Live(Settings(), fake_cluster())
    store = env.store(str(tmp_path / "s.db"))
    assert live_service(env, store, "fifo").world.epochs_reported == store.epochs_reported
    store.add_report(ProgressReport(1, ReportKind.PROGRESS, 10.0, epoch=3.0, restart_count=1))
    store.add_report(ProgressReport(1, ReportKind.PROGRESS, 20.0, epoch=2.5, restart_count=1))
    store.add_report(ProgressReport(1, ReportKind.PROGRESS, 30.0, epoch=9.0, restart_count=0))
    assert store.epochs_reported(1, 1) == 3.0 and store.epochs_reported(2, 0) == 0.0


def test_a_job_the_checkpoint_signal_killed_keeps_its_reports_and_its_row(
        tmp_path: Path) -> None:
    """A review: the job the signal killed is FAILED when the round observes it, so it was
    out of the round's rows; the next round it is PENDING again, read as another job
    under the id, its reports deleted and its progress 0 until it reported again; and
    explain said it had left the queue. Its row now says it is run again."""
    fake, store, clock, svc = srtf_preempting_job_1(tmp_path)
    store.add_report(ProgressReport(1, ReportKind.PROGRESS, clock.t, epoch=30.0,
                                    batch_size=32))
    fake.finish(1, "FAILED", signal=10)  # SIGUSR1 before the script could handle it
    clock.t += 60
    svc.round_once()
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].restart_count == 1
    now = store.jobs_now()[1]
    assert (now.phase, now.user) == ("ending", "alice"), now
    assert "killed by SIGUSR1, the checkpoint signal" in now.reason, now
    fake.tick()
    clock.t += 60
    svc.round_once()
    assert [r.epoch for r in store.reports([1])[1]] == [30.0]


def test_a_flood_of_acknowledgements_asks_slurm_once_a_round(tmp_path: Path) -> None:
    """Found by a red-team: a job whose requeue Slurm refuses (``--no-requeue``) that
    acknowledged again and again cost two Slurm calls each on the loop's thread, and no
    round ran while they came. The loop tries the job once a round, its newest
    acknowledgement; a stale one (older than the signal) does not use the round's try."""
    fake, store, _clock, svc = srtf_preempting_job_1(tmp_path)
    sent = store.load_intents()[1].sent_s
    calls: list[str] = []
    real_requeue, real_list = fake.requeue, fake.list_jobs

    def refused(job_ids):  # type: ignore[no-untyped-def]
        calls.append("requeue")
        raise SlurmError("Requested operation is presently disabled for job 1")

    def listing(partition=None):  # type: ignore[no-untyped-def]
        calls.append("list")
        return real_list(partition)

    fake.requeue, fake.list_jobs = refused, listing  # type: ignore[method-assign]
    svc.checkpointed(ProgressReport(1, ReportKind.CHECKPOINTED, sent - 5))  # stale
    svc.requeue_acknowledged()  # as the loop does on each wake
    assert calls == []
    for i in range(50):
        svc.checkpointed(ProgressReport(1, ReportKind.CHECKPOINTED, sent + i))
        svc.requeue_acknowledged()
    assert calls.count("requeue") == 1
    fake.requeue = real_requeue  # type: ignore[method-assign]
    svc.world.round_index += 1  # the next round: tried again
    svc.checkpointed(ProgressReport(1, ReportKind.CHECKPOINTED, sent + 60))
    svc.requeue_acknowledged()
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].restart_count == 1


def test_an_acknowledged_checkpoint_waits_while_the_partition_is_down(tmp_path: Path) -> None:
    """A round in a DOWN partition defers the requeue, and so does the acknowledgement
    between rounds: Slurm starts nothing there, so the GPUs would only idle. The first
    round after the partition reopens requeues the job."""
    fake, store, clock, svc = srtf_preempting_job_1(tmp_path)
    sent = store.load_intents()[1].sent_s
    fake.partition_states["shockwave"] = "DOWN"
    clock.t += 5
    done = svc.round_once()
    assert [r.outcome for r in done.report.result.results
            if r.action.kind == ActionKind.PREEMPT] == [Outcome.DEFERRED]
    ticks = iter(float(t) for t in range(100))
    svc.timer = lambda: next(ticks)
    svc.checkpointed(ProgressReport(1, ReportKind.CHECKPOINTED, sent + 6))
    svc._wait(threading.Event(), boundary=3.0)
    assert fake.jobs[1].state == "RUNNING" and 1 in store.load_intents()
    fake.partition_states["shockwave"] = "UP"
    clock.t += 60  # past the checkpoint's grace
    svc.round_once()
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].held
    assert store.load_intents() == {}


def test_a_store_locked_while_an_acknowledged_checkpoint_is_requeued_stops_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A store another process holds locked (or a full disk) between rounds is one ERROR
    line, as in a round, not the end of the service."""
    fake, store, _clock, svc = srtf_preempting_job_1(tmp_path)
    sent = store.load_intents()[1].sent_s
    store.db.execute("PRAGMA busy_timeout=100")
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    ticks = iter(float(t) for t in range(100))
    svc.timer = lambda: next(ticks)
    svc.checkpointed(ProgressReport(1, ReportKind.CHECKPOINTED, sent + 1))
    with caplog.at_level(logging.ERROR):
        svc._wait(threading.Event(), boundary=3.0)
    assert "the store could not be written" in caplog.text
    assert fake.jobs[1].state == "PENDING" and fake.jobs[1].held  # Slurm's part was done
    other.execute("ROLLBACK")
    svc.round_once()  # and the service goes on, and forgets the checkpoint the write lost
    assert store.load_intents() == {} and fake.jobs[1].held


def test_a_store_unreadable_while_an_acknowledgement_is_weighed_stops_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether an acknowledgement asks Slurm reads the job's reported epochs from the
    store; that read failing between rounds is one ERROR line and a retry next round
    (a review found it outside the loop's guard: the service stopped)."""
    fake, store, _clock, svc = srtf_preempting_job_1(tmp_path)
    sent = store.load_intents()[1].sent_s

    def unreadable(*_args: object, **_kwargs: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(svc.world, "epochs_reported", unreadable)  # the store's (serve)
    ticks = iter(float(t) for t in range(100))
    svc.timer = lambda: next(ticks)
    svc.checkpointed(ProgressReport(1, ReportKind.CHECKPOINTED, sent + 1))
    with caplog.at_level(logging.ERROR):
        svc._wait(threading.Event(), boundary=3.0)
    assert "disk I/O error" in caplog.text and "requeue after its checkpoint" in caplog.text
    assert fake.jobs[1].state == "RUNNING" and 1 in store.load_intents()


def test_a_job_end_or_an_arrival_onto_idle_gpus_starts_waiting_jobs_between_rounds(
        tmp_path: Path) -> None:
    """Fill steps (engine/fill.py): an end report wakes the loop, which releases the job
    waiting for those GPUs before the next round; while GPUs idle, a poll finds a new job
    and releases it. Each is stored as a round of the same index; nothing is preempted."""
    fake = fake_cluster(nodes=1, gpus=8)
    for j in (job(1, 4), job(2, 4), job(3, 4)):
        fake.add(j)
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, fill_freed=True, fill_poll_s=2.0)
    svc.round_once()
    fake.tick()
    assert {j.job_id for j in fake.list_jobs() if j.state == "RUNNING"} == {1, 2}
    assert fake.jobs[3].held
    ticks = iter(float(t) for t in range(1000))
    svc.timer = lambda: next(ticks)
    stop = threading.Event()
    fake.finish(1)
    svc.memory = {"kept": 1}  # the round's: a fill step leaves it as it is
    svc.ended(ProgressReport(1, ReportKind.END, clock.t, exit_code=0))
    svc._wait(stop, boundary=3.0)
    assert not fake.jobs[3].held and store.next_round_index() == 1  # a fill of round 0
    assert svc.memory == {"kept": 1} and store.memory("fifo") == {"kept": 1}
    fake.tick()
    assert fake.jobs[3].state == "RUNNING"
    fake.finish(2)  # 4 GPUs idle now, and nobody waits
    svc.round_once()
    fake.add(job(4, 2))
    svc._wait(stop, boundary=200.0)  # polls every 2 ticks while GPUs idle
    assert not fake.jobs[4].held and store.next_round_index() == 2
    assert fake.signals == [] and all(a["kind"] == "start" for jid in (3, 4)
                                      for a in store.actions(jid))


def test_end_reports_sent_without_pause_take_one_fill_step_a_poll_interval(
        tmp_path: Path) -> None:
    """A job's owner may send end reports too (the API takes them from the owner): sent
    without pause, each was a fill step (a Slurm query and a stored round), hundreds a
    second. Ends within a poll interval are taken together."""
    fake = fake_cluster(nodes=1, gpus=8)
    fake.add(job(1, 4))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, fill_freed=True, fill_poll_s=0.5)
    svc.round_once()
    stop, spam = threading.Event(), threading.Event()

    def send() -> None:
        while not spam.is_set():
            svc.ended(ProgressReport(1, ReportKind.END, clock.t, exit_code=0))
            time.sleep(0.001)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    svc._wait(stop, boundary=svc.timer() + 1.2)
    spam.set()
    sender.join()
    steps = store.db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0] - 1
    assert 1 <= steps <= 3  # at 0, 0.5 and 1.0 s


@pytest.mark.parametrize("policy", ["gandiva_fair", "gavel", "las"])
def test_policies_that_share_by_service_received_take_turns_live(tmp_path: Path,
                                                                  policy: str) -> None:
    """Two whole-node jobs on one node: Gandiva-Fair and Gavel give each half the rounds;
    LAS (Tiresias' queues) runs job 1 until its service passes the first queue's 3,600
    GPU-seconds (15 rounds), then job 2. Found by a review: live, the service a job had
    received stayed 0, so job 1 kept the node every round under all three."""
    fake = fake_cluster(nodes=1, gpus=4)
    store, clock = Store(tmp_path / "s.db"), Clock()
    fake.now = int(clock.t)  # one clock for Slurm's start times and the service's
    for jid in (1, 2):
        fake.add(job(jid, 4, epochs=900))
    svc = service(fake, store, clock, policy=policy)
    ran = []
    for _ in range(24):
        svc.round_once()
        fake.tick(60)
        clock.t += 60
        ran.append(next(j.job_id for j in fake.list_jobs() if j.state == "RUNNING"))
    assert ran.count(2) >= 4, ran
    view = svc.world.observe()
    served = {j.job_id: j.progress.attained_gpu_s for j in view.jobs}
    assert served[1] > 0 and served[2] > 0 and served[1] + served[2] <= 24 * 60 * 4


def test_the_service_a_job_received_adds_up_over_its_restarts() -> None:
    """Run seconds and GPU-seconds across a requeue, as the simulator counts them."""
    fake = fake_cluster(nodes=1, gpus=4)
    clock = Clock()
    fake.now = int(clock.t)
    fake.add(job(1, 2, epochs=900))
    world = SlurmCluster(fake, clock, round_s=60.0)
    fake.release([1])
    fake.tick(0)
    for seconds in (100, 50):  # running 150 s
        fake.tick(seconds)
        clock.t += seconds
        world.observe()
    fake.requeue([1])
    fake.tick(5)
    clock.t += 5
    world.observe()  # in its requeue delay (cred_expire + 1 s is 11 s here): out of the plan
    fake.tick(25)
    clock.t += 25
    world.observe()  # pending: its run is over
    fake.tick(20)  # started again
    clock.t += 20
    started = fake.jobs[1].start_time
    fake.tick(40)
    clock.t += 40
    progress = next(j for j in world.observe().jobs if j.job_id == 1).progress
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].restart_count == 1
    assert progress.run_s == pytest.approx(150 + (clock.t - started))
    assert progress.attained_gpu_s == pytest.approx(2 * progress.run_s)


def test_a_new_job_that_must_start_now_calls_the_next_round_at_once(tmp_path: Path) -> None:
    """Both GPUs busy, a job arrives whose remaining time sets the makespan (Shockwave's
    critical path): the poll finds it although no GPU idles, its fill step starts nothing
    but finds it must start now, and the wait ends there for a round that stops a job for
    it (engine/fill.py::round_due). A job that round could not start calls no other."""
    fake = fake_cluster(nodes=1, gpus=2)
    for j in (job(1, 1, epochs=500), job(2, 1, epochs=500)):  # beyond their lease: stoppable
        fake.add(j)
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, policy="shockwave", fill_freed=True, fill_poll_s=2.0)
    svc.round_once()
    fake.tick()
    assert {j.job_id for j in fake.list_jobs() if j.state == "RUNNING"} == {1, 2}
    ticks = iter(float(t) for t in range(1000))
    svc.timer = lambda: next(ticks)
    stop = threading.Event()
    fake.add(job(3, 1, epochs=5000))
    assert svc._wait(stop, boundary=200.0)  # called well before the boundary
    assert fake.jobs[3].held and store.next_round_index() == 1  # the fill step of round 0
    svc.round_once()
    kinds = {jid: [a["kind"] for a in store.actions(jid)] for jid in (1, 2, 3)}
    assert kinds[3][-1] == "start" and "preempt" in kinds[1] + kinds[2]
    fake.add(job(4, 1, epochs=5))  # a short job: nothing to call a round for
    assert not svc._wait(stop, boundary=svc.timer() + 20)


def test_a_job_a_fill_step_started_keeps_its_lease_in_the_round_it_calls(
        tmp_path: Path) -> None:
    """Found by a review: a fill step started job 4 on the GPU job 1's end freed; job 3,
    on the critical path, arrived, and the round its fill step called at once (60 ms
    later live) saw 4 still pending, not started: planned as merely waiting, it was held
    again (or, once Slurm had started it, stopped) while job 2, past its lease, ran on.
    Job 4 now counts as started by the last round, leased as a running job seen for the
    first time, and job 2 is the one stopped for job 3."""
    fake = fake_cluster(nodes=1, gpus=2)
    for j in (job(1, 1, epochs=500), job(2, 1, epochs=500)):
        fake.add(j)
    store, clock = Store(tmp_path / "s.db"), Clock()
    # the market's order, which leaves 4 waiting: the lookahead's (docs/planner.md, step
    # 9) starts it at once, shortest first, and no fill step would
    svc = service(fake, store, clock, policy="shockwave", config={"lookahead": False},
                  fill_freed=True, fill_poll_s=2.0)
    for _ in range(11):  # 1 and 2 run past their lease (10 rounds of 60 s)
        svc.round_once()
        fake.tick()
        clock.t += 60
    fake.add(job(4, 1, epochs=300))
    svc.round_once()  # 4 waits for a GPU
    fake.tick()
    clock.t += 60
    assert fake.jobs[4].held and {fake.jobs[1].state, fake.jobs[2].state} == {"RUNNING"}
    ticks = iter(float(t) for t in range(1000))
    svc.timer = lambda: next(ticks)
    stop = threading.Event()
    fake.finish(1)
    svc.ended(ProgressReport(1, ReportKind.END, clock.t, exit_code=0))
    assert not svc._wait(stop, boundary=4.0)  # the end's fill step starts 4
    assert fake.jobs[4].state == "PENDING" and not fake.jobs[4].held  # Slurm: not yet
    fake.add(job(3, 1, epochs=5000))
    assert svc._wait(stop, boundary=200.0)  # 3 must start now: the round runs at once
    done = svc.round_once()
    assert done.report.view is not None and done.report.view.starting == {4}
    assert not fake.jobs[4].held, store.jobs_now()[4]
    assert "lease" in store.jobs_now()[4].reason
    kinds = {jid: [a["kind"] for a in store.actions(jid)] for jid in (2, 4)}
    assert "preempt" in kinds[2] and "preempt" not in kinds[4]
    fake.tick()  # 3, ranked first, takes the free GPU; 4 starts on 2's once it is requeued
    assert fake.jobs[3].state == "RUNNING" and not fake.jobs[4].held


def test_without_fill_freed_an_end_report_waits_for_the_round(tmp_path: Path) -> None:
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(job(1, 4))
    fake.add(job(2, 4))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock)
    svc.round_once()
    fake.tick()
    ticks = iter(float(t) for t in range(1000))
    svc.timer = lambda: next(ticks)
    fake.finish(1)
    svc.ended(ProgressReport(1, ReportKind.END, clock.t, exit_code=0))
    svc._wait(threading.Event(), boundary=20.0)
    assert fake.jobs[2].held


def test_a_fill_step_never_holds_again_a_job_its_round_released(tmp_path: Path) -> None:
    """The round released job 2 to take job 1's GPUs once 1 has checkpointed; a fill step
    before that (another job's end) has no GPU for 2, and must leave it released: held
    again, it would wait a whole round after 1's GPUs free."""
    fake, store, _clock, svc = srtf_preempting_job_1(tmp_path)
    svc.fill_freed = True
    assert fake.jobs[1].state == "RUNNING" and 1 in store.load_intents()
    assert fake.jobs[2].state == "PENDING" and not fake.jobs[2].held
    ticks = iter(float(t) for t in range(100))
    svc.timer = lambda: next(ticks)
    svc.ended(ProgressReport(7, ReportKind.END, 0.0, exit_code=0))
    svc._wait(threading.Event(), boundary=3.0)
    assert store.next_round_index() == 2  # the fill step was stored, as round 1
    assert not fake.jobs[2].held and 1 in store.load_intents()


def test_a_start_that_waits_for_a_checkpoint_ranks_below_every_start_that_can_run_now(
        tmp_path: Path) -> None:
    """SRTF preempts the long job 1 for the short jobs 2 (on 1's GPUs) and 3 (on the two
    free ones). Slurm's main scheduler stops at the first job of a partition that cannot
    start, so 2, waiting for 1's checkpoint, must not rank above 3."""
    fake = fake_cluster(nodes=1, gpus=6)
    fake.add(job(1, 4, epochs=500))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, policy="srtf")
    svc.round_once()
    fake.tick()
    fake.add(job(2, 4, epochs=2))
    fake.add(job(3, 2, epochs=1))
    clock.t += 60
    svc.round_once()
    assert 1 in store.load_intents() and fake.jobs[1].state == "RUNNING"
    assert fake.jobs[3].priority == TOP_PRIORITY
    assert fake.jobs[2].priority == TOP_PRIORITY - WAITING_BAND


def test_a_job_being_requeued_keeps_its_reports_while_it_is_out_of_the_view(
        tmp_path: Path) -> None:
    """A step taken while a job is COMPLETING (its epilog's end report wakes a fill step
    exactly then) does not see it; its reports must stay, or it reads as not started
    (a job 97 epochs of 99 in was planned as new, live)."""
    fake = fake_cluster(nodes=1, gpus=8)
    fake.add(job(1, 4, epochs=50))
    store, clock = Store(tmp_path / "s.db"), Clock()
    feed = ReportFeed(lambda since: store.reports(since_id=since),
                      table_progress(bundled_table("tacc")))
    world = SlurmCluster(fake, clock, round_s=60.0, intents=store, progress=feed.progress)
    svc = Service(world, make_policy("fifo", None), "fifo", store, round_s=60.0, feed=feed)
    svc.round_once()
    fake.tick()
    store.add_report(ProgressReport(1, ReportKind.PROGRESS, clock.t, epoch=30.0,
                                    batch_size=32))
    svc.round_once()
    assert world.observe().jobs[0].progress.epochs_done == 30.0
    fake.jobs[1] = with_state(fake.jobs[1], state="COMPLETING")
    svc.round_once()
    assert 1 in world.queued_ids and 1 in feed.reports
    fake.jobs[1] = with_state(fake.jobs[1], state="PENDING", held=True)
    assert world.observe().jobs[0].progress.epochs_done == 30.0


def test_the_gpus_of_a_job_whose_epilog_runs_go_to_a_waiting_job_at_once(
        tmp_path: Path) -> None:
    """The end report comes from the Epilog, while Slurm still counts the job's GPUs as
    allocated (COMPLETING): the fill step counts them as the planner's, and releases the
    waiting job, which Slurm starts once they are free."""
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(job(1, 4))
    fake.add(job(2, 4))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, fill_freed=True)
    svc.round_once()
    fake.tick()
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[2].held
    fake.jobs[1] = with_state(fake.jobs[1], state="COMPLETING")  # its Epilog runs
    ticks = iter(float(t) for t in range(100))
    svc.timer = lambda: next(ticks)
    svc.ended(ProgressReport(1, ReportKind.END, clock.t, exit_code=0))
    svc._wait(threading.Event(), boundary=3.0)
    assert not fake.jobs[2].held
    fake.tick()
    assert fake.jobs[2].state == "PENDING"  # the GPUs are not free yet
    fake.finish(1)
    fake.tick()
    assert fake.jobs[2].state == "RUNNING"


def test_a_requeued_job_joins_the_plan_when_slurm_may_start_it(tmp_path: Path) -> None:
    """A requeued job may not start before its eligible time (cred_expire + 1 s after
    the requeue): planned earlier, the GPUs kept for it idle until then (live, 20-25% of
    starts waited 4-5 s so). Out of the view until then, as the simulator's preempted
    jobs are for ``requeue_delay_s``; the poll between rounds sees it join."""
    fake = fake_cluster(nodes=1, gpus=8)
    store, clock = Store(tmp_path / "s.db"), Clock()
    fake.add(with_state(job(1, 8), eligible_time=int(clock.t) + 6, restart_count=1))
    fake.add(job(2, 4))
    svc = service(fake, store, clock, fill_freed=True, fill_poll_s=1.0)
    svc.round_once()
    assert fake.jobs[1].held and not fake.jobs[2].held  # FIFO would pick job 1 first
    assert 1 in svc.world.queued_ids and not svc.world.arrived()
    waiting = store.jobs_now()[1]  # out of the plan, not out of queue and explain
    assert waiting.phase == "pending" and waiting.reason.startswith("not_eligible(until ")
    fake.tick()
    fake.finish(2)  # 8 GPUs idle: the poll runs
    clock.t += 6
    assert svc.world.arrived()  # eligible now: a fill step on the idle GPUs starts it
    ticks = iter(float(t) for t in range(100))
    svc.timer = lambda: next(ticks)
    svc._wait(threading.Event(), boundary=5.0)
    assert not fake.jobs[1].held


def test_a_stored_row_of_a_job_in_its_requeue_delay_keeps_its_progress(
        tmp_path: Path) -> None:
    """Found by a live red-team: the rows a round stores for a job the plan leaves out (in
    its requeue delay, then waiting for GPUs another partition holds) said 0 epochs done
    and 0 s left, so ``explain`` read so, while ``queue``, which reads the progress
    afresh, showed them."""
    fake = fake_cluster(nodes=1, gpus=8)
    store, clock = Store(tmp_path / "s.db"), Clock()
    fake.add(with_state(job(1, 4, epochs=50), state="RUNNING", held=False))
    svc = _service_with_feed(fake, store, clock)
    svc.round_once()
    store.add_report(ProgressReport(1, ReportKind.PROGRESS, clock.t, epoch=3.0,
                                    batch_size=32, samples_per_s=90.0, uid=0))
    fake.jobs[1] = with_state(fake.jobs[1], state="PENDING", gpu_alloc=(), nodes="",
                              restart_count=1, eligible_time=int(clock.t) + 60)
    clock.t += 10
    svc.round_once()
    row = store.jobs_now()[1]
    assert row.reason.startswith("not_eligible(until ")
    assert row.epochs_done == 3.0 and row.epochs == 50 and row.remaining_s > 0
    # eligible, while another partition holds half the node: admission leaves it waiting
    fake.add(job(9, 6, partition="other"))
    fake.release([9])
    fake.tick()
    fake.jobs[1] = with_state(fake.jobs[1], eligible_time=int(clock.t))
    clock.t += 60
    svc.round_once()
    row = store.jobs_now()[1]
    assert row.reason.startswith("waiting_capacity(")
    assert row.epochs_done == 3.0 and row.remaining_s > 0


def test_a_job_preempted_in_a_round_wakes_the_poll_when_eligible_without_its_epilog(
        tmp_path: Path) -> None:
    """The round saw it running; requeued, it is pending and out of the view until its
    eligible time; then the poll sees it join even if no Epilog report woke a fill step
    (no SHOCKWAVE_BIN, the service unreachable from the node)."""
    fake = fake_cluster(nodes=1, gpus=8)
    store, clock = Store(tmp_path / "s.db"), Clock()
    fake.add(with_state(job(1, 4), state="RUNNING", held=False))
    svc = service(fake, store, clock, fill_freed=True, fill_poll_s=1.0)
    svc.round_once()
    assert fake.jobs[1].state == "RUNNING" and not svc.world.arrived()
    fake.jobs[1] = with_state(fake.jobs[1], state="PENDING", gpu_alloc=(), nodes="",
                              restart_count=1, eligible_time=int(clock.t) + 6)
    assert not svc.world.arrived()  # requeued, not yet eligible
    clock.t += 6
    assert svc.world.arrived()


def test_a_pinned_job_requeued_by_someone_else_is_held_within_its_requeue_delay(
        tmp_path: Path) -> None:
    """Found by a live red-team: a running job at the planner's pinned priority that an
    admin requeued (or a node failure) waited out its requeue delay unheld at that
    priority, and no step ran within it (the fill step its Epilog woke saw it COMPLETING):
    Slurm started it when the delay ended, ahead of the plan, and the service's hold
    landed 60 ms later on the running job. The poll sees it and a fill step holds it."""
    fake = fake_cluster(nodes=1, gpus=8)
    store, clock = Store(tmp_path / "s.db"), Clock()
    fake.add(with_state(job(1, 4), state="RUNNING", held=False, priority=TOP_PRIORITY))
    fake.add(job(2, 8))
    svc = service(fake, store, clock, fill_freed=True, fill_poll_s=1.0)
    svc.round_once()
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[2].held
    assert not svc.world.arrived()
    fake.jobs[1] = with_state(fake.jobs[1], state="PENDING", gpu_alloc=(), nodes="",
                              restart_count=1, eligible_time=int(clock.t) + 6)
    assert svc.world.arrived()  # pinned in its delay: a fill step now
    ticks = iter(float(t) for t in range(100))
    svc.timer = lambda: next(ticks)
    svc._wait(threading.Event(), boundary=3.0)
    assert fake.jobs[1].held and not svc.world.arrived()
    clock.t += 6
    fake.tick()
    assert fake.jobs[1].state == "PENDING"  # not started ahead of the plan


def test_a_store_of_an_earlier_build_has_its_admin_holds_taken_over_once(
        tmp_path: Path) -> None:
    """Earlier builds held with admin holds, which this one leaves to the admin: the first
    round over such a store (no `holds` mark) makes them the planner's user holds, once;
    a store made by this build never takes an admin's hold."""
    import sqlite3

    fake = fake_cluster(nodes=1, gpus=1)
    fake.add(job(1, 1, epochs=500))
    fake.add(with_state(job(2, 1), reason="JobHeldAdmin"))  # held by the earlier service
    path = tmp_path / "s.db"
    Store(path).close()
    with sqlite3.connect(path) as db:  # as an earlier build left it
        db.execute("DELETE FROM meta WHERE key = 'holds'")
    store, clock = Store(path), Clock()
    assert store.held_by_earlier_build()
    service(fake, store, clock).round_once()
    assert fake.jobs[2].reason == "JobHeldUser" and not store.held_by_earlier_build()
    fake.add(with_state(job(3, 1), reason="JobHeldAdmin"))  # an admin's, afterwards
    clock.t += 60
    service(fake, store, clock).round_once()
    assert fake.jobs[3].reason == "JobHeldAdmin"
    assert not Store(tmp_path / "new.db").held_by_earlier_build()


def test_a_job_an_admin_holds_is_shown_and_never_released_round_after_round(
        tmp_path: Path) -> None:
    """Idle GPUs and an admin's hold: the job stays held through rounds, and queue and
    explain show who holds it and how to give it back."""
    fake = fake_cluster(nodes=1, gpus=8)
    fake.add(with_state(job(1, 2), reason="JobHeldAdmin"))
    fake.add(job(2, 2))
    # an operator's hold: job_submit.lua, which cannot tell an operator from a coordinator,
    # marked it too, and a `uhold` would leave it a user's hold: a release gives it back
    fake.add(with_state(job(3, 2), reason="JobHeldAdmin", comment="x held=owner"))
    store = rounds(fake, tmp_path, 3)
    assert fake.jobs[1].held and fake.jobs[1].reason == "JobHeldAdmin"
    assert fake.jobs[2].state == "RUNNING"
    row = store.jobs_now()[1]
    assert (row.phase, row.user, row.gpus, row.model, row.epochs, row.bs) == (
        "held", "alice", 2, "ResNet-18", 9, 32)
    assert row.reason == "held_by_admin(scontrol uhold 1 returns it to the plan)"
    assert store.jobs_now()[3].reason == "held_by_admin(scontrol release 3 returns it to the plan)"


def test_a_job_its_owner_holds_is_shown_and_never_released_until_they_release_it(
        tmp_path: Path) -> None:
    """Idle GPUs, a job its owner holds (`scontrol hold`: job_submit.lua marks its comment
    `held=owner`) and one its owner requeue-held: both stay held through rounds, and queue
    and explain show them held by their owner and how to give them back (found by a
    review: the planner released an owner's hold, indistinguishable from its own, when it
    planned the job, and kept an owner's requeue-hold as an admin's). The owner's release
    (the mark cleared, the planner's hold left) returns the job to the plan, which starts
    it."""
    fake = fake_cluster(nodes=1, gpus=8)
    fake.add(with_state(job(1, 2), comment="model=resnet18 bs=32 epochs=9 held=owner"))
    fake.add(with_state(job(2, 2), comment="model=resnet18 bs=32 epochs=9",
                        reason="job requeued in held state"))
    fake.add(job(3, 2))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock)
    for _ in range(3):
        svc.round_once()
        fake.tick()
        clock.t += 60
    assert fake.jobs[1].held and fake.jobs[1].comment.endswith(" held=owner")
    assert fake.jobs[2].held and fake.jobs[2].comment.endswith(" held=requeue")
    assert fake.jobs[3].state == "RUNNING"
    rows = store.jobs_now()
    for jid in (1, 2):
        row = rows[jid]
        assert (row.phase, row.user, row.gpus, row.model, row.epochs, row.bs) == (
            "held", "alice", 2, "ResNet-18", 9, 32)
        assert row.reason == f"held_by_owner(scontrol release {jid} returns it to the plan)"
    fake.jobs[1] = with_state(fake.jobs[1], comment="model=resnet18 bs=32 epochs=9")
    svc.round_once()
    fake.tick()
    assert fake.jobs[1].state == "RUNNING"


def _a_round_held_meanwhile(tmp_path: Path, **held: Any) -> tuple[Any, ...]:
    """Two jobs on one node of 4; job 1 gets ``held`` (a hold) while the round plans,
    after its observation: the round done, the cluster, the service, its clock and the
    policy's own plan."""
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(job(1, 1))
    fake.add(job(2, 1))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock)
    plan = svc.policy.plan

    def held_meanwhile(*args: object, **kw: object) -> object:
        fake.jobs[1] = with_state(fake.jobs[1], **held)
        return plan(*args, **kw)

    svc.policy.plan = held_meanwhile  # type: ignore[method-assign]
    return svc.round_once(), fake, svc, clock, plan


def test_an_owners_hold_made_while_the_round_plans_is_not_released(tmp_path: Path) -> None:
    """As an admin's: a job its owner holds after the round's observation (job_submit.lua
    marks it; Slurm's state is the planner's hold it already had) is left held, not
    released with the plan's starts."""
    done, fake, *_ = _a_round_held_meanwhile(tmp_path, comment="bs=32 epochs=9 held=owner")
    outcome = {r.action.job_id: (r.outcome, r.message) for r in done.report.result.results}
    assert outcome[1] == (Outcome.DEFERRED, "held by its owner since this round's "
                                            "observation: left held")
    fake.tick()
    assert fake.jobs[1].held and fake.jobs[2].state == "RUNNING"


def test_an_admin_hold_made_while_the_round_plans_is_not_released(tmp_path: Path) -> None:
    """The observation is seconds old when the plan is applied: a job an admin holds in
    between (``scontrol hold``) is left held by the admin, not released with the plan's
    starts (a review found it released); the round's other starts go ahead."""
    done, fake, svc, clock, plan = _a_round_held_meanwhile(
        tmp_path, held=True, priority=0, reason="JobHeldAdmin")
    outcome = {r.action.job_id: (r.outcome, r.message) for r in done.report.result.results}
    assert outcome[1][0] == Outcome.DEFERRED and "admin" in outcome[1][1]
    fake.tick()
    assert fake.jobs[1].held and fake.jobs[1].reason == "JobHeldAdmin"
    assert fake.jobs[2].state == "RUNNING"
    svc.policy.plan = plan  # type: ignore[method-assign]
    clock.t += 60
    svc.round_once()
    fake.tick()
    assert fake.jobs[1].held and fake.jobs[1].reason == "JobHeldAdmin"


def _service_with_feed(fake: FakeSlurm, store: Store, clock: Clock) -> Service:
    feed = ReportFeed(lambda since: store.reports(since_id=since),
                      table_progress(bundled_table("tacc")))
    world = SlurmCluster(fake, clock, round_s=60.0, intents=store)
    world.progress, world.acked = feed.progress, feed.acked
    return Service(world, make_policy("srtf", None), "srtf", store, round_s=60.0, feed=feed)


def _epochs(store: Store, job_id: int, upto: int, at_s: float) -> None:
    for e in range(1, upto + 1):
        store.add_report(ProgressReport(job_id=job_id, kind=ReportKind.PROGRESS, at_s=at_s,
                                        epoch=float(e), batch_size=32, samples_per_s=100.0,
                                        restart_count=0, uid=0))


def _job_5_running(tmp_path: Path, reported: int
                   ) -> tuple[FakeSlurm, Store, Clock, Service]:
    """Job 5 (100 epochs) started by a round a minute ago, its first ``reported`` epochs
    reported since."""
    fake = fake_cluster(1, 4)
    fake.add(job(5, 1, epochs=100))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = _service_with_feed(fake, store, clock)
    svc.round_once()
    fake.tick()
    clock.t += 60
    _epochs(store, 5, reported, clock.t)
    return fake, store, clock, svc


def test_an_earlier_runs_acknowledgement_does_not_requeue_the_run_signalled(
        tmp_path: Path) -> None:
    """A user walkthrough: a process of the job's first run that Slurm's proctrack lost
    trained on beside the requeued run, and its acknowledgement of a signal of its own
    counted for the one the plan sent the new run: the new run was requeued with nothing
    saved. Only the signalled run's acknowledgement counts."""
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(with_state(job(1, 4, epochs=500), restart_count=1))  # its second run
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = _service_with_feed(fake, store, clock)
    svc.round_once()
    fake.tick()
    fake.add(job(2, 4, epochs=1))
    clock.t += 60
    svc.round_once()  # SRTF stops job 1: its run 1 is signalled
    assert fake.signals == [(1, "USR1")]
    stray = ProgressReport(job_id=1, kind=ReportKind.CHECKPOINTED, at_s=clock.t + 1,
                           epoch=3.0, restart_count=0, uid=0)
    store.add_report(stray)
    clock.t += 5
    svc.round_once()
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].restart_count == 1
    store.add_report(with_state(stray, restart_count=1, at_s=clock.t))
    clock.t += 5
    svc.round_once()  # its own: requeued
    assert fake.jobs[1].restart_count == 2 and fake.jobs[1].held


@pytest.mark.parametrize("restart_between", [True, False])
def test_a_job_id_slurm_gives_out_again_does_not_inherit_the_old_jobs_reports(
        tmp_path: Path, restart_between: bool) -> None:
    """Slurm gives a job id out again once its state is lost (or MaxJobId wraps): the new
    job is not the old one 95 epochs in, whether the service restarts in between (it
    reads the store's reports afresh) or not, nor after a later restart (the store
    forgets the old job's reports when the id comes back). A review found the new job
    starting at the old one's progress."""
    fake, store, clock, svc = _job_5_running(tmp_path, reported=95)
    svc.round_once()
    assert store.jobs_now()[5].epochs_done == 95.0
    fake.finish(5)
    clock.t += 60
    svc.round_once()
    assert 5 not in store.jobs_now()
    fresh = fake_cluster(1, 4)  # slurmctld's state gone: ids from the start again
    fresh.add(with_state(job(5, 1, epochs=100), user="bob", submit_time=int(clock.t)))
    if restart_between:
        svc = _service_with_feed(fresh, Store(tmp_path / "s.db"), clock)
    else:
        svc.world.backend = fresh
    clock.t += 60
    svc.round_once()
    assert svc.store.jobs_now()[5].epochs_done == 0.0
    assert svc.store.reports([5]) == {}
    again = _service_with_feed(fresh, Store(tmp_path / "s.db"), clock)  # a later restart
    clock.t += 60
    again.round_once()
    assert again.store.jobs_now()[5].epochs_done == 0.0


def test_a_suspended_job_keeps_its_row_and_its_reports(tmp_path: Path) -> None:
    """An admin's ``scontrol suspend``: the job is shown (left to Slurm) and, its id never
    leaving the store's jobs, its reports stay its own when it is resumed."""
    fake, store, clock, svc = _job_5_running(tmp_path, reported=40)
    fake.jobs[5] = with_state(fake.jobs[5], state="SUSPENDED")
    svc.round_once()
    row = store.jobs_now()[5]
    assert (row.phase, row.user) == ("suspended", "alice") and "suspended" in row.reason
    fake.jobs[5] = with_state(fake.jobs[5], state="RUNNING")
    clock.t += 60
    svc.round_once()
    assert store.jobs_now()[5].epochs_done == 40.0


def test_a_gpu_count_slurm_refuses_an_elastic_job_is_not_asked_for_again(
        tmp_path: Path) -> None:
    """Found by a review: a GRES update Slurm refuses (a QOS's MaxTRESPerJob, say) left
    the job held beside idle GPUs, the plan asking for the same count every round. The
    range is cut at the count Slurm holds on that side, and the job runs there the next
    round."""

    class Limited(FakeSlurm):
        def update_gpus(self, job_id: int, gpus: int, *, nodes: int | None = None,
                        gpu_type: str = "", per_job: bool = False,
                        max_nodes: int | None = None) -> None:
            if gpus * (nodes or 1) > 4:
                raise SlurmError("Job violates accounting/QOS policy")
            super().update_gpus(job_id, gpus, nodes=nodes, gpu_type=gpu_type,
                                per_job=per_job, max_nodes=max_nodes)

    fake = Limited([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    fake.add(job(1, 2, epochs=50, hint=PLAIN + " gpus=1-8"))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, policy="stretch_edf")
    outcomes = []
    for _ in range(3):
        done = svc.round_once()
        outcomes += [(r.action.kind, len(r.action.gpu_slots), r.outcome)
                     for r in done.report.result.results]
        fake.tick()
        clock.t += 60
    assert outcomes[0] == (ActionKind.START, 8, Outcome.REJECTED)
    assert outcomes[1] == (ActionKind.START, 2, Outcome.APPLIED)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].gpus == 2


def test_an_elastic_count_wider_than_a_node_is_placed_evenly_over_nodes(
        tmp_path: Path) -> None:
    """Found by a review: 8 GPUs placed 3+4+1 over nodes of 3, 4 and 4 usable GPUs (one
    held by another partition's job) were asked of Slurm as 2 a node (6): the next round
    saw 6, planned 8 again and resized it, round after round; then such a placement was
    refused before Slurm was asked, and the job ran at 4 beside 7 idle GPUs. Placement
    now takes whole nodes that split the count evenly: 4 + 4 on the two free nodes, from
    the first round, and never resized."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave", "other"))
                      for i in (1, 2, 3)])
    fake.add(SlurmJob(99, "other", "bob", "other", "RUNNING", gpus=1, nodes="n1"))
    fake.add(job(1, 4, epochs=50, hint=PLAIN + " gpus=4-8"))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, policy="elastic_greedy")
    counts = []
    for _ in range(6):
        svc.round_once()
        fake.tick()
        clock.t += 60
        counts.append((fake.jobs[1].state, fake.jobs[1].gpus, fake.jobs[1].restart_count))
    assert counts == [("RUNNING", 8, 0)] * 6, counts
    assert [(n, len(i)) for n, i in fake.jobs[1].gpu_alloc] == [("n2", 4), ("n3", 4)]

def test_a_fixed_multi_node_job_is_planned_where_slurm_runs_it(tmp_path: Path) -> None:
    """``-N 2 --gres=gpu:4`` runs as 4 + 4 in Slurm. Found by a review: the plan put it
    as 8 on one node of 8 and started an 8-GPU job on the other, which Slurm could not
    run (the first held 4 of each node) and the plan took for started. Placed 4 + 4, the
    8-GPU job waits held and two 4-GPU jobs behind it take the other halves."""
    fake = fake_cluster(nodes=2, gpus=8)
    fake.add(job(1, 8, nodes=2))
    fake.add(job(2, 8))
    fake.add(job(3, 4))
    fake.add(job(4, 4))
    rounds(fake, tmp_path, 2)
    states = {jid: (fake.jobs[jid].state, fake.jobs[jid].held) for jid in (1, 2, 3, 4)}
    assert states == {1: ("RUNNING", False), 2: ("PENDING", True), 3: ("RUNNING", False),
                      4: ("RUNNING", False)}
    assert [len(i) for _, i in fake.jobs[1].gpu_alloc] == [4, 4]


@pytest.mark.parametrize("policy", ["fifo", "shockwave"])
def test_a_job_that_asked_for_no_gpu_runs_to_its_end_once_started(policy: str) -> None:
    """Found by a review: a managed job with no GPU request is planned as a 1-GPU job, but
    Slurm gives it no GPU; placed on one, it was taken for a move and requeued every
    other round (its work lost without a signal), by FIFO too. Once running it is left
    to Slurm, shown as such, and its planned GPU goes to the next job."""
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(job(1, 0, epochs=500, hint=PLAIN))  # sbatch -p shockwave with no --gres
    fake.add(job(2, 4, epochs=500, hint=PLAIN))
    store, clock = Store(":memory:"), Clock()
    svc = service(fake, store, clock, policy=policy)
    for _ in range(5):
        svc.round_once()
        fake.tick(20)
        clock.t += 60
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].restart_count == 0
    assert fake.jobs[2].state == "RUNNING" and not fake.signals
    assert {r.job_id: r.reason for r in unplanned_rows(svc.world.left_out)} == {
        1: "without_gpus(asked for no GPU: left to Slurm until it ends)"}


@pytest.mark.parametrize("policy", ["srtf", "shockwave"])
def test_a_job_slurm_will_not_requeue_runs_to_its_end_once_started(policy: str) -> None:
    """A ``--no-requeue`` job moved into the partition (job_submit.lua sees no requeue
    flag of a job record) was preempted round after round once it ran: each requeue
    refused, while the plan counted its GPUs free for the job it stopped it for. Once
    running it is left to Slurm, never signalled, shown as such, and its GPUs go to no
    other job."""
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(with_state(job(1, 4, epochs=500), requeue=False))
    store, clock = Store(":memory:"), Clock()
    svc = service(fake, store, clock, policy=policy)
    svc.round_once()
    fake.tick()
    fake.add(job(2, 4, epochs=1))  # shorter: SRTF stops job 1 for it
    for _ in range(4):
        clock.t += 60
        done = svc.round_once()
        assert not done.report.result.count(Outcome.REJECTED)
        fake.tick(20)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].restart_count == 0
    assert fake.signals == [] and fake.jobs[2].state == "PENDING"
    assert {r.job_id: r.reason for r in unplanned_rows(svc.world.left_out)} == {
        1: "not_requeueable(submitted --no-requeue: Slurm will not requeue it, so it is "
           "left to run to its end)"}


def _rounds_over(fake: FakeSlurm, policy: str, n: int) -> Service:
    svc = service(fake, Store(":memory:"), Clock(), policy=policy)
    for _ in range(n):
        svc.round_once()
        fake.tick(20)
        svc.world.clock.t += 60  # type: ignore[attr-defined]
    return svc


@pytest.mark.parametrize("policy", ["fifo", "srtf", "shockwave"])
def test_a_job_waiting_for_its_dependency_is_left_to_slurm_until_it_is_met(
        policy: str) -> None:
    """Found by a red-team: a ``--dependency`` job was planned (its eligible time reads
    0), and Slurm tests no dependency of a held job (measured on 22.05): under SRTF the
    short job waiting for the long one was started every round and the long one held,
    so nothing ran; under FIFO a job whose dependency can never be met kept its GPUs.
    Such a job is left out of the plan and released until Slurm clears its dependency,
    then planned as any other."""
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(job(1, 4, epochs=200))
    fake.add(with_state(job(2, 4, epochs=1), dependency="afterok:1(unfulfilled)"))
    svc = _rounds_over(fake, policy, 3)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[2].state == "PENDING"
    assert not fake.jobs[2].held and fake.jobs[2].reason == "Dependency"
    assert {r.job_id: r.reason for r in unplanned_rows(svc.world.left_out)} == {
        2: "held_back(waits for its dependency afterok:1(unfulfilled): left to Slurm, "
           "released, until it lets the job go)"}
    fake.finish(1)
    for _ in range(3):
        svc.round_once()
        fake.tick(20)
        svc.world.clock.t += 60  # type: ignore[attr-defined]
    assert fake.jobs[2].state == "RUNNING" and not fake.jobs[2].dependency

    never = fake_cluster(nodes=1, gpus=4)
    never.add(job(1, 4, epochs=200))
    never.finish(1, "FAILED")
    never.add(with_state(job(3, 4, epochs=5), dependency="afterok:1(unfulfilled)"))
    never.add(job(4, 4, epochs=5))
    svc = _rounds_over(never, policy, 3)
    assert never.jobs[4].state == "RUNNING" and never.jobs[3].state == "PENDING"
    assert never.jobs[3].reason == "DependencyNeverSatisfied"


class _UserLimit(FakeSlurm):
    """A QOS limit on GPUs per user (``QOSMaxGRESPerUser``): a released job of ``limited``
    stays pending with that reason while another job of its owner's is queued."""

    limited: frozenset[int] = frozenset({2})

    def tick(self, seconds: int = 1) -> None:
        kept = {jid: j for jid in self.limited if (j := self.jobs[jid]).state == "PENDING"
                and not j.held and any(o.user == j.user and o.job_id != jid
                                       and o.state in ("PENDING", "RUNNING")
                                       for o in self.jobs.values())}
        for jid, j in kept.items():  # out of the scheduler's sight while it runs
            self.jobs[jid] = with_state(j, held=True)
        super().tick(seconds)
        for jid in kept:
            self.jobs[jid] = with_state(self.jobs[jid], held=False, reason="QOSMaxGRESPerUser")


def test_a_job_slurm_holds_back_for_a_limit_is_left_to_slurm_and_unpinned() -> None:
    """Found by a red-team: a job released by the plan that Slurm keeps pending for a
    limit of its owner's (a QOS or association limit, licences, a reservation) kept the
    GPUs the plan gave it, idle round after round, while another user's job waited held.
    Seen held back, it is left out of the plan, its pinned priority given back, and its
    GPUs go to the next job."""
    fake = _UserLimit([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    fake.add(job(1, 4, epochs=500))
    fake.add(job(2, 4, epochs=5))
    fake.add(with_state(job(3, 4, epochs=50), user="bob"))
    svc = _rounds_over(fake, "fifo", 4)
    assert fake.jobs[2].state == "PENDING" and fake.jobs[2].reason == "QOSMaxGRESPerUser"
    assert fake.jobs[2].priority < TOP_PRIORITY - PINNED_BAND
    assert fake.jobs[3].state == "RUNNING"
    assert svc.world.left_out.held_back == {2: "Slurm holds it back: QOSMaxGRESPerUser"}


def test_the_heartbeat_names_the_services_uid_before_the_first_round(tmp_path: Path) -> None:
    """Found by a review: the first round's holds went out before any heartbeat named the
    service's uid, so job_submit.lua took them, for a service run as an operator's
    account, for a user's and marked them kept for good. The heartbeat names it when the
    service starts, keeping a fresh one's time (none is written stale: new jobs run
    unheld until the first round, as without a file)."""
    import os

    beat = tmp_path / "heartbeat"
    fake, clock = fake_cluster(), Clock()
    svc = service(fake, Store(tmp_path / "s.db"), clock, heartbeat=str(beat))
    svc.run(threading.Event(), max_rounds=0)
    assert beat.read_text() == f"0 180\nuid {os.geteuid()}\n"
    beat.write_text("1796000000 600\n")  # an earlier build's, fresh
    svc.run(threading.Event(), max_rounds=0)
    assert beat.read_text() == f"1796000000 600\nuid {os.geteuid()}\n"


@pytest.mark.parametrize("policy", ["fifo", "shockwave"])
def test_a_job_asking_a_gpu_type_is_planned_on_nodes_of_that_type(policy: str) -> None:
    """Found by a red-team: the GPU type a job named (``--gres=gpu:v100:4``) was dropped,
    so the plan placed it on another type's node, where Slurm never starts it, and held
    the job that could have run there. A typed job is placed on its type's nodes only,
    and one asking more than its type has is refused as too large."""
    fake = FakeSlurm([SlurmNode("a1", ("IDLE",), 4, 0, ("shockwave",), gpu_type="a100"),
                      SlurmNode("v1", ("IDLE",), 4, 0, ("shockwave",), gpu_type="v100")])
    fake.add(SlurmJob(5, "x", "bob", "shockwave", "RUNNING", gpus=4, nodes="v1",
                      admin_comment=PLAIN.format(e=500), submit_time=800, gpu_type="v100"))
    fake.add(with_state(job(1, 4, epochs=5), gpu_type="v100"))
    fake.add(with_state(job(2, 4, epochs=50), gpu_type="a100"))
    fake.add(with_state(job(3, 8, epochs=5), gpu_type="a100"))
    svc = _rounds_over(fake, policy, 2)
    assert fake.jobs[2].state == "RUNNING" and fake.jobs[2].nodes == "a1"
    assert fake.jobs[1].state == "PENDING" and fake.jobs[5].state == "RUNNING"
    rows = {r.job_id: r.reason for r in svc.store.jobs_now().values()}
    assert rows[3].startswith("rejected_too_large(gpus=8 a100=4")


def test_a_job_moved_out_while_the_service_was_down_gets_its_hold_back(
        tmp_path: Path) -> None:
    """The service gave back the planner's hold of a job moved out of the partition only
    when it saw the job leave between two of its rounds: one moved while it was down
    stayed held for ever. A restarted service looks for the jobs its store last saw
    pending; the owner's hold of another such job (marked) stays."""
    fake = fake_cluster(nodes=1)
    for jid in (1, 2, 3):
        fake.add(job(jid, 8, epochs=50))
    svc = service(fake, Store(tmp_path / "s.db"), Clock())
    svc.round_once()
    assert fake.jobs[2].held and fake.jobs[3].held and not fake.jobs[1].held
    # the service is down: jobs 2 and 3 are moved out, 3 held by its owner (marked)
    fake.jobs[2] = with_state(fake.jobs[2], partition="other")
    fake.jobs[3] = with_state(fake.jobs[3], partition="other",
                              comment=fake.jobs[3].comment + " held=owner")
    again = service(fake, Store(tmp_path / "s.db"), Clock())
    again.round_once()
    assert not fake.jobs[2].held and fake.jobs[3].held


@pytest.mark.parametrize("restart", [False, True])
def test_a_job_moved_out_after_the_round_that_preempted_it_gets_its_hold_back(
        tmp_path: Path, restart: bool) -> None:
    """Found by a red-team: a job the round requeued and held (its row says running, as
    observed) and moved out by its owner before the next observation was never looked
    for, by the same service or a restarted one, and kept the planner's hold for ever.
    Every job whose hold or priority a step set is looked for when it leaves, and a
    restarted service looks for every job of the store's last round."""
    fake, store, clock, svc = srtf_preempting_job_1(tmp_path, PLAIN)
    assert fake.jobs[1].held and store.jobs_now()[1].phase == "running"
    fake.jobs[1] = with_state(fake.jobs[1], partition="other")
    if restart:
        store.close()
        svc = service(fake, Store(tmp_path / "s.db"), clock, policy="srtf")
    clock.t += 60
    svc.round_once()
    assert not fake.jobs[1].held


def test_a_job_moved_out_while_its_requeue_ends_gets_its_hold_back(tmp_path: Path) -> None:
    """Found by a live red-team: a job the planner requeued and held, moved out by its
    owner while Slurm still lists it COMPLETING (the step its own Epilog wakes sees it
    so), was looked for once, not PENDING then, and kept the planner's hold (priority 0)
    in its new partition for ever. It is looked for again until it is pending."""
    fake, _store, clock, svc = srtf_preempting_job_1(tmp_path, PLAIN)
    assert fake.jobs[1].held and fake.jobs[1].restart_count == 1
    pending = with_state(fake.jobs[1], partition="other")
    fake.jobs[1] = with_state(pending, state="COMPLETING")  # as 22.05 lists it then
    clock.t += 5
    svc.round_once()
    assert fake.jobs[1].held
    fake.jobs[1] = pending  # its Epilog done: pending, held, in partition other
    clock.t += 60
    svc.round_once()
    assert not fake.jobs[1].held


def test_a_store_is_one_partitions(tmp_path: Path) -> None:
    """Found by a red-team: with the service stopped, one round of another partition
    over its store (``plan --apply --partition other``) replaced every job row: the
    service's next round took its jobs for new ones and deleted their progress reports,
    and the one-shot round released the jobs the service held, taking them for jobs
    moved out. The first service over a store claims it for its partition; another's is
    refused in one line naming the store, before anything is read or written."""
    from slurm_shockwave.model.errors import InputError

    fake = fake_cluster(nodes=1)
    fake.add(job(1, 8, epochs=50))
    fake.add(job(2, 8, epochs=50))
    clock = Clock()
    service(fake, Store(tmp_path / "s.db"), clock).round_once()
    store = Store(tmp_path / "s.db")
    store.add_report(ProgressReport(1, ReportKind.PROGRESS, clock.t, epoch=3.0,
                                    batch_size=32, samples_per_s=90.0, uid=0))
    world = SlurmCluster(fake, clock, round_s=60.0, intents=store, partition="other")
    with pytest.raises(InputError) as refused:
        Service(world, make_policy("fifo", None), "fifo", store, round_s=60.0)
    assert str(refused.value) == (
        f"{tmp_path / 's.db'}: service.store: this store is partition shockwave's (its "
        "jobs' progress reports, holds and checkpoints); give partition other a store of "
        "its own (--store)")
    assert fake.jobs[2].held and sorted(store.jobs_now()) == [1, 2]
    assert [r.epoch for r in store.reports([1])[1]] == [3.0]
    service(fake, store, clock).round_once()  # its own partition's service goes on


def test_an_owners_hold_of_a_job_that_ran_and_moved_out_is_left(tmp_path: Path) -> None:
    """Found by a review: a restarted service looked for every job of its store's last
    round, so a job that was running then (never held by the planner), requeued by Slurm
    while the service was down, moved out and held there by its owner (a plain user hold:
    job_submit.lua marks none outside the managed partition) was released. Only the jobs
    the last round left waiting or preempted are looked for."""
    fake = fake_cluster(nodes=1)
    fake.add(job(1, 8, epochs=500))
    clock = Clock()
    svc = service(fake, Store(tmp_path / "s.db"), clock)
    svc.round_once()
    fake.tick(20)
    clock.t += 60
    svc.round_once()
    svc.store.close()
    fake.requeue([1])  # by Slurm (a node failure), while the service is down
    fake.jobs[1] = with_state(fake.jobs[1], partition="other", held=True, priority=0,
                              reason="JobHeldUser")  # the owner's hold there
    clock.t += 3600
    service(fake, Store(tmp_path / "s.db"), clock).round_once()
    assert fake.jobs[1].held


def test_a_store_is_claimed_by_the_first_round_written_not_by_a_start() -> None:
    """A service started on a mistyped partition while Slurm did not answer (so the
    partition check at start could not see the typo) wrote no round; it claims the store
    for nothing, and the right partition's service takes it."""
    fake = fake_cluster(nodes=1)
    fake.add(job(1, 8, epochs=50))
    store, clock = Store(":memory:"), Clock()
    typo = SlurmCluster(fake, clock, round_s=60.0, intents=store, partition="shockwav")
    Service(typo, make_policy("fifo", None), "fifo", store, round_s=60.0)
    assert store.meta_value("partition") is None
    service(fake, store, clock).round_once()
    assert store.meta_value("partition") == "shockwave"


def test_a_pinned_job_moved_out_before_it_starts_gets_its_priority_back() -> None:
    """A job the planner released at its pinned priority (the top of the queue) and moved
    to another partition before it started kept that priority there, ahead of every job
    of that partition. The service's next apply gives back the priority Slurm
    computes."""
    from slurm_shockwave.slurm.listing import TOP_PRIORITY

    fake = fake_cluster(nodes=1)
    fake.add(with_state(job(1, 8), held=False, reason="Resources", priority=TOP_PRIORITY - 1))
    world = SlurmCluster(fake, Clock(), round_s=60.0)
    world.observe()
    fake.jobs[1] = with_state(fake.jobs[1], partition="other")
    world.observe()
    world.apply([])
    assert fake.jobs[1].priority == 100_000 - 1


@pytest.mark.parametrize("policy", ["fifo", "srtf", "shockwave"])
def test_a_running_job_whose_gpu_indices_are_not_listed_takes_no_other_jobs(
        policy: str) -> None:
    """Found by a red-team: a running job the listing gave no GPU indices (its detail
    unread this round) was given n1:0-3, another job's GPUs, and the plan moved or stopped
    one of them. It is given the indices its node uses that no other job holds."""

    class NoDetail(FakeSlurm):
        hide: frozenset[int] = frozenset()

        def list_jobs(self, partition: str | None = None) -> list[SlurmJob]:
            return [with_state(j, gpu_alloc=()) if j.job_id in self.hide else j
                    for j in super().list_jobs(partition)]

    fake = NoDetail([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",)) for i in (1, 2)])
    for jid, gpus in ((1, 4), (2, 4), (3, 8), (4, 4)):
        fake.add(job(jid, gpus, epochs=40))
    svc = service(fake, Store(":memory:"), Clock(), policy=policy)
    for k in range(3):
        svc.round_once()
        fake.tick(20)
        svc.world.clock.t += 60  # type: ignore[attr-defined]
        fake.hide = frozenset({2} if k == 0 else ())
    assert fake.signals == [] and [fake.jobs[j].restart_count for j in (1, 2, 3)] == [0, 0, 0]


@pytest.mark.parametrize("policy", ["fifo", "srtf", "shockwave"])
def test_starts_are_ranked_widest_first_so_slurm_places_them_as_planned(policy: str) -> None:
    """Found by a red-team: the plan put a 4-GPU job on the half-used n2 and an 8-GPU job
    on the idle n1, but ranked the starts in the listing's order, and Slurm, starting
    them in priority order each where it fits, put the 4-GPU job on n1: the 8-GPU job
    waited the other's whole run beside 4 idle GPUs."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave", "other"))
                      for i in (1, 2)])
    fake.add(SlurmJob(50, "o", "bob", "other", "RUNNING", gpus=4, nodes="n2",
                      submit_time=800))
    fake.add(job(1, 4, epochs=50))
    fake.add(job(2, 8, epochs=5))
    _rounds_over(fake, policy, 2)
    assert (fake.jobs[1].nodes, fake.jobs[2].nodes) == ("n2", "n1")
    assert fake.jobs[2].state == "RUNNING" and fake.signals == []


@pytest.mark.parametrize("policy", ["fifo", "srtf"])
def test_a_job_on_several_nodes_holds_only_the_gpus_slurm_gave_it(policy: str) -> None:
    """Found by a red-team: a running job on several nodes held them whole in the plan,
    as the simulator's placement gives them, though Slurm lends the rest out: a
    ``--gpus=5`` job run as 4 + 1 kept 3 GPUs idle and a 2-GPU job waiting all its run."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave",)) for i in (1, 2)])
    fake.add(with_state(job(1, 5, epochs=30), state="RUNNING", held=False, node_count=2,
                        nodes="n1,n2", gpu_alloc=(("n1", (0, 1, 2, 3)), ("n2", (0,))),
                        start_time=1, per_job=True))
    fake.add(job(2, 2, epochs=3))
    fake.add(job(3, 1, epochs=3))
    _rounds_over(fake, policy, 2)
    assert fake.jobs[2].state == fake.jobs[3].state == "RUNNING"
    assert fake.jobs[1].state == "RUNNING" and fake.signals == []


@pytest.mark.parametrize("policy", ["fifo", "srtf", "shockwave"])
def test_a_per_node_request_is_never_spread_and_a_per_job_one_is(policy: str) -> None:
    """Found by a red-team: with another partition holding 1 GPU of each node of 8, a
    ``--gres=gpu:8`` job was planned 7 + 1 and released every round, which Slurm never
    starts, and the plan kept both nodes for it: a 4-GPU job waited beside 14 idle GPUs.
    A per-node request waits for a node; a ``--gpus=8`` one is spread as Slurm does."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave", "other"))
                      for i in (1, 2)])
    for jid, node in ((8, "n1"), (9, "n2")):
        fake.add(SlurmJob(jid, "o", "bob", "other", "RUNNING", gpus=1, nodes=node,
                          submit_time=800))
    fake.add(job(1, 8, epochs=5))
    fake.add(job(2, 4, epochs=5))
    svc = _rounds_over(fake, policy, 3)
    assert fake.jobs[1].held and fake.jobs[2].state == "RUNNING"
    assert svc.store.jobs_now()[1].reason.startswith("waiting_")
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave", "other"))
                      for i in (1, 2)])
    for jid, node in ((8, "n1"), (9, "n2")):
        fake.add(SlurmJob(jid, "o", "bob", "other", "RUNNING", gpus=1, nodes=node,
                          submit_time=800))
    fake.add(with_state(job(1, 8, epochs=5), per_job=True))
    _rounds_over(fake, policy, 3)
    assert fake.jobs[1].state == "RUNNING" and len(fake.jobs[1].gpu_alloc) == 2
    # found by a review: spread only when wider than the widest node, a --gpus=8 job
    # waited beside two half-used nodes of 8, where Slurm runs it 4 + 4
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",)) for i in (1, 2)])
    for jid, node in ((5, "n1"), (6, "n2")):
        fake.add(with_state(job(jid, 4, epochs=400), state="RUNNING", held=False, nodes=node,
                            gpu_alloc=((node, (0, 1, 2, 3)),), start_time=1))
    fake.add(with_state(job(3, 8, epochs=3), per_job=True))
    _rounds_over(fake, policy, 3)
    assert fake.jobs[3].state == "RUNNING" and len(fake.jobs[3].gpu_alloc) == 2
    assert fake.signals == [] and fake.jobs[5].restart_count == fake.jobs[6].restart_count == 0
    # and one wider than any node: over free GPUs too, not only whole free nodes (12 as
    # 6 + 6 beside two 2-GPU jobs on nodes of 8)
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",)) for i in (1, 2)])
    for jid, node in ((5, "n1"), (6, "n2")):
        fake.add(with_state(job(jid, 2, epochs=400), state="RUNNING", held=False, nodes=node,
                            gpu_alloc=((node, (0, 1)),), start_time=1))
    fake.add(with_state(job(3, 12, epochs=3), per_job=True))
    _rounds_over(fake, policy, 3)
    assert fake.jobs[3].state == "RUNNING" and len(fake.jobs[3].gpu_alloc) == 2
    assert fake.signals == []


def test_a_typed_job_wider_than_its_types_nodes_is_spread_over_them() -> None:
    """A ``--gpus=v100:8`` job on nodes of 4 v100 looked for one node as wide as the
    cluster's widest (an a100 node of 8) and never started; Slurm spreads it 4 + 4."""
    fake = FakeSlurm([SlurmNode("a1", ("IDLE",), 8, 0, ("shockwave",), gpu_type="a100"),
                      SlurmNode("v1", ("IDLE",), 4, 0, ("shockwave",), gpu_type="v100"),
                      SlurmNode("v2", ("IDLE",), 4, 0, ("shockwave",), gpu_type="v100")])
    fake.add(with_state(job(1, 8, epochs=5), gpu_type="v100", per_job=True))
    _rounds_over(fake, "fifo", 2)
    assert fake.jobs[1].state == "RUNNING"
    assert sorted(n for n, _ in fake.jobs[1].gpu_alloc) == ["v1", "v2"]


def test_a_typed_request_a_node_of_its_type_holds_is_not_spread() -> None:
    """The width of a type's nodes is all their GPUs, not what other partitions leave:
    with 2 of each a100 node of 8 held, ``a100:8`` (which Slurm gives one node) was
    planned as 6 + 2 and released, where Slurm cannot start it. It waits, saying that
    jobs outside the plan hold the room it needs (it read ``waiting_fragmentation``)."""
    fake = FakeSlurm([SlurmNode(f"a{i}", ("IDLE",), 8, 0, ("shockwave", "other"),
                                gpu_type="a100") for i in (1, 2)])
    for jid, node in ((8, "a1"), (9, "a2")):
        fake.add(SlurmJob(jid, "o", "bob", "other", "RUNNING", gpus=2, nodes=node,
                          submit_time=800, gpu_type="a100"))
    fake.add(with_state(job(2, 8, epochs=5), gpu_type="a100"))
    svc = _rounds_over(fake, "fifo", 2)
    assert fake.jobs[2].held
    rows = {r.job_id: r.reason for r in svc.store.jobs_now().values()}
    assert rows[2] == ("waiting_capacity(gpus=8 on one node: room usable a100=6 of 8: the rest "
                       "drained, down or held by jobs outside the plan)")


def test_defragmentation_clears_a_node_of_the_waiting_jobs_gpu_type() -> None:
    """Defragmentation cleared the node holding the fewest GPUs whatever its type: for a
    v100 job that was the a100 node, where it cannot run, and it waited until the v100
    node's jobs ended. It clears a node of the job's type, and their jobs move."""
    fake = FakeSlurm([SlurmNode("a1", ("IDLE",), 4, 0, ("shockwave",), gpu_type="a100"),
                      SlurmNode("v1", ("IDLE",), 4, 0, ("shockwave",), gpu_type="v100")])
    for jid, node in ((5, "a1"), (6, "v1"), (7, "v1")):
        fake.add(SlurmJob(jid, f"r{jid}", "bob", "shockwave", "RUNNING", gpus=1, nodes=node,
                          admin_comment=SIGNAL.format(e=500), submit_time=800 + jid,
                          start_time=800 + jid))
    fake.add(with_state(job(1, 4, epochs=1), gpu_type="v100"))
    _rounds_over(fake, "srtf", 6)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].nodes == "v1"


def _typed_cluster(*nodes: tuple[str, int, str], other: tuple[str, ...] = ()) -> FakeSlurm:
    return FakeSlurm([SlurmNode(name, ("IDLE",), gpus, 0,
                                ("shockwave", "other") if name in other else ("shockwave",),
                                gpu_type=kind) for name, gpus, kind in nodes])


def _small_running(fake: FakeSlurm, *where: tuple[int, str]) -> None:
    for jid, node in where:
        fake.add(SlurmJob(jid, f"r{jid}", "bob", "shockwave", "RUNNING", gpus=1, nodes=node,
                          admin_comment=SIGNAL.format(e=500), submit_time=800 + jid,
                          start_time=800 + jid))


@pytest.mark.parametrize("small_on_v4", [1, 3])
def test_defragmentation_clears_nodes_wide_enough_and_enough_of_them(
        small_on_v4: int) -> None:
    """Found by a review: defragmentation cleared ceil(want / the cluster's widest node)
    nodes, whatever their type's width (one v100 node of 4 for a ``v100:8`` job beside
    an a100 node of 8), and the node holding the fewest GPUs even where it was narrower
    than the job. Both waited until the small jobs ended."""
    fake = _typed_cluster(("a1", 8, "a100"), ("v1", 4, "v100"), ("v2", 4, "v100"))
    _small_running(fake, (6, "v1"), (7, "v2"))
    fake.add(with_state(job(1, 8, epochs=1), gpu_type="v100", per_job=True))
    _rounds_over(fake, "srtf", 8)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].nodes == "v1,v2"
    fake = _typed_cluster(("a1", 8, "a100"), ("v8", 8, "v100"), ("v4", 4, "v100"))
    _small_running(fake, (5, "v8"), (6, "v8"), *((10 + k, "v4") for k in range(small_on_v4)))
    fake.add(with_state(job(1, 8, epochs=1), gpu_type="v100"))
    _rounds_over(fake, "srtf", 8)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].nodes == "v8"


@pytest.mark.parametrize("held", [8, 7])
def test_a_typed_nodes_width_counts_when_other_partitions_hold_all_of_it(held: int) -> None:
    """Found by a review: a node whose GPUs another partition held all of was out of the
    view, and with it the width of its type: ``a100:8`` was spread 4 + 4 over two a100
    nodes of 4 and released, where Slurm does not start it, and the ``a100:4`` job behind
    it was held. The type's width is read from every node of the partition."""
    fake = _typed_cluster(("a1", 8, "a100"), ("a3", 4, "a100"), ("a4", 4, "a100"),
                          other=("a1",))
    fake.add(SlurmJob(9, "o", "bob", "other", "RUNNING", gpus=held, nodes="a1",
                      submit_time=800, gpu_type="a100"))
    fake.add(with_state(job(1, 8, epochs=5), gpu_type="a100"))
    fake.add(with_state(job(2, 4, epochs=5), gpu_type="a100"))
    svc = _rounds_over(fake, "fifo", 3)
    assert fake.jobs[1].held and fake.jobs[2].state == "RUNNING"
    assert svc.store.jobs_now()[1].reason.startswith("waiting_")


def test_an_elastic_typed_job_spreads_over_what_its_types_nodes_leave() -> None:
    """Found by a review: the width of a type's nodes by all their GPUs kept an elastic
    ``gpus=8-16`` a100 job, which the service spreads itself, waiting for one node of 8
    while other partitions held 2 of each: it runs 4 + 4."""
    fake = _typed_cluster(("a1", 8, "a100"), ("a2", 8, "a100"), other=("a1", "a2"))
    for jid, node in ((8, "a1"), (9, "a2")):
        fake.add(SlurmJob(jid, "o", "bob", "other", "RUNNING", gpus=2, nodes=node,
                          submit_time=800, gpu_type="a100"))
    fake.add(with_state(job(1, 8, epochs=50, hint=PLAIN + " gpus=8-16"), gpu_type="a100"))
    _rounds_over(fake, "fifo", 3)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].nodes == "a1,a2"


def test_typed_jobs_fit_nodes_of_several_types() -> None:
    """Found by a review: a node of several types (MIG) read as untyped, and a job asking
    one of them waited for ever; an elastic typed job was refused over its request
    though its fewest fit."""
    fake = FakeSlurm([SlurmNode("a1", ("IDLE",), 8, 0, ("shockwave",), gpu_type="a100"),
                      SlurmNode("m1", ("IDLE",), 4, 0, ("shockwave",), gpu_type="*")])
    fake.add(with_state(job(2, 2, epochs=5), gpu_type="1g.10gb"))
    _rounds_over(fake, "fifo", 2)
    assert fake.jobs[2].state == "RUNNING" and fake.jobs[2].nodes == "m1"
    from slurm_shockwave.engine.admission import admit
    from slurm_shockwave.model.cluster import ClusterView, GpuNode
    from slurm_shockwave.model.job import AdaptationMode, Job, JobProgress, JobSpec
    elastic = Job(JobSpec(9, "LM", 8, 4, AdaptationMode.STATIC, 0.0, 9, gpus_range=(2, 4),
                          gpu_type="v100"), JobProgress(epoch_s=10.0))
    view = ClusterView(now_s=0.0, round_index=0, round_s=60.0,
                       nodes=(GpuNode("v1", 2, (0, 1), "v100"),), jobs=(elastic,))
    assert admit(view)[1] == {}


def test_a_resized_elastic_job_keeps_its_gpu_type() -> None:
    """Found by a review: the GRES update wrote ``gres=gpu:N``, and Slurm replaces a job's
    GRES with what it is given, so a resized typed job became untyped and could start on
    another type's node. The update names the type."""
    fake = FakeSlurm([SlurmNode("v1", ("IDLE",), 8, 0, ("shockwave",), gpu_type="v100")])
    fake.add(with_state(job(1, 2, epochs=50, hint=PLAIN + " gpus=1-8"), gpu_type="v100"))
    calls: list[tuple[int, str]] = []
    real = fake.update_gpus

    def update(job_id: int, gpus: int, *, nodes: int | None = None,
               gpu_type: str = "", per_job: bool = False,
               max_nodes: int | None = None) -> None:
        calls.append((gpus, gpu_type))
        real(job_id, gpus, nodes=nodes, gpu_type=gpu_type, per_job=per_job,
             max_nodes=max_nodes)

    fake.update_gpus = update  # type: ignore[method-assign]
    _rounds_over(fake, "shockwave", 2)
    assert calls and all(kind == "v100" for _, kind in calls), calls
    assert fake.jobs[1].gpu_type == "v100" and fake.jobs[1].state == "RUNNING"


@pytest.mark.parametrize(("gpus", "nodes", "asked"), [
    (8, 1, {"per_job": True, "asks_per_job": True}),
    (16, 2, {"per_job": True, "asks_per_job": True}),
    (8, 1, {"asks_per_job": True, "max_nodes": 1})])  # -N 1 --gpus=2; 25.11 lists 1-1
def test_an_elastic_job_that_asked_gpus_per_job_is_resized_per_job(
        gpus: int, nodes: int, asked: dict[str, Any]) -> None:
    """Measured on 22.05 and 25.11: a job that asked ``--gpus=2`` is refused a GRES per
    node (``scontrol update gres=gpu:4``: "Invalid generic resource (gres)
    specification"), which every resize of such an elastic job wrote, so it never ran at
    the plan's count. It is given a count per job (``TresPerJob``), with its node count
    where that changes: on one node of 8 free and on two."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",))
                      for i in range(1, nodes + 1)])
    fake.add(with_state(job(1, 2, epochs=500, hint=PLAIN + f" gpus=1-{gpus}"), **asked))
    svc = _rounds_over(fake, "shockwave", 1)
    start = next(a for a in svc.store.actions(1) if a["kind"] == "start")
    assert start["outcome"] == "applied", start
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].gpus == gpus
    assert fake.jobs[1].node_count == nodes and fake.jobs[1].asks_per_job


@pytest.mark.parametrize("policy", ["fifo", "shockwave"])
def test_a_job_wider_than_the_nodes_up_now_waits_for_them(policy: str) -> None:
    """Found by a red-team: with one node of three drained, or another partition's job on
    it, a job of all the partition's GPUs read ``rejected_too_large`` (it sounds final: an
    owner cancels). It waits, saying how many GPUs are usable, and starts once the node is
    back; a job wider than every node of the partition is still too large."""
    fake = FakeSlurm([SlurmNode("n1", ("IDLE", "DRAIN"), 8, 0, ("shockwave", "other")),
                      SlurmNode("n2", ("IDLE",), 8, 0, ("shockwave", "other")),
                      SlurmNode("n3", ("IDLE",), 8, 0, ("shockwave", "other"))])
    fake.add(SlurmJob(9, "o", "bob", "other", "RUNNING", gpus=8, nodes="n3", submit_time=800))
    fake.add(job(1, 24, epochs=5, nodes=3))
    fake.add(job(2, 32, epochs=5, nodes=4))
    svc = _rounds_over(fake, policy, 1)
    rows = {r.job_id: r.reason for r in svc.store.jobs_now().values()}
    assert rows[1] == ("waiting_capacity(gpus=24 usable=8 of 24: the rest drained, down or "
                       "held by jobs outside the plan)"), rows
    assert rows[2] == "rejected_too_large(gpus=32 cluster=24)"
    fake.nodes[0] = with_state(fake.nodes[0], state=("IDLE",))
    fake.jobs[9] = with_state(fake.jobs[9], state="COMPLETED")
    for _ in range(2):
        svc.round_once()
        fake.tick(20)
    assert fake.jobs[1].state == "RUNNING"


@pytest.mark.parametrize("shape, reason", [
    ({"gpus": 8}, "gpus=8 on one node: room=4"),  # --gres=gpu:8
    ({"gpus": 8, "per_job": True, "max_nodes": 1}, "gpus=8 on one node: room=4"),
    ({"gpus": 12, "per_job": True, "max_nodes": 2}, "gpus=12 on at most 2 nodes: room=8"),
    ({"gpus": 8, "node_count": 4}, "gpus=8 on 4 nodes of 2: nodes of 2+=3"),
    ({"gpus": 8, "per_job": True, "node_count": 4,  # -N 4 --gpus=8
      "admin_comment": SIGNAL.format(e=5) + " submitted=901 asked_gpus=8 asked_nodes=4"},
     "gpus=8 on 4+ nodes: nodes=3"),
])
def test_a_job_whose_shape_no_nodes_can_give_is_refused(shape: dict[str, Any],
                                                        reason: str) -> None:
    """Found by a red-team: a job whose node shape no set of the partition's nodes can
    ever give (``--gres=gpu:8``, ``-N 1 --gpus=8`` or ``-N 1-2 --gpus=12`` on nodes of
    4; ``-N 4`` on 3 nodes) read ``waiting_fragmentation`` for ever, a wait, where its
    count alone fits the partition's 12 GPUs. It is refused as too large, saying why."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave",)) for i in (1, 2, 3)])
    fake.add(with_state(job(1, 1, epochs=5), **shape))
    svc = _rounds_over(fake, "fifo", 1)
    assert svc.store.jobs_now()[1].reason == f"rejected_too_large({reason})"
    assert fake.jobs[1].held


def test_a_job_that_asked_for_two_nodes_is_planned_on_two() -> None:
    """Found by a red-team: ``-N 2 --gpus=7`` (asked per job, which Slurm gives as one GPU
    on each node and the rest on the first: 6 + 1, measured) was planned as 7 on one
    node: released beside a node another job filled, it never started, while the plan
    kept the free node for it and an 8-GPU job waited beside 8 idle GPUs. Its fewest
    nodes are read from job_submit.lua's stamp (Slurm lists a requeued ``--gpus=7`` that
    ran on two nodes as two): it waits for a GPU on each of two nodes, and the 8-GPU job
    after it runs on the free node."""
    fake = fake_cluster(nodes=2)
    fake.add(job(1, 8, epochs=50))
    two = job(2, 7, epochs=5, nodes=2)
    fake.add(with_state(two, per_job=True, max_nodes=2,
                        admin_comment=two.admin_comment + " submitted=902 asked_gpus=7 "
                                                          "asked_nodes=2"))
    fake.add(job(3, 8, epochs=5))
    svc = _rounds_over(fake, "fifo", 3)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[3].state == "RUNNING"
    assert {fake.jobs[1].nodes, fake.jobs[3].nodes} == {"n1", "n2"}
    assert fake.jobs[2].held
    assert svc.store.jobs_now()[2].reason.startswith("waiting_")


@pytest.mark.parametrize("stamp, listed", [("", 2), (" asked_nodes=2", 2),
                                            (" asked_nodes=2", 1)])
def test_the_fewest_nodes_of_a_job_are_its_listings_no_more_than_its_stamp(
        stamp: str, listed: int) -> None:
    """Found by a review: ``-N 2 --gpus=8`` without the ``asked_nodes=`` stamp (queued
    before the job_submit.lua that writes it) was planned on one node again, and the
    stamp alone kept 2 after its owner's ``scontrol update NumNodes=1-2``. The listing's
    count, no more than the stamp: with one node full, the job waits for a GPU on each
    of two nodes and the next 8-GPU job runs; with the owner's update, it runs on one."""
    fake = fake_cluster(nodes=2)
    fake.add(job(1, 8, epochs=500))
    two = job(2, 8, epochs=5, nodes=listed)
    fake.add(with_state(two, per_job=True, max_nodes=2,
                        admin_comment=two.admin_comment + " submitted=902 asked_gpus=8" + stamp))
    fake.add(job(3, 8, epochs=5))
    _rounds_over(fake, "fifo", 3)
    runs = 3 if listed == 2 else 2
    assert fake.jobs[runs].state == "RUNNING" and fake.jobs[runs].nodes == "n2"
    assert fake.jobs[5 - runs].held


def test_a_typed_job_over_two_nodes_may_use_a_node_of_several_types() -> None:
    """Found by a review: ``-N 2 --gpus=a100:2`` beside one a100 node and one node of
    several types looked for its two nodes among the a100 nodes only, and waited for
    ever where Slurm gives it 1 + 1."""
    from slurm_shockwave.model.cluster import SEVERAL_TYPES

    fake = FakeSlurm([SlurmNode("a1", ("IDLE",), 4, 0, ("shockwave",), gpu_type="a100"),
                      SlurmNode("m1", ("IDLE",), 8, 0, ("shockwave",),
                                gpu_type=SEVERAL_TYPES)])
    two = job(1, 2, epochs=5, nodes=2)
    fake.add(with_state(two, gpu_type="a100", per_job=True, max_nodes=2,
                        admin_comment=two.admin_comment + " submitted=9 asked_gpus=2 "
                                                          "asked_nodes=2"))
    _rounds_over(fake, "fifo", 2)
    assert fake.jobs[1].state == "RUNNING"
    assert sorted(n for n, _ in fake.jobs[1].gpu_alloc) == ["a1", "m1"]


def test_a_job_over_several_nodes_is_given_what_slurm_gives() -> None:
    """Placement's split of a count asked per job over its fewest nodes is Slurm's, as
    measured on 22.05: one GPU on each, the rest on the first with room (``-N 2
    --gpus=8`` on two idle nodes of 8: 7 + 1; ``-N 3 --gpus=7`` beside 1, 6 and 7 free:
    1 + 5 + 1); it does not fit where fewer nodes than that have a free GPU."""
    from slurm_shockwave.engine.placement import _FreeSlots
    from slurm_shockwave.model.cluster import ClusterView, GpuNode

    def free(*idle: int) -> _FreeSlots:
        nodes = tuple(GpuNode(f"n{k}", n, tuple(range(n))) for k, n in enumerate(idle, 1))
        return _FreeSlots(ClusterView(0.0, 0, 60.0, nodes, (), exact_slots=True))

    def split(slots: tuple[str, ...] | None) -> list[int]:
        return [sum(s.startswith(f"n{k}:") for s in slots or ()) for k in (1, 2, 3, 4)]
    assert split(free(8, 8).take(8, min_nodes=2)) == [7, 1, 0, 0]
    assert split(free(1, 6, 7).take(7, min_nodes=3)) == [1, 5, 1, 0]
    assert split(free(8, 8).take(7)) == [7, 0, 0, 0]
    assert free(8, 0).take(7, min_nodes=2) is None


def test_a_job_wider_than_the_nodes_up_now_waits_for_them_whatever_its_shape() -> None:
    """A per-node ``--gres=gpu:8`` beside the only node of 8 drained: it waits (it is no
    wider than a node of the partition), saying the room usable, and starts on that node
    once it is back, where the 4 + 4 free elsewhere were never its."""
    fake = FakeSlurm([SlurmNode("n1", ("IDLE", "DRAIN"), 8, 0, ("shockwave",)),
                      SlurmNode("n2", ("IDLE",), 4, 0, ("shockwave",)),
                      SlurmNode("n3", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(job(1, 8, epochs=5))
    svc = _rounds_over(fake, "fifo", 1)
    assert svc.store.jobs_now()[1].reason == (
        "waiting_capacity(gpus=8 on one node: room usable=4 of 8: the rest drained, down "
        "or held by jobs outside the plan)")
    fake.nodes[0] = with_state(fake.nodes[0], state=("IDLE",))
    for _ in range(2):
        svc.round_once()
        fake.tick(20)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].nodes == "n1"


def test_a_started_job_slurm_does_not_start_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job the plan started on GPUs Slurm does not give it (the node's CPUs or memory
    all taken: the plan sees GPUs only) read ``scheduled`` round after round, never said
    to be not running. The start's message says since when, with Slurm's reason, in
    explain's actions and in the queue's reason column."""
    from slurm_shockwave.cli.queue import _reason

    fake = fake_cluster(nodes=1)
    fake.add(job(1, 4, epochs=5))
    monkeypatch.setattr(fake, "_candidates", lambda job, named_only: [])  # CPUs all taken
    svc = _rounds_over(fake, "fifo", 3)
    row = svc.store.jobs_now()[1]
    assert fake.jobs[1].state == "PENDING" and row.reason == "scheduled"
    assert row.message == "started since round 0, not running yet: Slurm says Resources"
    assert _reason(row) == f"scheduled; {row.message}"
    monkeypatch.undo()
    svc.round_once()
    fake.tick(1)
    assert fake.jobs[1].state == "RUNNING"
    # requeued by an admin before the next round, it ran: that round's start is afresh,
    # not "since" the earlier one (a red-team)
    fake.requeue([1])
    fake.now += 12  # past its requeue delay, before Slurm's next pass
    svc.world.clock.t += 60  # type: ignore[attr-defined]
    svc.round_once()
    assert fake.jobs[1].state == "PENDING" and svc.store.jobs_now()[1].message == ""


@pytest.mark.parametrize("policy", ["fifo", "shockwave"])
def test_a_per_job_request_is_spread_over_no_more_nodes_than_it_allows(policy: str) -> None:
    """Found by a red-team: a ``-N 1-2 --gpus=8`` job was planned 3 + 3 + 2 over three
    nodes, which Slurm never gives it, and released round after round while the plan kept
    those GPUs. It waits until two nodes hold it, then runs there."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave", "other"))
                      for i in (1, 2, 3)])
    for jid, node, gpus in ((7, "n1", 5), (8, "n2", 5), (9, "n3", 6)):
        fake.add(SlurmJob(jid, "o", "bob", "other", "RUNNING", gpus=gpus, nodes=node,
                          submit_time=800))
    fake.add(with_state(job(1, 8, epochs=5), per_job=True, max_nodes=2))
    svc = _rounds_over(fake, policy, 2)
    assert fake.jobs[1].held and fake.jobs[1].state == "PENDING"
    assert svc.store.jobs_now()[1].reason.startswith("waiting_")
    fake.jobs[9] = with_state(fake.jobs[9], state="COMPLETED")
    for _ in range(2):
        svc.round_once()
        fake.tick(20)
    assert fake.jobs[1].state == "RUNNING" and len(fake.jobs[1].gpu_alloc) <= 2


@pytest.mark.parametrize("policy", ["fifo", "shockwave"])
def test_a_running_elastic_job_is_never_dropped_and_one_waiting_fits_on_its_fewest(
        policy: str) -> None:
    """Found by a red-team: admission weighed an untyped elastic job by its request, so one
    submitted at 16 and running on 8 beside a drained node was dropped from the view while
    it ran: its GPUs read free, and a waiting job was planned there and released round
    after round, never started. A running job is always kept (FIFO, which chooses no
    counts, keeps it on the 8 it runs on: it stopped it to wait for 16); a waiting elastic
    job is admitted on its fewest count (Shockwave runs it on fewer, FIFO waits for its
    request)."""
    hint = PLAIN + " gpus=4-16 submitted=900 asked_gpus=16"
    nodes = [SlurmNode("n1", ("IDLE", "DRAIN"), 8, 0, ("shockwave", "other")),
             SlurmNode("n2", ("IDLE",), 8, 0, ("shockwave", "other")),
             SlurmNode("n3", ("IDLE",), 8, 0, ("shockwave", "other"))]
    fake = FakeSlurm(nodes)
    fake.add(SlurmJob(9, "o", "bob", "other", "RUNNING", gpus=8, nodes="n3", submit_time=800))
    fake.add(with_state(job(1, 8, epochs=500, hint=hint), state="RUNNING", held=False,
                        reason="None", nodes="n2", gpu_alloc=(("n2", tuple(range(8))),),
                        start_time=1))
    fake.add(job(2, 8, epochs=5))
    svc = _rounds_over(fake, policy, 3)
    rows = svc.store.jobs_now()
    assert fake.jobs[1].state == "RUNNING" and rows[1].phase == "running"
    assert fake.jobs[2].held and rows[2].reason.startswith("waiting_"), rows[2]
    fake = FakeSlurm(nodes)
    fake.add(SlurmJob(9, "o", "bob", "other", "RUNNING", gpus=8, nodes="n3", submit_time=800))
    fake.add(job(1, 16, epochs=5, hint=hint))
    svc = _rounds_over(fake, policy, 2)
    if policy == "shockwave":  # it chooses elastic counts; FIFO runs a job on its request
        assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].gpus < 16
    else:
        assert svc.store.jobs_now()[1].reason.startswith("waiting_")


def test_a_start_waiting_for_the_plans_own_preemptions_gets_no_note() -> None:
    """A job started where the plan stops others (their checkpoints take rounds) waits for
    GPUs the plan frees, not for room Slurm lacks: no not-running-yet note (a review)."""
    from tests.test_slurm_silence import _eight_running_and_a_wide_one

    fake, svc = _eight_running_and_a_wide_one()
    notes = []
    for _ in range(3):
        done = svc.round_once()
        notes += [r.message for r in done.report.result.results if r.action.job_id == 9]
        svc.world.clock.t += 5  # type: ignore[attr-defined]
    assert fake.jobs[9].state == "PENDING" and notes == ["", "", ""]


def test_a_fill_step_starts_a_grown_job_on_the_count_the_round_grew_it_to() -> None:
    """Found by a red-team: an elastic job running on 2 of a node of 8 (range 1-8), grown
    by the round (checkpoint, requeue and hold), was released by the next fill step on
    the 2 it held (its GRES, which only its start updates), ran on 2 again and was grown
    again: a checkpoint and restart every round, the 6 GPUs idle. The fill step starts
    it on the round's 8, once, its GRES updated first."""
    hint = SIGNAL + " gpus=1-8 submitted=901 asked_gpus=2"
    fake = fake_cluster(nodes=1)
    fake.add(with_state(job(1, 2, epochs=5000, hint=hint), state="RUNNING", held=False,
                        reason="None", nodes="n1", gpu_alloc=(("n1", (0, 1)),),
                        start_time=900))
    store, clock = Store(":memory:"), Clock()
    world = SlurmCluster(fake, clock, round_s=60.0, intents=store, fill_freed=True)
    svc = Service(world, make_policy("stretch_edf", None), "stretch_edf", store,
                  round_s=60.0, fill_freed=True)
    for _ in range(3):
        svc.round_once()
        if 1 in world.intents:  # signalled: the job checkpoints and says so
            clock.t += 3
            assert world.complete_checkpoint(ProgressReport(
                1, ReportKind.CHECKPOINTED, clock.t, restart_count=fake.jobs[1].restart_count))
            clock.t += 11
            fake.tick(11)  # past its requeue delay
            svc.round_once(fill=True)  # its requeue's end report, or any arrival
            fake.tick(1)
        clock.t += 46
        fake.tick(46)
    assert fake.jobs[1].state == "RUNNING" and fake.jobs[1].gpus == 8
    assert fake.jobs[1].restart_count == 1
