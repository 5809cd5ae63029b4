"""Elastic jobs: Shockwave choosing GPU counts against the same jobs fixed and against the
elastic baseline, on the paper's traces made elastic (range LO x .. HI x each request).

For each size: Shockwave on the trace as published (fixed counts), Shockwave on the
elastic trace, and ``elastic_greedy`` on the elastic trace; ratios elastic / fixed
(below 1 is better) and the checks of issue 11 (average JCT <= 0.85x and makespan <=
0.95x of fixed, worst rho no worse; better than the elastic baseline on worst rho and
makespan). The same for ``stretch_edf`` (ours; it only grows elastic jobs), fixed and
elastic, under ``checks_stretch_edf``; and the makespan's lower bounds, fixed and elastic
(``benchmarks/traces.py``). Prints one JSON object.

    python -m benchmarks.elastic --json [--sizes 120,220,900] [--range 0.5,2] [--out DIR]

``--out DIR`` also writes the comparison plots per size (DIR/elastic_<size>/).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from benchmarks import traces
from benchmarks.args import Parser, floats, names
from benchmarks.reference_runs import REFERENCE, SETTINGS, machine, reference_workload
from slurm_shockwave.cli.errors import writable_dir
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.report.results import summary_record
from slurm_shockwave.sim.inputs import Workload, build_workload, load_throughputs
from slurm_shockwave.sim.run import SimResult, simulate
from slurm_shockwave.sim.trace import elastic_factors, make_elastic

RUNS = (("shockwave_fixed", "shockwave", False), ("shockwave_elastic", "shockwave", True),
        ("elastic_greedy", "elastic_greedy", True),
        ("stretch_edf_fixed", "stretch_edf", False), ("stretch_edf_elastic", "stretch_edf", True))


def elastic_workload(size: str, low: float, high: float) -> tuple[Workload, Workload, int]:
    fixed, gpus = reference_workload(size)
    table = load_throughputs(REFERENCE / "throughputs" / f"{SETTINGS[size][2]}_throughputs.json")
    jobs = [make_elastic(j, low, high) for j in fixed.jobs]
    return fixed, build_workload(jobs, table, source=f"{fixed.source} (elastic)"), gpus


def checks(rec: dict[str, dict[str, object]], policy: str = "shockwave") -> dict[str, object]:
    """Issue 11's checks of ``policy`` elastic against ``policy`` fixed and elastic_greedy."""
    fixed, el, base = rec[f"{policy}_fixed"], rec[f"{policy}_elastic"], rec["elastic_greedy"]

    def num(r: dict[str, object], key: str) -> float:
        return float(r[key])  # type: ignore[arg-type]

    jct = num(el, "avg_jct_s") / num(fixed, "avg_jct_s")
    mk = num(el, "makespan_s") / num(fixed, "makespan_s")
    return {
        "jct_ratio": round(jct, 3), "makespan_ratio": round(mk, 3),
        "jct_ok": jct <= 0.85, "makespan_ok": mk <= 0.95,
        "worst_rho_ok": num(el, "worst_rho") <= num(fixed, "worst_rho"),
        "beats_baseline_worst_rho": num(el, "worst_rho") < num(base, "worst_rho"),
        "beats_baseline_makespan": num(el, "makespan_s") < num(base, "makespan_s"),
    }


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="120,220,900")
    ap.add_argument("--range", dest="factors", default="0.5,2")
    ap.add_argument("--out", default=None, help="write plots under this directory")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    low, high = floats(ap, "--range", args.factors, 2)
    sizes = names(ap, "--sizes", args.sizes, SETTINGS)
    try:
        elastic_factors(low, high)
        writable_dir(args.out, "--out")
    except InputError as exc:
        ap.error(str(exc))
    out: dict[str, object] = {}
    for size in sizes:
        fixed, elastic, gpus = elastic_workload(size, low, high)
        records: dict[str, dict[str, object]] = {}
        results: list[SimResult] = []
        for label, policy, is_elastic in RUNS:
            print(f"{size}: {label} ...", file=sys.stderr, flush=True)
            result = simulate(elastic if is_elastic else fixed, make_policy(policy), gpus=gpus)
            records[label] = summary_record(result)
            results.append(replace(result, policy=label))
        out[size] = {"gpus": gpus, "runs": records, "checks": checks(records),
                     "checks_stretch_edf": checks(records, "stretch_edf"),
                     "lower_bound_s": {"fixed": round(traces.lower_bound_s(fixed, gpus), 1),
                                       "elastic": round(traces.elastic_lower_bound_s(
                                           elastic, gpus), 1)}}
        if args.out:
            from slurm_shockwave.report.plots import write_plots

            write_plots(results, Path(args.out) / f"elastic_{size}",
                        f"{size} jobs, {gpus} GPUs, elastic {low:g}x-{high:g}x")
    print(json.dumps({"elastic": out, "range": [low, high], "machine": machine()}))


if __name__ == "__main__":
    main()
