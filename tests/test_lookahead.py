"""The lookahead that chooses each round's order (policies/shockwave/lookahead.py)."""

from __future__ import annotations

import pytest

from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.policies.shockwave.commitments import critical_path
from slurm_shockwave.policies.shockwave.config import ShockwaveConfig
from slurm_shockwave.policies.shockwave.lookahead import (
    STRETCHES,
    Candidate,
    Jobs,
    Projection,
    candidates,
    choose,
    project,
)
from tests.builders import a_job, a_view


def _jobs(remaining: dict[int, float], running: tuple[int, ...] = ()) -> Jobs:
    return Jobs(gpus={j: 1 for j in remaining}, remaining_s=remaining, size_s=remaining,
                arrival_s={j: 0.0 for j in remaining}, running=frozenset(running))


def _project(order: tuple[int, ...], jobs: Jobs, critical_frac: float = 0.0,
             then: tuple[int, ...] | None = None) -> Projection:
    return project(Candidate("c", order, order if then is None else then), jobs, now_s=0.0,
                   capacity=1, round_s=100.0, restore_s=10.0, critical_frac=critical_frac)


def test_a_projection_is_a_list_schedule_on_round_boundaries_with_restores() -> None:
    """Hand-computed: job 1 (300 s) then job 2 (100 s) on one GPU ends at 310 s; job 2
    starts at the next round boundary, 400 s, and ends at 510 s (stretches 1.03 and 5.1);
    the other way, 110 s then 200 + 310 = 510 s (1.1 and 1.7)."""
    jobs = _jobs({1: 300.0, 2: 100.0})
    assert _project((1, 2), jobs) == Projection(5.1, 310.0 + 510.0)
    assert _project((2, 1), jobs) == Projection(1.7, 110.0 + 510.0)
    # a running job pays no restore: it ends at 300 s, a round boundary, where job 2 starts
    running = _jobs({1: 300.0, 2: 100.0}, running=(1,))
    assert _project((1, 2), running) == Projection(4.1, 300.0 + 410.0)


def test_a_projection_starts_the_critical_path_first_after_this_round() -> None:
    """Job 3 (1,000 s of 1,050 s of work left on one GPU) reaches 0.95 x the makespan's
    bound when job 1 ends, so it starts before job 2 whatever the candidate's order."""
    jobs = _jobs({1: 100.0, 2: 50.0, 3: 1000.0})
    on = _project((1,), jobs, critical_frac=0.95, then=(1, 2, 3))
    off = _project((1,), jobs, critical_frac=0.0, then=(1, 2, 3))
    # on: 1 ends 110; 3 from 200 to 1210; 2 from 1300 to 1360
    assert on.total_jct_s == 110.0 + 1210.0 + 1360.0
    # off: 2 from 200 to 260; 3 from 300 to 1310
    assert off.total_jct_s == 110.0 + 260.0 + 1310.0


def test_the_choice_is_the_least_jct_within_the_tolerance_of_the_least_worst_stretch() -> None:
    projections = [Projection(1.0, 100.0), Projection(1.01, 90.0), Projection(1.5, 10.0)]
    assert choose(projections, 0.02) == 1
    assert choose(projections, 0.0) == 0
    assert choose(projections, 0.5) == 2
    # a tie goes to another order than the market's (the first)
    assert choose([Projection(1.0, 100.0), Projection(1.0, 100.0)], 0.02) == 1


def test_every_candidate_keeps_the_commitments_ahead() -> None:
    jobs = _jobs({1: 300.0, 2: 100.0, 3: 50.0})
    market = Candidate("market", (2, 1, 3), (2, 1, 3))
    tried = candidates(market, [2], jobs, least_stretch=1.5)
    assert tried[0] is market and len(tried) == 2 + len(STRETCHES)
    assert all(c.now[0] == 2 and sorted(c.now) == [1, 2, 3] for c in tried)
    assert tried[1].now == (2, 3, 1)  # shortest remaining first after the commitment


def test_the_policy_runs_the_order_the_lookahead_chooses_and_says_so() -> None:
    """Two GPUs, five jobs: the market's order runs a 20-epoch job before a 2-epoch one;
    the lookahead's runs the shortest first (the 40-epoch job, the critical path, ahead of
    all), and each job it places says which order did. Off, the market's plan is kept."""
    view = a_view(*(a_job(i, epochs=e) for i, e in enumerate((40, 3, 1, 20, 2))), gpus=2)
    on = make_policy("shockwave").plan(view, {}).plan
    off = make_policy("shockwave", {"lookahead": False}).plan(view, {}).plan
    assert off.order == (0, 2, 3, 1, 4) and on.order == (0, 2, 4, 1, 3)
    assert str(on.reasons[0]) == "scheduled(critical path)"
    assert on.reasons[4].detail.startswith("shortest remaining first: remaining~")
    assert not any("first:" in r.detail for r in off.reasons.values())


@pytest.mark.parametrize("tol", [-0.1, 11.0])
def test_a_tolerance_out_of_range_names_its_field(tol: float) -> None:
    assert ShockwaveConfig(lookahead_tol=tol).validate() == ("lookahead_tol",
                                                             "must be from 0 to 10")


def _naive(c: Candidate, jobs: Jobs, *, now_s: float, capacity: int, round_s: float,
           restore_s: float, critical_frac: float) -> Projection:
    """The projection as the module's docstring says it, written plainly: no heap and
    no running totals; every step looks at every job (the module reads its lists from
    the front)."""
    import math
    gpus, rem = jobs.gpus, jobs.remaining_s
    ends: dict[int, float] = {}

    def busy(at: float) -> int:  # GPUs held after ``at``
        return sum(gpus[j] for j, f in ends.items() if f > at + 1e-9)

    for jid in c.now:
        if busy(-math.inf) + gpus[jid] <= capacity:
            ends[jid] = now_s + rem[jid] + (restore_s if jid not in jobs.running else 0.0)
    waiting = [j for j in c.then if j not in ends and gpus[j] <= capacity]
    t = -math.inf
    while waiting and any(f > t + 1e-9 for f in ends.values()):
        soonest = min(f for f in ends.values() if f > t + 1e-9)
        t = now_s + math.ceil((soonest - now_s) / round_s - 1e-9) * round_s
        # the policy's own critical path over the jobs running after t and waiting; only
        # waiting ones can start
        after = {j: f - t for j, f in ends.items() if f > t + 1e-9}
        order = [j for j in critical_path({**after, **{j: rem[j] for j in waiting}}, gpus,
                                          capacity, critical_frac)
                 if j not in after] + waiting
        for jid in order:
            if jid not in ends and busy(t) + gpus[jid] <= capacity:
                ends[jid] = t + rem[jid] + restore_s
        waiting = [j for j in waiting if j not in ends]
    stretch = [(f - jobs.arrival_s[j]) / max(jobs.size_s[j], 1.0) for j, f in ends.items()]
    return Projection(max(stretch, default=0.0),
                      sum(f - jobs.arrival_s[j] for j, f in ends.items()))


@pytest.mark.parametrize("seed", range(30))
def test_the_projection_is_the_plain_list_schedule(seed: int) -> None:
    """The projection reads its lists from the front so that a round of 2,000 jobs costs
    0.2 s more, not 0.9 s; here it is checked against the plain schedule that looks at
    every waiting job every step, on random jobs, with the critical path and without."""
    import random
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    ids = list(range(n))
    rem = {j: float(rng.choice([50, 100, 300, 1000, 5000]) * rng.randint(1, 4)) for j in ids}
    jobs = Jobs(gpus={j: rng.choice([1, 1, 2, 4, 8]) for j in ids}, remaining_s=rem,
                size_s={j: rem[j] * rng.uniform(1, 2) for j in ids},
                arrival_s={j: -rng.uniform(0, 3000) for j in ids},
                running=frozenset(j for j in ids if rng.random() < 0.3))
    order = tuple(rng.sample(ids, n))
    c = Candidate("c", order, tuple(rng.sample(ids, n)))
    for frac in (0.0, 0.95):
        kw = dict(now_s=0.0, capacity=rng.choice([4, 8, 16]), round_s=120.0, restore_s=20.0,
                  critical_frac=frac)
        assert project(c, jobs, **kw) == _naive(c, jobs, **kw)  # type: ignore[arg-type]
