"""slurm.backend: auto takes pyslurm only where it imports and matches the running Slurm,
and says why in one line (resolve_backend); the probe runs in a real child process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurm_shockwave.config import SlurmConfig
from slurm_shockwave.slurm.backend_choice import PyslurmProbe, release, resolve_backend
from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.pyslurm_backend import make_backend


def test_named_backends_are_taken_as_named() -> None:
    assert resolve_backend(SlurmConfig(backend="cli")) == ("cli", "slurm.backend is cli")
    backend, reason = resolve_backend(SlurmConfig(backend="pyslurm"))
    assert backend == "pyslurm" and reason == "slurm.backend is pyslurm"
    assert SlurmConfig().backend == "auto"
    assert SlurmConfig(backend="slurmrestd").validate() == (
        "backend", "must be one of auto, cli, pyslurm")


def test_auto_without_a_slurm_conf_takes_the_cli(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent.conf")
    backend, reason = resolve_backend(SlurmConfig(slurm_conf=missing))
    assert backend == "cli" and reason.startswith("auto: no Slurm configuration")


def test_auto_where_pyslurm_does_not_import_takes_the_cli(tmp_path: Path,
                                                          monkeypatch) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # a pyslurm that fails to import
    (tmp_path / "pyslurm.py").write_text("raise ImportError('libslurm.so.43: not found')\n")
    backend, reason = resolve_backend(SlurmConfig(slurm_conf=str(conf)))
    assert backend == "cli"
    assert reason.startswith("auto: pyslurm does not import") and "libslurm" in reason
    assert "\n" not in reason


@pytest.mark.parametrize(("probe", "problem"), [
    (PyslurmProbe("25.11.2", "25.11.7", ""), None),
    (PyslurmProbe("25.11.2", None, "Unable to contact slurm controller"), None),
    (PyslurmProbe("25.11.2", "22.05.8", ""),
     "pyslurm 25.11.2 is for Slurm 25.11, the running slurmctld is 22.05.8"),
])
def test_a_probe_names_a_version_mismatch(probe: PyslurmProbe, problem: str | None) -> None:
    assert probe.problem() == problem
    assert release("25.11.7") == "25.11"


def _running_version() -> str:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                         check=False).stdout
    return next((line.split("=", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("SLURM_VERSION")), "")


def _pyslurm_version(prefix: str) -> str:
    text = Path(prefix, "pyslurm-site", "pyslurm", "version.py").read_text()
    return text.split('__version__ = "', 1)[1].split('"', 1)[0]


@pytest.mark.slurm
def test_auto_on_the_running_cluster(monkeypatch) -> None:
    """On the test cluster: pyslurm exactly when the build for 25.11 is on the path and the
    cluster is 25.11 (SHOCKWAVE_SLURM_25_11 names that build's prefix:
    docker-slurm/build-slurm-25.11.sh); the CLI, with the reason, otherwise."""
    if not os.environ.get("SLURM_CONF"):
        pytest.skip("no test cluster (SLURM_CONF unset; tests/run.sh starts one)")
    prefix = os.environ.get("SHOCKWAVE_SLURM_25_11")
    if prefix:  # the child process sees pyslurm 25.11, whatever this one imports
        monkeypatch.setenv("PYTHONPATH", f"{prefix}/pyslurm-site")
        monkeypatch.setenv("LD_LIBRARY_PATH", f"{prefix}/lib")
    running = release(_running_version())
    assert running, "scontrol show config said no SLURM_VERSION"
    backend, reason = resolve_backend(SlurmConfig())
    if prefix and running == "25.11":
        assert backend == "pyslurm", reason
        assert reason.startswith("auto: pyslurm 25.11.") and "matches" in reason
    else:
        assert backend == "cli", reason
        assert reason.startswith("auto: pyslurm"), reason
        if prefix:  # pyslurm 25.11 on another release: the mismatch, named
            assert reason == (f"auto: pyslurm {_pyslurm_version(prefix)} is for Slurm 25.11, "
                              f"the running slurmctld is {_running_version()}"), reason
    if backend == "cli":
        assert isinstance(make_backend("auto"), CliBackend)
