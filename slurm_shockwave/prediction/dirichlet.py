"""Bayesian remaining-runtime prediction over batch-size regimes
(../shared/reference/shockwave/NOTES.md §2.6).

A job trains in regimes, one per batch size it may use. The prior over the share of
epochs spent in each regime is a symmetric Dirichlet with mass E (total epochs); the
posterior adds the epochs the job has actually been *observed* at each batch size (in
simulation what the simulated job did, on Slurm what it reported), not the precomputed
profile the paper's code reads. Expected epochs per regime are rebased onto the epochs
still to run, and weighted by the epoch duration at that batch size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.workloads.catalog import MODELS


def regime_support(mode: AdaptationMode, model: str, init_bs: int) -> tuple[int, ...]:
    """The batch sizes a job may train at, from its adaptation mode alone."""
    info = MODELS.get(model)
    cap = info.max_bs if info else init_bs
    if mode == AdaptationMode.ACCORDION:
        return tuple(sorted({init_bs, max(cap, init_bs)}))
    if mode == AdaptationMode.GNS:
        out, bs = [init_bs], init_bs
        while bs * 2 <= cap:
            bs *= 2
            out.append(bs)
        return tuple(out)
    return (init_bs,)


def _rebase(expected: float, seen: float) -> float:
    """Take away the epochs already seen, one at a time while at least one is left."""
    return expected - seen if expected >= seen else expected - math.floor(expected)


def remaining_s(num_epochs: int, epochs_done: float, observed: Mapping[int, float],
                support: tuple[int, ...], epoch_s_by_bs: Mapping[int, float],
                current_bs: int | None = None) -> float:
    """Expected remaining runtime in seconds.

    ``observed`` maps batch size to completed epochs seen at it; the epoch in progress
    counts as observed at ``current_bs`` (as in the paper). ``epoch_s_by_bs`` gives the
    duration of one epoch at each batch size (batch sizes without one are skipped).
    """
    left = max(0.0, num_epochs - int(epochs_done))
    if num_epochs - epochs_done <= 0:
        return 0.0
    known = [b for b in support if b in epoch_s_by_bs] or [b for b in epoch_s_by_bs]
    if not known:
        return 0.0
    if current_bs is not None:
        observed = {**observed, current_bs: observed.get(current_bs, 0.0) + 1.0}
    prior = num_epochs / len(known)
    alpha = {b: prior + observed.get(b, 0.0) for b in known}
    total = sum(alpha.values())
    expected = {b: _rebase(num_epochs * a / total, observed.get(b, 0.0))
                for b, a in alpha.items()}
    mass = sum(expected.values())
    if mass <= 0:  # everything seen already: the current regime continues
        last = max(observed, key=lambda b: observed[b]) if observed else known[0]
        return left * epoch_s_by_bs.get(last, epoch_s_by_bs[known[0]])
    # rescale the predicted regime mix when it holds more epochs than are left
    return sum(n * epoch_s_by_bs[b] for b, n in expected.items()) * left / max(
        float(int(mass + 1)), left)
