"""The fail-open heartbeat: job_submit.lua holds new jobs only while this file is fresh.

``<unix time> <stale after s>``, written atomically (temporary file, rename) after every
round that reached Slurm, then ``uid <n>``: the service's uid, whose holds and releases
job_submit.lua takes for the planner's, as root's and SlurmUser's (a service run as an
operator's account had every hold it made marked as a user's, and kept held for good;
found by a review). Readers of the first line alone (an older job_submit.lua) are
unaffected. If the service stops, the file ages and new jobs run under Slurm alone;
``shockwave handback`` removes it at once.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

from slurm_shockwave.service.shared_file import write_shared


def write_heartbeat(path: str | Path, now_s: float, stale_after_s: float) -> None:
    write_shared(path, f"{int(now_s)} {math.ceil(stale_after_s)}\n"  # never shorter
                 f"uid {os.geteuid()}\n")


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
