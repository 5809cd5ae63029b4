"""How many progress reports the service keeps: per job, and for all jobs together.

A job's owner can send reports as fast as munged vouches for them. The cap per job
bounds one job; the budget for all bounds an owner with many jobs (a red-team's
estimate: 1,000 jobs at the cap per job would put about 13 GB into the round's feed and
2 GB into the store). Over the budget, the jobs with the most reports lose their
oldest, down to one level for all (``level``): a flood costs the flooder's own jobs
first, and a job with few reports loses none. Each keeps its newest reports, so its
latest progress, acknowledgement and end."""

from __future__ import annotations

from collections.abc import Iterable

MAX_REPORTS_PER_JOB = 50_000
"""Reports the store keeps for one job, of any kind: past it, each new one takes the place
of the job's oldest. A job's owner flooding reports would otherwise grow the store, and
the feed every round reads, without bound (a review measured a round 0.48 s slower with
200,000); a job reporting every few seconds for days loses only its oldest reports,
never its latest progress, acknowledgements or end (a refusal at the cap, tried first,
froze such a job's progress and lost its checkpoint requests)."""

MAX_REPORTS = 500_000
"""Reports kept for all jobs together, in the store and in the round's feed (about
280 bytes each in the feed: some 140 MB at the budget, measured on Python 3.11)."""

MIN_REPORTS_KEPT = 100
"""No job is cut below this many by the budget, however many jobs report: the level
stays here and the budget gives way (at most this many a job)."""


def level(counts: Iterable[int], budget: int) -> int | None:
    """The most reports any one job may keep so that all together fit ``budget`` (each
    job keeps min(its count, level)); None when they fit already. Never below
    ``MIN_REPORTS_KEPT``."""
    ordered = sorted(counts)
    if sum(ordered) <= budget:
        return None
    rest = budget
    for i, count in enumerate(ordered):
        share = rest // (len(ordered) - i)
        if count > share:
            return max(share, MIN_REPORTS_KEPT)
        rest -= count
    return max(ordered[-1], MIN_REPORTS_KEPT)  # not reached: the sum is over the budget
