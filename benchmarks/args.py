"""Command-line parsing shared by the benchmarks: bad arguments are one line and exit 2,
as for the ``shockwave`` command (argparse's own error prints the usage first)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {' '.join(message.split())}\n")
        raise SystemExit(2)


def names(ap: argparse.ArgumentParser, option: str, text: str,
          known: Iterable[str]) -> list[str]:
    """A comma-separated list of names, each one of ``known``."""
    known = tuple(known)
    wanted = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in wanted if n not in known] or ([] if wanted else ["(none)"])
    if bad:
        ap.error(f"{option}: unknown {bad[0]!r} (known: {', '.join(known)})")
    return wanted


def floats(ap: argparse.ArgumentParser, option: str, text: str, count: int | None = None,
           lo: float = -math.inf, hi: float = math.inf) -> list[float]:
    """Comma-separated finite numbers in [lo, hi] (``count`` of them if given)."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        ap.error(f"{option}: expected comma-separated numbers, got {text[:40]!r}")
    if count is not None and len(values) != count:
        ap.error(f"{option}: expected {count} comma-separated numbers, got {len(values)}")
    if not all(math.isfinite(v) and lo <= v <= hi for v in values):
        ap.error(f"{option}: every number must be from {lo:g} to {hi:g}, got {text[:40]!r}")
    return values
