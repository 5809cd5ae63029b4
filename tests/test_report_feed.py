"""The round's view of the reports (service/feed.py): an elastic job's rates are its own."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.service.daemon import Service
from slurm_shockwave.service.feed import ReportFeed
from slurm_shockwave.service.store import Store
from slurm_shockwave.slurm.fake import FakeSlurm
from slurm_shockwave.slurm.hints import parse_hint
from slurm_shockwave.slurm.protocol import SlurmJob, SlurmNode
from slurm_shockwave.slurm.table_progress import table_progress
from slurm_shockwave.workloads.bundled import bundled_table

HINT = parse_hint("shockwave: model=my-gpt bs=16 epochs=100 gpus=1-8")  # not in the table


def job(state: str, gpus: int, restart: int) -> SlurmJob:
    return SlurmJob(7, "gpt", "alice", "shockwave", state, gpus=gpus, restart_count=restart)


class Reports:
    def __init__(self) -> None:
        self.items: list[ProgressReport] = []

    def add(self, epoch: float, at: float, restart: int) -> None:
        self.items.append(ProgressReport(7, ReportKind.PROGRESS, at, epoch=epoch, batch_size=16,
                                         restart_count=restart, report_id=len(self.items) + 1))

    def read(self, since: int) -> Mapping[int, Iterable[ProgressReport]]:
        return {7: [r for r in self.items if r.report_id > since]}


def test_an_elastic_job_of_an_unknown_model_learns_its_rates_from_its_runs() -> None:
    reports = Reports()
    feed = ReportFeed(reports.read, table_progress(bundled_table("tacc")))
    # run 0 on 2 GPUs: 100 s an epoch
    for e in range(4):
        reports.add(e, 100.0 * e, restart=0)
    feed.refresh()
    on2 = feed.progress(job("RUNNING", 2, 0), HINT)
    assert dict(on2.rate_by_gpus)[4] == pytest.approx(1.6)  # the prior: nothing else known
    # resized: run 1 on 4 GPUs, 55 s an epoch after its restore
    for at, e in [(400.0, 3.0), (480.0, 4.0), (535.0, 5.0), (590.0, 6.0)]:
        reports.add(e, at, restart=1)
    feed.refresh()
    on4 = dict(feed.progress(job("RUNNING", 4, 1), HINT).rate_by_gpus)
    assert on4[4] == 1.0 and on4[2] == pytest.approx(0.55)  # measured: 100 s against 55 s
    assert on4[1] == pytest.approx(0.55 / 1.6)  # the prior, from 2 (the nearest measured)
    assert on4[8] == pytest.approx(1.6)  # the prior, from 4
    # the epoch time is the one measured on 4 GPUs; pending again with its GRES set to 2,
    # it is converted to 2 GPUs by the measured ratio
    assert feed.progress(job("RUNNING", 4, 1), HINT).epoch_s == pytest.approx(55.0)
    pending = feed.progress(job("PENDING", 2, 1), HINT)
    assert pending.epoch_s == pytest.approx(100.0)
    assert dict(pending.rate_by_gpus)[4] == pytest.approx(1 / 0.55)
    feed.keep_only([])
    assert feed.runs == {} and feed.reports == {}


def test_right_after_a_resize_the_old_counts_epoch_time_is_converted() -> None:
    reports = Reports()
    feed = ReportFeed(reports.read, table_progress(bundled_table("tacc")))
    for e in range(4):  # run 0 on 2 GPUs: 100 s an epoch
        reports.add(e, 100.0 * e, restart=0)
    feed.refresh()
    feed.progress(job("RUNNING", 2, 0), HINT)
    reports.add(3.0, 400.0, restart=1)  # run 1 on 8 GPUs: only its start so far
    feed.refresh()
    now = feed.progress(job("RUNNING", 8, 1), HINT)
    # nothing measured on 8 yet: the 2-GPU time scaled by the prior (1.6 a doubling)
    assert now.epoch_s == pytest.approx(100.0 / 1.6 ** 2)


def test_the_feed_bounds_first_intervals_by_the_restart_cost_it_is_given() -> None:
    """The service's feed passes ``slurm.restart_cost_s`` (cli/live_options.py): a run
    with one interval, its start-up inside, raises a table far too fast."""
    hint = parse_hint("shockwave: model=ResNet-18 bs=16 epochs=100")  # 54 s an epoch
    table = table_progress(bundled_table("tacc"))
    reports = Reports()
    reports.add(0, 0.0, restart=0)
    reports.add(1, 5000.0, restart=0)
    plain, bounded = (ReportFeed(reports.read, table),
                      ReportFeed(reports.read, table, startup_s=60.0))
    for feed in (plain, bounded):
        feed.refresh()
    ran = job("RUNNING", 1, 0)
    assert plain.progress(ran, hint).epoch_s == pytest.approx(table(ran, hint).epoch_s)
    assert bounded.progress(ran, hint).epoch_s == pytest.approx(4940.0)


def test_a_report_that_arrives_late_is_read_where_it_was_made() -> None:
    """A spooled report flushed after later ones, a report sent again because its answer
    came after the client's deadline (stored twice), and a report of the run before a
    requeue flushed by the epilog after the next run's: none reads as the job's latest
    progress, and the epoch time is still measured between consecutive epochs."""
    hint = parse_hint("shockwave: model=my-gpt bs=16 epochs=100")
    reports = Reports()
    feed = ReportFeed(reports.read, table_progress(bundled_table("tacc")))
    for e in range(5):
        reports.add(e, 100.0 * e, restart=0)
    reports.add(2, 199.0, restart=0)  # epoch 2 again, dated back by the client's age
    feed.refresh()
    now = feed.progress(job("RUNNING", 1, 0), hint)
    assert now.epochs_done == 4 and now.epoch_s == pytest.approx(100.0)
    reports.add(4, 600.0, restart=1)  # requeued, resumed from epoch 4
    reports.add(5, 660.0, restart=1)
    reports.add(6, 720.0, restart=1)
    reports.add(4.5, 450.0, restart=0)  # run 0's last report, flushed by its epilog late
    feed.refresh()
    now = feed.progress(job("RUNNING", 1, 1), hint)
    assert now.epochs_done == 6 and now.epoch_s == pytest.approx(60.0)


def test_with_a_clock_a_running_jobs_progress_reads_forward_and_a_waiting_ones_does_not() -> None:
    """The service's feed dates reports by the progress API's clock; with it, a running
    job 50 s past its epoch-4 report (100 s an epoch) has done 4.5 epochs; a pending job
    has done what it reported; without a clock, progress is as reported."""
    hint = parse_hint("shockwave: model=my-gpt bs=16 epochs=100")
    reports = Reports()
    for e in range(5):
        reports.add(e, 100.0 * e, restart=0)
    feed = ReportFeed(reports.read, table_progress(bundled_table("tacc")), clock=lambda: 450.0)
    feed.refresh()
    assert feed.progress(job("RUNNING", 1, 0), hint).epochs_done == pytest.approx(4.5)
    assert feed.progress(job("PENDING", 1, 0), hint).epochs_done == 4
    elastic = feed.progress(job("RUNNING", 2, 0), HINT)  # an elastic job too
    assert elastic.epochs_done == pytest.approx(4.5)
    plain = ReportFeed(reports.read, table_progress(bundled_table("tacc")))
    plain.refresh()
    assert plain.progress(job("RUNNING", 1, 0), hint).epochs_done == 4


def test_a_restarted_service_converts_an_earlier_runs_epoch_time(tmp_path: Path) -> None:
    """Found by a review: each run's GPU count was kept in memory only, so after a
    service restart a job moved from 8 GPUs to 2 read its 8-GPU epoch time as its time
    on 2 (2.6 times too short) until its new run's second report interval. The count of
    each run is kept in the store (real SQLite) and the restarted service's feed reads
    it: the time is converted from the first round, before the new run reports."""
    store = Store(tmp_path / "s.db")
    for e in range(4):  # run 0 on 8 GPUs: 40 s an epoch
        store.add_report(ProgressReport(7, ReportKind.PROGRESS, 40.0 * e, epoch=e,
                                        batch_size=16, restart_count=0))

    def feed() -> ReportFeed:
        f = ReportFeed(lambda since: store.reports(since_id=since),
                       table_progress(bundled_table("tacc")), runs=store.load_runs(),
                       record_run=store.record_run)
        f.refresh()
        return f

    assert feed().progress(job("RUNNING", 8, 0), HINT).epoch_s == pytest.approx(40.0)
    restarted = feed()  # a new process: nothing in memory; run 1 pending on 2 GPUs
    assert restarted.runs == {7: {0: (8, 0)}}  # (GPUs, submitted: none)
    assert restarted.progress(job("PENDING", 2, 1), HINT).epoch_s == pytest.approx(
        40.0 * 1.6 ** 2)  # the prior: 1.6 a doubling
    store.record_run(7, 0, 4)  # an id Slurm gave out again: its later runs are forgotten
    store.record_run(7, 2, 8)
    store.record_run(7, 1, 2)
    assert store.load_runs() == {7: {0: (4, 0), 1: (2, 0)}}


def test_the_service_keeps_each_runs_count_and_a_reader_writes_none(tmp_path: Path) -> None:
    """The service's feed writes each run's count to its store; a command that only
    reads the store (queue, plan) reads the counts and writes nothing."""
    from slurm_shockwave.cli.live_options import Live, service
    from slurm_shockwave.config import Settings
    from slurm_shockwave.slurm.fake import FakeSlurm
    from slurm_shockwave.slurm.protocol import SlurmNode

    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    fake.add(SlurmJob(7, "gpt", "alice", "shockwave", "RUNNING", gpus=4, nodes="n1",
                      admin_comment=f"{HINT.normalised()} submitted=900", submit_time=900))
    env = Live(Settings(), fake)
    path = str(tmp_path / "s.db")
    service(env, env.store(path), "fifo").round_once()
    reader = env.store(path, create=False)
    feed = env.feed(reader)
    assert feed.runs == {7: {0: (4, 900)}} and feed.record_run is None


def test_a_run_count_the_store_cannot_take_is_kept_in_memory() -> None:
    """A full disk fails the write of a run's count, not the round."""
    def full(*_args: int) -> None:
        raise OSError(28, "No space left on device")

    feed = ReportFeed(Reports().read, table_progress(bundled_table("tacc")), record_run=full)
    feed.refresh()
    feed.progress(job("RUNNING", 4, 0), HINT)
    assert feed.runs == {7: {0: (4, 0)}}


def _stamped(state: str, gpus: int, submitted: int, restart: int = 0) -> SlurmJob:
    """Job 7, elastic, stamped by job_submit.lua with its first submission; Slurm's
    submit time is the last requeue's."""
    return SlurmJob(7, "gpt", "alice", "shockwave", state, gpus=gpus, restart_count=restart,
                    nodes="n1" if state == "RUNNING" else "", held=state == "PENDING",
                    reason="JobHeldUser" if state == "PENDING" else "",
                    admin_comment=f"{HINT.normalised()} submitted={submitted}",
                    submit_time=submitted + 3000 * restart)


def _reports(store: Store, first: int, last: int, at_s: float, restart: int = 0,
             epoch_s: float = 40.0) -> None:
    for e in range(first, last + 1):
        store.add_report(ProgressReport(7, ReportKind.PROGRESS, at_s + epoch_s * (e - first),
                                        epoch=float(e), batch_size=16, restart_count=restart))


def _serve(job_7: SlurmJob, path: Path) -> tuple[FakeSlurm, Service]:
    from slurm_shockwave.cli.live_options import Live, service
    from slurm_shockwave.config import Settings

    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    fake.add(job_7)
    env = Live(Settings(), fake)
    return fake, service(env, env.store(path), "fifo")


@pytest.mark.parametrize("restart_between", [True, False])
def test_a_job_given_an_earlier_jobs_id_reads_none_of_its_reports_or_runs(
        tmp_path: Path, restart_between: bool) -> None:
    """Slurm gave job 7's id out again (its state reset, FirstJobId) while the old job 7's
    reports and runs were still in the store, and no round saw the id leave the queue:
    the service was down meanwhile, or the new job took the id between two rounds. The
    old job, 50 epochs in, ran on 8 GPUs then 4; the new one, pending, has done nothing
    and run nowhere. Its first submission (``submitted=``) tells them apart: the new job
    reads none of the old reports and runs, the service forgets them in the store, and
    a report of the old job that arrives late (dated back to before the new job was
    submitted) is not read either. Before, the new job read as 50 epochs in, and its
    epoch times would have been converted by the old job's counts."""
    now = int(time.time())
    old, new = now - 7200, now - 100
    path = tmp_path / "s.db"
    fake, svc = _serve(_stamped("RUNNING", 8, old), path)
    svc.round_once()
    fake.jobs[7] = _stamped("RUNNING", 4, old, restart=1)
    _reports(svc.store, 1, 50, old + 600.0, restart=1)
    svc.round_once()
    assert 50.0 <= svc.store.jobs_now()[7].epochs_done <= 51.0  # read forward to now
    assert sorted(svc.store.load_runs()[7]) == [0, 1]  # its runs on 8 and 4 GPUs
    if restart_between:
        fake, svc = _serve(_stamped("PENDING", 2, new), path)
    else:
        fake.jobs[7] = _stamped("PENDING", 2, new)
    svc.round_once()
    assert svc.store.jobs_now()[7].epochs_done == 0.0
    assert svc.feed is not None and svc.feed.runs[7] == {}
    assert svc.store.reports([7]) == {} and svc.store.load_runs() == {}
    _reports(svc.store, 51, 51, old + 3000.0, restart=1)  # the old job's, flushed late
    svc.round_once()
    assert svc.store.jobs_now()[7].epochs_done == 0.0
    # one dated within the clock skew of the new job's stamp, but of a later run than the
    # new job's (found by a review: sorted by restart count, it passed for the latest)
    _reports(svc.store, 52, 52, new - 60.0, restart=1)
    svc.round_once()
    assert svc.store.jobs_now()[7].epochs_done == 0.0
    # and one of the old job's last run, within the clock skew of the new job's stamp:
    # the new job has never run, so no report is its own (a red-team: read as its
    # progress, 121 epochs of 200 done, until it reported)
    _reports(svc.store, 60, 60, new - 60.0, restart=0)
    svc.round_once()
    assert svc.store.jobs_now()[7].epochs_done == 0.0


def test_a_job_keeps_its_own_reports_and_runs_across_requeues_and_restarts(
        tmp_path: Path) -> None:
    """The same job 7, requeued (Slurm moves its submit time to the requeue, not its
    stamp) with the service restarted in between, keeps every report and run of its
    own: its first report came 200 s before its stamp by the service's clock (a clock
    slurmctld's is ahead of, within MUNGE's skew) and is its own too. Its runs are kept
    with its stamp."""
    now = int(time.time())
    stamp = now - 7200
    path = tmp_path / "s.db"
    fake, svc = _serve(_stamped("RUNNING", 8, stamp), path)
    svc.round_once()
    _reports(svc.store, 1, 10, stamp - 200.0)  # run 0 on 8 GPUs
    svc.round_once()
    fake, svc = _serve(_stamped("RUNNING", 2, stamp, restart=1), path)  # restarted
    _reports(svc.store, 10, 12, stamp + 3000.0, restart=1, epoch_s=100.0)
    svc.feed.refresh()  # type: ignore[union-attr]
    svc.round_once()
    assert 12.0 <= svc.store.jobs_now()[7].epochs_done <= 13.0  # read forward to now
    assert len(svc.store.reports([7])[7]) == 13
    assert svc.store.load_runs() == {7: {0: (8, stamp), 1: (2, stamp)}}
    seen = svc.feed.progress(fake.jobs[7], HINT)  # type: ignore[union-attr]
    assert dict(seen.rate_by_gpus)[8] == pytest.approx(2.5)  # its own: 40 s against 100 s


def test_a_job_without_the_stamp_reads_every_report_and_run_of_its_id(
        tmp_path: Path) -> None:
    """A job submitted before job_submit.lua stamped it cannot be told from an earlier
    job of its id: it reads what the store has under the id, as before the stamp, and
    its runs are kept with no submission (0)."""
    path = tmp_path / "s.db"
    plain = replace(_stamped("RUNNING", 8, 0), admin_comment=HINT.normalised())
    _, svc = _serve(plain, path)
    svc.round_once()
    _reports(svc.store, 1, 10, 1000.0)
    svc.round_once()
    _, svc = _serve(replace(plain, gpus=2, restart_count=1), path)
    svc.round_once()
    assert 10.0 <= svc.store.jobs_now()[7].epochs_done <= 11.0  # read forward to now
    assert svc.store.load_runs() == {7: {0: (8, 0), 1: (2, 0)}}
