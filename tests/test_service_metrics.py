"""The service's Prometheus metrics over the in-memory fake (logic; the real service is
scraped in tests/test_doctor_live.py), and the Grafana dashboard's queries."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import threading
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.service.heartbeat import write_heartbeat
from slurm_shockwave.service.metrics import ServiceMetrics
from slurm_shockwave.service.progress_api import Counts
from slurm_shockwave.service.store import Store
from slurm_shockwave.slurm.protocol import SlurmNode
from tests.builders import WallLikeClock as Clock
from tests.test_service_loop import Flaky, fake_cluster, job, service

REPO = Path(__file__).resolve().parents[1]


def scraped(metrics: ServiceMetrics) -> dict[str, float]:
    body, kind = metrics.exposition()
    assert kind.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def test_rounds_failures_actions_and_jobs_are_counted(tmp_path: Path) -> None:
    fake = Flaky([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(job(1, 2))
    fake.add(job(2, 4))
    fake.down = 2
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock)
    svc.round_s = 0.01
    counts = Counts(accepted=5, rejected=1)
    beat = tmp_path / "beat"
    # SlurmUser root: the heartbeat under pytest's 0700 folder is readable (below: not)
    metrics = ServiceMetrics(policy="fifo", partition="shockwave", backend="cli",
                             heartbeat=str(beat), counts=lambda: counts, clock=clock.now,
                             slurm_user="root(0)")
    seen_down: list[float] = []
    stop = threading.Event()
    stop.wait = lambda t=None: False  # type: ignore[method-assign]
    failed = metrics.round_failed

    def failing(cause: str) -> None:
        failed(cause)
        seen_down.append(scraped(metrics)["shockwave_slurm_reachable"])

    metrics.round_failed = failing  # type: ignore[method-assign]
    assert svc.run(stop, max_rounds=2, observer=metrics) == 2
    m = scraped(metrics)
    assert seen_down == [0.0, 0.0] and m["shockwave_slurm_reachable"] == 1
    assert m["shockwave_round_failures_total{cause=slurm}"] == 2
    assert m["shockwave_rounds_total"] == 2 and m["shockwave_round_index"] == 1
    # job 1's start, sent again in round 2: the fake starts nothing until it ticks
    assert m["shockwave_actions_total{kind=start,outcome=applied}"] == 2
    assert m["shockwave_jobs{phase=held}"] == 1  # job 2 waits for the GPUs
    assert m["shockwave_round_phase_seconds_count{phase=plan}"] == 2
    assert math.isnan(m["shockwave_solver_gap"])  # FIFO solves nothing
    assert m["shockwave_progress_reports_total{outcome=accepted}"] == 5
    assert m["shockwave_info{backend=cli,partition=shockwave,policy=fifo}"] == 1
    assert m["shockwave_fail_open"] == 1 and math.isnan(m["shockwave_heartbeat_age_seconds"])
    write_heartbeat(beat, clock.now() - 5, 30)
    m = scraped(metrics)
    assert m["shockwave_fail_open"] == 0 and m["shockwave_heartbeat_age_seconds"] >= 5


def test_every_series_is_there_from_the_start_and_none_reads_as_known() -> None:
    """Found by a review: a first failure made its series appear at 1, which
    ``increase()`` cannot see, so a one-off full disk never showed; and a fresh process
    said its last round was at 0 (1970), round 0 and Slurm reachable before asking."""
    m = scraped(ServiceMetrics(policy="fifo", partition="p", backend="cli"))
    for cause in ("slurm", "store", "error"):
        assert m[f"shockwave_round_failures_total{{cause={cause}}}"] == 0
    for kind in ("start", "preempt"):
        for outcome in ("applied", "rejected", "deferred"):
            assert m[f"shockwave_actions_total{{kind={kind},outcome={outcome}}}"] == 0
    assert m["shockwave_solver_solves_total{status=optimal}"] == 0
    for name in ("shockwave_last_round_timestamp_seconds", "shockwave_round_index",
                 "shockwave_slurm_reachable", "shockwave_solver_gap"):
        assert math.isnan(m[name]), name
    assert not [k for k in m if "_created" in k]


def test_a_window_plan_kept_for_rounds_is_one_solve(tmp_path: Path) -> None:
    """Found by a review: Shockwave keeps its window plan for up to ``reopt_rounds``
    rounds, and every round counted its solve again (up to 8 times)."""
    fake = fake_cluster(nodes=1, gpus=4)
    for j in (job(1, 2, epochs=900), job(2, 2, epochs=900), job(3, 4, epochs=900)):
        fake.add(j)
    clock = Clock()
    svc = service(fake, Store(tmp_path / "s.db"), clock, policy="shockwave")
    metrics = ServiceMetrics(policy="shockwave", partition="p", backend="cli",
                             clock=clock.now)
    for _ in range(5):
        metrics.round_done(svc.round_once())
        fake.tick()
        clock.t += 60
    solves = sum(v for k, v in scraped(metrics).items()
                 if k.startswith("shockwave_solver_solves_total"))
    assert solves == svc.memory["solves"] >= 1
    assert solves < 5


def test_actions_between_rounds_are_counted(tmp_path: Path) -> None:
    """Found by a review: the starts of a fill step (a job's end report) and the requeue
    after a checkpoint's acknowledgement were stored but never counted, nor a failed
    fill step."""
    fake = fake_cluster(nodes=1, gpus=8)
    for j in (job(1, 4), job(2, 4), job(3, 4)):
        fake.add(j)
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, fill_freed=True, fill_poll_s=2.0)
    metrics = svc.observer = ServiceMetrics(policy="fifo", partition="p", backend="cli",
                                            clock=clock.now)
    metrics.round_done(svc.round_once())
    fake.tick()
    ticks = iter(float(t) for t in range(1000))
    svc.timer = lambda: next(ticks)  # type: ignore[method-assign]
    fake.finish(1)
    svc.ended(ProgressReport(1, ReportKind.END, clock.t, exit_code=0))
    svc._wait(threading.Event(), boundary=3.0)  # between rounds, as ``run`` does
    stored = sum(1 for jid in (1, 2, 3) for a in store.actions(jid)
                 if a["kind"] == "start" and a["outcome"] == "applied")
    assert stored == 3
    assert scraped(metrics)["shockwave_actions_total{kind=start,outcome=applied}"] == 3


def test_a_requeue_after_an_acknowledgement_is_counted(tmp_path: Path) -> None:
    """The preemption a checkpoint's acknowledgement completes between rounds counted
    only as deferred (its signal's round), never applied (a review)."""
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(job(1, 4, epochs=500))
    clock = Clock()
    svc = service(fake, Store(tmp_path / "s.db"), clock, policy="srtf")
    metrics = svc.observer = ServiceMetrics(policy="srtf", partition="p", backend="cli",
                                            clock=clock.now)
    metrics.round_done(svc.round_once())
    fake.tick()
    fake.add(job(2, 4, epochs=1))
    clock.t += 60
    metrics.round_done(svc.round_once())  # job 1 signalled for job 2
    m = scraped(metrics)
    assert m["shockwave_actions_total{kind=preempt,outcome=deferred}"] == 1
    assert m["shockwave_actions_total{kind=preempt,outcome=applied}"] == 0
    svc.checkpointed(ProgressReport(1, ReportKind.CHECKPOINTED, clock.t + 1))
    svc.requeue_acknowledged()
    assert fake.jobs[1].restart_count == 1
    assert scraped(metrics)["shockwave_actions_total{kind=preempt,outcome=applied}"] == 1


def test_fail_open_is_1_when_slurmctld_cannot_read_a_fresh_heartbeat() -> None:
    """Found by a review: the metric read the heartbeat as the service (root) and said 0
    while job_submit.lua, reading it inside slurmctld as SlurmUser, found none and let
    every new job in unheld. It now asks doctor's question (swtest1 stands in for
    SlurmUser; ``su`` confirms what that user can really read)."""
    import os
    import shutil
    import subprocess
    import tempfile
    import time

    top = Path(tempfile.mkdtemp(prefix="sw-metric-", dir="/tmp"))
    folder, beat = top / "state", top / "state" / "heartbeat"
    try:
        os.chmod(top, 0o755)
        folder.mkdir()
        write_heartbeat(beat, time.time(), 360)
        for slurm_user in ("swtest1(1001)", None):
            metrics = ServiceMetrics(policy="fifo", partition="p", backend="cli",
                                     heartbeat=str(beat), slurm_user=slurm_user)
            for folder_mode, file_mode in ((0o755, 0o644), (0o700, 0o644), (0o755, 0o600),
                                           (0o711, 0o644)):
                os.chmod(folder, folder_mode)
                os.chmod(beat, file_mode)
                can = subprocess.run(["su", "swtest1", "-s", "/bin/sh", "-c", f"cat {beat}"],
                                     capture_output=True, timeout=30).returncode == 0
                m = scraped(metrics)
                assert m["shockwave_fail_open"] == (0 if can else 1), (
                    slurm_user, oct(folder_mode), oct(file_mode), m)
                assert m["shockwave_heartbeat_age_seconds"] < 60  # fresh, read as root
    finally:
        shutil.rmtree(top)


def test_the_grafana_dashboard_queries_only_metrics_the_service_serves() -> None:
    dashboard = json.loads((REPO / "etc" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\bshockwave_[a-z_]+", e)}
    body = ServiceMetrics(policy="fifo", partition="p", backend="cli", heartbeat="/nope",
                          counts=Counts).exposition()[0].decode()
    served = set(re.findall(r"^# TYPE (\S+)", body, flags=re.MULTILINE))
    suffixes = ("", "_total", "_bucket", "_count", "_sum")
    missing = {n for n in used if not any(n.removesuffix(s) in served for s in suffixes)}
    assert not missing and len(used) >= 10, missing
    # the fail-open panel says YES with the service down too (its own series gone with
    # it), by the expression docs/admin.md gives admins for their alert
    fail_open = next(p for p in dashboard["panels"] if p["title"].startswith("Fail-open"))
    expr = fail_open["targets"][0]["expr"]
    assert "up{job=" in expr and f"`{expr}`" in (REPO / "docs" / "admin.md").read_text()


def test_a_failed_fill_step_is_counted_and_a_failing_observer_stops_nothing(
        tmp_path: Path) -> None:
    """A fill step Slurm does not answer counts as a failure (reachable 0, then 1 after
    one that works); an observer that raises is logged, the step goes on (a review:
    only two of its calls were guarded)."""
    fake = Flaky([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    fake.add(job(1, 4))
    clock = Clock()
    svc = service(fake, Store(tmp_path / "s.db"), clock, fill_freed=True)
    metrics = svc.observer = ServiceMetrics(policy="fifo", partition="p", backend="cli",
                                            clock=clock.now)
    metrics.round_done(svc.round_once())
    fake.down = 1
    assert svc._fill("a job ended") is None
    m = scraped(metrics)
    assert m["shockwave_round_failures_total{cause=slurm}"] == 1
    assert m["shockwave_slurm_reachable"] == 0
    assert svc._fill("a job ended") is not None
    assert scraped(metrics)["shockwave_slurm_reachable"] == 1

    class Broken:
        def __getattr__(self, name: str) -> object:
            def fail(*_args: object) -> None:
                raise RuntimeError("observer bug")
            return fail

    svc.observer = Broken()  # type: ignore[assignment]
    fake.down = 1
    assert svc._fill("a job ended") is None  # told, and its failure only logged
    assert svc._fill("a job ended") is not None


def test_a_round_that_fails_after_its_actions_counts_them_and_the_failure(
        tmp_path: Path) -> None:
    """Found by a review: a round whose store write failed after Slurm took its actions
    counted as a failure only, its starts never counted."""
    fake = fake_cluster(nodes=1, gpus=8)
    for j in (job(1, 4), job(2, 4)):
        fake.add(j)
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock)
    metrics = ServiceMetrics(policy="fifo", partition="p", backend="cli", clock=clock.now)
    real = store.save_round

    def full(*args: object, **kwargs: object) -> int:
        store.save_round = real  # type: ignore[method-assign]
        raise sqlite3.OperationalError("database or disk is full")

    store.save_round = full  # type: ignore[method-assign]
    stop = threading.Event()
    stop.wait = lambda t=None: False  # type: ignore[method-assign]
    svc.run(stop, max_rounds=1, observer=metrics)
    now = scraped(metrics)
    # the failed round's two starts, which Slurm took, and the next round's two (the jobs
    # had not started yet, so it released them again); only the latter are stored
    assert now["shockwave_actions_total{kind=start,outcome=applied}"] == 4
    assert sum(v for k, v in now.items()
               if k.startswith("shockwave_round_failures_total{")) == 1
    assert now["shockwave_rounds_total"] == 1  # the round after it
