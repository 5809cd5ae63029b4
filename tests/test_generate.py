from collections import Counter

import pytest

from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.workloads.bundled import bundled_table


def test_seeded_and_shaped_like_the_paper() -> None:
    table = bundled_table("tacc")
    shape = TraceShape(num_jobs=2000, mean_gap_s=40)
    jobs = generate(shape, table, seed=3)
    assert jobs == generate(shape, table, seed=3)
    assert jobs != generate(shape, table, seed=4)
    arrivals = [j.spec.arrival_s for j in jobs]
    assert arrivals[0] == 0 and arrivals == sorted(arrivals)
    assert arrivals[-1] / (len(jobs) - 1) == pytest.approx(40, rel=0.1)
    gpus = Counter(j.spec.gpus for j in jobs)
    multi = [j for j in jobs if j.spec.model != "Recommendation"]
    assert sum(j.spec.gpus == 1 for j in multi) / len(multi) == pytest.approx(0.6, abs=0.05)
    assert gpus[8] > 0
    assert all(j.spec.gpus == 1 for j in jobs if j.spec.model == "Recommendation")
    modes = Counter(j.spec.mode for j in jobs)
    assert modes[AdaptationMode.STATIC] < 0.1 * len(jobs)  # only short accordion jobs
    short = sum(j.nominal_s <= 0.2 * 3600 + 0.2 * 4.8 * 3600 for j in jobs) / len(jobs)
    assert short == pytest.approx(0.72, abs=0.05)


def test_bad_shape_is_rejected() -> None:
    with pytest.raises(ValueError, match="mode_mix"):
        generate(TraceShape(mode_mix=(0.5, 0.5, 0.5)), bundled_table(), seed=0)
