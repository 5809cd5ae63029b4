"""The V100 throughput tables bundled with the package (tacc and wisr)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.throughputs import ThroughputTable, from_compact, from_gavel

BUNDLED_TABLES = ("tacc", "wisr")


def bundled_table(name: str = "tacc") -> ThroughputTable:
    data = json.loads(resources.files("slurm_shockwave.data").joinpath(
        "v100_throughputs.json").read_text(encoding="utf-8"))
    if name not in data["tables"]:
        raise InputError(f"no bundled table {name!r} (known: {', '.join(BUNDLED_TABLES)})",
                         field="throughputs")
    return from_compact(data["tables"][name], source=f"builtin:{name}")


def load_table(spec: str | Path | None) -> ThroughputTable:
    """A Gavel-format JSON file, or ``builtin:tacc`` / ``builtin:wisr`` (default tacc)."""
    if spec is None:
        return bundled_table("tacc")
    text = str(spec)
    if text.startswith("builtin:"):
        return bundled_table(text.split(":", 1)[1])
    try:
        data = json.loads(Path(text).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", source=text,
                         field="throughputs") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", source=text, line=exc.lineno,
                         field="throughputs") from None
    return from_gavel(data, source=text)
