"""The job-side client's bounds, with no service and no munged: an endpoint file that is
not a short regular file, and values out of the service's limits, never hang the job,
never raise, and are never sent or spooled."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_shockwave.client import reporter
from slurm_shockwave.service import progress_api
from tests.job_env import in_job
from tests.job_env import job_env as clean_env

ROOT = Path(__file__).resolve().parents[1]
CLI = ["-m", "slurm_shockwave.cli", "report"]


def job_env(**extra: str) -> dict[str, str]:
    return clean_env(PYTHONPATH=str(ROOT), **extra)


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


# -- M3: values out of the service's bounds -----------------------------------------------

def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def away(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A job (123) whose service is configured but away: a report it takes is spooled."""
    spool = tmp_path / "spool"
    return job_env(SLURM_JOB_ID="123", SHOCKWAVE_SPOOL=str(spool),
                   SHOCKWAVE_URL=f"http://127.0.0.1:{closed_port()}"), spool


def spooled(spool: Path) -> list[dict[str, object]]:
    return [json.loads(f.read_bytes()) for f in sorted(spool.iterdir())] \
        if spool.exists() else []


BAD = [["--epoch", "-1"], ["--epoch", "1e308"], ["--epoch", "1000000.001"],
       ["--epoch", "\uff15"], ["--epoch", "nan"], ["--epoch", "inf"], ["--epoch", "1_0"],
       ["--epoch", ""], ["--epoch", "abc"],
       ["--batch-size", "0"], ["--batch-size", "-3"], ["--batch-size", "10000001"],
       ["--batch-size", "99999999999999999999999"], ["--batch-size", "9" * 5000],
       ["--batch-size", "64.0"], ["--batch-size", "\uff16\uff14"],
       ["--samples-per-s", "-1"], ["--samples-per-s", "1e10"], ["--samples-per-s", "-0.5"],
       ["--end", "256"], ["--end", "-256"], ["--end", "\u0661"],
       ["--job-id", "0", "--epoch", "1"], ["--job-id", "4294967296", "--epoch", "1"],
       ["--job-id", "-5", "--epoch", "1"], ["--job-id", "\uff17", "--epoch", "1"],
       ["--epoch", "3", "--batch-size", "0"]]  # one bad value drops its whole report


@pytest.mark.parametrize("args", BAD, ids=" ".join)
def test_a_bad_value_is_dropped_with_one_warning_naming_it(
        args: list[str], away: tuple[dict[str, str], Path]) -> None:
    env, spool = away
    out = run([*CLI, *args], env)
    assert out.returncode == 0 and out.stdout == ""
    bad = args[0] if args[0] == "--job-id" else args[-2]
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"shockwave report: {bad} "), out.stderr
    assert "not sent" in lines[0] or "nothing is sent" in lines[0]
    assert spooled(spool) == []  # not sent, not spooled


EDGES = [(["--epoch", "0"], "epoch", 0.0), (["--epoch", "1e6"], "epoch", 1e6),
         (["--epoch", "1000000.0"], "epoch", 1e6), (["--epoch", " 2.5 "], "epoch", 2.5),
         (["--batch-size", "1"], "batch_size", 1),
         (["--batch-size", "10000000"], "batch_size", 10_000_000),
         (["--samples-per-s", "0"], "samples_per_s", 0.0),
         (["--samples-per-s", "1e9"], "samples_per_s", 1e9),
         (["--end", "255"], "exit_code", 255), (["--end", "-255"], "exit_code", -255),
         (["--end", "-1"], "exit_code", -1),
         (["--job-id", "1", "--end", "0"], "job_id", 1),
         (["--job-id", "4294967295", "--end", "0"], "job_id", 2**32 - 1)]


@pytest.mark.parametrize(("args", "field", "value"), EDGES, ids=lambda a: str(a))
def test_a_value_at_the_edge_of_its_bounds_is_taken(
        args: list[str], field: str, value: float, away: tuple[dict[str, str], Path]) -> None:
    env, spool = away
    out = run([*CLI, *args], env)
    assert out.returncode == 0 and out.stderr == "" and out.stdout == ""
    [body] = spooled(spool)  # the service is away: spooled to be sent later
    assert body[field] == value and type(body[field]) is type(value)


@pytest.fixture
def lib_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    return in_job(monkeypatch, tmp_path, "123",
                  SHOCKWAVE_URL=f"http://127.0.0.1:{closed_port()}")


@pytest.mark.parametrize(("call", "field"), [
    (lambda: reporter.report(epoch=-1.0), "epoch"),
    (lambda: reporter.report(epoch=1e308), "epoch"),
    (lambda: reporter.report(epoch=10**400), "epoch"),  # no float holds it
    (lambda: reporter.report(epoch=1.0, batch_size=0), "batch_size"),
    (lambda: reporter.report(batch_size=64.0), "batch_size"),  # type: ignore[arg-type]
    (lambda: reporter.report(batch_size=True), "batch_size"),
    (lambda: reporter.report(samples_per_s=1e10), "samples_per_s"),
    (lambda: reporter.report(samples_per_s="5"), "samples_per_s"),  # type: ignore[arg-type]
    (lambda: reporter.end(256), "exit_code"),
    (lambda: reporter.end(-256), "exit_code"),
])
def test_the_library_drops_a_bad_value_with_one_warning(
        call: Callable[[], bool], field: str, lib_env: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert call() is False
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and f" {field} " in lines[0], lines
    assert spooled(lib_env) == []


@pytest.mark.parametrize(("name", "value", "field"), [
    ("SLURM_JOB_ID", "0", "job_id"), ("SLURM_JOB_ID", "4294967296", "job_id"),
    ("SLURM_RESTART_COUNT", "1000001", "restart_count")])
def test_a_bad_value_from_slurms_environment_is_dropped_with_a_warning(
        name: str, value: str, field: str, lib_env: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(name, value)
    assert reporter.report(epoch=1.0) is False
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and f" {field} " in lines[0], lines
    assert spooled(lib_env) == []


def test_non_ascii_digits_in_slurms_environment_are_no_job(
        lib_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "\uff11\uff12\uff13")  # int() reads 123
    assert reporter.report(epoch=1.0) is False and spooled(lib_env) == []
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "\uff12")  # read as 0, as when unset
    assert reporter.report(epoch=1.0) is False  # spooled: the service is away
    assert [b["restart_count"] for b in spooled(lib_env)] == [0]


def test_the_library_takes_values_at_the_edges(lib_env: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    reporter.report(epoch=0, batch_size=1, samples_per_s=0.0)
    reporter.report(epoch=1e6, batch_size=10_000_000, samples_per_s=10**9)
    reporter.end(-255)
    reporter.end(255)
    assert capsys.readouterr().err == ""
    assert [(b.get("epoch"), b.get("batch_size"), b.get("samples_per_s"), b.get("exit_code"))
            for b in spooled(lib_env)] == [(0, 1, 0.0, None), (1e6, 10_000_000, 10**9, None),
                                           (None, None, None, -255), (None, None, None, 255)]


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


def test_the_clients_job_id_bound_is_the_packages() -> None:
    """The client is stdlib-only (a training script may vendor it), so it cannot import
    the package's bound for Slurm ids: the two must say the same."""
    from slurm_shockwave.model.bounds import MAX_SLURM_ID

    assert reporter.INT_LIMITS["job_id"] == (1, MAX_SLURM_ID)
