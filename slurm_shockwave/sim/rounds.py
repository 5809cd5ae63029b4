"""How many rounds a simulation takes, bounded from the trace before it runs.

``rounds_at_least`` is what every policy needs: a trace over it is refused up front, not
stopped after minutes at the simulator's round limit. ``rounds_at_most`` is what a policy
that keeps some job running while one waits can need, restores and requeue delays paid:
a run past the limit is the input's doing only if that estimate is past it too; else it
is a bug (a policy or the simulator not making progress).
"""

from __future__ import annotations

import math

from slurm_shockwave.sim.inputs import Workload


def busy_s_at_least(workload: Workload, restore_s: float) -> float:
    """Seconds some job is in the cluster, at least: the union over jobs of [arrival,
    arrival + restore + runtime alone at its fastest count]. The simulator's clock jumps
    only over time with no job in, and a round covers at most ``round_s`` of the rest."""
    spans = sorted((j.spec.arrival_s, j.spec.arrival_s + restore_s
                    + workload.profiles[j.spec.job_id].fastest_s(j.spec.gpu_counts()))
                   for j in workload.jobs)
    total, end = 0.0, -math.inf
    for lo, hi in spans:
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def rounds_at_least(workload: Workload, *, gpus: int, round_s: float,
                    restore_s: float) -> float:
    """Rounds every policy needs: the busy time (``busy_s_at_least``), or the GPU-seconds
    of work spread over all ``gpus``, in rounds of ``round_s``."""
    return max(busy_s_at_least(workload, restore_s), workload.gpu_work_s / gpus) / round_s


def _slowest_s(workload: Workload) -> float:
    """Each job's runtime alone at its slowest count, summed: the work run one at a time."""
    total = 0.0
    for j in workload.jobs:
        profile = workload.profiles[j.spec.job_id]
        total += max(sum(n * profile.epoch_s_at(bs, c) for bs, n in profile.segments())
                     for c in j.spec.gpu_counts())
    return total


def rounds_at_most(workload: Workload, *, round_s: float, restore_s: float,
                   requeue_delay_s: float) -> float:
    """Rounds a policy that runs some job whenever one waits needs at most (inf: no bound).

    Each round no job ends in, some job runs it whole and gains at least ``round_s -
    restore_s - requeue_delay_s`` of its work (a job moved waits out the delay on its new
    GPUs, then restores); after a preemption, up to the delay's rounds may pass with every
    waiting job held; each job's arrival and end may take a round of its own, or cut one
    short (a fill step)."""
    gain = round_s - restore_s - requeue_delay_s
    if gain <= 0:
        return math.inf
    held = math.ceil(requeue_delay_s / round_s)
    return 4 * len(workload.jobs) + math.ceil(_slowest_s(workload) / gain) * (1 + 2 * held)
