"""Real HiGHS always; real Gurobi on a model its bundled licence allows; the fallback."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from slurm_shockwave.solver import backends
from slurm_shockwave.solver.backends import solve
from slurm_shockwave.solver.milp import SolveOptions, Status
from slurm_shockwave.solver.plan_window import greedy_rounds, solve_window
from slurm_shockwave.solver.window import WindowInputs, build, evaluate, pwl_log, to_point


def window(n: int, *, capacity: int | None = None, seed: int = 1, cap: float = np.inf,
           k: float = 10.0) -> WindowInputs:
    rng = np.random.default_rng(seed)
    total = rng.integers(10, 100, n).astype(float)
    done = np.floor(rng.random(n) * total / 2)
    epoch_s = rng.uniform(30, 300, n)
    return WindowInputs(rng.choice([1, 2, 4, 8], n).astype(float), total, done, epoch_s,
                        (total - done) * epoch_s, np.full(n, cap), np.ones(n),
                        capacity or max(8, n // 3), 20, 120.0, k)


def test_pwl_log_matches_the_paper_breakpoints() -> None:
    f = np.array([0.0, 0.2, 0.5, 1.0])
    assert pwl_log(f)[0] == pytest.approx(np.log(1e-6))
    assert pwl_log(f)[1] == pytest.approx(np.log(0.2))
    assert pwl_log(f)[2] == pytest.approx((np.log(0.4) + np.log(0.6)) / 2)
    assert pwl_log(f)[3] == pytest.approx(0.0)


def test_model_point_is_feasible_and_values_agree() -> None:
    inp = window(30)
    model = build(inp).milp
    rounds = greedy_rounds(inp)
    point = to_point(inp, rounds)
    assert model.is_feasible(point)
    assert model.objective(point) == pytest.approx(evaluate(inp, rounds)[0])


def test_highs_solves_to_the_gap_and_beats_greedy() -> None:
    inp = window(60)
    sol = solve_window(inp, backend="highs", rel_gap=1e-4)
    assert sol.status in ("optimal", "within_gap", "feasible")
    obj, ok = evaluate(inp, sol.rounds)
    assert ok and obj == pytest.approx(sol.objective)
    assert sol.gap <= 1e-4 + 1e-9
    assert obj >= evaluate(inp, greedy_rounds(inp))[0]
    assert inp.gpus @ sol.rounds <= inp.capacity * inp.rounds


def test_each_solve_runs_with_its_own_thread_count() -> None:
    """HiGHS keeps one pool of threads per process, started by the first solve: a later
    solve asking for another count failed ("Not Set"), and the planner planned greedily
    for the rest of the process (found testing docs/planner.md's thread claim)."""
    model = build(window(20)).milp
    results = [solve(model, SolveOptions(rel_gap=1e-6, threads=t), "highs")
               for t in (2, 1, 0, 1)]
    assert [r.status for r in results] == [Status.OPTIMAL] * 4, [r.message for r in results]
    assert max(r.objective for r in results) == pytest.approx(min(r.objective
                                                                  for r in results))
    inp = window(30)
    assert {solve_window(inp, threads=t).status for t in (2, 1)}.isdisjoint({"greedy"})


def test_gurobi_on_a_model_within_the_bundled_licence() -> None:
    pytest.importorskip("gurobipy")
    model = build(window(40)).milp
    assert model.shape[0] < 2000 and model.shape[1] < 2000
    g = solve(model, SolveOptions(rel_gap=1e-6), "gurobi")
    h = solve(model, SolveOptions(rel_gap=1e-6), "highs")
    if g.status == Status.LICENCE_LIMIT:
        pytest.skip(f"no usable Gurobi licence here: {g.message}")
    assert g.backend == "gurobi" and g.status == Status.OPTIMAL
    assert g.objective == pytest.approx(h.objective, rel=1e-5)


def test_too_large_for_the_licence_falls_back_to_highs_warning_once(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gurobipy")
    monkeypatch.setattr(backends, "_fallback_warned", False)
    model = build(window(600)).milp
    assert model.shape[1] > 2000
    with caplog.at_level(logging.WARNING, logger="slurm_shockwave.solver"):
        for name in ("auto", "gurobi", "auto"):  # every round of a run
            r = solve(model, SolveOptions(max_nodes=50), name)
            assert r.backend == "highs" and r.status.has_solution
            assert "fallback from gurobi" in r.message
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 1 and "falling back to HiGHS" in lines[0]


def test_solver_gurobi_without_gurobi_is_refused_at_config_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``solver: gurobi`` means Gurobi: without it the configuration is bad input (one
    line naming the field, exit 2), where ``auto`` quietly uses HiGHS."""
    import slurm_shockwave.policies.shockwave.config as sw_config
    from slurm_shockwave.model.errors import InputError
    from slurm_shockwave.policies.registry import make_policy

    monkeypatch.setattr(sw_config, "gurobi_unavailable", lambda: "no Gurobi licence (10009)")
    with pytest.raises(InputError, match="no Gurobi licence") as err:
        make_policy("shockwave", {"solver": "gurobi"}, source="etc/shockwave.yaml")
    assert "solver" in str(err.value)
    assert make_policy("shockwave", {"solver": "auto"}).config.solver == "auto"


def test_infeasible_caps_are_reported_not_raised() -> None:
    inp = window(10, cap=0.0, capacity=8)  # every job must finish in 40 minutes: impossible
    sol = solve_window(inp, backend="highs")
    assert sol.status == "infeasible"


def test_unknown_backend_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown backend"):
        solve(build(window(3)).milp, SolveOptions(), "cplex")


def test_a_solver_library_that_raises_falls_back_to_the_greedy_rounds(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review: 'the solver never raises into the scheduler' (docs/planner.md)
    did not hold for an exception from the solver library itself: it reached the
    service, which failed every round. It is logged and the round is planned greedily."""
    from slurm_shockwave.solver.highs import HighsBackend

    def broken(self: HighsBackend, model: object, options: object) -> None:
        raise RuntimeError("highspy: internal error")

    monkeypatch.setattr(HighsBackend, "solve", broken)
    inp = window(12)
    with caplog.at_level(logging.ERROR, logger="slurm_shockwave.solver"):
        sol = solve_window(inp, backend="highs")
    assert sol.status == "greedy" and "RuntimeError: highspy: internal error" in sol.message
    assert np.array_equal(sol.rounds, greedy_rounds(inp)) and not np.isfinite(sol.bound)
    assert "highs raised" in caplog.text and "Traceback" in caplog.text
