from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_shockwave.slurm.cli_backend import CliBackend
from tests.live_cluster import Submitter, answering, kept_heartbeat, write_fresh

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "shockwave"


def reference_file(pattern: str) -> Path:
    """A file under ../shared/reference/shockwave, or skip the test with the reason."""
    hits = sorted(glob.glob(str(REFERENCE / pattern)))
    if not hits:
        pytest.skip(f"reference data not found: {REFERENCE / pattern}")
    return Path(hits[0])


@pytest.fixture(scope="session")
def backend() -> CliBackend:
    """The CLI backend of the local cluster; skips with the reason when no cluster answers
    (fails instead when SHOCKWAVE_REQUIRE_SLURM is set)."""
    return answering(CliBackend)


@pytest.fixture
def submitter(backend: CliBackend, tmp_path: Path) -> Iterator[Callable[..., Submitter]]:
    """``submitter(script_text, *default_sbatch_args)``: a Submitter whose jobs, and only
    those, are cancelled when the test ends."""
    made: list[Submitter] = []

    def make(text: str, *defaults: str) -> Submitter:
        made.append(Submitter(backend, tmp_path / f"worker{len(made)}.sh", text, *defaults))
        return made[-1]

    yield make
    for submit in made:
        submit.cancel_all()


@pytest.fixture
def managed_heartbeat() -> Iterator[Path]:
    """A fresh service heartbeat, so job_submit.lua holds managed jobs at submit; the file
    is put back as it was. Skips when the cluster named no heartbeat file."""
    with kept_heartbeat() as path:
        write_fresh(path)
        yield path


LOCAL_USERS = ("swtest1", "swtest2")


@pytest.fixture(scope="session")
def users() -> tuple[str, str]:
    """Two real local users, not root (made with useradd when missing; needs root)."""
    for user in LOCAL_USERS:
        if subprocess.run(["id", user], capture_output=True, check=False).returncode:
            if os.geteuid() != 0:
                pytest.skip(f"user {user} missing and not root to add it")
            subprocess.run(["useradd", "-m", user], check=True, capture_output=True)
    return LOCAL_USERS


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every user may read and search (pytest's own tmp is root's alone), for
    files other local users run or read; removed when the test ends."""
    base = Path(tempfile.mkdtemp(prefix="sw-open-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def system_python() -> str:
    """The system's python3, which other users can run (root's may be private). Skips
    where this process is not root (it cannot act as them) or there is none."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as other users")
    found = shutil.which("python3", path="/usr/bin:/bin")
    if found is None:
        pytest.skip("no system python3 for the other users")
    return found


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Callable[[Path], Path]]:
    """``read_only_mount(folder)``: the folder seen through a read-only bind mount (a
    read-only disk, which even root cannot write); unmounted when the test ends. Skips
    where this process cannot mount (not root)."""
    mounted: list[Path] = []

    def mount(folder: Path) -> Path:
        view = tmp_path / f"ro{len(mounted)}"
        view.mkdir()
        for args in (["--bind", str(folder), str(view)],
                     ["-o", "remount,ro,bind", str(view)]):
            done = subprocess.run(["mount", *args], capture_output=True, text=True,
                                  check=False)
            if done.returncode:
                if args[0] == "-o":  # bound, but not read-only
                    subprocess.run(["umount", str(view)], capture_output=True, check=False)
                pytest.skip(f"cannot make a read-only mount: {done.stderr.strip()}")
        mounted.append(view)
        return view

    yield mount
    for view in mounted:
        subprocess.run(["umount", "-l", str(view)], capture_output=True, check=False)
