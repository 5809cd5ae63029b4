"""Helpers for the tests marked ``slurm`` (the local cluster of docker-slurm/start.sh):
a backend that answers or a skip with the reason, jobs that are cancelled at the end,
waiting for a condition, and the heartbeat file put back as it was found."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from slurm_shockwave.slurm.protocol import SlurmBackend, SlurmError, SlurmJob

B = TypeVar("B", bound=SlurmBackend)

WARNED_ON_TEST_CLUSTERS = {"ProctrackType": "proctrack/linuxproc"}
"""doctor's warnings on every test cluster, and what they name: the clusters track a
job's processes by their parents (several slurmd on one host, no cgroups for them), so
doctor says that a preempted job's processes may outlive it."""


def doctor_all_ok(checks: dict[str, dict[str, str]], *also: str) -> dict[str, dict[str, str]]:
    """The checks that are not ok, but for ``also`` and the test clusters' own warnings
    (each of which must be a warning naming what it warns of)."""
    for name, names in WARNED_ON_TEST_CLUSTERS.items():
        assert checks[name]["status"] == "warn" and names in checks[name]["detail"], \
            checks[name]
    return {n: c for n, c in checks.items() if c["status"] != "ok"
            and n not in (*also, *WARNED_ON_TEST_CLUSTERS)}


def answering(make: Callable[[], B], required: bool = True) -> B:
    """The backend ``make`` builds, once it lists the nodes. Without an answer the test is
    skipped with the reason, or fails when SHOCKWAVE_REQUIRE_SLURM is set and ``required``."""
    try:
        backend = make()
        nodes = backend.list_nodes()
    except SlurmError as exc:
        if required and os.environ.get("SHOCKWAVE_REQUIRE_SLURM"):
            pytest.fail(f"no Slurm cluster: {exc}")
        pytest.skip(f"no Slurm cluster (start docker-slurm/start.sh): {exc}")
    assert nodes, "the cluster has no nodes"
    return backend


def wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"condition not met within {timeout_s} s" + (f": {what}" if what else ""))


@contextlib.contextmanager
def slurmctld_stopped(conf: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    """The docker-slurm cluster's slurmctld (``conf``'s, its pid file in run/ beside etc/)
    stopped inside, started again on leaving whatever happened, once the stopped one has
    exited, and answering: a failure inside must not leave every later real-cluster test
    without a controller (a CI run lost 29 tests that way)."""
    pid = int((conf.parent.parent / "run" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    try:
        yield
    finally:
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60, "slurmctld to stop")
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env)
    wait_for(lambda: subprocess.run(["scontrol", "ping"], capture_output=True,
                                    env=env).returncode == 0, 60, "slurmctld up")


def job(backend: SlurmBackend, job_id: int) -> SlurmJob:
    return next(j for j in backend.list_jobs() if j.job_id == job_id)


class Submitter:
    """Submits one script with default sbatch arguments and remembers the job ids, so that
    exactly these jobs are cancelled at the end (``cancel_all``)."""

    def __init__(self, backend: SlurmBackend, script: Path, text: str, *defaults: str) -> None:
        self.backend = backend
        self.script = script
        self.defaults = defaults
        self.mine: list[int] = []
        script.write_text(text)
        script.chmod(0o755)

    def __call__(self, *args: str) -> int:
        job_id = self.backend.submit(str(self.script), [*self.defaults, *args])
        self.mine.append(job_id)
        return job_id

    def cancel_all(self) -> None:
        for job_id in self.mine:
            with contextlib.suppress(SlurmError):
                self.backend.cancel(job_id)


def heartbeat_path(why: str = "") -> Path:
    """The heartbeat file the cluster's job_submit.lua reads, or skip the test."""
    name = os.environ.get("SHOCKWAVE_HEARTBEAT")
    if not name:
        pytest.skip("SHOCKWAVE_HEARTBEAT unset (docker-slurm/start.sh prints it: eval its "
                    "output)" + (f"; {why}" if why else ""))
    return Path(name)


@contextlib.contextmanager
def kept_heartbeat(why: str = "") -> Iterator[Path]:
    """The heartbeat file, put back as it was found (or removed if there was none)."""
    path = heartbeat_path(why)
    saved = path.read_bytes() if path.exists() else None
    try:
        yield path
    finally:
        if saved is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(saved)


def write_fresh(path: Path, ttl_s: int = 86400) -> None:
    """A heartbeat as the running service writes it: now, valid for ``ttl_s`` seconds."""
    path.write_text(f"{int(time.time())} {ttl_s}\n")
