"""The fail-open heartbeat: job_submit.lua holds new jobs only while this file is fresh.

One line, ``<unix time> <stale after s>``, written atomically (temporary file, rename)
after every round that reached Slurm. If the service stops, the file ages and new jobs
run under Slurm alone; ``shockwave handback`` removes it at once.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

from slurm_shockwave.service.shared_file import write_shared


def write_heartbeat(path: str | Path, now_s: float, stale_after_s: float) -> None:
    write_shared(path, f"{int(now_s)} {math.ceil(stale_after_s)}\n")  # never shorter


def read_heartbeat(path: str | Path) -> tuple[int, int] | None:
    """(written at, stale after) or None when missing or malformed."""
    try:
        first = Path(path).read_text(encoding="ascii").split("\n", 1)[0].split()
        return int(first[0]), int(first[1])
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None


def remove_heartbeat(path: str | Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        Path(path).unlink()
