"""The job-side client for real: munged, the HTTP API, subprocesses, the spool, a signal."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_shockwave.client import reporter
from slurm_shockwave.service import munge
from slurm_shockwave.service.progress_api import ProgressAPI
from slurm_shockwave.service.store import JobRow, RoundRecord, Store
from slurm_shockwave.slurm.intents import CheckpointIntent
from tests.job_env import in_job, job_env
from tests.test_progress_api import munged_running

pytestmark = pytest.mark.skipif(not munged_running(),
                                reason="munged is not running (docker-slurm/start.sh or "
                                       ".ci/run start it)")

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "state.db")
    s.save_round(RoundRecord(round_index=0, at_s=1000.0, policy="fifo", dry_run=False, jobs=3,
                             phase_s={}, solver_status=None, solver_gap=None, applied=0,
                             rejected=0, deferred=0),
                 [JobRow(job_id=7, user="root"), JobRow(job_id=8, user="root"),
                  JobRow(job_id=101, user="swtest1")], [], {}, read_round_id=0)
    yield s
    s.close()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean job environment: job 7, a spool directory; no service yet."""
    return in_job(monkeypatch, tmp_path, "7", SLURM_RESTART_COUNT="1")


def epochs(store: Store, job: int = 7) -> list[float | None]:
    return [r.epoch for r in store.reports([job]).get(job, [])]


def test_no_service_or_no_job_does_nothing(env: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert reporter.report(epoch=1.0) is False
    assert reporter.end(0) is False
    assert not env.exists()  # nothing spooled: there is no service to tell
    monkeypatch.setenv("SHOCKWAVE_URL", "http://127.0.0.1:1")
    monkeypatch.delenv("SLURM_JOB_ID")
    assert reporter.report(epoch=1.0) is False and not env.exists()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("named", ["endpoint file", "url"])
def test_a_service_named_but_not_found_has_the_reports_spooled_until_it_is(
        named: str, env: Path, store: Store, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a red-team: an endpoint file named but not written yet (the service not
    started), or a URL without its scheme, had every report dropped without a word,
    spool and all. Now they are spooled with one warning, the epilog's flush is told
    the service did not answer, and the first call that finds the service sends them,
    oldest first."""
    monkeypatch.setattr(reporter, "_warned", set())
    endpoint = tmp_path / "endpoint"
    if named == "url":
        monkeypatch.setenv("SHOCKWAVE_URL", "127.0.0.1:7817")
    else:
        monkeypatch.setenv("SHOCKWAVE_ENDPOINT_FILE", str(endpoint))
    assert reporter.report(epoch=1.0) is False
    assert reporter.report(epoch=2.0) is False
    assert len(list(env.iterdir())) == 2
    why = ("$SHOCKWAVE_URL is no http:// or https:// URL" if named == "url" else
           "$SHOCKWAVE_ENDPOINT_FILE is not there yet")
    assert capsys.readouterr().err.splitlines() == [
        f"shockwave reporter: no service to send to ({why}): reports are spooled"]
    assert reporter.flush_spools([str(env)]) == (0, False)  # kept, and not "all sent"
    flushed = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "report",
                              "--flush-spool", str(env)], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert flushed.returncode == 0 and flushed.stderr.splitlines() == [
        "shockwave report: sent 0 spooled reports; the service did not answer: the rest "
        "stay spooled"], flushed.stderr
    with ProgressAPI(store.path, listen="127.0.0.1:0", endpoint_file=str(endpoint)) as api:
        if named == "url":
            monkeypatch.setenv("SHOCKWAVE_URL", api.url)
        assert reporter.report(epoch=3.0) is True
    assert epochs(store) == [1.0, 2.0, 3.0] and list(env.iterdir()) == []


def test_reports_land_through_the_endpoint_file(env: Path, store: Store,
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    endpoint = tmp_path / "endpoint"
    with ProgressAPI(store.path, listen="127.0.0.1:0", endpoint_file=str(endpoint)):
        monkeypatch.setenv("SHOCKWAVE_ENDPOINT_FILE", str(endpoint))
        assert reporter.report(epoch=2.5, batch_size=128, samples_per_s=900.0) is True
        assert reporter.checkpointed() is True
        assert reporter.end(3) is True
    [progress, ckpt, ended] = store.reports([7])[7]
    assert (progress.epoch, progress.batch_size, progress.samples_per_s) == (2.5, 128, 900.0)
    assert progress.restart_count == 1 and ckpt.kind.value == "checkpointed"
    assert ended.exit_code == 3


def test_a_refused_report_is_dropped_not_spooled(env: Path, store: Store,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """And the job's log says why, once (a user walkthrough: a report for another user's
    job id came back False with not a word)."""
    monkeypatch.setattr(reporter, "_warned", set())
    with ProgressAPI(store.path, listen="127.0.0.1:0") as api:
        monkeypatch.setenv("SHOCKWAVE_URL", api.url)
        monkeypatch.setenv("SLURM_JOB_ID", "999")  # not managed: 404
        assert reporter.report(epoch=1.0) is False
        assert reporter.report(epoch=2.0) is False
    assert not env.exists() or not list(env.iterdir())
    warned = capsys.readouterr().err.splitlines()
    assert len(warned) == 1, warned
    assert f"{api.url} refused a report (404: job_id: " in warned[0], warned
    assert warned[0].endswith("it is dropped, not sent again"), warned


def test_spools_while_the_service_is_down_and_flushes_when_back(
        env: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{port}")
    assert reporter.report(epoch=1.0) is False
    assert reporter.report(epoch=2.0) is False
    time.sleep(0.5)  # spooled at least this long before the flush
    files = sorted(env.iterdir())
    assert len(files) == 2 and stat.S_IMODE(env.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert json.loads(files[0].read_text())["epoch"] == 1.0
    assert epochs(store) == []
    with ProgressAPI(store.path, listen=f"127.0.0.1:{port}"):
        assert reporter.report(epoch=3.0) is True
    assert epochs(store) == [1.0, 2.0, 3.0]  # oldest first, each with its own credential
    assert list(env.iterdir()) == []
    # dated back by their age in the spool: no epoch time measured between them
    at = [r.at_s for rs in store.reports().values() for r in rs]
    assert at[2] - at[0] >= 0.45


def test_a_report_the_spool_cannot_hold_leaves_no_empty_file(
        env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a red-team: on a full disk the spool file was made and its write failed
    silently, leaving an empty file that no flush sends and the cap counts. (A full disk
    is stood in for: the write raises ENOSPC.)"""
    import errno

    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{free_port()}")
    real = os.fdopen

    class Full:
        def __init__(self, fd: int, mode: str) -> None:
            self.f = real(fd, mode)

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reporter.os, "fdopen", Full)
    assert reporter.report(epoch=1.0) is False
    assert reporter.report(epoch=2.0) is False
    assert list(env.iterdir()) == []
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "could not be written" in ln]
    assert len(warned) == 1 and "No space left on device" in warned[0]


def test_an_unsafe_spool_is_refused(env: Path, store: Store, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{free_port()}")
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    monkeypatch.setenv("SHOCKWAVE_SPOOL", str(link))
    assert reporter.report(epoch=1.0) is False
    assert list(real.iterdir()) == []
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    monkeypatch.setenv("SHOCKWAVE_SPOOL", str(open_dir))
    assert reporter.report(epoch=1.0) is False
    assert list(open_dir.iterdir()) == []


def test_a_spool_that_is_a_file_drops_reports_with_one_warning(
        env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The service away and the spool unusable: the reports are lost, so say it, once a
    process, not every epoch (a red-team finding: it said nothing)."""
    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{free_port()}")
    spool = tmp_path / "a-file"
    spool.write_text("")
    monkeypatch.setenv("SHOCKWAVE_SPOOL", str(spool))
    monkeypatch.setattr(reporter, "_warned", set())
    assert reporter.report(epoch=1.0) is False and reporter.report(epoch=2.0) is False
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "reports are dropped" in lines[0] and str(spool) in lines[0]
    assert spool.read_text() == ""


def test_a_spool_swapped_for_a_symlink_mid_flush_is_not_followed(
        env: Path, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's epilog flushes a user's spool: checked, then used. If its owner swaps the
    path for a symlink to another directory after the check, the flush goes on in the
    directory it checked (open as a descriptor): nothing in the other one is renamed,
    sent or deleted."""
    port = free_port()
    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{port}")
    assert reporter.report(epoch=1.0) is False
    spooled = [p.name for p in env.iterdir()]
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    bait = other / spooled[0].replace("-", "-9", 1)  # a name the flush would take
    bait.write_bytes((env / spooled[0]).read_bytes())
    moved = tmp_path / "moved"
    real_scandir = os.scandir

    def swap_then_scan(path: object) -> object:
        if not (env.is_symlink() or moved.exists()):
            env.rename(moved)  # the checked directory, moved away...
            env.symlink_to(other)  # ...and its path now names another one
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(reporter.os, "scandir", swap_then_scan)
    with ProgressAPI(store.path, listen=f"127.0.0.1:{port}"):
        assert reporter.flush_spool() == 1
    assert epochs(store) == [1.0]
    assert list(moved.iterdir()) == []  # the checked directory's report, sent
    assert [p.name for p in other.iterdir()] == [bait.name]  # untouched


FLUSH_UNTIL_EMPTY = """
import os, sys, threading, time
from slurm_shockwave.client import reporter
spool, threads = os.environ["SHOCKWAVE_SPOOL"], int(sys.argv[1])
def flush():
    end = time.monotonic() + 30
    while time.monotonic() < end and os.listdir(spool):
        reporter.flush_spool()
        time.sleep(0.01)
workers = [threading.Thread(target=flush) for _ in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
"""


def test_concurrent_flushers_send_each_spooled_report_once(
        env: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The threads of a job and its other processes (DDP ranks, the epilog) flush one
    spool at once: each report is claimed by one of them and stored once (without the
    claim, 40 threads' 400 reports were stored 467 times)."""
    port = free_port()
    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{port}")
    count = 150
    for epoch in range(1, count + 1):
        assert reporter.report(epoch=float(epoch)) is False  # the service is away
    assert len(list(env.iterdir())) == count
    with ProgressAPI(store.path, listen=f"127.0.0.1:{port}"):
        procs = [subprocess.Popen([sys.executable, "-c", FLUSH_UNTIL_EMPTY, "6"],
                                  env={**job_env(SHOCKWAVE_URL=f"http://127.0.0.1:{port}",
                                                 SLURM_JOB_ID="7", SHOCKWAVE_SPOOL=str(env)),
                                       "PYTHONPATH": str(ROOT)})
                 for _ in range(2)]
        end = time.monotonic() + 30

        def flush() -> None:
            while time.monotonic() < end and any(env.iterdir()):
                reporter.flush_spool()
                time.sleep(0.01)

        threads = [threading.Thread(target=flush) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for proc in procs:
            assert proc.wait(timeout=60) == 0
    assert list(env.iterdir()) == []
    got = sorted(e for e in epochs(store) if e is not None)
    assert got == [float(e) for e in range(1, count + 1)]  # each exactly once


def test_a_claim_left_by_a_dead_sender_is_sent_again(env: Path, store: Store,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A claimed spool file whose claimant is gone (a process of this host that no longer
    runs, or a claim older than CLAIM_STALE_S) is sent; one whose claimant runs is left to
    it, and the flush stops there (the claimant goes on in order); a send that fails puts
    the file back under its spooled name."""
    port = free_port()
    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{port}")
    for epoch in (1.0, 2.0, 3.0):
        assert reporter.report(epoch=epoch) is False
    first, second, third = sorted(p.name for p in env.iterdir())
    assert reporter.flush_spool() == 0  # unreachable: nothing claimed stays behind
    assert sorted(p.name for p in env.iterdir()) == [first, second, third]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = reporter._host()
    now = time.time_ns()
    os.rename(env / first, env / f"{first}.{now}.{dead.stdout.strip()}.1.{host}.claim")
    alive = env / f"{second}.{now}.1.1.{host}.claim"  # pid 1 runs
    os.rename(env / second, alive)
    with ProgressAPI(store.path, listen=f"127.0.0.1:{port}"):
        assert reporter.flush_spool() == 1  # the dead one's; stops at the live claim
        assert epochs(store) == [1.0]
        old = time.time_ns() - int((reporter.CLAIM_STALE_S + 1) * 1e9)
        os.rename(alive, env / f"{second}.{old}.1.1.{host}.claim")  # now it is stale
        assert reporter.flush_spool() == 2
    assert epochs(store) == [1.0, 2.0, 3.0] and list(env.iterdir()) == []


def test_several_spools_are_flushed_in_one_budget_and_stop_where_the_service_does_not_answer(
        env: Path, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``flush_spools`` (the epilog's one call): every spool's reports when the service
    answers, (sent, True); with no service listening, (0, False) from the first spool,
    without trying the others, and every report stays spooled."""
    port = free_port()
    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{port}")
    assert reporter.report(epoch=1.0) is False
    second = tmp_path / "second"
    monkeypatch.setenv("SHOCKWAVE_SPOOL", str(second))
    assert reporter.report(epoch=2.0) is False
    spools = [str(env), str(second)]
    tried: list[str] = []
    real_open = reporter._Client._open_spool

    def counted(client: reporter._Client) -> int | None:
        tried.append(str(client.spool))
        return real_open(client)

    monkeypatch.setattr(reporter._Client, "_open_spool", counted)
    assert reporter.flush_spools(spools, 7) == (0, False)
    assert tried == [str(env)]  # the second spool was not tried
    assert len(list(env.iterdir())) == len(list(second.iterdir())) == 1
    with ProgressAPI(store.path, listen=f"127.0.0.1:{port}"):
        assert reporter.flush_spools(spools, 7) == (2, True)
    assert epochs(store) == [1.0, 2.0]
    assert list(env.iterdir()) == list(second.iterdir()) == []


def test_what_else_a_spool_holds_never_stops_a_report(env: Path, store: Store,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a red-team: a directory named like a spooled report made every later
    report fail unsent and unspooled, leaking a descriptor each, and a claim naming a pid
    no process can have raised out of the flush the same way. Neither stops a report: the
    directory is left alone, the impossible claimant is gone."""
    port = free_port()
    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{port}")
    env.mkdir(mode=0o700, exist_ok=True)
    (env / f"{time.time_ns():020d}-1-000001-7.json").mkdir()
    later = f"{time.time_ns() + 10**18}"  # never stale by its age
    claim = env / (f"{time.time_ns():020d}-1-000002-7.json.{later}.9999999999.1."
                   f"{reporter._host()}.claim")
    claim.write_text('{"job_id": 7, "kind": "progress", "epoch": 0.5}')
    fds = len(os.listdir("/proc/self/fd"))
    with ProgressAPI(store.path, listen=f"127.0.0.1:{port}"):
        assert [reporter.report(epoch=float(e)) for e in range(1, 21)] == [True] * 20
    assert epochs(store) == [0.5, *map(float, range(1, 21))]
    assert len(os.listdir("/proc/self/fd")) - fds < 5  # no descriptor a report
    assert [p.is_dir() for p in env.iterdir()] == [True]


def test_a_forked_child_reports_though_a_lock_was_held_as_it_forked(
        env: Path, store: Store) -> None:
    """Found by a red-team: a child forked while another thread held the client's lock
    (a warning, a report's count) inherited it held for ever, and its report blocked."""
    program = (
        "import os, sys, threading\n"
        "from slurm_shockwave.client import reporter\n"
        "reporter._state_lock.acquire()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    answered = reporter.report(epoch=1.0) is not None\n"
        "    os._exit(0 if answered else 1)\n"
        "reporter._state_lock.release()\n"
        "_, status = os.waitpid(pid, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT),
                              "SHOCKWAVE_URL": f"http://127.0.0.1:{free_port()}"},
                         timeout=30, check=False)
    assert out.returncode == 0, out.stderr


def test_a_flush_with_only_a_moment_left_sends_nothing(env: Path, store: Store,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A report sent with a timeout of a moment may be stored, answered too late, spooled
    again and sent twice: a flush with less than MIN_SEND_S left stops instead."""
    port = free_port()
    monkeypatch.setenv("SHOCKWAVE_URL", f"http://127.0.0.1:{port}")
    assert reporter.report(epoch=1.0) is False
    client = reporter._Client(os.environ)
    with ProgressAPI(store.path, listen=f"127.0.0.1:{port}"):
        assert client.flush(time.monotonic() + reporter.MIN_SEND_S / 2) == (0, True)
        assert epochs(store) == [] and len(list(env.iterdir())) == 1
        assert client.flush(time.monotonic() + reporter.TIMEOUT_S) == (1, True)
    assert epochs(store) == [1.0]


def run(args: list[str], env: dict[str, str], user: str | None = None,
        ) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, *args]
    if user is not None:
        cmd = ["runuser", "-u", user, "--", *cmd]
    return subprocess.run(cmd, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=60, check=False)


def test_the_report_command_always_exits_0(store: Store, tmp_path: Path) -> None:
    with ProgressAPI(store.path, listen="127.0.0.1:0") as api:
        env = job_env(SHOCKWAVE_URL=api.url, SLURM_JOB_ID="8")
        cli = ["-m", "slurm_shockwave.cli", "report"]
        assert run([*cli, "--epoch", "3", "--batch-size", "64", "--samples-per-s", "812"],
                   env).returncode == 0
        assert run([*cli, "--checkpointed"], env).returncode == 0
        assert run([*cli, "--end", "0"], env).returncode == 0
        bad = run([*cli, "--epoch", "abc", "--bogus"], env)
        assert bad.returncode == 0 and "ignoring" in bad.stderr
        assert run([*cli, "--epoch", "1"], job_env()).returncode == 0  # no service
        # found by a red-team: click's usage errors (an option given last without its
        # value: `--epoch $E` with E empty) were exit 2, and a warning to a stderr that
        # cannot be written exit 1
        for args in (["--epoch"], ["--checkpointed=yes"], ["--end"]):
            usage = run([*cli, *args], env)
            assert usage.returncode == 0 and "nothing is sent" in usage.stderr, usage
            assert ".:" not in usage.stderr, usage.stderr  # click's full stop (red-team)
        with open("/dev/full", "w") as full:
            closed = subprocess.run([sys.executable, *cli, "--epoch", "abc"], stderr=full,
                                    env={**env, "PYTHONPATH": str(ROOT)}, timeout=60)
        assert closed.returncode == 0
    kinds = [(r.kind.value, r.epoch, r.exit_code) for r in store.reports([8])[8]]
    assert kinds == [("progress", 3.0, None), ("checkpointed", None, None), ("end", None, 0)]


def test_one_report_command_sends_progress_then_checkpoint_then_end(store: Store) -> None:
    """The order they happened in (the end was sent first, before the job's last
    progress; red-team finding)."""
    with ProgressAPI(store.path, listen="127.0.0.1:0") as api:
        env = job_env(SHOCKWAVE_URL=api.url, SLURM_JOB_ID="8")
        proc = run(["-m", "slurm_shockwave.cli", "report", "--end", "0", "--checkpointed",
                    "--epoch", "5"], env)
        assert proc.returncode == 0, proc.stderr
    kinds = [(r.kind.value, r.epoch, r.exit_code) for r in store.reports([8])[8]]
    assert kinds == [("progress", 5.0, None), ("checkpointed", None, None), ("end", None, 0)]


@pytest.mark.parametrize(("env", "end"), [
    ({"SLURM_JOB_EXIT_CODE2": "0:0", "SLURM_JOB_EXIT_CODE": "0"}, "0"),
    ({"SLURM_JOB_EXIT_CODE2": "3:0", "SLURM_JOB_EXIT_CODE": "768"}, "3"),
    ({"SLURM_JOB_EXIT_CODE2": "0:9", "SLURM_JOB_EXIT_CODE": "9"}, "137"),  # SIGKILL
    ({"SLURM_JOB_EXIT_CODE": "256"}, "1"),  # a wait(2) status alone (no ...CODE2)
    ({"SLURM_JOB_EXIT_CODE": "15"}, "143"),  # killed by SIGTERM
    ({"SLURM_JOB_EXIT_CODE": "x"}, "-1"), ({}, "-1"),
    ({"SLURM_JOB_EXIT_CODE2": "999999:0"}, "-1"),
])
def test_the_epilog_reports_the_exit_code_a_shell_would(tmp_path: Path, env: dict[str, str],
                                                         end: str) -> None:
    """What the job's end report carries: the exit status, or 128 + the signal that
    killed it; never a raw wait(2) status, which the service refuses (above 255)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "shockwave"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n')
    fake.chmod(0o755)
    script = tmp_path / "epilog.sh"  # alone: no events.sh beside it, so no event log
    shutil.copy(ROOT / "plugin_scripts" / "epilog.sh", script)
    done = subprocess.run(["sh", str(script)], env={"PATH": f"{bin_dir}:/usr/bin:/bin",
                                                    "SLURM_JOB_ID": "42", **env},
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "calls").read_text().split() == ["report", "--job-id", "42",
                                                        "--end", end]


def test_the_epilog_flushes_only_that_jobs_spool(store: Store, users: tuple[str, str],
                                                 request: pytest.FixtureRequest) -> None:
    """Root forwards a user's spool with root's credential: only files of the job it names
    (a forged file for another user's job stays behind)."""
    if os.geteuid() != 0:
        pytest.skip("the epilog's flush runs as root")
    owner = pwd.getpwnam(users[0])
    base = Path(tempfile.mkdtemp(prefix="sw-spool-"))  # pytest's tmp is root's alone
    base.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    spool = base / "user-spool"
    spool.mkdir(mode=0o700)
    os.chown(spool, owner.pw_uid, owner.pw_gid)
    port = free_port()
    env = job_env(SHOCKWAVE_URL=f"http://127.0.0.1:{port}", SLURM_JOB_ID="101",
                  SHOCKWAVE_SPOOL=str(spool))
    # the user's side: the single vendored file, under the system's Python (root's may be
    # private), as swtest1
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None:
        pytest.skip("no system python3 for the job's user")
    shutil.copy(reporter.__file__, base / "reporter.py")
    code = "import reporter\nassert reporter.report(epoch=4.0) is False\n"
    done = subprocess.run(["runuser", "-u", "swtest1", "--", system_python, "-c", code],
                          env={**env, "PYTHONPATH": str(base)}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    forged = spool / f"{'0' * 20}-1-000001-101.json"  # named for job 101, body for job 7
    forged.write_text(json.dumps({"job_id": 7, "kind": "end", "exit_code": 0}))
    assert len(list(spool.iterdir())) == 2
    with ProgressAPI(store.path, listen=f"127.0.0.1:{port}"):
        out = run(["-m", "slurm_shockwave.cli", "report", "--flush-spool", str(spool),
                   "--job-id", "101"], job_env(SHOCKWAVE_URL=f"http://127.0.0.1:{port}"))
    assert out.returncode == 0 and "sent 1" in out.stderr, out.stderr
    assert epochs(store, 101) == [4.0] and epochs(store, 7) == []
    assert list(spool.iterdir()) == [forged]


def test_flushing_a_spool_folder_that_is_not_there_is_bad_input(store: Store,
                                                               tmp_path: Path) -> None:
    """Found by a review: ``report --flush-spool DIR`` of a folder that does not exist
    said "sent 0" and exit 0, as if there were nothing left to send. It is the hand-named
    folder that is wrong: one line naming the option and the path, exit 2, and the
    call's other reports are still sent."""
    missing, a_file = tmp_path / "no-such-spool", tmp_path / "a-file"
    a_file.write_text("")
    with ProgressAPI(store.path, listen="127.0.0.1:0") as api:
        env = job_env(SHOCKWAVE_URL=api.url)
        for spool, problem in ((missing, "no such directory"), (a_file, "not a directory")):
            out = run(["-m", "slurm_shockwave.cli", "report", "--flush-spool", str(spool),
                       "--job-id", "8", "--end", "0"], env)
            assert (out.returncode, out.stdout) == (2, ""), out.stderr
            assert out.stderr == f"error: {spool}: --flush-spool: {problem}\n"
    assert [r.exit_code for r in store.reports([8])[8]] == [0, 0]
    assert not missing.exists()


def test_the_epilog_is_quiet_and_exits_0_whatever_the_spool(tmp_path: Path) -> None:
    """The epilog flushes /tmp/shockwave-spool-JOB only when the job made it: a job that
    never spooled gets no --flush-spool call (now exit 2 for a folder not there), and a
    spool gone between its check and the call is that exit 2 unseen; either way the
    epilog says nothing, exits 0 and still reports the end, with the real command."""
    job = 1999999  # a job id no real job on this host has (its spool is in /tmp)
    spool = Path(f"/tmp/shockwave-spool-{job}")
    assert not spool.exists()
    store = Store(tmp_path / "s.db")
    store.save_round(RoundRecord(0, 1000.0, "fifo", False, 1, {}, None, None, 0, 0, 0),
                     [JobRow(job_id=job, user="root")], [], {}, read_round_id=0)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "shockwave"  # the real command; with GONE, the spool goes first
    wrapper.write_text(f'#!/bin/sh\n[ -n "$GONE" ] && [ "$2" = --flush-spool ] && rmdir "$3"\n'
                       f'exec {sys.executable} -m slurm_shockwave.cli "$@"\n')
    wrapper.chmod(0o755)
    script = tmp_path / "epilog.sh"
    shutil.copy(ROOT / "plugin_scripts" / "epilog.sh", script)
    try:
        with ProgressAPI(store.path, listen="127.0.0.1:0") as api:
            for made, gone in ((False, ""), (True, ""), (True, "1")):
                if made:
                    spool.mkdir(mode=0o700)
                env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                       "SHOCKWAVE_URL": api.url, "SLURM_JOB_ID": str(job),
                       "SLURM_JOB_UID": str(os.geteuid()), "SLURM_JOB_EXIT_CODE2": "3:0",
                       "GONE": gone}
                done = subprocess.run(["sh", str(script)], env=env, capture_output=True,
                                      text=True, timeout=60, check=False)
                assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), (made, gone)
                with contextlib.suppress(FileNotFoundError):
                    spool.rmdir()
    finally:
        with contextlib.suppress(FileNotFoundError):
            spool.rmdir()
    assert [r.exit_code for r in store.reports([job])[job]] == [3, 3, 3]
    store.close()


def as_user(user: str, *cmd: str, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"  # env's PATH may lack sbin
    return subprocess.run([runuser, "-u", user, "--", *cmd], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def spool_job_id(base: int, request: pytest.FixtureRequest) -> int:
    """A job id of this test process's with no spool in /tmp (its real spools live there):
    whatever is at its spool names (folders, symlinks, files) goes now and when the test
    ends."""
    job = base + os.getpid() % 100_000

    def clean() -> None:
        for path in Path("/tmp").glob(f"shockwave-spool-{job}*"):
            if path.is_symlink() or not path.is_dir():
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)

    clean()
    request.addfinalizer(clean)
    return job


@pytest.mark.parametrize("plant", ["open-dir", "dir", "symlink", "own-open-dir"])
def test_a_spool_another_user_planted_is_never_used(
        plant: str, users: tuple[str, str], tmp_path: Path,
        request: pytest.FixtureRequest, open_dir: Path, system_python: str) -> None:
    """Found by a review: job ids are predictable, and another user (swtest2) may make
    /tmp/shockwave-spool-<job> before the job of swtest1 runs, to read its reports (a
    directory of theirs, or a symlink to one) or to stop them (the TaskProlog refused it
    and exported no spool at all: the job lost every report while the service was away);
    a directory of the job's own user that others may write lets them add files. Such a
    folder is never used: the TaskProlog makes the job a folder of its own beside it,
    the client refuses to spool into it (one warning), the epilog never forwards it."""
    victim, attacker = users
    job = spool_job_id(3_900_000, request)
    planted = Path(f"/tmp/shockwave-spool-{job}")
    base = open_dir
    # the plant, before the job runs
    theirs = base / "theirs"
    if plant == "symlink":
        theirs.mkdir(mode=0o755)
        os.chown(theirs, pwd.getpwnam(attacker).pw_uid, pwd.getpwnam(attacker).pw_gid)
        assert as_user(attacker, "ln", "-s", str(theirs), str(planted)).returncode == 0
    else:
        maker = victim if plant == "own-open-dir" else attacker
        mode = "0755" if plant == "dir" else "0777"
        assert as_user(maker, "mkdir", "-m", mode, str(planted)).returncode == 0
        assert as_user(maker, "chmod", mode, str(planted)).returncode == 0  # past the umask
        theirs = planted
    forged = theirs / f"{'0' * 20}-1-000001-{job}.json"
    body = json.dumps({"job_id": job, "kind": "progress", "epoch": 9.0})
    write = f"open({str(forged)!r}, 'w').write({body!r})"
    assert as_user(attacker, system_python, "-c", write).returncode == 0

    # the job's TaskProlog, as swtest1 (no Slurm: an scontrol that knows nothing)
    bin_dir = base / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "scontrol").chmod(0o755)
    endpoint = base / "endpoint"
    port = free_port()
    endpoint.write_text(f"http://127.0.0.1:{port}\n")
    endpoint.chmod(0o644)
    for name in ("task_prolog.sh", "epilog.sh"):
        text = (ROOT / "plugin_scripts" / name).read_text()
        text = text.replace('ENDPOINT_FILE="/var/lib/slurm-shockwave/endpoint"',
                            f'ENDPOINT_FILE="{endpoint}"')
        (base / name).write_text(text.replace(
            'SHOCKWAVE_BIN=""', f'SHOCKWAVE_BIN="{bin_dir / "shockwave"}"'))
    (bin_dir / "shockwave").write_text(
        f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m slurm_shockwave.cli "$@"\n')
    (bin_dir / "shockwave").chmod(0o755)
    path = f"{bin_dir}:/usr/bin:/bin"
    prolog = as_user(victim, "sh", str(base / "task_prolog.sh"),
                     env={"PATH": path, "SLURM_JOB_ID": str(job)})
    exports = dict(line.removeprefix("export ").split("=", 1)
                   for line in prolog.stdout.splitlines())
    spool = Path(exports["SHOCKWAVE_SPOOL"])
    assert spool != planted and spool.name.startswith(f"{planted.name}.")
    st = os.lstat(spool)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == pwd.getpwnam(victim).pw_uid
    again = as_user(victim, "sh", str(base / "task_prolog.sh"),  # the job's next task
                    env={"PATH": path, "SLURM_JOB_ID": str(job)})
    assert f"export SHOCKWAVE_SPOOL={spool}" in again.stdout.splitlines()

    # the job, as swtest1, with the service away: its report goes to its own spool; told
    # to use the planted one, it does not, and says so once
    shutil.copy(reporter.__file__, base / "reporter.py")
    code = ("import reporter\n"
            "print(reporter.report(epoch=4.0), reporter.report(epoch=5.0))\n")
    env = {**exports, "PATH": path, "PYTHONPATH": str(base), "SLURM_JOB_ID": str(job)}
    assert as_user(victim, system_python, "-c", code, env=env).stdout.split() == \
        ["False", "False"]
    assert len(list(spool.glob("*.json"))) == 2  # beside .signal
    told = as_user(victim, system_python, "-c", code,
                   env={**env, "SHOCKWAVE_SPOOL": str(planted)})
    assert told.stdout.split() == ["False", "False"]
    warned = told.stderr.splitlines()
    assert len(warned) == 1 and "no directory of this user's alone" in warned[0], told.stderr
    assert [p.name for p in theirs.iterdir()] == [forged.name]  # nothing of the job's

    # the epilog, as root, with the service back: the job's own spool only
    store = Store(tmp_path / "state.db")
    store.save_round(RoundRecord(round_index=0, at_s=1000.0, policy="fifo", dry_run=False,
                                 jobs=1, phase_s={}, solver_status=None, solver_gap=None,
                                 applied=0, rejected=0, deferred=0),
                     [JobRow(job_id=job, user=victim)], [], {}, read_round_id=0)
    owner = pwd.getpwnam(victim)
    with ProgressAPI(store.path, listen=f"127.0.0.1:{port}"):
        done = subprocess.run(["sh", str(base / "epilog.sh")], env={
            "PATH": "/usr/bin:/bin", "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": str(owner.pw_uid),
            "SLURM_JOB_GID": str(owner.pw_gid), "SLURM_JOB_USER": victim,
            "SLURM_JOB_EXIT_CODE2": "0:0"},
            capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    reports = store.reports([job]).get(job, [])
    store.close()
    assert [(r.kind.value, r.epoch) for r in reports] == [
        ("progress", 4.0), ("progress", 5.0), ("end", None)]
    assert not spool.exists() and forged.exists()  # its own spool removed, not the plant



def test_tasks_starting_together_beside_a_planted_spool_all_get_one_that_lasts(
        users: tuple[str, str], request: pytest.FixtureRequest) -> None:
    """Found by a review: with the spool's name planted, the job's tasks (a TaskProlog
    each, at once) each made a folder of their own, and a task whose own was not the
    first removed it though another task had taken it already: that task had no spool.
    Every spool a task is given now lasts, is the job user's alone, and most tasks share
    one (the epilog forwards every one: tests above)."""
    if os.geteuid() != 0:
        pytest.skip("the users need root")
    victim, attacker = users
    job = spool_job_id(3_800_000, request)
    base = Path(tempfile.mkdtemp(prefix="sw-tasks-"))
    base.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    (base / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    (base / "scontrol").chmod(0o755)
    (base / "task_prolog.sh").write_text(
        (ROOT / "plugin_scripts" / "task_prolog.sh").read_text().replace(
            'ENDPOINT_FILE="/var/lib/slurm-shockwave/endpoint"',
            f'ENDPOINT_FILE="{base / "none"}"'))
    assert as_user(attacker, "mkdir", "-m", "755", f"/tmp/shockwave-spool-{job}").returncode == 0
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    tasks = [subprocess.Popen([runuser, "-u", victim, "--", "sh", str(base / "task_prolog.sh")],
                              env={"PATH": f"{base}:/usr/bin:/bin", "SLURM_JOB_ID": str(job)},
                              stdout=subprocess.PIPE, text=True) for _ in range(8)]
    spools = {line.split("=", 1)[1] for t in tasks
              for line in t.communicate(timeout=60)[0].splitlines()
              if line.startswith("export SHOCKWAVE_SPOOL=")}
    assert spools and len(spools) <= 4, spools
    for spool in map(Path, spools):
        st = os.lstat(spool)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
        assert st.st_uid == pwd.getpwnam(victim).pw_uid and spool.name != f"shockwave-spool-{job}"



def _spools_and_command(victim: str, job: int, tmp_path: Path, count: int) -> Path:
    """``count`` spools of ``job`` in /tmp, each with one report (epoch i + 1), of the
    user ``victim``; a ``shockwave`` command of this checkout; the folder it is in."""
    owner = pwd.getpwnam(victim)
    for i in range(count):
        spool = Path(f"/tmp/shockwave-spool-{job}.task{i:04d}")
        spool.mkdir(mode=0o700)
        body = json.dumps({"job_id": job, "kind": "progress", "epoch": float(i + 1)})
        report = spool / f"{'0' * 20}-1-{i:06d}-{job}.json"
        report.write_text(body)
        for path in (spool, report):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "shockwave").write_text(
        f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m slurm_shockwave.cli "$@"\n')
    (bin_dir / "shockwave").chmod(0o755)
    return bin_dir


def _epilog(bin_dir: Path, url: str, job: int, victim: str) -> subprocess.CompletedProcess[str]:
    owner = pwd.getpwnam(victim)
    return subprocess.run(["sh", str(ROOT / "plugin_scripts" / "epilog.sh")], env={
        "PATH": f"{bin_dir}:/usr/bin:/bin", "SHOCKWAVE_URL": url,
        "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": str(owner.pw_uid),
        "SLURM_JOB_GID": str(owner.pw_gid),
        "SLURM_JOB_EXIT_CODE2": "0:0"}, capture_output=True, text=True, timeout=60,
        check=False)


def test_the_epilog_forwards_every_spool_the_jobs_tasks_made(
        users: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Found by a review: tasks beside a planted spool name may make several folders,
    and the epilog forwarded four at most: the reports in the others were lost. It
    forwards up to 16, in one call with the end report."""
    if os.geteuid() != 0:
        pytest.skip("the users and the epilog need root")
    victim = users[0]
    job = spool_job_id(3_700_000, request)
    bin_dir = _spools_and_command(victim, job, tmp_path, 6)
    store = Store(tmp_path / "state.db")
    store.save_round(RoundRecord(0, 1000.0, "fifo", False, 1, {}, None, None, 0, 0, 0),
                     [JobRow(job_id=job, user=victim)], [], {}, read_round_id=0)
    with ProgressAPI(store.path, listen="127.0.0.1:0") as api:
        done = _epilog(bin_dir, api.url, job, victim)
    assert done.returncode == 0, done.stderr
    reports = store.reports([job]).get(job, [])
    store.close()
    assert sorted(r.epoch for r in reports if r.epoch) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [r.exit_code for r in reports if r.exit_code is not None] == [0]  # the end too
    # and the spools are gone: a later job given the same id (a state reset, MaxJobId)
    # took a spool left behind for its own, old reports and all (a red-team finding)
    assert list(Path("/tmp").glob(f"shockwave-spool-{job}*")) == []


def test_the_epilog_ends_within_seconds_beside_a_service_that_never_answers(
        users: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Our own finding: with 16 spools and a service that accepts connections but never
    answers, the epilog held the node 11 s (a flush call per spool, 10 s for them all,
    then the end report's own timeout). One call now flushes them all within 3 s,
    stops at the first the service does not take and skips the end report: 2.2 s here,
    bounded by the call's 6 s timeout. The spools go all the same."""
    if os.geteuid() != 0:
        pytest.skip("the users and the epilog need root")
    victim = users[0]
    job = spool_job_id(3_800_000, request)
    bin_dir = _spools_and_command(victim, job, tmp_path, 16)
    with socket.socket() as silent:  # connections wait in its backlog, never answered
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        began = time.monotonic()
        done = _epilog(bin_dir, f"http://127.0.0.1:{silent.getsockname()[1]}", job, victim)
        took = time.monotonic() - began
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert took < 7.0, took  # 6 s for the call and 1 for the removal; 11 s before
    assert list(Path("/tmp").glob(f"shockwave-spool-{job}*")) == []


FAKE_SERVICE = """
import http.server, json, subprocess, sys
import reporter
port, vouch = int(sys.argv[1]), sys.argv[2] == "own"
class Answer(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"accepted": 1, "checkpoint": True}).encode()
        self.send_response(202)
        self.send_header("Content-Length", str(len(body)))
        if vouch:  # a credential as good as the service's, but of this user's uid
            payload = reporter.answer_payload(202, self.headers[reporter.CRED_HEADER], body)
            cred = subprocess.run(["munge"], input=payload, capture_output=True, check=True)
            self.send_header(reporter.ANSWER_HEADER, cred.stdout.decode().strip())
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Answer).serve_forever()
"""

TWO_REPORTS = """
import reporter
reporter.install()
for epoch in (3.0, 4.0):
    print(reporter.report(epoch=epoch), reporter.should_checkpoint())
"""


@pytest.mark.parametrize(("vouch", "service_uid", "believed"), [
    ("none", None, False), ("own", None, False), ("own", "1002", True)],
    ids=["no-credential", "another-uid", "the-named-uid"])
def test_an_answer_not_from_the_service_is_no_answer(
        users: tuple[str, str], request: pytest.FixtureRequest, open_dir: Path,
        system_python: str, vouch: str,
        service_uid: str | None, believed: bool) -> None:
    """Found by a review: while the service's port is free (stopped, restarting) any user
    of its host may listen there; answering every report 202 {"checkpoint": true}, swtest2
    had swtest1's reports dropped unspooled and its job checkpoint for nothing. An answer
    is believed only with a credential over it and this request made by root or the
    service's uid (``SHOCKWAVE_SERVICE_UID``): else the reports are spooled, with one
    warning. The job's side is the vendored file as swtest1, the listener swtest2's."""
    base = open_dir
    shutil.copy(reporter.__file__, base / "reporter.py")
    spool = base / "spool"
    spool.mkdir(mode=0o700)
    owner = pwd.getpwnam(users[0])
    os.chown(spool, owner.pw_uid, owner.pw_gid)
    port = free_port()
    listener = subprocess.Popen([system_python, "-c", FAKE_SERVICE, str(port), vouch],
                                user=users[1], group=users[1], extra_groups=[],
                                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(base)},
                                cwd=base)
    request.addfinalizer(lambda: (listener.kill(), listener.wait()))
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(base), "SLURM_JOB_ID": "101",
           "SHOCKWAVE_URL": f"http://127.0.0.1:{port}", "SHOCKWAVE_SIGNAL": "USR1",
           "SHOCKWAVE_SPOOL": str(spool)}
    if service_uid is not None:
        env["SHOCKWAVE_SERVICE_UID"] = service_uid
    job = subprocess.run(["runuser", "-u", users[0], "--", system_python, "-c", TWO_REPORTS],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert job.returncode == 0, job.stderr
    if believed:
        assert job.stdout.split() == ["True", "True"] * 2 and job.stderr == ""
        assert list(spool.iterdir()) == []
    else:
        assert job.stdout.split() == ["False", "False"] * 2
        assert len(list(spool.iterdir())) == 2  # kept for the service
        warned = job.stderr.splitlines()
        assert len(warned) == 1 and "is not the service's" in warned[0], job.stderr


def test_an_answers_credential_vouches_for_this_request_once() -> None:
    """What the client checks in the answer's credential, with munged: made by a trusted
    uid, for this status and this request's credential, decoded once (munged refuses it
    again: an answer seen on the wire cannot be played to this request twice); the same
    through the unmunge command when libmunge is absent."""
    body = b'{"accepted": 1}'
    digest = hashlib.sha256(body).hexdigest().encode()
    end = time.monotonic() + 10
    for lib in (reporter.munge_library, lambda: None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(reporter, "munge_library", lib)
            ours, other = munge.encode(b"request"), munge.encode(b"another request")
            vouch = munge.encode(reporter.answer_payload(202, ours, body))
            assert reporter._vouched(vouch, 202, ours, frozenset({1002}), end) is None
            vouch = munge.encode(reporter.answer_payload(202, ours, body))
            assert reporter._vouched(vouch, 202, other, frozenset({0}), end) is None
            vouch = munge.encode(reporter.answer_payload(202, ours, body))
            assert reporter._vouched(vouch, 403, ours, frozenset({0}), end) is None
            vouch = munge.encode(reporter.answer_payload(202, ours, body))
            assert reporter._vouched(vouch, 202, ours, frozenset({0}), end) == digest
            assert reporter._vouched(vouch, 202, ours, frozenset({0}), end) is None  # replayed
            assert reporter._vouched("MUNGE:forged:", 202, ours, frozenset({0}), end) is None


def test_the_endpoint_files_owner_is_trusted_where_the_url_comes_from_it(
        tmp_path: Path) -> None:
    """The epilog reads the URL from the endpoint file, which the service writes: its
    owner is the service's uid. Root is always trusted; $SHOCKWAVE_SERVICE_UID names
    another (the TaskProlog exports the file's owner)."""
    endpoint = tmp_path / "endpoint"
    endpoint.write_text("http://127.0.0.1:1\n")
    os.chown(endpoint, 1002, 1002)
    assert reporter._service_uids({}) == {0}
    assert reporter._service_uids({"SHOCKWAVE_SERVICE_UID": "1001"}) == {0, 1001}
    assert reporter._service_uids({"SHOCKWAVE_SERVICE_UID": "x"}) == {0}
    assert reporter._service_uids({"SHOCKWAVE_ENDPOINT_FILE": str(endpoint)}) == {0, 1002}
    assert reporter._service_uids({"SHOCKWAVE_ENDPOINT_FILE": str(endpoint),
                                   "SHOCKWAVE_URL": "http://127.0.0.1:2"}) == {0}


def test_root_flushes_a_spool_only_when_the_jobs_user_owns_it(
        store: Store, users: tuple[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The epilog checks the spool's owner before it runs the flush, by its path; the
    client checks the directory it opened again: with $SLURM_JOB_UID given, root sends
    nothing from a directory of anyone else's (another user's planted in its place after
    the epilog's check)."""
    if os.geteuid() != 0:
        pytest.skip("the epilog's flush runs as root")
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    planter = pwd.getpwnam(users[1])
    os.chown(spool, planter.pw_uid, planter.pw_gid)
    (spool / f"{time.time_ns():020d}-1-000001-101.json").write_text(
        json.dumps({"job_id": 101, "kind": "progress", "epoch": 9.0}))
    for key in ("SHOCKWAVE_SPOOL", "SHOCKWAVE_ENDPOINT_FILE", "SHOCKWAVE_SERVICE_UID"):
        monkeypatch.delenv(key, raising=False)
    with ProgressAPI(store.path, listen="127.0.0.1:0") as api:
        monkeypatch.setenv("SHOCKWAVE_URL", api.url)
        monkeypatch.setenv("SLURM_JOB_UID", str(pwd.getpwnam(users[0]).pw_uid))
        assert reporter.flush_spool(str(spool), 101) == 0
        assert len(list(spool.iterdir())) == 1 and epochs(store, 101) == []
        monkeypatch.setenv("SLURM_JOB_UID", str(planter.pw_uid))  # were it that job's user's
        assert reporter.flush_spool(str(spool), 101) == 1
    assert epochs(store, 101) == [9.0]


def test_should_checkpoint_flips_on_the_real_signal() -> None:
    code = ("import os, signal\n"
            "from slurm_shockwave.client import reporter\n"
            "assert reporter.should_checkpoint() is False\n"
            "os.kill(os.getpid(), signal.SIGUSR1)\n"
            "assert reporter.should_checkpoint() is True\n"
            "reporter.checkpointed()\n"
            "assert reporter.should_checkpoint() is False\n"
            "print('ok')\n")
    done = run(["-c", code], job_env(SHOCKWAVE_SIGNAL="USR1"))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    # without SHOCKWAVE_SIGNAL no handler is installed: the signal's default applies
    code = ("import os, signal\n"
            "from slurm_shockwave.client import reporter\n"
            "assert reporter.install() is False and reporter.should_checkpoint() is False\n"
            "signal.signal(signal.SIGUSR1, lambda *a: print('own handler'))\n"
            "os.kill(os.getpid(), signal.SIGUSR1)\n"
            "assert reporter.should_checkpoint() is False\n")
    done = run(["-c", code], job_env())
    assert done.returncode == 0 and "own handler" in done.stdout, done.stderr


def test_signal_int_asks_for_a_checkpoint_and_does_not_interrupt() -> None:
    """Found by a review: with signal=INT the handler chained to Python's SIGINT default,
    which raised KeyboardInterrupt in the training loop: the job died unsaved."""
    code = ("import os, signal, time\n"
            "from slurm_shockwave.client import reporter\n"
            "assert reporter.install() is True\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "time.sleep(0.1)\n"
            "assert reporter.should_checkpoint() is True\n"
            "print('ok')\n")
    done = run(["-c", code], job_env(SHOCKWAVE_SIGNAL="INT"))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_checkpoint_the_signal_missed_comes_with_the_next_answer(store: Store) -> None:
    """The service signalled run 2 of job 7 before the job had its handler (the intent is
    in the store, the signal went nowhere): the job's next progress report turns
    should_checkpoint() true, in Python and for `shockwave report`; a job without a
    checkpoint signal of its own, or reporting for another run, is not asked."""
    sent = time.time()
    store.record_intent(CheckpointIntent(7, "USR1", sent, sent + 30.0, 2))
    code = ("from slurm_shockwave.client import reporter\n"
            "assert reporter.should_checkpoint() is False\n"
            "assert reporter.report(epoch=1.0) is True\n"
            "print(reporter.should_checkpoint())\n")
    with ProgressAPI(store.path, listen="127.0.0.1:0") as api:
        env = job_env(SHOCKWAVE_URL=api.url, SLURM_JOB_ID="7", SLURM_RESTART_COUNT="2",
                      SHOCKWAVE_SIGNAL="USR1")
        asked = run(["-c", code], env)
        assert asked.returncode == 0 and asked.stdout.strip() == "True", asked.stderr
        cli = run(["-m", "slurm_shockwave.cli", "report", "--epoch", "1.5"], env)
        assert cli.returncode == 0 and cli.stdout.strip() == "checkpoint", cli.stderr
        other_run = run(["-c", code], {**env, "SLURM_RESTART_COUNT": "1"})
        assert other_run.stdout.strip() == "False", other_run.stderr
        no_handler = run(["-c", code], job_env(SHOCKWAVE_URL=api.url, SLURM_JOB_ID="7",
                                               SLURM_RESTART_COUNT="2"))
        assert no_handler.stdout.strip() == "False", no_handler.stderr
        acked = run(["-c", "from slurm_shockwave.client import reporter\n"
                           "assert reporter.checkpointed() is True\n" + code], env)
        assert acked.stdout.strip() == "False", acked.stderr


TRICKLED = b"{" * 100000


@pytest.mark.parametrize(("head", "drip", "outcome"), [
    # found by a red-team: the answer's body a byte every 0.25 s; cut at the deadline,
    # the report still counts as taken (the 202 came, with the service's credential)
    (b"HTTP/1.1 202 Accepted\r\nContent-Length: 100000\r\nX-Munge-Answer: {vouch}\r\n\r\n",
     b"{", "accepted"),
    # the same without the service's credential: anyone's answer, no answer
    (b"HTTP/1.1 202 Accepted\r\nContent-Length: 100000\r\n\r\n", b"{", "unreachable"),
    # found by a review: http.client reads the status line and up to 100 headers with a
    # timeout per read, so headers a byte at a time held a report 30 s; nothing taken
    (b"HTTP/1.1 202 Accepted\r\n", b"X", "unreachable"),
], ids=["answer", "unvouched", "headers"])
def test_a_service_trickling_its_answer_does_not_hold_the_job(head: bytes, drip: bytes,
                                                              outcome: str) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn, contextlib.suppress(OSError):  # the client hangs up before the end
            request = conn.recv(65536)
            found = re.search(rb"(?i)x-munge-credential: *(\S+)", request)
            cred = found.group(1).decode() if found else ""
            vouch = munge.encode(reporter.answer_payload(202, cred, TRICKLED)).encode()
            conn.sendall(head.replace(b"{vouch}", vouch))
            for _ in range(40):
                conn.sendall(drip)
                time.sleep(0.25)

    threading.Thread(target=serve, daemon=True).start()
    started = time.monotonic()
    status = reporter._post(f"http://127.0.0.1:{srv.getsockname()[1]}", b"{}", started + 2.0)
    srv.close()
    assert status == (outcome, {})
    assert time.monotonic() - started < 3.5
    # found by a red-team: the report's thread and socket lived on, reading a byte a
    # second for ever, one of each for every report: closed when it is given up
    deadline = time.monotonic() + 3.0
    while any(t.name == "shockwave-report" for t in threading.enumerate()) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(t.name == "shockwave-report" for t in threading.enumerate())


def test_a_name_lookup_that_hangs_does_not_hold_the_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A service listening on 0.0.0.0 names itself by its host name, and a resolver that
    does not answer blocked each report for glibc's retries (10 s), outside any timeout."""
    real = socket.getaddrinfo

    def slow(host: str, *args: object, **kw: object) -> object:
        if host == "service.example":
            time.sleep(10)
        return real(host, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    started = time.monotonic()
    assert reporter._post("http://service.example:1", b"{}", started + 2.0) == \
        ("unreachable", {})
    assert time.monotonic() - started < 3.0


HUNG_MUNGED = """
import os, socket, sys, threading, time
sock = socket.socket(socket.AF_UNIX)
sock.bind("/run/munge/munge.socket.2")  # on a tmpfs of this mount namespace only
sock.listen(64)
held = []
threading.Thread(target=lambda: [held.append(sock.accept()) for _ in iter(int, 1)],
                 daemon=True).start()  # accepts, never answers: a munged that is stuck
from slurm_shockwave.client import reporter
for name, call in (("report", lambda: reporter.report(epoch=1.0)),
                   ("checkpointed", reporter.checkpointed), ("end", lambda: reporter.end(0))):
    t = time.monotonic()
    print(name, call(), round(time.monotonic() - t, 2), flush=True)
"""


def test_a_munged_that_never_answers_does_not_hold_the_job(tmp_path: Path) -> None:
    """Found by a review: libmunge's encode has no deadline of ours, and a munged that
    accepts and never answers held each call about 10 s in the training loop. In a private
    mount namespace (the real munged untouched) /run/munge holds such a socket: each call
    returns within its deadline, and the reports are spooled."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private mount namespace")
    spool = tmp_path / "spool"
    script = ('mount -t tmpfs -o size=1m,mode=755 none /run/munge && '
              f'exec {sys.executable} -c "$0"')
    env = job_env(SHOCKWAVE_URL=f"http://127.0.0.1:{free_port()}", SLURM_JOB_ID="7",
                  SHOCKWAVE_SPOOL=str(spool), PYTHONPATH=str(ROOT))
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                           HUNG_MUNGED], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    calls = [line.split() for line in done.stdout.splitlines()]
    assert [(name, ok) for name, ok, _s in calls] == [
        ("report", "False"), ("checkpointed", "False"), ("end", "False")]
    assert all(float(seconds) < reporter.TIMEOUT_S + 1.0 for _n, _o, seconds in calls), calls
    assert len(list(spool.iterdir())) == 3


def test_a_jobs_proxy_settings_never_carry_its_reports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Training jobs often run with $http_proxy set (pip, trackers); a proxy refusing an
    inner address answered 403, read as a refusal: the report was dropped with the spool."""
    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen(4)
    seen: list[bytes] = []

    def refuse() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = proxy.accept()
                with conn:
                    seen.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=refuse, daemon=True).start()
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.getsockname()[1]}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    store = Store(tmp_path / "s.db")
    with ProgressAPI(store.path, listen="127.0.0.1:0") as api:
        status, _answer = reporter._post(api.url, b"{}", time.monotonic() + 2.0)
    proxy.close()
    assert seen == []
    assert status == "refused"  # by the service itself: "{}" names no job
