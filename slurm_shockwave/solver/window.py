"""Shockwave's window program (../shared/reference/shockwave/NOTES.md §2.2),
built as one sparse MILP.

For N jobs over a window of T rounds of tau seconds on G GPUs:

    maximise   (1/N) sum_i pi_i L_i  -  k * M / (tau T)
    subject to sum_i w_i n_i <= G T                   (GPU capacity over the window)
               sum_{i: w_i >= w} n_i <= floor(G/w) T   (gangs per round, each width w)
               p_i d_i <= tau n_i                      (progress needs GPU time)
               L_i <= a_b + s_b (e_i + p_i) / E_i      (concave piecewise-linear log, all b)
               r_i >= R_i - p_i d_i,  M >= r_i         (remaining time after the window)
               r_i <= cap_i                             (finish-time fairness, when set)
               n_i in {0..T}, 0 <= p_i <= E_i - e_i,  r_i >= 0

n_i counts the rounds job i runs in the window. The paper's model has a binary x_{i,t}
per round; its objective depends on x only through n_i = sum_t x_{i,t}, so this
aggregated model is a relaxation of it, N integers instead of N T binaries, so its
optimum is an upper bound on the paper's. The gang rows are valid for every round (at
most floor(G/w) jobs of width >= w fit at once) and matter only when w does not divide G
(3 GPUs, 2-GPU jobs: one at a time, not 1.5). ``policies/shockwave/schedule.py`` packs
the n_i into rounds; the policy evaluates the packed plan with :func:`evaluate`, so the
gap it reports is the packed plan's against the bound.

The log uses the paper's breakpoints (0, .2, .4, .6, .8, 1; log 0 taken as log 1e-6).
Maximising a concave piecewise-linear function needs no SOS2 binaries: L_i is bounded
by every segment's line and the optimum sits on the lower envelope.
The objective is normalised (mean log; M in units of the window) so k keeps its meaning
from 30 jobs to 3,000 (docs/planner.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from slurm_shockwave.solver.milp import Milp

BREAKPOINTS = np.array([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
_LOGS = np.log(np.maximum(BREAKPOINTS, 1e-6))
_SLOPES = np.diff(_LOGS) / np.diff(BREAKPOINTS)
_INTERCEPTS = _LOGS[:-1] - _SLOPES * BREAKPOINTS[:-1]


def pwl_log(fraction: np.ndarray) -> np.ndarray:
    """The paper's piecewise-linear log of progress fraction (its lower envelope)."""
    f = np.clip(fraction, 0.0, 1.0)
    return np.asarray(np.min(_INTERCEPTS[None, :] + _SLOPES[None, :] * f[:, None], axis=1))


@dataclass(frozen=True)
class WindowInputs:
    gpus: np.ndarray          # w_i
    epochs_total: np.ndarray  # E_i
    epochs_done: np.ndarray   # e_i
    epoch_s: np.ndarray       # d_i, predicted seconds per epoch over the window
    remaining_s: np.ndarray   # R_i, predicted remaining runtime
    cap_s: np.ndarray         # upper bound on r_i (inf: no fairness constraint)
    weight: np.ndarray        # pi_i (1 unless relaxing fairness)
    capacity: int             # G
    rounds: int               # T
    round_s: float            # tau
    k: float

    @property
    def n(self) -> int:
        return int(self.gpus.size)


@dataclass(frozen=True)
class WindowModel:
    milp: Milp
    n: int

    def rounds_of(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(np.round(x[: self.n]), dtype=int)


def gang_limits(inp: WindowInputs) -> list[tuple[np.ndarray, int]]:
    """(jobs of width >= w, floor(G/w) T) for each width w that does not divide G (the
    others are implied by the capacity row)."""
    out = []
    for w in np.unique(inp.gpus):
        if 0 < w <= inp.capacity and inp.capacity % int(w):
            out.append((inp.gpus >= w, (inp.capacity // int(w)) * inp.rounds))
    return out


def build(inp: WindowInputs) -> WindowModel:
    n, t = inp.n, inp.rounds
    i_p, i_l, i_r, i_m = n, 2 * n, 3 * n, 4 * n
    cols = 4 * n + 1
    ar = np.arange(n)
    segs = _SLOPES.size
    c = np.zeros(cols)
    c[i_l:i_l + n] = inp.weight / n
    c[i_m] = -inp.k / (inp.round_s * t)
    row_blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    lo: list[np.ndarray] = []
    hi: list[np.ndarray] = []
    row = 0

    def block(rows: np.ndarray, cidx: np.ndarray, vals: np.ndarray) -> None:
        row_blocks.append((rows, cidx, vals))

    # capacity over the window
    block(np.zeros(n, dtype=int), ar, inp.gpus.astype(float))
    lo.append(np.array([-np.inf]))
    hi.append(np.array([float(inp.capacity * t)]))
    row += 1
    for members, limit in gang_limits(inp):
        idx = ar[members]
        block(np.full(idx.size, row), idx, np.ones(idx.size))
        lo.append(np.array([-np.inf]))
        hi.append(np.array([float(limit)]))
        row += 1
    # progress: d_i p_i - tau n_i <= 0
    block(row + ar, ar, np.full(n, -inp.round_s))
    block(row + ar, i_p + ar, inp.epoch_s)
    lo.append(np.full(n, -np.inf))
    hi.append(np.zeros(n))
    row += n
    # log envelope: L_i - s_b p_i / E_i <= a_b + s_b e_i / E_i
    jb = np.repeat(ar, segs)
    bb = np.tile(np.arange(segs), n)
    rr = row + np.arange(n * segs)
    block(rr, i_l + jb, np.ones(n * segs))
    block(rr, i_p + jb, -_SLOPES[bb] / inp.epochs_total[jb])
    lo.append(np.full(n * segs, -np.inf))
    hi.append(_INTERCEPTS[bb] + _SLOPES[bb] * inp.epochs_done[jb] / inp.epochs_total[jb])
    row += n * segs
    # remaining: -r_i - d_i p_i <= -R_i
    block(row + ar, i_r + ar, -np.ones(n))
    block(row + ar, i_p + ar, -inp.epoch_s)
    lo.append(np.full(n, -np.inf))
    hi.append(-inp.remaining_s)
    row += n
    # max: r_i - M <= 0
    block(row + ar, i_r + ar, np.ones(n))
    block(row + ar, np.full(n, i_m), -np.ones(n))
    lo.append(np.full(n, -np.inf))
    hi.append(np.zeros(n))
    row += n
    a = sp.csc_matrix((np.concatenate([b[2] for b in row_blocks]),
                       (np.concatenate([b[0] for b in row_blocks]),
                        np.concatenate([b[1] for b in row_blocks]))), shape=(row, cols))
    col_lo = np.zeros(cols)
    col_hi = np.full(cols, np.inf)
    col_hi[:n] = np.where(inp.gpus > inp.capacity, 0, t)  # a gang wider than the cluster
    col_hi[i_p:i_p + n] = np.maximum(inp.epochs_total - inp.epochs_done, 0.0)
    col_lo[i_l:i_l + n] = -np.inf
    col_hi[i_l:i_l + n] = 0.0
    col_hi[i_r:i_r + n] = inp.cap_s
    integer = np.zeros(cols, dtype=bool)
    integer[:n] = True
    milp = Milp(c, a, np.concatenate(lo), np.concatenate(hi), col_lo, col_hi, integer)
    return WindowModel(milp, n)


def completion(inp: WindowInputs, rounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Planned epochs and remaining seconds after the window for integer rounds."""
    left = np.maximum(inp.epochs_total - inp.epochs_done, 0.0)
    p = np.minimum(left, inp.round_s * rounds / np.maximum(inp.epoch_s, 1e-9))
    r = np.maximum(0.0, inp.remaining_s - p * inp.epoch_s)
    return p, r


def evaluate(inp: WindowInputs, rounds: np.ndarray) -> tuple[float, bool]:
    """The program's objective for given rounds, and whether it meets every constraint."""
    p, r = completion(inp, rounds)
    logs = pwl_log((inp.epochs_done + p) / inp.epochs_total)
    objective = float(inp.weight @ logs) / inp.n - inp.k * float(r.max(initial=0.0)) / (
        inp.round_s * inp.rounds)
    ok = bool(np.all(r <= inp.cap_s + 1e-6) and inp.gpus @ rounds <= inp.capacity * inp.rounds
              and np.all(rounds >= 0) and np.all(rounds <= inp.rounds)
              and all(rounds[m].sum() <= lim for m, lim in gang_limits(inp)))
    return objective, ok


def to_point(inp: WindowInputs, rounds: np.ndarray) -> np.ndarray:
    """A full variable vector for integer rounds (a warm start for the MILP)."""
    p, r = completion(inp, rounds)
    logs = pwl_log((inp.epochs_done + p) / inp.epochs_total)
    return np.concatenate([rounds.astype(float), p, logs, r, [r.max(initial=0.0)]])


def round_down_up(inp: WindowInputs, fractional: np.ndarray) -> np.ndarray:
    """Round an LP solution: floor, then add rounds while capacity lasts, first to jobs whose
    fairness cap the floor would break, then by largest fraction."""
    base = np.floor(fractional + 1e-7).astype(int)
    left = inp.capacity * inp.rounds - int(inp.gpus @ base)
    frac = fractional - base
    _, r = completion(inp, base)
    urgent = (r > inp.cap_s + 1e-6).astype(float)
    gangs = [(m, lim - int(base[m].sum())) for m, lim in gang_limits(inp)]
    for i in np.lexsort((-frac, -urgent)):
        if frac[i] <= 1e-7 and not urgent[i]:  # an urgent job's fraction may be ~0 (LP
            break  # rounds of 2.00000005 floor to 2 and break its cap): it goes up all the same
        if inp.gpus[i] <= left and base[i] < inp.rounds and all(
                room > 0 for m, room in gangs if m[i]):
            base[i] += 1
            left -= int(inp.gpus[i])
            gangs = [(m, room - int(m[i])) for m, room in gangs]
    return base
