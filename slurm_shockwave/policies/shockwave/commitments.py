"""Who runs this round whatever the window's plan says: finishing jobs, the critical
path and leased jobs.

Leases: a started job keeps its GPUs long enough to pay for its restart.

Every (re)start costs the job ``restart_cost_s`` of GPU time (checkpoint restore, and
live also the scheduler's start latency). The window program plans in whole rounds and
does not see that cost, so re-solving on every arrival can start a job, take it back a
round later and start it again: each such flip wastes a restore. A lease keeps a started
job running for the fewest rounds that hold its restart cost to ``overhead`` of the run;
after that the market's plan decides again. The round a run began is kept in the
policy's memory (string keys, so it survives the store's JSON round trip).

The critical path: a job whose remaining time alone is (nearly) the makespan's lower
bound loses makespan for every round it waits, and no other job can make that up; the
window program's makespan term weighs it, but packing and the fairness caps can still
push it back, so it runs first, after the finishing jobs.

Finishing jobs: the lease's arithmetic read at the other end of a run. A running job
with at most a lease left cannot pay for a restart with what it has left to run, and
its GPUs come back within the lease anyway, so nothing, the critical path included,
stops it. A node may still be cleared of one, for the critical path
(``Plan.moves_for``; kept where it is, the screened traces' mean makespan was 0.9%
longer) or for a job whose GPUs would idle (``Plan.avoid_idle``; pinned there, the
screen at time scale 12 was ahead of FIFO on fewer makespans: docs/evaluation.md). The GPUs of a job
that ends mid-round reach a waiting job at once only where fill steps run
(``ClusterView.fills``); without them they idle until the round's end, so there only
jobs with more than a round left are kept.

All three are rules applied after the market's program, and the docs say so
(docs/planner.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slurm_shockwave.model.job import Job, JobId
from slurm_shockwave.model.lifecycle import Phase


def lease_rounds(restart_cost_s: float, overhead: float, round_s: float) -> int:
    """Rounds L with restart_cost_s <= overhead * L * round_s; 1 (no lease) when off."""
    if overhead <= 0 or restart_cost_s <= 0:
        return 1
    return max(1, math.ceil(restart_cost_s / (overhead * round_s) - 1e-9))


def run_starts(jobs: Sequence[Job], previous: Mapping[str, int], round_index: int,
               starting: frozenset[JobId] = frozenset(),
               places: Mapping[str, Sequence[str]] | None = None) -> dict[str, int]:
    """The round each running job's current run began. A job first seen running was
    started by the previous round's plan, so its run began one round ago; so did a
    ``starting`` one (``ClusterView.starting``: a fill step of the previous round
    released it and Slurm is starting it), which a round called at once by that fill
    step otherwise stopped before it ran; and so did one on other GPUs than ``places``
    (the last round's ``run_places``) says: it was moved or resized, a checkpoint and a
    restart. Before, only a move some round saw waiting (live, one that took longer
    than the time to the next round) began a new run: the simulator moves a job within
    a round, and live a requeue delay shorter than a round can do the same (6 s of a 10 s
    round at time scale 12), and such a job had no lease to keep it where it had just
    paid its restore (s0_40x16 simulated with the live costs: a job moved for an 8-GPU
    one was stopped two rounds later)."""
    places = places or {}

    def began(job: Job) -> int:
        key = str(job.job_id)
        where = places.get(key)
        if where and job.gpu_slots and list(where) != sorted(job.gpu_slots):
            return round_index - 1
        return int(previous.get(key, round_index - 1))

    return {str(j.job_id): began(j) for j in jobs
            if j.phase == Phase.RUNNING or j.job_id in starting}


def run_places(jobs: Sequence[Job], starts: Mapping[str, int]) -> dict[str, list[str]]:
    """The GPUs each started job holds now, for the next round's ``run_starts``."""
    return {str(j.job_id): sorted(j.gpu_slots) for j in jobs
            if str(j.job_id) in starts and j.gpu_slots}


def finishing(jobs: Sequence[Job], most_remaining_s: Mapping[JobId, float], lease: int,
              round_s: float, fills: bool) -> list[JobId]:
    """Running jobs whose most remaining time is at most ``lease`` rounds (and, without
    fill steps, more than one round), soonest done first; none when the lease is a
    single round (off, or a restart too cheap to need one)."""
    if lease <= 1:
        return []
    return sorted((j.job_id for j in jobs if j.phase == Phase.RUNNING
                   and (fills or most_remaining_s[j.job_id] > round_s)
                   and most_remaining_s[j.job_id] <= lease * round_s),
                  key=lambda jid: (most_remaining_s[jid], jid))


def leased(jobs: Sequence[Job], starts: Mapping[str, int], round_index: int,
           lease: int) -> list[JobId]:
    """Started jobs (``run_starts``) still inside their lease, in id order."""
    return [j.job_id for j in jobs if str(j.job_id) in starts
            and round_index - starts[str(j.job_id)] < lease]


def critical_path(remaining_s: Mapping[JobId, float], gpus: Mapping[JobId, int],
                  capacity: int, frac: float) -> list[JobId]:
    """Jobs whose remaining time reaches ``frac`` of the makespan's lower bound from now
    (the longest remaining time, or all remaining GPU-time over the GPUs), longest first."""
    if frac <= 0 or not remaining_s:
        return []
    bound = max(max(remaining_s.values()),
                sum(gpus[j] * r for j, r in remaining_s.items()) / max(capacity, 1))
    return sorted((j for j, r in remaining_s.items() if r >= frac * bound),
                  key=lambda j: (-remaining_s[j], j))
