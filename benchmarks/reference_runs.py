"""Shared helpers for benchmarks that run the paper's reference traces."""

from __future__ import annotations

import glob
import os
import platform
from pathlib import Path
from typing import Any

from slurm_shockwave.sim.inputs import Workload, build_workload, load_throughputs
from slurm_shockwave.sim.trace import read_trace

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "shockwave"

# (trace file prefix, GPUs, throughput table): the paper's canonical and scale settings
SETTINGS = {
    "120": ("120_", 32, "tacc"),
    "220": ("220_", 64, "wisr"),
    "900": ("900_0.2_5_1000_", 256, "wisr"),
}


def reference_workload(name: str, reference: Path = REFERENCE) -> tuple[Workload, int]:
    prefix, gpus, table = SETTINGS[name]
    hits = sorted(glob.glob(str(reference / "traces" / f"{prefix}*.trace")))
    if not hits:
        raise SystemExit(f"reference trace {prefix}* not found under {reference}")
    jobs = read_trace(hits[0])
    throughputs = load_throughputs(reference / "throughputs" / f"{table}_throughputs.json")
    return build_workload(jobs, throughputs, source=hits[0]), gpus


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}
