"""Many sbatch jobs at once for the live benchmarks, and exactly those cancelled after."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence


def submit_many(options: Sequence[str], script: str) -> list[int]:
    """One ``sbatch --parsable -o /dev/null OPTIONS script`` per entry, through one shell
    (fast enough for thousands); their job ids. When one fails, the jobs this call made
    are cancelled and the run ends in one line naming Slurm's reason, exit 2 (the
    caller's own cleanup cancels what earlier calls made)."""
    lines = "\n".join(f"sbatch --parsable -o /dev/null {o} {script} || exit 1"
                      for o in options)
    proc = subprocess.run(["sh"], input=lines, text=True, check=False, capture_output=True)
    ids = [int(line.split(";")[0]) for line in proc.stdout.split()
           if line.split(";")[0].isdigit()]
    if proc.returncode or len(ids) != len(options):
        cancel(ids)
        why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        print(f"error: sbatch: {len(ids)} of {len(options)} jobs submitted (cancelled): "
              f"{why}", file=sys.stderr)
        raise SystemExit(2)
    return ids


def cancel(job_ids: Sequence[int]) -> None:
    """scancel exactly these jobs (never every job of the user), a thousand per call."""
    for k in range(0, len(job_ids), 1000):
        subprocess.run(["scancel", *map(str, job_ids[k:k + 1000])], check=False,
                       capture_output=True)
