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
