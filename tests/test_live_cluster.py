"""LocalCluster's start and stop as a plain program (no Slurm): what it stops and when."""

from __future__ import annotations

import signal
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
