"""The V100 throughput tables bundled with the package (tacc and wisr)."""

from __future__ import annotations

import json
from importlib import resources

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.throughputs import ThroughputTable, from_compact

BUNDLED_TABLES = ("tacc", "wisr")


def bundled_table(name: str = "tacc") -> ThroughputTable:
    data = json.loads(resources.files("slurm_shockwave.data").joinpath(
        "v100_throughputs.json").read_text(encoding="utf-8"))
    if name not in data["tables"]:
        raise InputError(f"no bundled table {name!r} (known: {', '.join(BUNDLED_TABLES)})",
                         field="throughputs")
    return from_compact(data["tables"][name], source=f"builtin:{name}")
