"""Rich tables for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from slurm_shockwave.sim.run import SimResult


def console(*, stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped, and
    prints text as it is: what it shows comes from users (a hint's reason quotes the
    job's comment), and rich markup in it crashed ``explain`` or lost its brackets."""
    probe = Console(stderr=stderr, markup=False)
    return probe if probe.is_terminal else Console(stderr=stderr, width=140, markup=False)


def _fmt_s(v: float) -> str:
    return f"{v:,.0f}"


def summary_table(result: SimResult, title: str) -> Table:
    s = result.summary
    t = Table(title=Text(title), show_header=True)  # a file name is not markup
    t.add_column("metric")
    t.add_column("value", justify="right")
    for name, value in (
        ("policy", result.policy), ("jobs", str(s.jobs)), ("GPUs", str(s.gpus)),
        ("makespan (s)", _fmt_s(s.makespan_s)), ("average JCT (s)", _fmt_s(s.avg_jct_s)),
        ("worst rho", f"{s.worst_rho:.3f}"), ("median rho", f"{s.median_rho:.3f}"),
        ("unfair jobs (rho > 1.05)", f"{100 * s.unfair_fraction:.1f}%"),
        ("unfair jobs (rho > 1.1)", f"{100 * s.unfair_fraction_110:.1f}%"),
        ("GPU utilisation", f"{100 * s.utilization:.1f}%"),
        ("  without restore time", f"{100 * s.useful_utilization:.1f}%"),
        ("rounds", str(result.rounds)),
        ("wall time (s)", f"{result.wall_s:.2f}"),
    ):
        t.add_row(name, value)
    if result.cut_off:
        t.add_row("jobs cut off (--cutoff, or the config's deadline_factor)",
                  str(result.cut_off))
    return t


def compare_table(results: Sequence[SimResult], title: str) -> Table:
    """Absolute values with the ratio to the first policy beside each."""
    base = results[0].summary
    t = Table(title=Text(title))
    for col in ("policy", "makespan (s)", "x", "avg JCT (s)", "x", "worst rho", "x",
                "unfair %", "util %", "useful %", "wall s"):
        t.add_column(col, justify="left" if col == "policy" else "right")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b else "-"

    for r in results:
        s = r.summary
        t.add_row(r.policy, _fmt_s(s.makespan_s), ratio(s.makespan_s, base.makespan_s),
                  _fmt_s(s.avg_jct_s), ratio(s.avg_jct_s, base.avg_jct_s),
                  f"{s.worst_rho:.3f}", ratio(s.worst_rho, base.worst_rho),
                  f"{100 * s.unfair_fraction:.1f}", f"{100 * s.utilization:.1f}",
                  f"{100 * s.useful_utilization:.1f}", f"{r.wall_s:.2f}")
    cut = [f"{r.policy} {r.cut_off}" for r in results if r.cut_off]
    if cut:  # their JCT is the cut's, which flatters the average (a red-team)
        t.caption = Text(f"jobs cut off (--cutoff, or the config's deadline_factor; their "
                         f"JCT is at the cut): {', '.join(cut)}")
    return t


def rows_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    t = Table(title=Text(title))
    for c in columns:
        # folded, never cut: a cut value reads as another (a red-team: rho "1.…", where
        # "sw-node3[0…", a reason "waiting_capacity(remain…" at 80 or 120 columns, and
        # in piped output)
        t.add_column(c, overflow="fold")
    for row in rows:
        t.add_row(*(str(v) for v in row))
    return t
