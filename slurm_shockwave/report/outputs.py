"""Result files written whole or not at all.

A run's CSV, JSON, trace or plot goes to a temporary file beside its target and is
renamed onto it only once complete, so a full disk or a killed run leaves the previous
file as it was, never a truncated one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PLOTS = ("jct_cdf.png", "rho_cdf.png", "gpus_busy.png")
"""The files ``report.plots.write_plots`` writes (here, so a caller can check them without
importing matplotlib)."""


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix, so writers that go by it still
    do): renamed onto ``path`` when the block ends, removed if it raises. Only a new
    file or a regular one is replaced so: a symlink, a device (``/dev/stdout``) or a
    FIFO is written through as it is, or a rename would put a file in its place."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        yield path
        return
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
