"""What the planner believes about each job: predicted remaining time and epoch time."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_shockwave.model.job import AdaptationMode, Job
from slurm_shockwave.prediction.calibration import calibrate
from slurm_shockwave.prediction.dirichlet import regime_support, remaining_s
from slurm_shockwave.prediction.noise import noise_factor


@dataclass(frozen=True, slots=True)
class Estimate:
    remaining_s: float
    """Predicted runtime still needed at full allocation."""
    epoch_s: float
    """remaining_s / epochs left: the mean seconds per remaining epoch, where the
    epoch in progress counts whole, as in the paper (docs/planner.md, step 1)."""
    done_work_s: float
    """Runtime the finished epochs took at full allocation."""
    most_remaining_s: float
    """The most the job may still take: its epochs left at the slowest epoch among the
    batch sizes it may still train at (a GNS job's only grow), and never less than
    ``remaining_s``. The critical path reads this, so that a job the posterior expects
    to speed up, and which may never do so, is not found too late for the makespan."""


def estimate(job: Job, *, noise: float = 0.0, seed: int = 0) -> Estimate:
    p = job.progress
    table = dict(p.epoch_s_by_bs) or {p.bs: p.epoch_s}
    durations = calibrate(table, p.bs, p.epoch_s)
    observed: dict[int, float] = {}
    for bs, epochs in p.bs_history:
        observed[bs] = observed.get(bs, 0.0) + epochs
    support = regime_support(job.spec.mode, job.spec.model, job.spec.init_bs)
    remaining = remaining_s(job.spec.num_epochs, p.epochs_done, observed, support, durations,
                            current_bs=p.bs)
    remaining *= noise_factor(seed, job.job_id, noise)
    whole = sum(observed.values())
    done = sum(n * durations.get(b, p.epoch_s) for b, n in observed.items())
    done += max(0.0, p.epochs_done - whole) * durations.get(p.bs, p.epoch_s)
    left = job.remaining_epochs
    per_epoch = remaining / left if left > 0 else p.epoch_s
    ahead = [b for b in support if b in durations
             and (job.spec.mode != AdaptationMode.GNS or b >= p.bs)]
    slowest = max([durations.get(p.bs, p.epoch_s)] + [durations[b] for b in ahead])
    return Estimate(remaining, max(per_epoch, 1e-6), done, max(remaining, left * slowest))
