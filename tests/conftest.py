from __future__ import annotations

import glob
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "shockwave"


def reference_file(pattern: str) -> Path:
    """A file under ../shared/reference/shockwave, or skip the test with the reason."""
    hits = sorted(glob.glob(str(REFERENCE / pattern)))
    if not hits:
        pytest.skip(f"reference data not found: {REFERENCE / pattern}")
    return Path(hits[0])
