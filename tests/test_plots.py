"""The comparison plots (report/plots.py): every policy drawn so it can be told apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.report import plots
from slurm_shockwave.sim.run import simulate
from tests.builders import a_spec, a_workload


def test_twelve_policies_are_drawn_in_twelve_different_styles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a red-team: the 11th policy drew in the first's colour and line
    (benchmarks.scale runs 11: shockwave and themis were one line in its plots)."""
    r = simulate(a_workload(a_spec(0, epochs=2), a_spec(1, epochs=3, gpus=2)),
                 make_policy("fifo"), gpus=2)
    results = [r.__class__(**{**r.__dict__, "policy": f"p{k}"}) for k in range(12)]
    seen: list[list[tuple[Any, Any]]] = []
    real = plots._save

    def save(fig: Any, ax: Any, path: Path, **kw: str) -> Path:
        seen.append([(line.get_color(), line.get_linestyle()) for line in ax.get_lines()
                     if not str(line.get_label()).startswith("_")])
        return real(fig, ax, path, **kw)

    monkeypatch.setattr(plots, "_save", save)
    assert len(plots.write_plots(results, tmp_path, "t")) == 3
    assert [len(styles) for styles in seen] == [12, 12, 12]
    assert all(len(set(styles)) == 12 for styles in seen), seen
