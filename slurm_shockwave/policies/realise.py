"""Realising fractional allocations as whole rounds (Gavel's round-based mechanism).

Each round every job earns ``x_i * round_s`` of credit; it has received ``run_s``. Jobs
are ordered by deficit (credit minus received), so over time each job runs for the
fraction its allocation says. Placement then fills GPUs greedily in that order, which
keeps the schedule work-conserving. Allocations are recomputed every round (Gavel's
simulator recomputes at most every 1000 s; see docs/deviations.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import JobId
from slurm_shockwave.model.plan import Memory, Plan, Planned, Reason, ReasonCode

KEEP_ROUNDS = 30
"""How long an absent job's credit is kept (rounds)."""


def realise(view: ClusterView, allocation: Mapping[JobId, float], memory: Memory) -> Planned:
    # string keys: memory must survive a JSON round trip unchanged
    old_credit: Mapping[str, float] = memory.get("credit_s", {})
    now = view.round_index
    # a memory written before "seen" was kept: every credit in it seen now
    old_seen: Mapping[str, int] = memory.get("seen", dict.fromkeys(old_credit, now))
    # A job out of the view for a while (a requeue delay longer than a round, an admin's
    # hold) keeps its credit for KEEP_ROUNDS rounds, and one whose credit is gone comes
    # back even (credit = what it has run): rebuilt from the view alone, it came back
    # owing its whole past run time and was held back for rounds on end.
    seen = {k: r for k, r in old_seen.items() if now - r <= KEEP_ROUNDS}
    credit = {k: c for k, c in old_credit.items() if k in seen}
    keyed = []
    for job in view.jobs:
        jid = job.job_id
        x = allocation.get(jid, 0.0)
        credit[str(jid)] = credit.get(str(jid), job.progress.run_s) + x * view.round_s
        seen[str(jid)] = now
        deficit = credit[str(jid)] - job.progress.run_s
        keyed.append((-deficit, -x, job.spec.arrival_s, jid))
    keyed.sort()
    reasons = {jid: Reason(ReasonCode.SCHEDULED, f"x={allocation.get(jid, 0.0):.3f}")
               for *_, jid in keyed}
    return Planned(Plan(tuple(k[-1] for k in keyed), reasons),
                   {"credit_s": credit, "seen": seen})
