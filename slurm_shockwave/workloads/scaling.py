"""Throughput at GPU counts a job has not been measured on: the stated prior.

An elastic job's throughput at each count comes from what is known (the throughput
table's 1/2/4/8-GPU entries for a catalogue model, or the job's own reports at the
counts it has run on). A count with no measurement takes the nearest measured count's
throughput scaled by the prior: throughput grows as ``count ** SCALING_EXPONENT``, that
is each doubling multiplies it by ``2 x SCALING_EFFICIENCY`` = 1.6, each halving
divides it by 1.6 (docs/elastic.md). "Nearest" is on a log scale, ties to the larger.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from slurm_shockwave.model.throughputs import ThroughputTable

SCALING_EFFICIENCY = 0.8
"""Prior: a doubling of GPUs gives 2 x 0.8 = 1.6 x the throughput. The bundled tables'
median doubling gains are 1.63 / 1.92 / 1.76 (tacc, 1->2 / 2->4 / 4->8 GPUs) and
1.77 / 1.87 / 1.90 (wisr): the prior takes the low end, so an untried count is not
over-promised."""
SCALING_EXPONENT = math.log2(2 * SCALING_EFFICIENCY)


TABLE_COUNTS = (1, 2, 4, 8)
"""The GPU counts throughput tables measure (the paper's)."""


def table_rates(table: ThroughputTable, model: str, bs: int,
                counts: Iterable[int] = ()) -> dict[int, float]:
    """What the table measured of ``model`` at ``bs``: steps a second at its own counts
    and at ``counts``, where it has them (what ``fill_rates`` scales from)."""
    return {c: table.steps_per_s(model, bs, c) for c in {*TABLE_COUNTS, *counts}
            if table.has(model, bs, c)}


def nearest_count(count: int, measured: Iterable[int]) -> int:
    """The measured count nearest ``count`` on a log scale, ties to the larger."""
    return min(measured, key=lambda k: (abs(math.log2(count / k)), -k))


def fill_rates(known: Mapping[int, float], counts: Iterable[int]) -> dict[int, float]:
    """Throughput at every count in ``counts``: measured where known, else the prior
    from the nearest measured count. ``known`` must hold at least one positive rate."""
    measured = {c: r for c, r in known.items() if r > 0 and c > 0}
    if not measured:
        raise ValueError("no measured throughput to scale from")
    out: dict[int, float] = {}
    for c in counts:
        if c in measured:
            out[c] = measured[c]
            continue
        near = nearest_count(c, measured)
        out[c] = measured[near] * (c / near) ** SCALING_EXPONENT
    return out


def relative_rates(known: Mapping[int, float], counts: Iterable[int],
                   request: int) -> dict[int, float]:
    """Throughput at each count over the throughput at ``request`` (1.0 there)."""
    wanted = sorted({*counts, request})
    rates = fill_rates(known, wanted)
    base = rates[request]
    return {c: rates[c] / base for c in wanted}
