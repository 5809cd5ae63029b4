"""Reading the simulator's inputs from files: throughput tables and workloads."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from slurm_shockwave.model.bounds import MAX_EXCLUSIVE_S
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.throughputs import ThroughputTable
from slurm_shockwave.sim.trace import TraceJob, read_trace
from slurm_shockwave.workloads.bundled import load_table
from slurm_shockwave.workloads.profile import JobProfile, build_profile

DEMO_TRACE = "demo"
LIVE_DEMO_TRACE = "demo-live"
"""16 jobs for 16 GPUs (generator seed 2): what `shockwave demo` runs on a live cluster."""


def load_throughputs(spec: str | Path | None) -> ThroughputTable:
    """A path to a Gavel-format JSON file, or ``builtin:tacc`` / ``builtin:wisr``."""
    return load_table(spec)


def demo_trace_path() -> Path:
    return Path(str(resources.files("slurm_shockwave.data").joinpath("demo.jsonl")))


def shadows_local(spec: str) -> bool:
    """Whether ``spec`` names a bundled trace and a file or directory in the current
    directory too. The bundled trace is read (a directory named demo is common); a user
    who meant the local one must be told that ``./demo`` names it."""
    return spec in (DEMO_TRACE, LIVE_DEMO_TRACE) and os.path.lexists(spec)


def load_trace(spec: str | Path | None) -> list[TraceJob]:
    if spec is None or str(spec) == DEMO_TRACE:
        return read_trace(demo_trace_path())
    if str(spec) == LIVE_DEMO_TRACE:
        return read_trace(Path(str(resources.files("slurm_shockwave.data").joinpath(
            "demo_live.jsonl"))))
    return read_trace(spec)


@dataclass(frozen=True)
class Workload:
    jobs: tuple[TraceJob, ...]
    profiles: dict[int, JobProfile]
    source: str

    @property
    def gpu_work_s(self) -> float:
        """The trace's work in GPU-seconds: each job's runtime alone at its request times
        its GPUs (what ``trace show`` totals, and the simulation's bounds spread over the
        GPUs)."""
        return sum(self.profiles[j.spec.job_id].exclusive_s * j.spec.gpus for j in self.jobs)


def build_workload(jobs: list[TraceJob], table: ThroughputTable, *, source: str) -> Workload:
    """Profiles for every job; a missing throughput entry names the job and its line."""
    profiles = {}
    for job in jobs:
        try:
            profile = build_profile(job.spec, table)
        except InputError as exc:
            raise InputError(f"job {job.spec.job_id}: {exc.problem} in {table.source}",
                             source=source, line=job.line or None, field="throughput") from None
        if not profile.exclusive_s <= MAX_EXCLUSIVE_S:
            raise InputError(f"job {job.spec.job_id} would train {profile.exclusive_s:.3g} s "
                             f"alone on its GPUs ({table.source}); at most {MAX_EXCLUSIVE_S:g}",
                             source=source, line=job.line or None, field="epochs")
        profiles[job.spec.job_id] = profile
    return Workload(tuple(jobs), profiles, source)
