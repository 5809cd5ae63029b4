"""The window program at scale: the programs the Shockwave policy itself solves.

N active jobs drawn by the trace generator (GPU demands 1/2/4/8 at 0.6/0.3/0.09/0.01,
Accordion/GNS adaptation, so each job's predicted epoch time mixes batch-size regimes),
random progress, G = N / 3.5 GPUs (the paper's contention), a T-round window. The
policy's own ``plan()`` is called twice, as in a simulation:

* ``first``: the round the jobs arrive in (fair finish times set, caps that hold);
* ``late``: the same jobs after waiting ``--late-windows`` windows without progress, so
  many are behind their fair finish time: caps dropped, relaxation weights rho^lambda,
  the heavy programs of a long simulation.

Each is the policy's program (fairness caps, relaxation weights, its window order and
packing). With ``--trace 120|220|900`` the programs are instead every one the policy
solves while simulating that reference trace (up to ``--max-rounds``), and the top-level
keys are the slowest solve's, with a summary of all under ``simulation``.

``certified_gap`` is the policy's own certificate: |bound - objective| /
|objective| where ``objective`` is the packed schedule's value (the plan that runs) and
``bound`` the optimum of a finished LP relaxation or MILP (null, "unknown", when every
solve stopped at a limit, or when packing broke a fairness cap). Top-level keys are the
slower of the two rounds; both are under ``solves``.

    python -m benchmarks.solver --jobs 2000 --rounds 20 --json
    python -m benchmarks.solver --trace 900 --max-rounds 140 --json
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import time
from typing import Any

import numpy as np

from benchmarks.args import Parser
from slurm_shockwave.model.bounds import MAX_CLUSTER_GPUS
from slurm_shockwave.model.cluster import ClusterView, GpuNode
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import Job, JobProgress
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import Memory, Planned
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.policies.shockwave.config import ShockwaveConfig
from slurm_shockwave.policies.shockwave.policy import Shockwave
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import build_workload
from slurm_shockwave.workloads.bundled import bundled_table
from slurm_shockwave.workloads.profile import run_lengths

ROUND_S = 120.0
MAX_JOBS = 10_000
"""Five times the paper's largest program (2,000 jobs): one solve already takes minutes."""
MAX_LATE_WINDOWS = 1_000


def synthetic_jobs(n: int, seed: int) -> list[Job]:
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
    return views


def measure(policy: Shockwave, view: ClusterView, memory: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    planned = policy.plan(view, memory)
    wall = time.perf_counter() - started
    plan = planned.memory["plan"]
    return {**record(plan["solve"], len(view.jobs), plan["relaxed"]), "wall_s": round(wall, 4),
            "behind_rho_max": sum(r > policy.config.rho_max for r in plan["rho"].values()),
            "memory": planned.memory}


def record(solve: dict[str, Any], jobs: int, relaxed: bool) -> dict[str, Any]:
    return {"jobs": jobs, "build_s": round(solve["build_s"], 4),
            "solve_s": round(solve["wall_s"] - solve["build_s"], 4),
            "wall_s": round(solve["wall_s"], 4), "certified_gap": solve["gap"],
            "solver_gap": solve["solver_gap"],
            "objective": solve["objective"], "bound": solve["bound"],
            "status": solve["status"], "backend": solve["backend"],
            "feasible": solve["feasible"], "rounds_lost_in_packing": solve["rounds_lost"],
            "relaxed": relaxed}


class Recording(Shockwave):
    """The policy, unchanged, keeping a record of each program it solves."""

    solves: list[dict[str, Any]]

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        planned = super().plan(view, memory)
        plan = planned.memory.get("plan")
        if plan and plan["start"] == view.round_index and planned.memory["solves"] > \
                memory.get("solves", 0):
            self.solves.append(record(plan["solve"], len(view.jobs), plan["relaxed"]))
        return planned


def in_simulation(trace: str, config: ShockwaveConfig, max_rounds: int) -> dict[str, Any]:
    from benchmarks.reference_runs import reference_workload
    from slurm_shockwave.sim.run import RoundLimit, simulate

    workload, gpus = reference_workload(trace)
    policy = Recording(config)
    policy.solves = []
    # stopped at --max-rounds: the solves so far count (any other error is a bug, and
    # was hidden with it: found by a review)
    with contextlib.suppress(RoundLimit):
        simulate(workload, policy, gpus=gpus, max_rounds=max_rounds)
    solves = policy.solves
    slowest = max(solves, key=lambda r: r["wall_s"])
    finite = [r["certified_gap"] for r in solves if r["certified_gap"] is not None]
    return {**slowest, "gpus": gpus, "simulation": {
        "trace": trace, "max_rounds": max_rounds, "solves": len(solves),
        "wall_s_total": round(sum(r["wall_s"] for r in solves), 3),
        "wall_s_max": slowest["wall_s"],
        "certified_gap_max_known": max(finite, default=None),
        "certified_gap_median_known": float(np.median(finite)) if finite else None,
        "solver_gap_max": max((r["solver_gap"] for r in solves if r["solver_gap"] is not None),
                              default=None),
        "gap_unknown": len(solves) - len(finite),
        "stopped_at_node_limit": sum(r["status"] == "feasible" for r in solves),
        "rounds_lost_in_packing": sum(r["rounds_lost_in_packing"] for r in solves)}}


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--backend", default="highs")
    ap.add_argument("--time-limit-s", type=float, default=None,
                    help="wall-clock limit per solve (default: none, as in simulation)")
    ap.add_argument("--max-nodes", type=int, default=ShockwaveConfig.max_nodes)
    ap.add_argument("--rel-gap", type=float, default=ShockwaveConfig.rel_gap)
    ap.add_argument("--k", type=float, default=ShockwaveConfig.k)
    ap.add_argument("--gpus", type=int, default=None, help="default: N / 3.5")
    ap.add_argument("--late-windows", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", choices=("120", "220", "900"), default=None,
                    help="measure every program a simulation of this reference trace solves")
    ap.add_argument("--max-rounds", type=int, default=1_000_000)
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    # checked by the policy's own rules, each named by its option
    options = {"window_rounds": "--rounds", "k": "--k", "solver": "--backend",
               "max_nodes": "--max-nodes", "time_limit_s": "--time-limit-s",
               "rel_gap": "--rel-gap"}
    section = {"window_rounds": args.rounds, "k": args.k, "solver": args.backend,
               "max_nodes": args.max_nodes, "time_limit_s": args.time_limit_s,
               "rel_gap": args.rel_gap}
    try:
        config = make_policy("shockwave", section).config
    except InputError as exc:
        ap.error(f"{options.get(exc.field.rsplit('.', 1)[-1], exc.field)}: {exc.problem}")
    # bounded before any work: --jobs 1e9 drew jobs for ever, --late-windows nan failed
    # after the first solve, and a negative one was silently 1
    if not 1 <= args.jobs <= MAX_JOBS:
        ap.error(f"--jobs: must be from 1 to {MAX_JOBS}, not {args.jobs}")
    if args.gpus is not None and not (8 <= args.gpus <= MAX_CLUSTER_GPUS and args.gpus % 8 == 0):
        ap.error(f"--gpus: must be a multiple of 8 (nodes of 8) up to {MAX_CLUSTER_GPUS}, "
                 f"not {args.gpus}")
    if not 1 <= args.late_windows <= MAX_LATE_WINDOWS:  # NaN fails this too
        ap.error(f"--late-windows: must be from 1 to {MAX_LATE_WINDOWS}, not "
                 f"{args.late_windows}")
    if args.max_rounds < 1:
        ap.error(f"--max-rounds: must be >= 1, not {args.max_rounds}")
    machine = {"cpus": os.cpu_count(), "python": platform.python_version()}
    if args.trace:
        print(json.dumps({"rounds": args.rounds, **in_simulation(args.trace, config,
                                                                  args.max_rounds),
                          "machine": machine}))
        return
    jobs = synthetic_jobs(args.jobs, args.seed)
    gpus = args.gpus or max(8, int(args.jobs / 3.5) // 8 * 8)
    policy = Shockwave(config)
    nodes = tuple(GpuNode(f"n{i}", 8) for i in range(gpus // 8))
    arrived = max(j.spec.arrival_s for j in jobs)
    first_view = ClusterView(arrived, 0, ROUND_S, nodes, tuple(jobs), len(jobs))
    first = measure(policy, first_view, {})
    later = args.rounds * max(1, round(args.late_windows))  # a re-plan is due: same job set
    late_view = ClusterView(arrived + later * ROUND_S, later, ROUND_S, nodes, tuple(jobs),
                            len(jobs))
    late = measure(policy, late_view, first.pop("memory"))
    late.pop("memory")
    worst = max((first, late), key=lambda r: r["wall_s"])
    print(json.dumps({"rounds": args.rounds, "gpus": gpus, **worst,
                      "solves": {"first": first, "late": late}, "machine": machine}))


if __name__ == "__main__":
    main()
