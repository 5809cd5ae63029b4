"""``shockwave doctor`` and ``/metrics`` against real Slurm daemons (marker slurm).

The test cluster passes, with the service running beside it, and its /metrics shows
rounds advancing and the solver's gap. Then a cluster of our own (docker-slurm/start.sh
on ports of this checkout's offset) has one setting at a time removed from its
slurm.conf and slurmctld restarted with it: doctor names exactly that setting.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_shockwave.slurm.cli_backend import CliBackend
from tests.live_cluster import (
    Submitter,
    doctor_all_ok,
    kept_heartbeat,
    slurmctld_stopped,
    wait_for,
)

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
OFFSET = int(os.environ.get("SHOCKWAVE_TEST_PORT_OFFSET", "0") or 0)


def doctor(config: Path, env: dict[str, str] | None = None,
           *extra: str) -> tuple[int, dict[str, dict[str, str]]]:
    out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "doctor", "--json",
                          "--config", str(config), *extra], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def samples(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(\S+) (\S+)$", text, flags=re.MULTILINE)}


def test_doctor_passes_and_metrics_show_rounds_and_gap(
        backend: CliBackend, tmp_path: Path,
        submitter: Callable[..., Submitter]) -> None:
    with kept_heartbeat("the service writes it") as beat:
        endpoint = beat.parent / "endpoint"  # where the cluster's scripts read it
        endpoint.unlink(missing_ok=True)
        cfg = tmp_path / "sw.yaml"
        cfg.write_text(f"slurm: {{round_s: 30}}\nservice: {{store: {tmp_path}/state.db, "
                       f"heartbeat: {beat}, endpoint_file: {endpoint}, "
                       "listen: '127.0.0.1:0'}\n")
        fast = tmp_path / "fast.yaml"  # the service itself plans every 2 s
        fast.write_text(cfg.read_text().replace("round_s: 30", "round_s: 2"))
        log = (tmp_path / "serve.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "slurm_shockwave.cli", "serve",
                                 "--config", str(fast)], stdout=log, stderr=log)
        try:
            wait_for(endpoint.exists, 60, "the progress API")
            url = endpoint.read_text().strip()
            wait_for(lambda: samples(url).get("shockwave_rounds_total", 0) >= 1, 60,
                     "a first round")
            submit = submitter("#!/bin/sh\nsleep 120\n", "-p", "shockwave", "-o", "/dev/null")
            for gpus in (1, 2, 4, 8, 8, 8, 8, 8):
                submit(f"--gres=gpu:{gpus}", "--comment",
                       "model=resnet18 bs=32 epochs=20 mode=gns")
            first = samples(url)
            wait_for(lambda: samples(url)["shockwave_rounds_total"]
                     >= first["shockwave_rounds_total"] + 2, 60, "rounds advancing")
            wait_for(lambda: samples(url).get('shockwave_actions_total{kind="start",'
                                              'outcome="applied"}', 0) >= 1, 60,
                     "a start counted")
            # the gauge is what a round saw in the queue: a start applied in one round is a
            # running job only once Slurm has started it and a later round has read it
            wait_for(lambda: samples(url).get('shockwave_jobs{phase="running"}', 0) >= 1, 60,
                     "a round that sees a running job")
            now = samples(url)
            assert now["shockwave_round_index"] > first["shockwave_round_index"]
            gap = now["shockwave_solver_gap"]
            assert gap == gap and 0 <= gap < 1, gap  # a number (not NaN): a solve's gap
            assert sum(v for k, v in now.items()
                       if k.startswith("shockwave_solver_solves_total")) >= 1
            assert now["shockwave_fail_open"] == 0
            assert now['shockwave_round_phase_seconds_count{phase="plan"}'] >= 3
            assert 'shockwave_progress_reports_total{outcome="accepted"}' in now
            code, checks = doctor(cfg)
            # the test's service listens on any free port: warned of (a fixed port is
            # what a site gives it, docs/admin.md)
            assert checks["service.listen"]["status"] == "warn", checks["service.listen"]
            bad = doctor_all_ok(checks, "service.listen")
            assert code == 0 and not bad, bad
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        first_line = (tmp_path / "serve.log").read_text().splitlines()[0]
        assert "backend cli (config: auto) [auto: pyslurm does not import" in first_line


# -- a cluster of our own, broken one setting at a time ------------------------------------

class OwnCluster:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.conf = state / "etc" / "slurm.conf"
        self.env: dict[str, str] = {}
        self.pristine = ""

    def start(self) -> None:
        port = 17817 + OFFSET + 50
        done = subprocess.run(["bash", str(REPO / "docker-slurm" / "start.sh"), "--state-dir",
                               str(self.state), "--nodes", "1", "--gpus-per-node", "2",
                               "--ctld-port", str(port), "--node-port-base",
                               str(17900 + OFFSET + 50)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        exports = dict(line[len("export "):].split("=", 1)
                       for line in done.stdout.splitlines() if line.startswith("export "))
        self.env = {**os.environ, **exports}
        self.pristine = self.conf.read_text()

    def restart_with(self, edit: Callable[[str], str]) -> None:
        """slurmctld restarted on the pristine slurm.conf changed by ``edit``."""
        with slurmctld_stopped(self.conf, self.env):
            self.conf.write_text(edit(self.pristine))

    def stop(self) -> None:
        subprocess.run(["bash", str(REPO / "docker-slurm" / "stop.sh"), "--state-dir",
                        str(self.state), "--purge"], capture_output=True)


@pytest.fixture(scope="module")
def own(backend: CliBackend) -> Iterator[OwnCluster]:
    # every folder above its TaskProlog open to other users, as on a real cluster (pytest's
    # own tmp folders are 0700; doctor names that)
    state = Path(tempfile.mkdtemp(prefix="sw-doctor-cluster-", dir="/tmp"))
    os.chmod(state, 0o755)
    cluster = OwnCluster(state)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)


def _drop(key: str) -> Callable[[str], str]:
    return lambda text: "\n".join(ln for ln in text.splitlines()
                                  if not ln.startswith(key + "=")) + "\n"


def _set(key: str, value: str) -> Callable[[str], str]:
    return lambda text: re.sub(rf"^{key}=.*$", f"{key}={value}", text, flags=re.MULTILINE)


BROKEN = [  # (what is changed in slurm.conf, the check that must name it, its status)
    (_drop("JobSubmitPlugins"), "JobSubmitPlugins", "fail"),
    (_set("JobRequeue", "0"), "JobRequeue", "fail"),
    (_drop("AuthInfo"), "cred_expire", "warn"),
    (_set("PriorityType", "priority/basic"), "PriorityType", "warn"),
    (_drop("TaskProlog"), "TaskProlog", "warn"),
    (_drop("Epilog"), "Epilog", "warn"),
    (lambda t: t.replace("PartitionName=shockwave Nodes=sw-node1 Default=YES MaxTime=INFINITE "
                         "State=UP", "PartitionName=shockwave Nodes=sw-node1 Default=YES "
                         "MaxTime=INFINITE State=DOWN"), "partition shockwave", "fail"),
]


def test_doctor_names_each_setting_removed(own: OwnCluster, tmp_path: Path) -> None:
    cfg = tmp_path / "sw.yaml"
    cfg.write_text(f"service: {{store: {tmp_path}/state.db}}\n")
    code, checks = doctor(cfg, own.env)
    assert code == 0, checks
    assert all(c["status"] == "skip" for c in doctor_all_ok(checks, "service",
                                                            "heartbeat").values()), checks
    for edit, name, status in BROKEN:
        own.restart_with(edit)
        code, checks = doctor(cfg, own.env)
        assert checks[name]["status"] == status, (name, checks[name])
        assert checks[name]["fix"], name
        others = {n for n, c in checks.items() if c["status"] == "fail"} - {name}
        assert not others, (name, others)
        assert code == (1 if status == "fail" else 0), name
    own.restart_with(lambda t: t)
    os.chmod(own.state / "etc", 0o750)  # a hand-made folder under root's umask 027
    try:
        checks = doctor(cfg, own.env)[1]
        assert checks["TaskProlog"]["status"] == "warn", checks["TaskProlog"]
        assert "not searchable by other users" in checks["TaskProlog"]["detail"]
    finally:
        os.chmod(own.state / "etc", 0o755)
    lua = own.state / "etc" / "job_submit.lua"
    lua.write_text(lua.read_text().replace(f'"{own.env["SHOCKWAVE_HEARTBEAT"]}"',
                                           '"/elsewhere/heartbeat"'))
    code, checks = doctor(cfg, own.env)
    assert code == 1 and "heartbeat '/elsewhere/heartbeat'" in \
        checks["job_submit.lua"]["detail"]
    lua.write_text("-- a site's own job_submit.lua\nfunction slurm_job_submit() end\n")
    code, checks = doctor(cfg, own.env, "--partition", "nosuch")
    assert code == 1
    assert checks["job_submit.lua"]["status"] == "fail"
    assert "not slurm-shockwave's" in checks["job_submit.lua"]["detail"]
    assert checks["partition nosuch"]["detail"] == "Slurm has no such partition"
