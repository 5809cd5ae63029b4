from __future__ import annotations

import glob
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "shockwave"


def reference_file(pattern: str) -> Path:
    """A file under ../shared/reference/shockwave, or skip the test with the reason."""
    hits = sorted(glob.glob(str(REFERENCE / pattern)))
    if not hits:
        pytest.skip(f"reference data not found: {REFERENCE / pattern}")
    return Path(hits[0])


@pytest.fixture
def managed_heartbeat() -> Iterator[Path]:
    """A fresh service heartbeat, so job_submit.lua holds managed jobs at submit; the file
    is put back as it was. Skips when the cluster named no heartbeat file."""
    name = os.environ.get("SHOCKWAVE_HEARTBEAT")
    if not name:
        pytest.skip("SHOCKWAVE_HEARTBEAT unset (docker-slurm/start.sh prints it)")
    path = Path(name)
    saved = path.read_bytes() if path.exists() else None
    path.write_text(f"{int(time.time())} 86400\n")
    yield path
    if saved is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(saved)
