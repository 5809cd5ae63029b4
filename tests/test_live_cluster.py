"""LocalCluster's start and stop as a plain program (no Slurm): what it stops and when."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from slurm_shockwave.live import cluster as cluster_mod
from slurm_shockwave.live.cluster import LocalCluster
from slurm_shockwave.model.errors import InputError


@pytest.fixture
def scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """start.sh and stop.sh stand-ins: stop.sh leaves a mark."""
    folder = tmp_path / "docker-slurm"
    folder.mkdir()
    (folder / "stop.sh").write_text(f"#!/bin/bash\necho stopped >> {tmp_path}/stops\n")
    monkeypatch.setattr(cluster_mod, "SCRIPTS", folder)
    monkeypatch.setattr(cluster_mod, "missing_for_cluster", lambda: None)
    return folder


def stops(tmp_path: Path) -> int:
    marks = tmp_path / "stops"
    return len(marks.read_text().split()) if marks.exists() else 0


def test_a_start_refused_as_already_running_leaves_that_cluster_alone(
        tmp_path: Path, scripts: Path) -> None:
    """Found by a review: a second run on the same state folder was refused by start.sh,
    and then stopped the first run's cluster (its jobs cancelled, its daemons killed)."""
    (scripts / "start.sh").write_text("#!/bin/bash\necho 'start.sh: already running' >&2\n"
                                      f"exit {cluster_mod.ALREADY_RUNNING}\n")
    with pytest.raises(InputError, match="already running"), \
            LocalCluster(tmp_path / "state", nodes=1):
        pass
    assert stops(tmp_path) == 0
    (scripts / "start.sh").write_text("#!/bin/bash\necho 'start.sh: no slurmd' >&2\nexit 2\n")
    with pytest.raises(InputError, match="no slurmd"), LocalCluster(tmp_path / "s", nodes=1):
        pass
    assert stops(tmp_path) == 1  # a start that failed half-way is cleaned up


def test_a_signal_while_the_cluster_starts_stops_what_it_started(
        tmp_path: Path, scripts: Path) -> None:
    """Found by a review: SIGTERM or ^C during start.sh (up to 90 s waiting for the
    nodes) raised out of __enter__, so __exit__ never ran and the daemons stayed up."""
    (scripts / "start.sh").write_text("#!/bin/bash\nexec sleep 30\n")
    threading.Timer(0.5, signal.pthread_kill,
                    (threading.main_thread().ident, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt), LocalCluster(tmp_path / "state", nodes=1):
        pass
    assert stops(tmp_path) == 1


def _stub(folder: Path, name: str, body: str) -> None:
    (folder / name).write_text("#!/bin/bash\n" + body + "\n")
    (folder / name).chmod(0o755)


@pytest.fixture
def slurm_stubs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The real start.sh against stand-ins for Slurm's daemons and commands on PATH, and
    a munge that answers (so it starts no munged)."""
    if os.geteuid() != 0:
        pytest.skip("start.sh runs as root (mknod)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "slurmd", '[ "$1" = -V ] && echo "slurm 22.05.8"; exit 0')
    _stub(bin_dir, "munged", "exit 0")
    _stub(bin_dir, "munge", "echo credential")
    _stub(bin_dir, "unmunge", "cat >/dev/null")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


def _start(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(cluster_mod.SCRIPTS / "start.sh"), "--nodes", "1",
                           "--gpus-per-node", "1", "--timeout", "20",
                           "--state-dir", str(tmp_path / "state")],
                          capture_output=True, text=True, timeout=60)


def test_start_waits_through_a_controller_not_answering_yet(
        tmp_path: Path, slurm_stubs: Path) -> None:
    """Found by a review: under pipefail one refused sinfo ended start.sh at once, with
    no message, instead of waiting out its timeout for the controller."""
    _stub(slurm_stubs, "slurmctld",
          f'sleep 30 >/dev/null 2>&1 & echo $! > {tmp_path}/state/run/slurmctld.pid')
    _stub(slurm_stubs, "sinfo", f'n=$(cat {tmp_path}/tries 2>/dev/null || echo 0)\n'
          f'echo $((n + 1)) > {tmp_path}/tries\n'
          '[ "$n" -ge 2 ] || { echo "Unable to contact slurm controller" >&2; exit 1; }\n'
          'echo idle')
    done = _start(tmp_path)
    os.kill(int((tmp_path / "state/run/slurmctld.pid").read_text()), signal.SIGTERM)
    assert done.returncode == 0, done.stderr
    assert "export SLURM_CONF=" in done.stdout
    assert (tmp_path / "tries").read_text().strip() == "3"


def test_start_says_when_its_controller_died(tmp_path: Path, slurm_stubs: Path) -> None:
    """Its own slurmctld gone (a port taken, a bad state folder): start.sh says so with
    the log's end at once, instead of asking whatever else answers on the port."""
    _stub(slurm_stubs, "slurmctld",
          f'echo "fatal: slurmctld: bind: Address already in use" > {tmp_path}/state/log/'
          f'slurmctld.log\nsh -c "exit 0" & wait $!\necho $! > {tmp_path}/state/run/slurmctld.pid')
    _stub(slurm_stubs, "sinfo", "echo idle-elsewhere")
    done = _start(tmp_path)
    assert done.returncode == 1
    assert "slurmctld exited" in done.stderr and "Address already in use" in done.stderr


def test_start_refuses_a_port_another_cluster_holds(tmp_path: Path, slurm_stubs: Path) -> None:
    """Found by a red-team: the demo's fixed ports held by another cluster (a second demo,
    daemons a killed run left) let start.sh say "cluster up" with its own slurmctld dead,
    and the run submitted to the other one. A port in use is refused before anything
    starts."""
    import socket

    _stub(slurm_stubs, "slurmctld", f"echo started >> {tmp_path}/started")
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = subprocess.run(["bash", str(cluster_mod.SCRIPTS / "start.sh"), "--nodes", "1",
                               "--ctld-port", str(port), "--state-dir", str(tmp_path / "s")],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"port {port} is in use" in done.stderr, done.stderr
    assert not (tmp_path / "started").exists()


def test_start_is_not_fooled_by_another_controller_answering(
        tmp_path: Path, slurm_stubs: Path) -> None:
    """Its own slurmctld died while another controller answers sinfo with idle nodes:
    before, the first idle answer ended the wait with "cluster up"."""
    _stub(slurm_stubs, "slurmctld",
          f'echo "fatal: bind: Address already in use" > {tmp_path}/state/log/'
          f'slurmctld.log\nsh -c "exit 0" & wait $!\necho $! > {tmp_path}/state/run/slurmctld.pid')
    _stub(slurm_stubs, "sinfo", "echo idle")
    done = _start(tmp_path)
    assert done.returncode == 1 and "slurmctld exited" in done.stderr, done.stderr


def test_a_second_interrupt_does_not_cut_the_stop_short(
        tmp_path: Path, scripts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a red-team: ^C again while stop.sh ran (seconds, silent) killed it and
    left the daemons on their ports. The stop goes on to its end, and says so."""
    (scripts / "stop.sh").write_text(f"#!/bin/bash\nps -o sid= -p $$ > {tmp_path}/sid\n"
                                     f"sleep 1\necho stopped >> {tmp_path}/stops\n")
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):  # raised once the cluster is down
        LocalCluster(tmp_path / "state", nodes=1).stop()
    assert stops(tmp_path) == 1
    assert "stopping the local cluster" in capsys.readouterr().err
    # out of the terminal's reach: its ^C goes to the whole foreground process group
    assert int((tmp_path / "sid").read_text()) != os.getsid(0)


def test_stop_kills_a_job_step_of_its_cluster_whatever_its_environment(
        tmp_path: Path) -> None:
    """Found in a CI run: a 25.11 job step (its environment without SLURM_CONF) outlived
    its cluster. stop.sh knows this cluster's steps by the folder they run in too, and
    leaves another folder's alone."""
    import shutil
    import time

    stepd = tmp_path / "bin" / "slurmstepd"
    stepd.parent.mkdir()
    shutil.copy(shutil.which("sleep") or "/bin/sleep", stepd)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for state in (ours, theirs):
        (state / "run").mkdir(parents=True)
        (state / "log").mkdir()
    procs = [subprocess.Popen([str(stepd), "300"], cwd=state / "log", env={})
             for state in (ours, theirs)]
    try:
        stop = Path(__file__).resolve().parent.parent / "docker-slurm" / "stop.sh"
        done = subprocess.run(["bash", str(stop), "--state-dir", str(ours)],
                              capture_output=True, text=True, timeout=60, check=False)
        assert "killed 1 leftover slurmstepd(s)" in done.stderr, done.stderr
        procs[0].wait(timeout=10)
        time.sleep(0.2)
        assert procs[1].poll() is None  # another cluster's
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
