"""Which 24-40-job traces does Shockwave win live? The simulator with the live costs, first.

A live run takes minutes, so the traces for ``benchmarks.live`` are screened in the
simulator with the costs a live run has at ``--time-scale`` (a restart loses the emulated
restore plus half of Slurm's scheduling interval; a requeued job waits ``cred_expire`` +
1 s; the service's fill steps between rounds, and Slurm alone modelled as FIFO with
them, since Slurm's scheduler runs on every end and submission), on nodes of 8 GPUs.
For each generated trace (five shapes of 24-40 jobs on 16-32 GPUs, ``--seeds`` seeds
each): every policy's makespan, average JCT and worst rho, the
trace's makespan lower bound (latest arrival + exclusive runtime, or GPU-work / GPUs),
and whether Shockwave beats FIFO (the simulator's model of Slurm alone) on both makespan
and worst rho; ``restarts`` counts starts beyond each job's first (preemptions, moves).
``against_fifo`` counts, for every policy run, the traces where it beats FIFO on each
metric, with its means. One JSON object; every trace is reported, not only the wins.

    python -m benchmarks.live_screen --time-scale 30 --seeds 4 --json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from benchmarks import traces
from benchmarks.args import Parser, live_costs_args, names, policy_config
from benchmarks.reference_runs import machine
from slurm_shockwave.live.run import ROUND_TRACE_S, live_restore_s
from slurm_shockwave.metrics.summary import Summary
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import Workload, build_workload, load_throughputs
from slurm_shockwave.sim.run import SimResult, simulate

SHAPES: tuple[tuple[str, TraceShape, int], ...] = (
    ("32 jobs / 32 GPUs", TraceShape(num_jobs=32, mean_gap_s=45, min_h=0.2, max_h=1.5,
                                     gpu_mix=(0.4, 0.3, 0.2, 0.1)), 32),
    ("32 jobs / 24 GPUs", TraceShape(num_jobs=32, mean_gap_s=30, min_h=0.1, max_h=2.0,
                                     gpu_mix=(0.4, 0.3, 0.2, 0.1)), 24),
    ("36 jobs / 24 GPUs", TraceShape(num_jobs=36, mean_gap_s=40, min_h=0.1, max_h=1.5,
                                     gpu_mix=(0.5, 0.25, 0.15, 0.1)), 24),
    ("30 jobs / 32 GPUs", TraceShape(num_jobs=30, mean_gap_s=60, min_h=0.2, max_h=2.0,
                                     gpu_mix=(0.3, 0.3, 0.3, 0.1)), 32),
    ("40 jobs / 16 GPUs", TraceShape(num_jobs=40, mean_gap_s=30, min_h=0.1, max_h=1.0,
                                     gpu_mix=(0.5, 0.3, 0.15, 0.05)), 16),
)


def live_costs(time_scale: float, cred_expire_s: int) -> tuple[float, float]:
    """A restart's restore and a requeued job's wait, trace seconds, live at
    ``time_scale`` (module docstring)."""
    return live_restore_s(time_scale), (cred_expire_s + 1) * time_scale


def simulate_live(workload: Workload, policy: Policy[Any], gpus: int, time_scale: float,
                  cred_expire_s: int, fill: bool = True) -> SimResult:
    """``policy`` on ``workload`` in the simulator with the costs a live run has at
    ``time_scale``, on nodes of 8 GPUs."""
    restore, delay = live_costs(time_scale, cred_expire_s)
    return simulate(workload, policy, gpus=gpus, gpus_per_node=8, round_s=ROUND_TRACE_S,
                    restore_s=restore, requeue_delay_s=delay, fill_freed=fill)


def metrics(summary: Summary) -> dict[str, float]:
    """A run's makespan, average JCT and worst rho as the screen reports them."""
    return {"makespan_s": round(summary.makespan_s, 1), "avg_jct_s": round(summary.avg_jct_s, 1),
            "worst_rho": round(summary.worst_rho, 3)}


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-scale", default="30")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--cred-expire-s", type=int, default=5)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--config", default="{}", help="JSON settings for shockwave, e.g. "
                    "'{\"lease_overhead\": 0}' to measure what the leases do")
    ap.add_argument("--no-fill", action="store_true",
                    help="no fill steps between rounds (the paper's model; the service and "
                         "Slurm alone both start work between rounds)")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    time_scale = live_costs_args(ap, args.time_scale, args.cred_expire_s)
    if not 1 <= args.seeds <= 1000:
        ap.error("--seeds: must be from 1 to 1000")
    policies = names(ap, "--policies", args.policies, POLICIES)
    config = policy_config(ap, "--config", args.config, "shockwave")
    table = load_throughputs(None)
    restore, delay = live_costs(time_scale, args.cred_expire_s)
    rows: list[dict[str, Any]] = []
    for seed in range(args.seeds):
        for name, shape, gpus in SHAPES:
            trace = generate(shape, table, seed=seed)
            workload = build_workload(trace, table, source=f"{name} seed {seed}")
            bound = traces.lower_bound_s(workload, gpus)
            print(f"{name}, seed {seed} ...", file=sys.stderr, flush=True)
            runs = {}
            for policy in policies:
                cfg = config if policy == "shockwave" else None
                r = simulate_live(workload, make_policy(policy, cfg), gpus, time_scale,
                                  args.cred_expire_s, fill=not args.no_fill)
                runs[policy] = {**metrics(r.summary), "restarts": r.starts - len(trace)}
            sw, ff = runs.get("shockwave"), runs.get("fifo")
            rows.append({"shape": name, "seed": seed, "jobs": len(trace), "gpus": gpus,
                         "lower_bound_s": round(bound, 1), "policies": runs,
                         "shockwave_beats_slurm": bool(
                             sw and ff and sw["makespan_s"] < ff["makespan_s"]
                             and sw["worst_rho"] < ff["worst_rho"])})
    def with_fifo(policy: str) -> list[dict[str, Any]]:
        return [r for r in rows if policy in r["policies"] and "fifo" in r["policies"]]

    def mean(policy: str, key: str, over_bound: bool = False) -> float | None:
        """None with no trace to average (a 0 read as a perfect score)."""
        vals: list[float] = [
            r["policies"][policy][key] / (r["lower_bound_s"] if over_bound else 1.0)
            for r in with_fifo(policy)]
        return round(sum(vals) / len(vals), 3) if vals else None

    def against_fifo(policy: str) -> dict[str, Any]:
        """How often ``policy`` beats FIFO (the simulator's Slurm alone), trace by trace."""
        pairs = [(r["policies"][policy], r["policies"]["fifo"]) for r in with_fifo(policy)]
        return {
            "traces": len(pairs),
            "wins_makespan": sum(a["makespan_s"] < b["makespan_s"] for a, b in pairs),
            "wins_worst_rho": sum(a["worst_rho"] < b["worst_rho"] for a, b in pairs),
            "wins_both": sum(a["makespan_s"] < b["makespan_s"] and a["worst_rho"] < b["worst_rho"]
                             for a, b in pairs),
            "wins_avg_jct": sum(a["avg_jct_s"] < b["avg_jct_s"] for a, b in pairs),
            "mean_makespan_over_bound": mean(policy, "makespan_s", True),
            "mean_avg_jct_s": mean(policy, "avg_jct_s"),
            "mean_worst_rho": mean(policy, "worst_rho"),
            "mean_restarts": (round(sum(a["restarts"] for a, _ in pairs) / len(pairs), 1)
                              if pairs else None),
        }

    against = {p: against_fifo(p) for p in policies if p != "fifo"}
    shockwave = against.get("shockwave") or against_fifo("shockwave")
    run = bool(shockwave["traces"])  # else no wins to count: null, not 0
    summary = {p: {"makespan_over_bound": mean(p, "makespan_s", True),
                   "avg_jct_s": mean(p, "avg_jct_s"), "worst_rho": mean(p, "worst_rho")}
               for p in ("shockwave", "fifo")} if run else {}
    print(json.dumps({"time_scale": time_scale, "restore_s": restore,
                      "fill_freed": not args.no_fill,
                      "requeue_delay_s": delay, "traces": rows,
                      "wins_both": shockwave["wins_both"] if run else None,
                      "wins_makespan": shockwave["wins_makespan"] if run else None,
                      "wins_worst_rho": shockwave["wins_worst_rho"] if run else None,
                      "mean": summary, "against_fifo": against, "machine": machine()}))


if __name__ == "__main__":
    main()
