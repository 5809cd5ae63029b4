"""Comparison plots: JCT CDF, rho distribution, GPUs busy over time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import ScalarFormatter

from slurm_shockwave.model.bounds import utf8_text
from slurm_shockwave.report.outputs import PLOTS, replacing
from slurm_shockwave.sim.run import SimResult

_STYLES = ("-", "--", ":", "-.")


def _style(k: int) -> dict[str, Any]:
    """The k-th policy's colour and line: the 10 colours of matplotlib's cycle, then each
    again with another line (the 11th policy drew as the first, found by a red-team:
    shockwave and themis could not be told apart in benchmarks.scale's plots)."""
    return {"color": f"C{k % 10}", "linestyle": _STYLES[(k // 10) % len(_STYLES)]}


def _cdf(ax: Any, values: Sequence[float], label: str, k: int) -> None:
    xs = sorted(values)
    n = len(xs)
    ax.step(xs, [(i + 1) / n for i in range(n)], where="post", label=label, **_style(k))


def _write(fig: Any, path: Path, dpi: int) -> None:
    try:
        with replacing(path) as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)


def _literal(title: str) -> str:
    """A title as written: a trace's file name may hold ``$``, which matplotlib would
    read as mathematics, or bytes that are not UTF-8, which it refuses (both failed
    after the table was printed)."""
    return utf8_text(title).replace("$", r"\$")


def _save(fig: Any, ax: Any, path: Path, *, xlabel: str, ylabel: str, title: str) -> Path:
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    _write(fig, path, dpi=110)
    return path


def write_plots(results: Sequence[SimResult], out: Path, title: str) -> list[Path]:
    title = _literal(title)
    out.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, r in enumerate(results):
        _cdf(ax, [(o.finish_s - o.arrival_s) / 3600 for o in r.outcomes], r.policy, k)
    paths.append(_save(fig, ax, out / PLOTS[0], xlabel="job completion time (h)",
                       ylabel="fraction of jobs", title=f"JCT CDF: {title}"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, r in enumerate(results):
        _cdf(ax, list(r.rhos.values()), r.policy, k)
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    paths.append(_save(fig, ax, out / PLOTS[1],
                       xlabel="finish-time fairness rho (lower is fairer)",
                       ylabel="fraction of jobs", title=f"rho CDF: {title}"))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, r in enumerate(results):
        ax.step([t / 3600 for t, _ in r.timeline], [g for _, g in r.timeline], where="post",
                label=r.policy, linewidth=1, **_style(k))
    if results:
        ax.axhline(results[0].gpus, color="grey", linestyle="--", linewidth=1)
    paths.append(_save(fig, ax, out / PLOTS[2], xlabel="time (h)", ylabel="GPUs busy",
                       title=f"GPUs busy over time: {title}"))
    return paths


def write_pareto(records: Sequence[Mapping[str, Any]], path: Path, title: str,
                 bound_s: float, limits: Mapping[str, float] | None = None) -> Path:
    """Makespan and average JCT against worst rho, one point per policy: lower-left is
    better on both axes. The solid line is the makespan bound; the dashed and dotted ones
    are ``limits`` ('makespan', 'avg_jct', 'worst_rho': the targets' own, given by the
    caller, who knows which policies are the baselines), when given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, label in ((axes[0], "makespan_s", "makespan (h)"),
                           (axes[1], "avg_jct_s", "average JCT (h)")):
        for r in records:
            mine = r["policy"] == "shockwave"
            x, y = float(r[key]) / 3600, float(r["worst_rho"])
            ax.scatter([x], [y], s=90 if mine else 40, marker="*" if mine else "o",
                       color="crimson" if mine else "steelblue", zorder=3)
            ax.annotate(str(r["policy"]), (x, y), textcoords="offset points", xytext=(5, 4),
                        fontsize=8, fontweight="bold" if mine else "normal")
        if key == "makespan_s":
            ax.axvline(bound_s / 3600, color="black", linewidth=1, label="lower bound")
        if limits is not None:
            if key == "makespan_s":
                ax.axvline(limits["makespan"] / 3600, color="grey", linestyle="--",
                           linewidth=1, label="1.1 x lower bound")
            else:
                ax.axvline(limits["avg_jct"] / 3600, color="grey", linestyle="--",
                           linewidth=1, label="1.1 x best baseline")
            ax.axhline(limits["worst_rho"], color="grey", linestyle=":", linewidth=1,
                       label="best baseline worst rho")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.set(xlabel=label, ylabel="worst rho (log)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Pareto view: {_literal(title)}")
    _write(fig, path, dpi=100)
    return path
