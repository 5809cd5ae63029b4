"""Is a policy's result on a trace a property of the trace, or of its luck? The same
generated trace run as ``--copies`` copies, copy 0 as generated and each other one with
every arrival moved later by a seeded random 0 to ``--jitter-s`` seconds, each policy
in the simulator with the live costs of ``benchmarks.live_screen`` (restore, requeue
delay, fill steps, nodes of 8 GPUs). A preemptive schedule's makespan can move by
several percent with a few seconds of arrival jitter (a different job is preempted,
a node cleared a round later), so one run of one trace cannot say whether a policy
wins there. Per policy: each copy's makespan, average JCT and worst rho, their means,
spread and range, and, where ``fifo`` (the simulator's Slurm alone) runs too, on how
many copies the policy beats it on makespan and on worst rho. One JSON object.

    python -m benchmarks.jitter --shape 40x16 --seed 0 --copies 8 --policies fifo,shockwave --json
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from dataclasses import replace
from typing import Any

from benchmarks.args import Parser, floats, live_costs_args, names, policy_config
from benchmarks.live_screen import SHAPES, live_costs, metrics, simulate_live
from benchmarks.reference_runs import machine
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.sim.generate import generate
from slurm_shockwave.sim.inputs import build_workload, load_throughputs
from slurm_shockwave.sim.trace import TraceJob

SHAPE_NAMES = {f"{shape.num_jobs}x{gpus}": (name, shape, gpus) for name, shape, gpus in SHAPES}
"""``benchmarks.live_screen``'s shapes by jobs x GPUs (``40x16``: 40 jobs on 16 GPUs)."""


def jittered(jobs: list[TraceJob], copy: int, jitter_s: float) -> list[TraceJob]:
    """Copy 0 is the trace; copy k moves each arrival later by 0 to ``jitter_s`` seconds,
    drawn from a generator seeded with k."""
    if copy == 0:
        return jobs
    rng = random.Random(copy)
    return [replace(j, spec=replace(j.spec, arrival_s=j.spec.arrival_s + rng.uniform(0, jitter_s)))
            for j in jobs]


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": round(statistics.mean(values), 3), "sd": round(statistics.pstdev(values), 3),
            "min": min(values), "max": max(values)}


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="40x16", help=f"one of {', '.join(SHAPE_NAMES)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--jitter-s", default="30")
    ap.add_argument("--time-scale", default="30")
    ap.add_argument("--cred-expire-s", type=int, default=5)
    ap.add_argument("--policies", default="fifo,shockwave,stretch_edf")
    ap.add_argument("--config", default="{}", help="JSON settings for shockwave, e.g. "
                    "'{\"lease_overhead\": 0.05}'")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    if args.shape not in SHAPE_NAMES:
        ap.error(f"--shape: unknown shape {args.shape!r} (known: {', '.join(SHAPE_NAMES)})")
    if not 1 <= args.copies <= 1000:
        ap.error("--copies: must be from 1 to 1000")
    if not 0 <= args.seed < 2**32:
        ap.error("--seed: must be from 0 to 2^32 - 1")
    jitter_s = floats(ap, "--jitter-s", args.jitter_s, count=1, lo=0, hi=3600)[0]
    time_scale = live_costs_args(ap, args.time_scale, args.cred_expire_s)
    policies = names(ap, "--policies", args.policies, POLICIES)
    config = policy_config(ap, "--config", args.config, "shockwave")
    name, shape, gpus = SHAPE_NAMES[args.shape]
    table = load_throughputs(None)
    base = generate(shape, table, seed=args.seed)
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in policies}
    for copy in range(args.copies):
        print(f"copy {copy + 1}/{args.copies} ...", file=sys.stderr, flush=True)
        workload = build_workload(jittered(base, copy, jitter_s), table,
                                  source=f"{name} seed {args.seed} copy {copy}")
        for policy in policies:
            cfg = config if policy == "shockwave" else None
            runs[policy].append(metrics(simulate_live(
                workload, make_policy(policy, cfg), gpus, time_scale, args.cred_expire_s).summary))
    out: dict[str, Any] = {}
    for policy, rows in runs.items():
        entry: dict[str, Any] = {key: spread([r[key] for r in rows])
                                 for key in ("makespan_s", "avg_jct_s", "worst_rho")}
        entry["makespan_by_copy"] = [r["makespan_s"] for r in rows]
        if policy != "fifo" and "fifo" in runs:
            pairs = list(zip(rows, runs["fifo"], strict=True))
            entry["wins_makespan_vs_fifo"] = sum(a["makespan_s"] < b["makespan_s"]
                                                 for a, b in pairs)
            entry["wins_worst_rho_vs_fifo"] = sum(a["worst_rho"] < b["worst_rho"]
                                                  for a, b in pairs)
        out[policy] = entry
    restore, delay = live_costs(time_scale, args.cred_expire_s)
    print(json.dumps({"shape": name, "seed": args.seed, "gpus": gpus, "copies": args.copies,
                      "jitter_s": jitter_s, "time_scale": time_scale, "restore_s": restore,
                      "requeue_delay_s": delay, "shockwave_config": config, "policies": out,
                      "machine": machine()}))


if __name__ == "__main__":
    main()
