"""The job-side client's bounds, with no service and no munged: an endpoint file that is
not a short regular file, and values out of the service's limits, never hang the job,
never raise, and are never sent or spooled."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_shockwave.client import reporter
from slurm_shockwave.service import progress_api

ROOT = Path(__file__).resolve().parents[1]
ENV_KEYS = ("SHOCKWAVE_URL", "SHOCKWAVE_ENDPOINT_FILE", "SHOCKWAVE_SPOOL", "SHOCKWAVE_SIGNAL",
            "SLURM_JOB_ID", "SLURM_RESTART_COUNT")
CLI = ["-m", "slurm_shockwave.cli", "report"]


def job_env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    return {**base, "PYTHONPATH": str(ROOT), **extra}


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A subprocess, so that a hang fails the test (timeout) instead of stalling the run."""
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=30, check=False)


# -- C5: the endpoint file ----------------------------------------------------------------

TIMED = ("import time\n"
         "from slurm_shockwave.client import reporter\n"
         "t = time.monotonic()\n"
         "ok = reporter.report(epoch=1.0)\n"
         "print(ok, time.monotonic() - t)\n")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "endpoint.fifo"
    os.mkfifo(path)  # and nobody ever opens it for writing
    return path


def endpoints(tmp_path: Path, fifo: Path) -> dict[str, Path]:
    big = tmp_path / "big"
    big.write_bytes(b"http://127.0.0.1:1" + b" " * reporter.MAX_ENDPOINT)
    folder = tmp_path / "folder"
    folder.mkdir()
    return {"fifo": fifo, "zero": Path("/dev/zero"), "urandom": Path("/dev/urandom"),
            "big": big, "folder": folder}


@pytest.mark.parametrize("which", ["fifo", "zero", "urandom", "big", "folder"])
def test_an_endpoint_file_that_is_no_short_regular_file_is_no_service(
        which: str, tmp_path: Path, fifo: Path) -> None:
    """A FIFO with no writer, /dev/zero, /dev/urandom, a file over 4 KiB, a directory:
    as if there were no endpoint file. The call returns False well within 2 s (before the
    fix /dev/zero and the FIFO never returned) and spools nothing."""
    spool = tmp_path / "spool"
    env = job_env(SLURM_JOB_ID="123", SHOCKWAVE_SPOOL=str(spool),
                  SHOCKWAVE_ENDPOINT_FILE=str(endpoints(tmp_path, fifo)[which]))
    out = run(["-c", TIMED], env)
    assert out.returncode == 0, out.stderr
    ok, seconds = out.stdout.split()
    assert ok == "False" and float(seconds) < 2.0
    assert not spool.exists()


@pytest.mark.parametrize("which", ["fifo", "zero"])
def test_the_report_command_returns_on_such_an_endpoint_file(which: str, tmp_path: Path,
                                                             fifo: Path) -> None:
    spool = tmp_path / "spool"
    env = job_env(SLURM_JOB_ID="123", SHOCKWAVE_SPOOL=str(spool),
                  SHOCKWAVE_ENDPOINT_FILE=str(endpoints(tmp_path, fifo)[which]))
    out = run([*CLI, "--epoch", "1"], env)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""
    assert not spool.exists()


def test_a_short_regular_endpoint_file_is_read(tmp_path: Path) -> None:
    endpoint = tmp_path / "endpoint"
    url = "http://127.0.0.1:7817"
    endpoint.write_text(url + "\n")
    assert reporter._service_url({"SHOCKWAVE_ENDPOINT_FILE": str(endpoint)}) == url
    endpoint.write_text(url.ljust(reporter.MAX_ENDPOINT))  # exactly the limit
    assert reporter._service_url({"SHOCKWAVE_ENDPOINT_FILE": str(endpoint)}) == url
    endpoint.write_text(url.ljust(reporter.MAX_ENDPOINT + 1))
    assert reporter._service_url({"SHOCKWAVE_ENDPOINT_FILE": str(endpoint)}) is None
    link = tmp_path / "link"  # a symlink to the file (a shared file system's) is fine
    endpoint.write_text(url)
    link.symlink_to(endpoint)
    assert reporter._service_url({"SHOCKWAVE_ENDPOINT_FILE": str(link)}) == url


# -- one definition of the bounds, on both sides ------------------------------------------

VALUES: list[object] = [None, True, False, "1", -1, 0, 1, 255, 256, -255, -256, 1_000_000,
                        1_000_001, 10_000_000, 10_000_001, 2**32 - 1, 2**32, 10**400, -0.0,
                        0.5, 64.0, 604800, 604800.5, 1e6, 1e6 + 0.5, 1e9, 1e10, 1e308,
                        math.inf, -math.inf]
NULLABLE = {"epoch", "batch_size", "samples_per_s", "restart_count", "exit_code", "age_s"}


@pytest.mark.parametrize("name", [*reporter.INT_LIMITS, *reporter.FLOAT_LIMITS])
def test_the_client_refuses_exactly_what_the_service_refuses(name: str) -> None:
    for value in VALUES:
        body = {"job_id": 1, "kind": "end", name: value}
        raw = json.dumps(body).encode()  # inf: Infinity, which the service refuses as "body"
        try:
            progress_api.parse_report(raw, uid=0, at_s=1e9)
            taken = True
        except progress_api.Refused as exc:
            assert exc.status == 400 and exc.field in (name, "body"), (value, exc.error)
            taken = False
        client = (value is None and name in NULLABLE) or (
            value is not None and reporter.check(name, value) is None)
        assert taken == client, (name, value)
