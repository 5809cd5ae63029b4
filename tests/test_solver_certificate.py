"""The certificate is for the plan that runs: checked against brute force.

On instances small enough to enumerate every per-round schedule x_{i,t} (the paper's
program), the packed plan's value may not exceed the true optimum, the reported bound may
not fall below it, and the reported gap must cover the true one.
"""

from __future__ import annotations

import json
from itertools import combinations, combinations_with_replacement

import numpy as np
import pytest

from slurm_shockwave.policies.shockwave.policy import certificate
from slurm_shockwave.policies.shockwave.schedule import pack, window_order
from slurm_shockwave.solver.milp import SolveResult, Status, relative_gap
from slurm_shockwave.solver.plan_window import solve_window
from slurm_shockwave.solver.window import WindowInputs, evaluate


def per_round_optimum(inp: WindowInputs) -> float:
    """max over every schedule of T rounds (each a set of gangs fitting G GPUs)."""
    ids = range(inp.n)
    fits = [s for r in range(inp.n + 1) for s in combinations(ids, r)
            if sum(inp.gpus[i] for i in s) <= inp.capacity]
    best = -np.inf
    for schedule in combinations_with_replacement(fits, inp.rounds):
        counts = np.zeros(inp.n, dtype=int)
        for s in schedule:
            counts[list(s)] += 1
        value, ok = evaluate(inp, counts)
        if ok:
            best = max(best, value)
    return best


def plan_that_runs(inp: WindowInputs) -> tuple[dict[str, float], float]:
    """As the policy does it: solve, order, pack, certify; and the program's own value."""
    sol = solve_window(inp, rel_gap=1e-6)
    order = window_order(sol.rounds, inp.remaining_s, inp.weight, 10.0, inp.round_s,
                         [False] * inp.n, ids_of=list(range(inp.n)), due_s=np.zeros(inp.n))
    schedule = pack({i: int(sol.rounds[i]) for i in range(inp.n)},
                    {i: int(inp.gpus[i]) for i in range(inp.n)}, order, inp.capacity,
                    inp.rounds)
    return certificate(inp, sol, schedule, list(range(inp.n))), sol.objective


def check(inp: WindowInputs) -> dict[str, float]:
    cert, _ = plan_that_runs(inp)
    opt = per_round_optimum(inp)
    if not np.isfinite(opt):
        return cert
    assert cert["bound"] is not None and cert["bound"] >= opt - 1e-9  # never below
    if cert["feasible"]:
        assert cert["objective"] <= opt + 1e-9          # the plan is a real schedule
        assert cert["gap"] is None or cert["gap"] >= relative_gap(opt, cert["objective"]) - 1e-9
        assert (cert["gap"] is None) == (cert["bound"] is None)
    else:
        assert cert["gap"] is None                      # unknown, not small
    return cert


def instance(gpus: list[int], capacity: int, rounds: int, seed: int,
             cap: float = np.inf) -> WindowInputs:
    rng = np.random.default_rng(seed)
    n = len(gpus)
    total = rng.integers(5, 40, n).astype(float)
    done = np.floor(rng.random(n) * total / 2)
    epoch_s = rng.uniform(20, 200, n)
    return WindowInputs(np.array(gpus, dtype=float), total, done, epoch_s,
                        (total - done) * epoch_s, np.full(n, cap), rng.uniform(0.5, 2, n),
                        capacity, rounds, 120.0, 10.0)


def test_three_two_gpu_jobs_on_three_gpus() -> None:
    # The review's case: the aggregated count 3 x 20 x 2 GPU-rounds fits 3 x 20, but only
    # one 2-GPU job runs at a time. The gang row makes the program see that; either way
    # the reported gap must cover the packed plan's true one.
    inp = WindowInputs(np.full(3, 2.0), np.full(3, 100.0), np.zeros(3), np.full(3, 60.0),
                       np.full(3, 6000.0), np.full(3, np.inf), np.ones(3), 3, 20, 120.0, 10.0)
    cert = check(inp)
    assert cert["rounds_lost"] == 0
    assert cert["gap"] <= 1e-6


def test_random_small_instances_against_brute_force() -> None:
    rng = np.random.default_rng(7)
    for seed in range(25):
        n = int(rng.integers(2, 5))
        capacity = int(rng.integers(2, 6))
        gpus = [int(g) for g in rng.integers(1, capacity + 1, n)]
        cap = float(rng.choice([np.inf, 2000.0, 500.0]))
        check(instance(gpus, capacity, int(rng.integers(2, 5)), seed, cap))


def test_a_solve_stopped_by_a_limit_gives_no_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """An LP stopped early has a point but no bound: the gap is unknown, not small."""
    import slurm_shockwave.solver.plan_window as pw

    inp = instance([1, 2, 1], 3, 4, seed=3)
    real = pw.solve

    def stopped(model, options, backend):  # type: ignore[no-untyped-def]
        r = real(model, options, backend)
        return SolveResult(Status.FEASIBLE, r.x, r.objective, float("inf"), r.wall_s,
                           r.backend, "time limit reached")

    monkeypatch.setattr(pw, "solve", stopped)
    sol = solve_window(inp)
    assert sol.bound == float("inf") and sol.gap == float("inf")
    schedule = pack({i: int(sol.rounds[i]) for i in range(inp.n)},
                    {i: int(inp.gpus[i]) for i in range(inp.n)}, list(range(inp.n)),
                    inp.capacity, inp.rounds)
    cert = certificate(inp, sol, schedule, list(range(inp.n)))
    assert cert["gap"] is None and cert["bound"] is None
    json.dumps(cert, allow_nan=False)  # the live store keeps memory as strict JSON


def test_highs_reports_no_bound_when_its_node_limit_stops_it() -> None:
    from slurm_shockwave.solver.backends import solve
    from slurm_shockwave.solver.window import build

    rng = np.random.default_rng(0)
    n = 60
    inp = WindowInputs(rng.choice([1.0, 2.0, 3.0], n), np.full(n, 50.0), np.zeros(n),
                       rng.uniform(20, 300, n), rng.uniform(1e3, 2e4, n), np.full(n, np.inf),
                       rng.uniform(0.5, 3, n), 7, 20, 120.0, 10.0)
    from slurm_shockwave.solver.milp import SolveOptions

    r = solve(build(inp).milp, SolveOptions(max_nodes=1, rel_gap=0.0), "highs")
    if r.status == Status.OPTIMAL:
        pytest.skip("HiGHS closed this model at the root")
    assert r.bound == float("inf")


def urgent_by_a_hair() -> WindowInputs:
    """One GPU, five rounds; job 0 must finish in the window (cap 0) and needs 2 rounds
    and 6e-6 s, so the LP gives it 2.00000005 rounds; jobs 1 and 2 need 1.5 each."""
    tau = 120.0
    remaining = np.array([2 * tau + 6e-6, 1.5 * tau, 1.5 * tau])
    total, done = np.array([10.0, 10.0, 10.0]), np.array([9.0, 0.0, 0.0])
    return WindowInputs(gpus=np.ones(3), epochs_total=total, epochs_done=done,
                        epoch_s=remaining / (total - done), remaining_s=remaining,
                        cap_s=np.array([0.0, np.inf, np.inf]), weight=np.ones(3),
                        capacity=1, rounds=5, round_s=tau, k=0.0)


def test_rounding_gives_a_job_its_cap_first_however_small_its_fraction() -> None:
    """Found by a review: the rounding stopped at the first fraction of ~0, which an
    urgent job's can be, so no job was rounded up, a GPU-round idled and the cap broke."""
    from slurm_shockwave.solver.window import round_down_up

    inp = urgent_by_a_hair()
    rounds = round_down_up(inp, np.array([2.00000005, 1.49999997, 1.49999997]))
    assert rounds[0] == 3 and evaluate(inp, rounds)[1]


def test_a_window_with_no_feasible_point_found_is_not_called_infeasible(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rounded point that breaks a cap, and no MILP solution (a live round's time ran
    short): found by a review, that was labelled infeasible and the policy then dropped
    every job's cap. The program is feasible: the rounded LP point is used, as documented."""
    from slurm_shockwave.solver import plan_window

    # a rounding that breaks the cap (the floor), and no time left for the MILP
    monkeypatch.setattr(plan_window, "round_down_up",
                        lambda _inp, x: np.floor(x + 1e-7).astype(int))
    solution = solve_window(urgent_by_a_hair(), time_limit_s=0.0)
    assert solution.status == "rounded_lp" and "broke a fairness cap" in solution.message
