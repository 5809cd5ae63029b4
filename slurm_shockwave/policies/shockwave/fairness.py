"""The momentum-averaged fair finish time each job is held to
(../shared/reference/shockwave/NOTES.md §2.4).

Each time the job set changes, every active job gets a new estimate of when it would
finish with an equal 1/N share since arrival:
``FT_i = arrival_i + (work done_i + predicted remaining_i) / min(1, G/N)``.
The target is ``momentum x (time-weighted average of the estimates) + (1 - momentum) x
latest``, each estimate weighted by the rounds it stood. Kept per job as four numbers so
memory stays small and serialisable.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

FairState = list[float]
"""[weighted sum, total weight (rounds), round of the latest estimate, latest estimate]"""


def record(state: FairState | None, round_index: int, estimate: float) -> FairState:
    if state is None:
        return [0.0, 0.0, float(round_index), estimate]
    wsum, wtotal, last_round, last = state
    span = max(0.0, round_index - last_round)
    return [wsum + last * span, wtotal + span, float(round_index), estimate]


def target(state: FairState, round_index: int, momentum: float) -> float:
    wsum, wtotal, last_round, last = state
    span = max(0.0, round_index - last_round)
    weight = wtotal + span
    average = (wsum + last * span) / weight if weight > 0 else last
    return momentum * average + (1.0 - momentum) * last


def update_all(states: Mapping[int, FairState], estimates: Mapping[int, float],
               round_index: int) -> dict[int, FairState]:
    """New estimates for the jobs given; jobs that left are forgotten."""
    return {jid: record(states.get(jid), round_index, est) for jid, est in estimates.items()}


def fair_span(fair_finish_s: np.ndarray, arrival_s: np.ndarray) -> np.ndarray:
    """Each job's fair time in the system, fair finish time minus arrival: what rho, the
    caps and the lateness priority are ratios of.

    The paper's program divides absolute times (``t_end + r / s <= rho_max F``, priority
    ``(now + R / s) / F``), which depend on where time zero is: live that is when the
    service first ran, so as it aged every cap fell below now and every job's ratio
    tended to 1, and the same trace shifted by a day ran less fairly (worst rho 1.49
    against 1.05 on the 120-job trace). Spans since arrival keep the schedule the same
    wherever time starts. At least a second, so a job with no work left divides safely.
    """
    return np.asarray(np.maximum(fair_finish_s - arrival_s, 1.0), dtype=float)


PRIORITY_RANGE = (1e-4, 1e4)
"""Keeps relaxed weights within the solver's numerical range."""


def lateness_weight(projected_rho: np.ndarray, short: np.ndarray, lam: float) -> np.ndarray:
    """The weight on each job's log progress in the window program: the paper's
    ``rho^lambda``, and ``rho^100`` for a job with less than one round left once it is past
    its fair time (rho > 1), clipped to :data:`PRIORITY_RANGE`.

    Every job of the program gets it, whether its fairness cap holds or not, so priority
    grows with lateness in the program solved: up to rho 1 it is one strictly increasing
    function for every job, and past 1 strictly increasing for each kind, a job about to
    finish late above a longer one at the same rho (the paper's push). Earlier forms:
    weight 1 below rho_max and rho^lambda above it (a job at 0.61 weighed 0.08, one at
    0.59 weighed 1); then weight 1 for every job whose cap held, so a long job whose cap
    was out of reach at rho 0.6 weighed 0.08 against the on-track jobs' 1; and ``rho^100``
    for every short job, 0.006 at rho 0.95 against a long job's 0.03 at 0.5 (an audit).
    """
    exponent = np.where(short & (projected_rho > 1.0), 100.0, lam)
    with np.errstate(over="ignore", under="ignore"):
        weight = np.power(np.maximum(projected_rho, 0.0), exponent)
    return np.asarray(np.clip(weight, *PRIORITY_RANGE), dtype=float)
