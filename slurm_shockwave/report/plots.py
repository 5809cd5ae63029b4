"""Comparison plots: JCT CDF, rho distribution, GPUs busy over time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from slurm_shockwave.sim.run import SimResult


def _cdf(ax: Any, values: Sequence[float], label: str) -> None:
    xs = sorted(values)
    n = len(xs)
    ax.step(xs, [(i + 1) / n for i in range(n)], where="post", label=label)


def _save(fig: Any, ax: Any, path: Path, *, xlabel: str, ylabel: str, title: str) -> Path:
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def write_plots(results: Sequence[SimResult], out: Path, title: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        _cdf(ax, [(o.finish_s - o.arrival_s) / 3600 for o in r.outcomes], r.policy)
    paths.append(_save(fig, ax, out / "jct_cdf.png", xlabel="job completion time (h)",
                       ylabel="fraction of jobs", title=f"JCT CDF: {title}"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        _cdf(ax, list(r.rhos.values()), r.policy)
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    paths.append(_save(fig, ax, out / "rho_cdf.png",
                       xlabel="finish-time fairness rho (lower is fairer)",
                       ylabel="fraction of jobs", title=f"rho CDF: {title}"))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in results:
        ax.step([t / 3600 for t, _ in r.timeline], [g for _, g in r.timeline], where="post",
                label=r.policy, linewidth=1)
    if results:
        ax.axhline(results[0].gpus, color="grey", linestyle="--", linewidth=1)
    paths.append(_save(fig, ax, out / "gpus_busy.png", xlabel="time (h)", ylabel="GPUs busy",
                       title=f"GPUs busy over time: {title}"))
    return paths
