"""Synthetic traces shaped like the paper's generator (../shared/reference/shockwave/NOTES.md §3.5).

Poisson arrivals with mean gap ``mean_gap_s``; a nominal duration from ``num_durations``
evenly spaced values between ``min_h`` and ``max_h`` hours, picked by bucket (72% from the
shortest fifth, 20% from the next 30%, 5% from the next 40%, 3% from the longest tenth);
a (model, batch size) template uniformly; GPUs from ``gpu_mix`` over 1/2/4/8 for models
that train on several GPUs; an adaptation mode from ``mode_mix`` (accordion jobs under
1000 s become static, as in the artefact); total steps = duration x isolated throughput.

Other shapes for the scale study (docs/evaluation.md), off by default so the paper-shaped
traces keep their seeds: ``arrivals="diurnal"`` thins a Poisson process of peak rate
1/mean_gap_s by a day-long sinusoid (busy days, quiet nights); ``durations="pareto"``
draws a heavy-tailed duration (Pareto, shape ``tail_alpha``, from ``min_h``, capped at
``max_h``) instead of the buckets.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode, JobSpec
from slurm_shockwave.model.throughputs import ThroughputTable
from slurm_shockwave.sim.trace import TraceJob
from slurm_shockwave.workloads.bundled import TABLE_OPTION
from slurm_shockwave.workloads.catalog import MODELS
from slurm_shockwave.workloads.profile import epochs_from_steps

_BUCKETS = ((0.0, 0.2, 0.72), (0.2, 0.5, 0.20), (0.5, 0.9, 0.05), (0.9, 1.0, 0.03))
GPU_CHOICES = (1, 2, 4, 8)
ARRIVALS = ("poisson", "diurnal")
DURATIONS = ("buckets", "pareto")
_DAY_S = 86_400.0
MIN_TAIL_ALPHA = 0.1
MAX_TAIL_ALPHA = 100.0


@dataclass(frozen=True)
class TraceShape:
    num_jobs: int = 120
    mean_gap_s: float = 40.0
    min_h: float = 0.2
    max_h: float = 5.0
    num_durations: int = 100
    mode_mix: tuple[float, float, float] = (0.0, 0.5, 0.5)
    """Probabilities of static, accordion, gns."""
    gpu_mix: tuple[float, float, float, float] = (0.6, 0.3, 0.09, 0.01)
    """Probabilities of 1, 2, 4, 8 GPUs."""
    arrivals: str = "poisson"
    """poisson | diurnal (rate between ``1 - diurnal_depth`` and 1 times the peak, 24 h period)."""
    diurnal_depth: float = 0.8
    durations: str = "buckets"
    """buckets (the paper's) | pareto (heavy tail of shape ``tail_alpha``)."""
    tail_alpha: float = 1.2
    """From MIN_TAIL_ALPHA: below about 0.05 a uniform draw near 2**-53 raised to
    -1/alpha overflows a float; the cap at ``max_h`` makes anything heavier the same."""

    def validate(self) -> tuple[str, str] | None:
        if self.num_jobs < 1:
            return "num_jobs", "must be >= 1"
        if self.mean_gap_s < 0:
            return "mean_gap_s", "must be >= 0"
        if not 0 < self.min_h <= self.max_h:
            return "min_h", "need 0 < min_h <= max_h"
        if self.num_durations < 1:
            return "num_durations", "must be >= 1"
        if self.arrivals not in ARRIVALS:
            return "arrivals", f"must be one of {', '.join(ARRIVALS)}"
        if not 0 <= self.diurnal_depth <= MAX_DIURNAL_DEPTH:
            # deeper, the thinning at midnight tries ~1/(1-depth) times per arrival
            return "diurnal_depth", f"must be from 0 to {MAX_DIURNAL_DEPTH}"
        if self.durations not in DURATIONS:
            return "durations", f"must be one of {', '.join(DURATIONS)}"
        if not MIN_TAIL_ALPHA <= self.tail_alpha <= MAX_TAIL_ALPHA:
            return "tail_alpha", f"must be from {MIN_TAIL_ALPHA} to {MAX_TAIL_ALPHA:g}"
        for name, mix in (("mode_mix", self.mode_mix), ("gpu_mix", self.gpu_mix)):
            if any(p < 0 for p in mix) or not math.isclose(sum(mix), 1.0, abs_tol=1e-6):
                return name, "probabilities must be >= 0 and sum to 1"
        return None


MAX_DIURNAL_DEPTH = 0.99
"""The night's rate is at least 1% of the peak's."""


def _duration_s(rng: random.Random, shape: TraceShape) -> float:
    if shape.durations == "pareto":
        return min(shape.max_h, shape.min_h * rng.paretovariate(shape.tail_alpha)) * 3600.0
    n = shape.num_durations
    values = [shape.min_h + (shape.max_h - shape.min_h) * i / max(1, n - 1) for i in range(n)]
    lo, hi, _ = rng.choices(_BUCKETS, weights=[b[2] for b in _BUCKETS])[0]
    first = min(n - 1, int(lo * n))
    last = max(first, min(n - 1, math.ceil(hi * n) - 1))
    return values[rng.randint(first, last)] * 3600.0


def _next_arrival(rng: random.Random, shape: TraceShape, now: float) -> float:
    """The next arrival after ``now``; diurnal by thinning (accept with the day's rate)."""
    while True:
        now += -math.log(1.0 - rng.random()) * shape.mean_gap_s
        # no gap: all at once, and no time passes for the cycle to thin (it tried for ever)
        if shape.arrivals == "poisson" or shape.mean_gap_s == 0:
            return now
        level = 1.0 - shape.diurnal_depth * 0.5 * (1.0 + math.cos(2 * math.pi * now / _DAY_S))
        if rng.random() < level:
            return now


def generate(shape: TraceShape, table: ThroughputTable, seed: int = 0) -> list[TraceJob]:
    problem = shape.validate()
    if problem:
        raise ValueError(f"{problem[0]}: {problem[1]}")
    rng = random.Random(seed)
    templates = [(m.name, bs) for m in MODELS.values() for bs in m.batch_sizes
                 if table.has(m.name, bs, 1)]
    if not templates:
        raise InputError("no catalogue model has a 1-GPU throughput", source=table.source,
                         field=TABLE_OPTION)
    modes = list(AdaptationMode)
    jobs: list[TraceJob] = []
    arrival = 0.0
    for index in range(shape.num_jobs):
        if index:
            arrival = _next_arrival(rng, shape, arrival)
        model, bs = rng.choice(templates)
        gpus = rng.choices(GPU_CHOICES, weights=shape.gpu_mix)[0] if MODELS[model].multi_gpu else 1
        if not table.has(model, bs, gpus):  # was silently 1 GPU: the mix asked was not drawn
            raise InputError(f"has no {gpus}-GPU throughput for {model} (batch size {bs}), "
                             f"which the GPU mix (--gpu-mix) drew for job {index}: a table "
                             f"with it, or no share for {gpus} GPUs in the mix",
                             source=table.source, field=TABLE_OPTION)
        mode = rng.choices(modes, weights=shape.mode_mix)[0]
        duration = _duration_s(rng, shape)
        if mode == AdaptationMode.ACCORDION and duration < 1000:
            mode = AdaptationMode.STATIC
        steps = max(1, int(duration * table.steps_per_s(model, bs, gpus)))
        epochs = epochs_from_steps(steps, MODELS[model].samples_per_epoch, bs)
        spec = JobSpec(index, model, bs, gpus, mode, float(round(arrival)), epochs)
        jobs.append(TraceJob(spec, steps, duration))
    return jobs
