"""The service's Prometheus metrics over the in-memory fake (logic; the real service is
scraped in tests/test_doctor_live.py), and the Grafana dashboard's queries."""

from __future__ import annotations

import json
import math
import re
import threading
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from slurm_shockwave.service.heartbeat import write_heartbeat
from slurm_shockwave.service.metrics import ServiceMetrics
from slurm_shockwave.service.progress_api import Counts
from slurm_shockwave.service.store import Store
from slurm_shockwave.slurm.protocol import SlurmNode
from tests.builders import WallLikeClock as Clock
from tests.test_service_loop import Flaky, job, service

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

    def failed(cause: str) -> None:
        metrics.round_failed(cause)
        seen_down.append(scraped(metrics)["shockwave_slurm_reachable"])

    assert svc.run(stop, max_rounds=2, on_round=metrics.round_done, on_failure=failed) == 2
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
