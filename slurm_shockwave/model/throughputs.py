"""Isolated job throughputs (steps/s for the whole job on its GPUs).

Two inputs are understood: Gavel's JSON format (``--throughputs FILE``, as shipped with the
Shockwave artefact) and the compact table bundled in ``slurm_shockwave/data``. Parsing
takes already-loaded JSON so this module does no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurm_shockwave.model.bounds import (
    MAX_BATCH_SIZE,
    MAX_JOB_GPUS,
    MAX_THROUGHPUT,
    MIN_THROUGHPUT,
    bounded,
    shown,
)
from slurm_shockwave.model.errors import InputError

_GAVEL_KEY = re.compile(r"^\('(?P<model>.+?) \(batch size (?P<bs>[0-9]+)\)', (?P<gpus>[0-9]+)\)$")


@dataclass(frozen=True)
class ThroughputTable:
    rates: Mapping[tuple[str, int, int], float]
    source: str = "<table>"

    def has(self, model: str, bs: int, gpus: int) -> bool:
        return (model, bs, gpus) in self.rates

    def steps_per_s(self, model: str, bs: int, gpus: int) -> float:
        try:
            return self.rates[(model, bs, gpus)]
        except KeyError:
            raise InputError(f"no entry for {model} batch size {bs} on {gpus} GPU(s)",
                             source=self.source, field="throughput") from None

    def models(self) -> set[str]:
        return {m for m, _, _ in self.rates}

    @property
    def digest(self) -> str:
        """Its rates' identity, whatever file they were read from: two live runs compare
        only on the same table (``benchmarks.live --against``)."""
        text = repr(sorted(self.rates.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def from_gavel(data: Any, *, source: str, worker_type: str = "v100") -> ThroughputTable:
    """Read Gavel's ``{worker: {"('<Model> (batch size B)', w)": {"null": thr}}}`` format."""
    if not isinstance(data, Mapping) or worker_type not in data:
        raise InputError(f"no worker type {worker_type!r} at the top level", source=source,
                         field="worker_type")
    entries = data[worker_type]
    if not isinstance(entries, Mapping):
        raise InputError(f"expected an object of entries, got {shown(entries)}", source=source,
                         field=worker_type)
    rates: dict[tuple[str, int, int], float] = {}
    seen: dict[tuple[str, int, int], str] = {}
    for key, entry in entries.items():
        m = _GAVEL_KEY.match(key)
        if m is None:
            continue  # single-batch-size workloads such as A3C carry no batch size
        field = f"{worker_type}.{key if len(key) <= 100 else shown(key)}"
        bs = bounded(m["bs"], source=source, field=field, integer=True, lo=1, hi=MAX_BATCH_SIZE)
        gpus = bounded(m["gpus"], source=source, field=field, integer=True, lo=1,
                       hi=MAX_JOB_GPUS)
        # "batch size 064" is batch size 64: two spellings of one entry, the later silently
        # winning, would make the table say what its author did not see
        first = seen.setdefault((m["model"], int(bs), int(gpus)), key)
        if first != key:
            raise InputError(f"the same entry as {shown(first)}", source=source, field=field)
        if not isinstance(entry, Mapping) or "null" not in entry:
            raise InputError(f"expected an object with the isolated throughput under \"null\","
                             f" got {shown(entry)}", source=source, field=field)
        thr = bounded(entry["null"], source=source, field=f"{field}.null", lo=0,
                      hi=MAX_THROUGHPUT)
        if isinstance(entry["null"], str):
            raise InputError(f"expected a number, got {shown(entry['null'])}", source=source,
                             field=f"{field}.null")
        if thr == 0:
            continue  # Gavel marks combinations that do not run (out of memory) with 0
        if thr < MIN_THROUGHPUT:
            raise InputError(f"must be 0 (does not run) or from {MIN_THROUGHPUT:g} to "
                             f"{MAX_THROUGHPUT:g} steps/s, got {shown(entry['null'])}",
                             source=source, field=f"{field}.null")
        rates[(m["model"], bs, gpus)] = thr
    if not rates:
        raise InputError("no '(<model> (batch size B)', gpus)' entries found", source=source,
                         field=worker_type)
    return ThroughputTable(rates, source)


def from_compact(data: Mapping[str, Mapping[str, Mapping[str, float]]], *,
                 source: str) -> ThroughputTable:
    """Read the bundled ``model -> batch size -> gpus -> steps/s`` table."""
    rates = {(model, int(bs), int(gpus)): float(thr)
             for model, by_bs in data.items()
             for bs, by_gpus in by_bs.items()
             for gpus, thr in by_gpus.items() if thr > 0}
    return ThroughputTable(rates, source)
