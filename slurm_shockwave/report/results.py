"""Results as plain records: the JSON object and the per-job CSV."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from slurm_shockwave.report.outputs import replacing
from slurm_shockwave.sim.run import SimResult


def summary_record(result: SimResult, *, trace: str = "",
                   settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run's figures; ``cut_off``: the jobs the simulator's cut-off
    (``deadline_factor``) ended before their work was done, whose JCT the averages count
    (found by a red-team: only the per-job CSV said so); ``settings``: how the run was
    made, where the caller knows (``cli.run_options.run_settings``)."""
    s = result.summary
    return {
        "policy": result.policy, "trace": trace, "jobs": s.jobs, "gpus": s.gpus,
        "makespan_s": round(s.makespan_s, 3), "avg_jct_s": round(s.avg_jct_s, 3),
        "worst_rho": round(s.worst_rho, 5), "median_rho": round(s.median_rho, 5),
        "unfair_fraction": round(s.unfair_fraction, 5),
        "unfair_fraction_110": round(s.unfair_fraction_110, 5),
        "utilization": round(s.utilization, 5),
        "useful_utilization": round(s.useful_utilization, 5), "rounds": result.rounds,
        "wall_s": round(result.wall_s, 3),
        "cut_off": result.cut_off,
        **({"settings": settings} if settings is not None else {}),
    }


def write_per_job_csv(result: SimResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["job_id", "gpus", "arrival_s", "finish_s", "jct_s", "exclusive_s",
                      "rho", "run_s", "rounds_run", "cut_off"])
        for o in result.outcomes:
            out.writerow([o.job_id, o.gpus, f"{o.arrival_s:.3f}", f"{o.finish_s:.3f}",
                          f"{o.finish_s - o.arrival_s:.3f}", f"{o.exclusive_s:.3f}",
                          f"{result.rhos[o.job_id]:.5f}", f"{o.run_s:.3f}", o.rounds_run,
                          int(o.cut_off)])
