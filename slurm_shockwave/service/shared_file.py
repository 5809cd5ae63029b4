"""The service's small files that other programs read: the heartbeat (slurmctld's
job_submit.lua) and the progress API's URL (the TaskProlog)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from slurm_shockwave.slurm.plugin_files import make_dirs


def write_shared(path: str | Path, text: str) -> None:
    """``text`` (ASCII) at ``path``, atomically and world-readable: written to a
    temporary beside it and renamed, so a reader never sees half a line. Its folder is
    made if missing; on an OSError the temporary is removed and the error raised."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        make_dirs(target.parent)  # 0755 whatever root's umask: other users read it
        tmp.write_text(text, encoding="ascii")
        tmp.chmod(0o644)  # slurmctld (SlurmUser) and every job's user read it
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
