"""One live round against the real local cluster with many jobs in the queue.

Submits ``--jobs`` hinted jobs to the managed partition (held at submit by
job_submit.lua), lets a first round start a share of them, then times the next round:
``observe_s`` (squeue/sinfo and building the view) and ``apply_s`` for a plan that starts
some held jobs, preempts some running ones (the signal part; their requeue-hold comes
when the grace time ends) and re-holds the rest. Prints one JSON object. Needs
docker-slurm/start.sh (SLURM_CONF set); cancels its jobs at the end.

    python -m benchmarks.slurm_round --jobs 2000 --json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from benchmarks.args import Parser
from benchmarks.reference_runs import machine
from benchmarks.slurm_jobs import cancel, submit_many
from slurm_shockwave.clock import WallClock
from slurm_shockwave.model.plan import Action, ActionKind
from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.world import SlurmCluster


def hinted(n: int) -> list[str]:
    """sbatch options of n hinted 1-GPU jobs that survive their checkpoint signal."""
    return [f"--gres=gpu:1 --comment='model=resnet18 bs=32 epochs={10 + i % 50} mode=gns "
            "signal=USR1 grace=600'" for i in range(n)]


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--start", type=int, default=16, help="jobs the plan starts")
    ap.add_argument("--preempt", type=int, default=8, help="running jobs it preempts")
    ap.add_argument("--owner-released", type=int, default=200,
                    help="held jobs released by their owners before the round (re-held)")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    for option, value, lo in (("--jobs", args.jobs, 1), ("--start", args.start, 0),
                              ("--preempt", args.preempt, 0),
                              ("--owner-released", args.owner_released, 0)):
        if value < lo:
            ap.error(f"{option}: must be >= {lo}, not {value}")
    if not os.environ.get("SLURM_CONF"):
        ap.error("SLURM_CONF is not set: eval \"$(docker-slurm/start.sh)\" first")
    backend = CliBackend()
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as fh:
        fh.write("#!/bin/sh\ntrap '' USR1\nsleep 3600\n")  # survives its checkpoint signal
    os.chmod(fh.name, 0o755)
    t0 = time.perf_counter()
    mine: list[int] = []
    try:
        mine = submit_many(hinted(args.jobs), fh.name)
        submit_s = time.perf_counter() - t0
        print(f"submitted {args.jobs} jobs in {submit_s:.1f}s", file=sys.stderr)
        world = SlurmCluster(backend, WallClock())
        # round 1: start a first batch so there is something to preempt
        ours = set(mine)  # the plan acts on the benchmark's own jobs only
        view = world.observe()
        own = [j for j in view.jobs if j.job_id in ours]
        first = [Action(ActionKind.START, j.job_id) for j in own[: args.preempt * 2]]
        world.apply(first)
        time.sleep(8)
        idle = [j.job_id for j in own[args.preempt * 2 + args.start:]]
        backend.release(idle[: args.owner_released])  # owners, behind the planner's back
        # round 2, timed: observe, then start some, preempt some, re-hold the rest
        t1 = time.perf_counter()
        view = world.observe()
        t2 = time.perf_counter()
        running = [j.job_id for j in view.jobs if j.is_running and j.job_id in ours]
        waiting = [j.job_id for j in view.jobs if not j.is_running and j.job_id in ours]
        actions = ([Action(ActionKind.PREEMPT, jid) for jid in running[: args.preempt]]
                   + [Action(ActionKind.KEEP, jid) for jid in running[args.preempt:]]
                   + [Action(ActionKind.START, jid) for jid in waiting[: args.start]])
        result = world.apply(actions)
        t3 = time.perf_counter()
        print(json.dumps({
            "jobs": len(view.jobs), "running": len(running), "observe_s": round(t2 - t1, 3),
            "apply_s": round(t3 - t2, 3), "round_s": round(t3 - t1, 3),
            "started": min(args.start, len(waiting)),
            "preempted": min(args.preempt, len(running)),
            "owner_released_and_reheld": sum(
                1 for j in backend.list_jobs() if j.job_id in set(idle[: args.owner_released])
                and j.held),
            "outcomes": {o: result.count(o) for o in {r.outcome for r in result.results}},
            "submit_s": round(submit_s, 1), "machine": machine()}, default=str))
    finally:
        cancel(mine)
        os.unlink(fh.name)


if __name__ == "__main__":
    main()
