"""The window program at scale: build, solve and certify one planning round.

Synthetic rounds shaped like the paper's: N active jobs drawn by the trace generator
(GPU demands 1/2/4/8 at 0.6/0.3/0.09/0.01, Accordion/GNS adaptation, so each job's
predicted epoch time mixes batch-size regimes), random progress, G = N / 3.5 GPUs
(the paper's contention), a T-round window. The plan that would run is the packed
schedule (per-round capacity, gangs); ``certified_gap`` is
|bound - objective| / |objective| where ``objective`` is the packed schedule's value of
the program's objective and ``bound`` the better of the LP relaxation's optimum and the
MILP's dual bound (both valid upper bounds on the full x_{i,t} program).

    python benchmarks/solver.py --jobs 2000 --rounds 20 --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time

import numpy as np

from slurm_shockwave.model.job import Job, JobProgress
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.policies.shockwave.estimates import estimate
from slurm_shockwave.policies.shockwave.policy import window_inputs
from slurm_shockwave.policies.shockwave.schedule import pack
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import build_workload
from slurm_shockwave.solver.milp import relative_gap
from slurm_shockwave.solver.plan_window import solve_window
from slurm_shockwave.solver.window import WindowInputs, evaluate
from slurm_shockwave.workloads.bundled import bundled_table
from slurm_shockwave.workloads.profile import run_lengths


def synthetic_round(n: int, rounds: int, seed: int, k: float) -> WindowInputs:
    table = bundled_table("wisr")
    jobs = generate(TraceShape(num_jobs=n, mean_gap_s=5.0), table, seed)
    workload = build_workload(jobs, table, source="synthetic")
    rng = random.Random(seed)
    views = []
    for tj in jobs:
        prof = workload.profiles[tj.spec.job_id]
        done = rng.random() * 0.8 * prof.num_epochs
        bs = prof.bs_by_epoch[min(int(done), prof.num_epochs - 1)]
        progress = JobProgress(epochs_done=done, bs=bs, epoch_s=prof.epoch_s_by_bs[bs],
                               bs_history=tuple(run_lengths(prof.bs_by_epoch[: int(done)])),
                               epoch_s_by_bs=tuple(sorted(prof.epoch_s_by_bs.items())))
        views.append(Job(tj.spec, progress, Phase.PENDING))
    est = {j.job_id: estimate(j) for j in views}
    return window_inputs(views, est, capacity=max(8, int(n / 3.5) // 8 * 8), rounds=rounds,
                         round_s=120.0, k=k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--backend", default="highs")
    ap.add_argument("--time-limit-s", type=float, default=15.0)
    ap.add_argument("--rel-gap", type=float, default=1e-4)
    ap.add_argument("--k", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    inp = synthetic_round(args.jobs, args.rounds, args.seed, args.k)
    started = time.perf_counter()
    sol = solve_window(inp, backend=args.backend, time_limit_s=args.time_limit_s,
                       rel_gap=args.rel_gap)
    ids = list(range(inp.n))
    order = sorted(ids, key=lambda i: (-int(inp.gpus[i]), -int(sol.rounds[i])))  # widest first
    schedule = pack({i: int(sol.rounds[i]) for i in ids}, {i: int(inp.gpus[i]) for i in ids},
                    order, inp.capacity, inp.rounds, contiguous=False)
    placed = np.zeros(inp.n, dtype=int)
    for round_jobs in schedule:
        for i in round_jobs:
            placed[i] += 1
    objective, feasible = evaluate(inp, placed)
    wall = time.perf_counter() - started
    print(json.dumps({
        "jobs": args.jobs, "rounds": args.rounds, "gpus": inp.capacity,
        "build_s": round(sol.build_s, 4), "solve_s": round(sol.wall_s - sol.build_s, 4),
        "wall_s": round(wall, 4),
        "certified_gap": relative_gap(sol.bound, objective),
        "objective": objective, "bound": sol.bound, "status": sol.status,
        "backend": sol.backend, "feasible": feasible,
        "rounds_lost_in_packing": int((sol.rounds - placed).sum()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }))


if __name__ == "__main__":
    main()
