"""The paper's scale study: Shockwave next to the fair baselines at three cluster sizes.

120 jobs / 32 GPUs (tacc), 220 / 64 and 900 / 256 (wisr). For each size: every policy's
metrics, and Shockwave's ratios against the best of Gavel, Themis and AlloX (makespan
ratio = best baseline / Shockwave, so > 1 is better; the same for worst rho). Prints one
JSON object; ``--out DIR`` also writes the comparison plots per size.

    python benchmarks/scale.py --json [--sizes 120,220,900] [--out docs/img]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.reference_runs import machine, reference_workload
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.report.results import summary_record
from slurm_shockwave.sim.run import simulate

FAIR_BASELINES = ("gavel", "themis", "allox")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="120,220,900")
    ap.add_argument("--policies", default="shockwave,gavel,themis,allox,gandiva_fair,ossp,srtf")
    ap.add_argument("--config", default="{}", help="JSON settings for shockwave")
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    table = {}
    for size in args.sizes.split(","):
        workload, gpus = reference_workload(size)
        results = []
        for name in args.policies.split(","):
            cfg = json.loads(args.config) if name == "shockwave" else None
            print(f"{size}: {name} ...", file=sys.stderr, flush=True)
            results.append(simulate(workload, make_policy(name, cfg), gpus=gpus))
        records = {r.policy: summary_record(r) for r in results}
        row: dict[str, object] = {"gpus": gpus, "policies": records}
        if "shockwave" in records and all(b in records for b in FAIR_BASELINES):
            sw = records["shockwave"]
            best_mk = min(float(records[b]["makespan_s"]) for b in FAIR_BASELINES)
            best_rho = min(float(records[b]["worst_rho"]) for b in FAIR_BASELINES)
            row["makespan_ratio"] = round(best_mk / float(sw["makespan_s"]), 3)
            row["worst_rho_ratio"] = round(best_rho / float(sw["worst_rho"]), 3)
        table[size] = row
        if args.out:
            from slurm_shockwave.report.plots import write_plots

            write_plots(results, Path(args.out) / f"scale_{size}", f"{size} jobs, {gpus} GPUs")
    print(json.dumps({"scale": table, "machine": machine()}))


if __name__ == "__main__":
    main()
