"""The closed forms against a real LP solver (HiGHS through scipy.optimize.linprog)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from slurm_shockwave.solver.fractional import (
    fractional_knapsack,
    min_makespan,
    min_max_ratio,
    water_fill,
)

gpus_lists = st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(gpus_lists, st.integers(1, 24), st.data())
def test_knapsack_is_lp_optimal(gpus: list[int], capacity: int, data: st.DataObject) -> None:
    values = data.draw(st.lists(st.floats(0.1, 100), min_size=len(gpus), max_size=len(gpus)))
    x = fractional_knapsack(gpus, values, capacity)
    ours = sum(v * g * xi for v, g, xi in zip(values, gpus, x, strict=True))
    lp = linprog(-np.array(values) * np.array(gpus), A_ub=[gpus], b_ub=[capacity],
                 bounds=[(0, 1)] * len(gpus), method="highs")
    assert ours == pytest.approx(-lp.fun, rel=1e-7)
    assert sum(g * xi for g, xi in zip(gpus, x, strict=True)) <= capacity + 1e-9


@settings(max_examples=40, deadline=None)
@given(gpus_lists, st.integers(1, 24))
def test_water_fill_maximises_the_minimum_share(gpus: list[int], capacity: int) -> None:
    x = water_fill(gpus, [1.0] * len(gpus), capacity)
    shares = [g * xi for g, xi in zip(gpus, x, strict=True)]
    assert sum(shares) <= capacity + 1e-9 and all(0 <= xi <= 1 + 1e-12 for xi in x)
    # LP: maximise t subject to t <= w_i x_i, sum w x <= G, 0 <= x <= 1
    n = len(gpus)
    c = np.zeros(n + 1)
    c[-1] = -1
    a = [[*([0] * i), -gpus[i], *([0] * (n - i - 1)), 1] for i in range(n)]
    lp = linprog(c, A_ub=[*a, [*gpus, 0]], b_ub=[*([0] * n), capacity],
                 bounds=[*([(0, 1)] * n), (0, None)], method="highs")
    assert min(shares) == pytest.approx(-lp.fun, rel=1e-7, abs=1e-9)
    # lexicographic: capacity is not left idle while a job could use more
    assert sum(shares) == pytest.approx(min(capacity, sum(gpus)))


def test_water_fill_weights() -> None:
    x = water_fill([1, 1], [2.0, 1.0], 1)
    assert x == pytest.approx([2 / 3, 1 / 3])


def test_min_makespan_closed_form() -> None:
    x, horizon = min_makespan([1, 2], [100.0, 300.0], 2)
    assert horizon == pytest.approx(max(300.0, (100 + 600) / 2))
    assert x == pytest.approx([100 / 350, 300 / 350])


@settings(max_examples=30, deadline=None)
@given(gpus_lists, st.integers(1, 16), st.data())
def test_min_max_ratio_is_tight(gpus: list[int], capacity: int, data: st.DataObject) -> None:
    n = len(gpus)
    t = data.draw(st.lists(st.floats(0, 1000), min_size=n, max_size=n))
    r = data.draw(st.lists(st.floats(1, 1000), min_size=n, max_size=n))
    d = data.draw(st.lists(st.floats(10, 5000), min_size=n, max_size=n))
    x, best = min_max_ratio(gpus, t, r, d, capacity)
    assert sum(g * xi for g, xi in zip(gpus, x, strict=True)) <= capacity * (1 + 1e-9)
    rhos = [(ti + ri / max(xi, 1e-12)) / di for ti, ri, di, xi in zip(t, r, d, x, strict=True)]
    assert max(rhos) == pytest.approx(best, rel=1e-6)
    # a slightly smaller target must not fit (otherwise bisection stopped early)
    lower = best * (1 - 1e-10)
    need = [min(1.0, ri / (lower * di - ti)) if lower * di > ti else float("inf")
            for ti, ri, di in zip(t, r, d, strict=True)]
    floor = max((ti + ri) / di for ti, ri, di in zip(t, r, d, strict=True))
    over = sum(g * v for g, v in zip(gpus, need, strict=True)) > capacity
    assert best <= floor * (1 + 1e-9) or over
