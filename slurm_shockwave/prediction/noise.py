"""A seeded prediction-error knob for experiments (the paper's noise study)."""

from __future__ import annotations

import random


def noise_factor(seed: int, job_id: int, error: float) -> float:
    """A per-job factor in [1 - error, 1 + error], fixed for the job's lifetime."""
    if error <= 0:
        return 1.0
    rng = random.Random(f"{seed}:{job_id}")
    return max(0.0, 1.0 + rng.uniform(-error, error))
