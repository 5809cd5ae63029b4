"""The V100 throughput tables bundled with the package (tacc and wisr)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.throughputs import ThroughputTable, from_compact, from_gavel
from slurm_shockwave.workloads.input_files import read_text, strict_json

BUNDLED_TABLES = ("tacc", "wisr")
TABLE_OPTION = "--throughputs"
"""What an error about a table's spec names by default: the option of ``shockwave``, the
emulator and the benchmarks (the live commands' config names ``slurm.throughputs``)."""


def bundled_table(name: str = "tacc", *, field: str = TABLE_OPTION) -> ThroughputTable:
    data = json.loads(resources.files("slurm_shockwave.data").joinpath(
        "v100_throughputs.json").read_text(encoding="utf-8"))
    if name not in data["tables"]:
        raise InputError(f"no bundled table {name!r} (known: {', '.join(BUNDLED_TABLES)})",
                         field=field)
    return from_compact(data["tables"][name], source=f"builtin:{name}")


def load_table(spec: str | Path | None, *, field: str = TABLE_OPTION) -> ThroughputTable:
    """A Gavel-format JSON file, or ``builtin:tacc`` / ``builtin:wisr`` (default tacc);
    ``field`` is what an error about the spec itself names."""
    if spec is None:
        return bundled_table("tacc", field=field)
    text = str(spec)
    if text.startswith("builtin:"):
        return bundled_table(text.split(":", 1)[1], field=field)
    data = strict_json(read_text(text, field=field), source=text, field=field)
    return from_gavel(data, source=text)
