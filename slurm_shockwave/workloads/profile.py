"""Per-epoch job profiles: epochs, batch size per epoch, and their durations.

The profile is the simulator's ground truth for a job and the denominator of the
finish-time-fairness metric (exclusive runtime). Durations come from the throughput
table: ``(samples_per_epoch / bs) / steps_per_s(model, bs, gpus)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from slurm_shockwave.model.job import AdaptationMode, JobSpec
from slurm_shockwave.model.throughputs import ThroughputTable
from slurm_shockwave.workloads.adaptation import bs_schedule
from slurm_shockwave.workloads.catalog import model_info
from slurm_shockwave.workloads.scaling import relative_rates, table_rates


def epochs_from_steps(total_steps: int, samples_per_epoch: int, init_bs: int) -> int:
    """E = ceil(total_steps / ceil(samples / bs0)), as the artefact counts epochs."""
    steps_per_epoch = math.ceil(samples_per_epoch / init_bs)
    return max(1, math.ceil(total_steps / steps_per_epoch))


@dataclass(frozen=True, slots=True)
class JobProfile:
    bs_by_epoch: tuple[int, ...]
    epoch_s_by_bs: dict[int, float]
    """On the job's requested GPU count."""
    epoch_s_by_gpus: dict[int, dict[int, float]] = field(default_factory=dict)
    """An elastic job's epoch times on each of its other counts (count -> bs -> s)."""

    def epoch_s_at(self, bs: int, gpus: int) -> float:
        """Epoch time at batch size ``bs`` on ``gpus`` GPUs (the request when not listed)."""
        return self.epoch_s_by_gpus.get(gpus, self.epoch_s_by_bs)[bs]

    @property
    def num_epochs(self) -> int:
        return len(self.bs_by_epoch)

    def epoch_s(self, epoch: int) -> float:
        return self.epoch_s_by_bs[self.bs_by_epoch[min(epoch, self.num_epochs - 1)]]

    @property
    def exclusive_s(self) -> float:
        """Runtime alone on its GPUs: the metric's T_excl."""
        return sum(self.epoch_s_by_bs[b] for b in self.bs_by_epoch)

    def segments(self) -> list[tuple[int, int]]:
        """Run-length encoded (batch size, epochs), as the reference profiles store them."""
        return run_lengths(self.bs_by_epoch)

    def fastest_s(self, counts: Sequence[int]) -> float:
        """Runtime alone with each epoch on whichever of ``counts`` runs it fastest and
        resizing free: an elastic job's least runtime (its exclusive runtime when fixed)."""
        return sum(n * min(self.epoch_s_at(bs, c) for c in counts)
                   for bs, n in self.segments())


def run_lengths(batch_sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(batch size, consecutive epochs at it), in order."""
    out: list[tuple[int, int]] = []
    for b in batch_sizes:
        if out and out[-1][0] == b:
            out[-1] = (b, out[-1][1] + 1)
        else:
            out.append((b, 1))
    return out


def epoch_seconds(model: str, bs: int, gpus: int, table: ThroughputTable) -> float:
    return (model_info(model).samples_per_epoch / bs) / table.steps_per_s(model, bs, gpus)


def build_profile(spec: JobSpec, table: ThroughputTable) -> JobProfile:
    """Batch size and duration of every epoch of ``spec``.

    A batch size the table lacks is never switched to (the job stays at the batch size
    it had), as the artefact's simulator rejects such a change.
    """
    wanted = bs_schedule(AdaptationMode(spec.mode), spec.model, spec.init_bs, spec.gpus,
                         spec.num_epochs)
    durations = {spec.init_bs: epoch_seconds(spec.model, spec.init_bs, spec.gpus, table)}
    # Every batch size the table knows for this model and GPU count: what a predictor may
    # assume about regimes the job has not reached (or never will).
    info = model_info(spec.model)
    for b in {*info.batch_sizes, info.max_bs}:
        if table.has(spec.model, b, spec.gpus):
            durations.setdefault(b, epoch_seconds(spec.model, b, spec.gpus, table))
    schedule: list[int] = []
    current = spec.init_bs
    for b in wanted:
        current = b if b in durations else current
        schedule.append(current)
    return JobProfile(tuple(schedule), durations, elastic_epoch_s(spec, durations, table))


def elastic_epoch_s(spec: JobSpec, durations: dict[int, float],
                    table: ThroughputTable) -> dict[int, dict[int, float]]:
    """Epoch times of an elastic job on its other counts: from the table where it has
    the entry, else the prior of ``workloads/scaling.py`` from the counts it has."""
    others = [c for c in spec.gpu_counts() if c != spec.gpus]
    out: dict[int, dict[int, float]] = {c: {} for c in others}
    for b, at_request in durations.items():
        known = table_rates(table, spec.model, b, [spec.gpus, *others])
        # the request's duration is the table's (steps a second, not epochs: a review
        # found the two mixed for a request outside 1/2/4/8, 2 GPUs at 0.015 s an epoch)
        known.setdefault(spec.gpus, model_info(spec.model).samples_per_epoch / b / at_request)
        rel = relative_rates(known, others, spec.gpus)
        for c in others:
            out[c][b] = at_request / rel[c]
    return out
