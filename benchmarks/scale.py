"""The scale study: Shockwave against all nine baselines on the paper's traces and ours.

For each trace (benchmarks/traces.py): every policy's metrics, the trace's makespan lower
bound, and the four targets of issue 10 as pass/fail, each measured against the best of
all nine baselines:

- makespan <= 1.10 x the lower bound (max of latest arrival + exclusive runtime, and
  total GPU-work / GPUs);
- worst rho <= the lowest worst rho of the nine;
- average JCT <= 1.10 x the lowest of the nine;
- unfair fraction (rho > 1.05) <= 2%.

Every policy runs as configured in ``--settings`` (default: etc/shockwave.yaml as
shipped); ``--config`` overrides Shockwave's section. Prints one JSON object; ``--out
DIR`` also writes a Pareto plot per trace (``pareto_<trace>.png``: makespan and average
JCT against worst rho, one point per policy) and the CDF plots (``scale_<trace>/``).

    python -m benchmarks.scale --json [--traces 120,220,small] [--out docs/img]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import traces
from benchmarks.reference_runs import machine
from slurm_shockwave.config import Settings, load_settings
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.report.results import summary_record
from slurm_shockwave.sim.inputs import Workload
from slurm_shockwave.sim.run import SimResult, simulate

SHIPPED = Path(__file__).resolve().parents[1] / "etc" / "shockwave.yaml"
# the nine published baselines; elastic_greedy is the elastic comparison (benchmarks/elastic.py)
# and on these fixed-count traces runs exactly as FIFO (tests/test_elastic_policy.py)
BASELINES = tuple(sorted(n for n in POLICIES if n not in ("shockwave", "elastic_greedy")))
MAKESPAN_SLACK = 1.10
JCT_SLACK = 1.10
UNFAIR_LIMIT = 0.02


def run_policy(name: str, workload: Workload, gpus: int, settings: Settings,
               override: Mapping[str, Any] | None = None) -> SimResult:
    section = {**(settings.policies.get(name) or {}), **(override or {})}
    sim = settings.simulator
    return simulate(workload, make_policy(name, section), gpus=gpus, round_s=sim.round_s,
                    restore_s=sim.restore_s, deadline_factor=sim.deadline_factor)


def targets(records: Mapping[str, Mapping[str, Any]], bound_s: float,
            policy: str = "shockwave") -> dict[str, dict[str, Any]]:
    """The four targets for ``policy`` against the best of the nine baselines."""
    sw = records[policy]
    base = [records[b] for b in BASELINES if b in records]

    def best(key: str) -> tuple[float, str]:
        r = min(base, key=lambda r: (float(r[key]), r["policy"]))
        return float(r[key]), str(r["policy"])

    rho, rho_by = best("worst_rho")
    jct, jct_by = best("avg_jct_s")
    rows = {
        "makespan": (float(sw["makespan_s"]), MAKESPAN_SLACK * bound_s,
                     f"{MAKESPAN_SLACK} x lower bound"),
        "worst_rho": (float(sw["worst_rho"]), rho, f"best baseline ({rho_by})"),
        "avg_jct": (float(sw["avg_jct_s"]), JCT_SLACK * jct,
                    f"{JCT_SLACK} x best baseline ({jct_by})"),
        "unfair_fraction": (float(sw["unfair_fraction"]), UNFAIR_LIMIT, "2%"),
    }
    return {k: {"value": round(v, 5), "limit": round(lim, 5), "against": what,
                "ratio": round(v / lim, 4) if lim > 0 else None, "pass": v <= lim + 1e-9}
            for k, (v, lim, what) in rows.items()}


def study(name: str, policies: list[str], settings: Settings,
          override: Mapping[str, Any] | None, out: Path | None) -> dict[str, Any]:
    workload, gpus = traces.load(name)
    bound = traces.lower_bound_s(workload, gpus)
    results = []
    for policy in policies:
        print(f"{name}: {policy} ...", file=sys.stderr, flush=True)
        results.append(run_policy(policy, workload, gpus, settings,
                                  override if policy == "shockwave" else None))
    records = {r.policy: summary_record(r, trace=name) for r in results}
    for r in records.values():
        r["makespan_vs_bound"] = round(float(r["makespan_s"]) / bound, 4)
    row: dict[str, Any] = {"jobs": len(workload.jobs), "gpus": gpus,
                           "lower_bound_s": round(bound, 1), "policies": records}
    if "shockwave" in records and all(b in records for b in BASELINES):
        row["targets"] = targets(records, bound)
        row["all_pass"] = all(t["pass"] for t in row["targets"].values())
    if out is not None:
        from slurm_shockwave.report.plots import write_pareto, write_plots

        title = f"{name}: {len(workload.jobs)} jobs, {gpus} GPUs"
        write_pareto(list(records.values()), out / f"pareto_{name}.png", title, bound)
        write_plots(results, out / f"scale_{name}", title)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", "--sizes", dest="traces", default=",".join(traces.ALL),
                    help=f"comma-separated, of: {', '.join(traces.ALL)}")
    ap.add_argument("--policies", default=",".join(("shockwave", *BASELINES)))
    ap.add_argument("--settings", default=str(SHIPPED), help="YAML settings (all policies)")
    ap.add_argument("--config", default="{}", help="JSON overrides of shockwave's settings")
    ap.add_argument("--out", default=None, help="directory for the plots")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    settings = load_settings(args.settings)
    out = Path(args.out) if args.out else None
    table = {name: study(name, args.policies.split(","), settings, json.loads(args.config), out)
             for name in args.traces.split(",")}
    print(json.dumps({"scale": table, "settings": args.settings, "machine": machine()}))


if __name__ == "__main__":
    main()
