"""The traces of the scale study: the paper's three and our own generated shapes.

The paper's (120 jobs / 32 GPUs on tacc, 220 / 64 and 900 / 256 on wisr) are read from
../shared/reference/shockwave/traces. Ours are seeded generator shapes defined here (no
data files), each stressing what the paper's traces do not: steady arrivals over many
hours, a day/night cycle, heavy-tailed durations, and a small cluster crowded with short
jobs. The "tune" traces are the ones the defaults were tuned on; the paper's validate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.reference_runs import SETTINGS, reference_workload
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import Workload, build_workload
from slurm_shockwave.sim.trace import TraceJob
from slurm_shockwave.solver.fluid import FluidJobs
from slurm_shockwave.workloads.bundled import bundled_table


@dataclass(frozen=True)
class Generated:
    gpus: int
    shape: TraceShape
    seed: int
    table: str = "wisr"
    about: str = ""


GENERATED: dict[str, Generated] = {
    "poisson": Generated(32, TraceShape(num_jobs=300, mean_gap_s=180.0), seed=11,
                         about="steady Poisson arrivals over 14 h"),
    "diurnal": Generated(40, TraceShape(num_jobs=600, mean_gap_s=100.0, arrivals="diurnal"),
                         seed=12, about="a day/night cycle over more than a day"),
    "heavy_tail": Generated(32, TraceShape(num_jobs=160, mean_gap_s=90.0, min_h=0.25,
                                           max_h=12.0, durations="pareto", tail_alpha=1.1),
                            seed=13, about="Pareto durations (shape 1.1) from 15 min to 12 h"),
    "small": Generated(12, TraceShape(num_jobs=48, mean_gap_s=30.0, min_h=0.1, max_h=1.45,
                                      gpu_mix=(0.6, 0.3, 0.1, 0.0)),
                       seed=14, about="48 jobs under 90 min crowding 12 GPUs"),
}
PAPER = tuple(SETTINGS)
ALL = PAPER + tuple(GENERATED)


def load(name: str) -> tuple[Workload, int]:
    """A trace by name; ``shape@seed`` is one of our shapes drawn with another seed (held
    out: no default was chosen on one, ``benchmarks.scale --seeds``)."""
    if name in SETTINGS:
        return reference_workload(name)
    shape, at, seed = name.partition("@")
    if shape not in GENERATED or (at and not seed.isdigit()):
        raise SystemExit(f"unknown trace {name!r} (known: {', '.join(ALL)}, or one of "
                         f"ours as NAME@SEED)")
    g = GENERATED[shape]
    table = bundled_table(g.table)
    jobs = generate(g.shape, table, int(seed) if at else g.seed)
    return build_workload(jobs, table, source=f"generated:{name}"), g.gpus


def fluid_jobs(workload: Workload, gpus: int) -> FluidJobs:
    """The trace's jobs for the fluid relaxation: arrival, exclusive runtime, GPUs; and,
    where a job is elastic, its speed at each of its counts up to ``gpus``: the best any
    of its epochs gets there, (epoch time at the request) / (epoch time at the count),
    so the fastest it gets through its exclusive runtime (``solver/fluid.py``)."""
    jobs = workload.jobs
    speeds = None
    if any(j.spec.is_elastic for j in jobs):
        speeds = tuple({c: max(profile.epoch_s_at(bs, j.spec.gpus) / profile.epoch_s_at(bs, c)
                               for bs, _ in profile.segments())
                        for c in _usable_counts(j, gpus)}
                       for j in jobs for profile in (workload.profiles[j.spec.job_id],))
    return FluidJobs(np.array([j.spec.arrival_s for j in jobs], dtype=float),
                     np.array([workload.profiles[j.spec.job_id].exclusive_s for j in jobs]),
                     np.array([j.spec.gpus for j in jobs]), gpus, speeds)


def _usable_counts(job: TraceJob, gpus: int) -> list[int]:
    """The job's counts a cluster of ``gpus`` GPUs has room for (its request where none
    fits)."""
    return [c for c in job.spec.gpu_counts() if c <= gpus] or [job.spec.gpus]


def lower_bound_s(workload: Workload, gpus: int) -> float:
    """Issue 10's bound of the trace: the latest (arrival + exclusive runtime), and all
    GPU-work spread over every GPU. It bounds a schedule of the trace's work, each job at
    its exclusive runtime at each epoch's batch size; the simulator applies a batch-size
    change at a round's end (the artefact's one-round lag), so a job whose batch size
    changes may run alone up to about 1% faster (29 of the 120-job trace's jobs, at most
    0.9914x; found by a red-team), and a simulated makespan may fall that much below it.
    The fluid bounds (``--bounds``) rest on the same runtimes."""
    return fluid_jobs(workload, gpus).simple_bound_s


def elastic_lower_bound_s(workload: Workload, gpus: int) -> float:
    """The same for jobs with a GPU range: as if every epoch ran at whichever of its
    job's counts is cheapest in GPU-seconds (for the work) or fastest (for the latest
    finish), and resizing were free. It is :func:`lower_bound_s` for fixed jobs, and
    issue 11's makespan target is out of reach where it exceeds 0.95 x the fixed run."""
    work, last = 0.0, 0.0
    for job in workload.jobs:
        profile = workload.profiles[job.spec.job_id]
        counts = _usable_counts(job, gpus)
        work += sum(epochs * min(c * profile.epoch_s_at(bs, c) for c in counts)
                    for bs, epochs in profile.segments())
        last = max(last, job.spec.arrival_s + profile.fastest_s(counts))
    return max(work / gpus, last)
