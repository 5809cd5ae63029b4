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


def test_diurnal_arrivals_crowd_the_day_and_thin_the_night() -> None:
    shape = TraceShape(num_jobs=3000, mean_gap_s=60, arrivals="diurnal", diurnal_depth=0.8)
    jobs = generate(shape, bundled_table("wisr"), seed=1)
    hours = [(j.spec.arrival_s % 86_400) / 3600 for j in jobs]
    day = sum(9 <= h < 15 for h in hours)  # around the peak at noon
    night = sum(h < 3 or h >= 21 for h in hours)  # around the trough at midnight
    assert day > 3 * night


def test_pareto_durations_are_heavy_tailed_and_bounded() -> None:
    shape = TraceShape(num_jobs=3000, min_h=0.25, max_h=12.0, durations="pareto",
                       tail_alpha=1.1)
    nominal_h = sorted(j.nominal_s / 3600 for j in generate(shape, bundled_table("wisr"),
                                                             seed=2))
    assert nominal_h[0] >= 0.25 and nominal_h[-1] <= 12.0
    median = nominal_h[len(nominal_h) // 2]
    assert median < 0.6 and nominal_h[int(0.99 * len(nominal_h))] > 10 * median


@pytest.mark.parametrize(("field", "value"), [("arrivals", "bursty"), ("durations", "flat"),
                                              ("diurnal_depth", 1.0), ("diurnal_depth", 0.995),
                                              ("tail_alpha", 0.0)])
def test_bad_new_shape_fields_are_named(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        generate(TraceShape(**{field: value}), bundled_table(), seed=0)  # type: ignore[arg-type]


def test_diurnal_arrivals_with_no_gap_come_at_once() -> None:
    """Found by a review: with --mean-gap-s 0 time never moved, and a deep night (depth
    near 1) thinned every try away: `trace generate` ran for ever."""
    shape = TraceShape(num_jobs=5, mean_gap_s=0, arrivals="diurnal", diurnal_depth=0.99)
    assert [j.spec.arrival_s for j in generate(shape, bundled_table(), seed=0)] == [0.0] * 5
