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
        [--bounds [--slot-s 120]]

``--out DIR`` also writes the comparison plots per size (DIR/elastic_<size>/).
``--bounds`` adds, per size, what no schedule of the elastic trace can do (``fluid``: the
fluid relaxation's least average JCT, of any schedule and of one within issue 11's
makespan and worst-rho limits, solved as LPs; a schedule that knows the future included)
and whether that proves the average-JCT target out of reach.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks import traces
from benchmarks.args import Parser, floats, names
from benchmarks.reference_runs import REFERENCE, SETTINGS, machine, reference_workload
from slurm_shockwave.cli.errors import writable_dir
from slurm_shockwave.metrics.summary import contention
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.report.results import summary_record
from slurm_shockwave.sim.inputs import Workload, build_workload, load_throughputs
from slurm_shockwave.sim.run import SimResult, simulate
from slurm_shockwave.sim.trace import elastic_factors, make_elastic
from slurm_shockwave.solver import fluid

RUNS = (("shockwave_fixed", "shockwave", False), ("shockwave_elastic", "shockwave", True),
        ("elastic_greedy", "elastic_greedy", True),
        ("stretch_edf_fixed", "stretch_edf", False), ("stretch_edf_elastic", "stretch_edf", True))
JCT_TARGET = 0.85
MAKESPAN_TARGET = 0.95


def elastic_workload(size: str, low: float, high: float) -> tuple[Workload, Workload, int]:
    fixed, gpus = reference_workload(size)
    table = load_throughputs(REFERENCE / "throughputs" / f"{SETTINGS[size][2]}_throughputs.json")
    jobs = [make_elastic(j, low, high) for j in fixed.jobs]
    return fixed, build_workload(jobs, table, source=f"{fixed.source} (elastic)"), gpus


def num(record: dict[str, object], key: str) -> float:
    """A figure of a run's record (``summary_record``: JSON values)."""
    return float(record[key])  # type: ignore[arg-type]


def checks(rec: dict[str, dict[str, object]], policy: str = "shockwave") -> dict[str, object]:
    """Issue 11's checks of ``policy`` elastic against ``policy`` fixed and elastic_greedy."""
    fixed, el, base = rec[f"{policy}_fixed"], rec[f"{policy}_elastic"], rec["elastic_greedy"]

    jct = num(el, "avg_jct_s") / num(fixed, "avg_jct_s")
    mk = num(el, "makespan_s") / num(fixed, "makespan_s")
    return {
        "jct_ratio": round(jct, 3), "makespan_ratio": round(mk, 3),
        "jct_ok": jct <= JCT_TARGET, "makespan_ok": mk <= MAKESPAN_TARGET,
        "worst_rho_ok": num(el, "worst_rho") <= num(fixed, "worst_rho"),
        "beats_baseline_worst_rho": num(el, "worst_rho") < num(base, "worst_rho"),
        "beats_baseline_makespan": num(el, "makespan_s") < num(base, "makespan_s"),
    }


def fluid_bounds(fixed: Workload, elastic: Workload, gpus: int,
                 records: dict[str, dict[str, object]], slot_s: float) -> dict[str, object]:
    """What no schedule of the elastic trace can do, from the fluid relaxation
    (solver/fluid.py): the least average JCT of any schedule, and of one within issue
    11's limits against the fixed Shockwave run (makespan <= 0.95 x its makespan, every
    job's rho <= its worst rho), against the target 0.85 x its average JCT (None where
    the limits alone are out of reach, and the target with them); and the same jobs
    fixed, no limits, beside it. The limits and the target are the records' figures, as
    ``checks`` compares them; a run passes a check on its figures rounded as the records
    round them, so each limit is widened by that rounding's half unit and the target
    proven out of reach only above its own (a bound above the target by less proves
    nothing)."""
    started = time.perf_counter()
    ref = records["shockwave_fixed"]
    jobs = traces.fluid_jobs(elastic, gpus)
    mk_limit = MAKESPAN_TARGET * num(ref, "makespan_s") + 5e-4
    rho_limit = num(ref, "worst_rho") + 5e-6
    target = JCT_TARGET * num(ref, "avg_jct_s")
    within = fluid.deadlines(jobs, worst_rho=rho_limit,
                             contention=contention(len(elastic.jobs), gpus),
                             makespan_s=mk_limit)
    lp_s: dict[str, float] = {}

    def timed(key: str, jobs: fluid.FluidJobs, deadline_s: np.ndarray) -> float:
        t = time.perf_counter()
        value = fluid.min_avg_jct_s(jobs, deadline_s, slot_s)
        lp_s[key] = round(time.perf_counter() - t, 1)
        return value

    fixed_jobs = traces.fluid_jobs(fixed, gpus)
    row: dict[str, float] = {
        "avg_jct_s": timed("avg_jct_s", jobs, fluid.deadlines(jobs)),
        "avg_jct_s_within_limits": timed("avg_jct_s_within_limits", jobs, within),
        "avg_jct_s_fixed": timed("avg_jct_s_fixed", fixed_jobs, fluid.deadlines(fixed_jobs)),
    }
    bound = row["avg_jct_s_within_limits"]
    return {
        "slot_s": slot_s, **{k: round(v, 1) if math.isfinite(v) else None
                             for k, v in row.items()},
        "limits": {"makespan_s": round(mk_limit, 3), "worst_rho": round(rho_limit, 6)},
        "target_avg_jct_s": round(target, 1),
        "within_limits_vs_target": round(bound / target, 4) if math.isfinite(bound) else None,
        "proven_unreachable": bound > target + 5e-4,
        "lp_s": lp_s, "wall_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="120,220,900")
    ap.add_argument("--range", dest="factors", default="0.5,2")
    ap.add_argument("--out", default=None, help="write plots under this directory")
    ap.add_argument("--bounds", action="store_true",
                    help="also what no schedule can do (the fluid relaxation's LPs)")
    ap.add_argument("--slot-s", type=float, default=120.0,
                    help="the relaxation's slot (smaller: tighter, slower)")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    if not 1.0 <= args.slot_s <= 3600.0:
        ap.error(f"--slot-s: must be from 1 to 3600 seconds, not {args.slot_s}")
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
        row: dict[str, object] = {
            "gpus": gpus, "runs": records, "checks": checks(records),
            "checks_stretch_edf": checks(records, "stretch_edf"),
            "lower_bound_s": {"fixed": round(traces.lower_bound_s(fixed, gpus), 1),
                              "elastic": round(traces.elastic_lower_bound_s(elastic, gpus),
                                               1)}}
        if args.bounds:
            print(f"{size}: fluid bounds ...", file=sys.stderr, flush=True)
            row["fluid"] = fluid_bounds(fixed, elastic, gpus, records, args.slot_s)
        out[size] = row
        if args.out:
            from slurm_shockwave.report.plots import write_plots

            write_plots(results, Path(args.out) / f"elastic_{size}",
                        f"{size} jobs, {gpus} GPUs, elastic {low:g}x-{high:g}x")
    print(json.dumps({"elastic": out, "range": [low, high], "machine": machine()}))


if __name__ == "__main__":
    main()
