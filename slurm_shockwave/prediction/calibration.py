"""Calibrating table epoch durations against what a job is observed to do.

The throughput table can be wrong for a cluster (other GPUs, other software). When the
observed epoch time at the current batch size differs from the table by more than
``tolerance``, every batch size's duration is scaled by the same factor.
"""

from __future__ import annotations

from collections.abc import Mapping


def calibrate(table_epoch_s: Mapping[int, float], bs: int, observed_epoch_s: float,
              tolerance: float = 0.1) -> dict[int, float]:
    expected = table_epoch_s.get(bs)
    if not expected or observed_epoch_s <= 0:
        return dict(table_epoch_s)
    factor = observed_epoch_s / expected
    if abs(factor - 1.0) <= tolerance:
        return dict(table_epoch_s)
    return {b: s * factor for b, s in table_epoch_s.items()}
