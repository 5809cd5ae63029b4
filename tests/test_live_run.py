"""The whole system on a local cluster of its own (marker slurm): 16 emulated jobs of mixed
GPU counts and adaptation modes under Shockwave, the service killed with SIGKILL and
restarted every 40 s; every job completes, reports reach the planner, and acknowledged
checkpoints requeue jobs before their grace ends. Without Slurm: what a run started is
stopped however it ends."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import queue
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest

from slurm_shockwave.live import run as live
from slurm_shockwave.live.cluster import missing_for_cluster
from slurm_shockwave.live.run import LiveSettings, run_live
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.sim.inputs import (
    LIVE_DEMO_TRACE,
    build_workload,
    load_throughputs,
    load_trace,
)

# SHOCKWAVE_TEST_PORT_OFFSET lets two checkouts run this beside each other (tests/run.sh)
PORT_OFFSET = int(os.environ.get("SHOCKWAVE_TEST_PORT_OFFSET", "0"))


@pytest.mark.parametrize("ending", ["SIGTERM", "heartbeat timeout"])
def test_a_run_ended_before_the_first_heartbeat_stops_the_service(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    """Found by a review: the service was started, and its first heartbeat awaited,
    before the try whose finally stops it; a SIGTERM, ^C or the heartbeat's timeout then
    left it running. The cluster is a stand-in (no Slurm); the service a real process that
    writes no heartbeat (a slow start on a busy machine)."""
    cluster_stopped = []

    @contextlib.contextmanager
    def cluster(*_args: Any, **_kwargs: Any) -> Iterator[dict[str, str]]:
        try:
            yield {**os.environ, "SHOCKWAVE_HEARTBEAT": str(tmp_path / "heartbeat")}
        finally:
            cluster_stopped.append(True)

    services: list[subprocess.Popen[bytes]] = []

    def start(self: live._Service) -> None:
        self.proc = subprocess.Popen(["sleep", "300"])
        services.append(self.proc)
        if ending == "SIGTERM":  # sent once run_live turns it into an interrupt
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()

    monkeypatch.setattr(live, "LocalCluster", cluster)
    monkeypatch.setattr(live._Service, "start", start)
    if ending != "SIGTERM":  # (with SIGTERM the wait is its 120 s: the signal comes first)
        monkeypatch.setattr(live, "_await_heartbeat",
                            functools.partial(live._await_heartbeat, timeout_s=0.5))
    settings = LiveSettings(trace=LIVE_DEMO_TRACE, gpus=16, time_scale=60.0,
                            policy="shockwave", work_dir=tmp_path)
    try:
        with pytest.raises(KeyboardInterrupt if ending == "SIGTERM" else InputError):
            run_live(settings)
        assert len(services) == 1 and cluster_stopped == [True]
        assert services[0].poll() is not None, "the service was left running"
    finally:
        for proc in services:
            proc.kill()
            proc.wait()


def test_a_jobs_finish_is_read_at_the_middle_of_slurms_whole_second(tmp_path: Path) -> None:
    """Found by a review: the finish was Slurm's end_time (whole seconds, truncated) minus
    a start from time.time(): every JCT read 0.5 x time scale trace seconds short on
    average (30 s at time scale 60). Here each job ends at a known wall time, its end_time
    that time truncated, the fractions spread evenly over the second."""
    trace = load_trace(LIVE_DEMO_TRACE)
    table = load_throughputs(None)
    workload = build_workload(trace, table, source="demo-live")
    scale, t0 = 60.0, 1_800_000_000.123
    jobs, true_jct = {}, []
    for i, j in enumerate(trace):
        submit = t0 + j.spec.arrival_s / scale
        run_s = workload.profiles[j.spec.job_id].exclusive_s / scale
        end = math.floor(submit + run_s) + (i + 0.5) / len(trace)  # fraction i/16 + 1/32
        true_jct.append((end - submit) * scale)
        jobs[j.spec.job_id] = live.JobState(j.spec.job_id, 100 + i, round(submit, 3),
                                            "COMPLETED", submit, float(math.floor(end)))
    settings = LiveSettings(trace=LIVE_DEMO_TRACE, gpus=16, time_scale=scale,
                            policy="shockwave", work_dir=tmp_path)
    result = live._results(settings, workload, live.run_identity(settings, workload, table),
                           jobs, 0.0, 0)
    assert result["completed"] == len(trace)
    assert result["avg_jct_s"] == pytest.approx(fmean(true_jct), abs=0.1)


def test_a_run_past_its_timeout_says_so_in_one_line(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a review: a run that reached --timeout-s ended without a word, its
    unfinished jobs counted as lost as if Slurm had lost them. Now one line says so, and
    the result says ``timed_out``."""
    settings = LiveSettings(trace=LIVE_DEMO_TRACE, gpus=16, time_scale=60.0,
                            policy="shockwave", work_dir=tmp_path, timeout_s=0.0)
    jobs = {1: live.JobState(1, 101, 0.0, "COMPLETED"), 2: live.JobState(2, 102, 0.0)}
    submit = subprocess.Popen(["sleep", "30"])
    try:
        finished = live._watch(settings, {}, jobs, queue.SimpleQueue(), 3, 0.0, submit,
                               threading.Thread(), None, None)
    finally:
        submit.kill()
        submit.wait()
    assert finished is False
    assert capsys.readouterr().err == ("timeout: --timeout-s 0 passed with 1 of 3 jobs "
                                       "finished; the others count as lost\n")


@pytest.mark.slurm
def test_sixteen_emulated_jobs_complete_through_service_kills(tmp_path: Path) -> None:
    problem = missing_for_cluster()
    if problem:
        if os.environ.get("SHOCKWAVE_REQUIRE_SLURM"):
            pytest.fail(problem)
        pytest.skip(problem)
    trace = load_trace(LIVE_DEMO_TRACE)
    assert len(trace) >= 16 and len({j.spec.gpus for j in trace}) >= 3
    assert len({j.spec.mode for j in trace}) >= 2
    result = run_live(LiveSettings(trace=LIVE_DEMO_TRACE, gpus=16, time_scale=60.0,
                                   policy="shockwave", work_dir=tmp_path,
                                   kill_service_every_s=40.0, timeout_s=900.0,
                                   ports=(23817 + PORT_OFFSET, 23900 + PORT_OFFSET)))
    assert result["completed"] == result["jobs"] == 16 and result["lost"] == 0
    assert result["service_kills"] >= 1
    # the controller's log shows every job released by the service before it started
    assert result["start_wait"]["n"] >= 16 and result["start_wait"]["mean_s"] is not None
    db = sqlite3.connect(f"file:{tmp_path / 'state.db'}?mode=ro", uri=True)
    kinds = dict(db.execute("SELECT kind, COUNT(*) FROM reports GROUP BY kind").fetchall())
    assert kinds.get("progress", 0) > 100
    # an acknowledged checkpoint is requeued as the acknowledgement arrives, between
    # rounds (whether this trace preempts at all depends on the plan; the deterministic
    # check is test_service_live.py::test_an_acknowledged_checkpoint_requeues_long_before_the_grace)
    log = (tmp_path / "serve.log").read_text()
    if kinds.get("checkpointed"):
        assert "checkpoint acknowledged, requeued" in log
    assert "Traceback" not in log
