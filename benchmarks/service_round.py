"""One full service round on the local cluster with many jobs in the queue.

Submits ``--jobs`` hinted jobs of mixed 1/2/4/8 GPUs to the managed partition, runs the
service `shockwave serve` makes from the same settings (``--config``, default
etc/shockwave.yaml; Shockwave by default; the real store in a temporary folder) for a
first round
(a full solve, starts, and the re-hold of every other job: ``first_round``), submits
``--arrivals`` more jobs so the plan must be solved again, and times the next round:
observe, plan, apply and persist, as the service logs them. ``db_bytes_per_round`` is
the store's growth per round over the ``--rounds`` rounds that follow, with the whole
queue in it. Needs docker-slurm/start.sh (SLURM_CONF set); cancels exactly the jobs it
submitted.

    python -m benchmarks.service_round --jobs 2000 --json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.args import Parser
from benchmarks.reference_runs import machine
from benchmarks.slurm_jobs import cancel, submit_many
from slurm_shockwave.cli.live_options import Live
from slurm_shockwave.cli.live_options import service as shipped_service
from slurm_shockwave.config import live_policy, load_settings
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.service.heartbeat import write_heartbeat
from slurm_shockwave.slurm.cli_backend import CliBackend

GPUS = (1, 1, 2, 2, 4, 8)


def mixed(n: int, partition: str) -> list[str]:
    """sbatch options of n hinted jobs of 1-8 GPUs in ``partition``."""
    return [f"-p {partition} --gres=gpu:{GPUS[i % len(GPUS)]} "
            f"--comment='model=resnet18 bs=32 epochs={10 + i % 50} mode=gns'"
            for i in range(n)]


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--policy", default="shockwave")
    ap.add_argument("--rounds", type=int, default=3, help="rounds measured for db growth")
    ap.add_argument("--arrivals", type=int, default=20,
                    help="jobs submitted before the timed round (so the plan is re-solved)")
    ap.add_argument("--config", default=None, help="settings file (default: etc/shockwave.yaml)")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    for option, value, lo in (("--jobs", args.jobs, 1), ("--rounds", args.rounds, 1),
                              ("--arrivals", args.arrivals, 0)):
        if value < lo:
            ap.error(f"{option}: must be >= {lo}, not {value}")
    try:  # before any job is submitted
        settings = load_settings(args.config or Path(__file__).parents[1] / "etc" /
                                 "shockwave.yaml")
        live_policy(settings, args.policy)
    except InputError as exc:
        ap.error(str(exc))
    if not os.environ.get("SLURM_CONF"):
        ap.error("SLURM_CONF is not set: eval \"$(docker-slurm/start.sh)\" first")
    heartbeat = os.environ.get("SHOCKWAVE_HEARTBEAT")
    work = Path(tempfile.mkdtemp(prefix="shockwave-bench-"))
    # the service `shockwave serve` makes from the same settings (its world's partition,
    # restart cost and fill steps, its own heartbeat where the local cluster reads it)
    svc = replace(settings.service, heartbeat=heartbeat or str(work / "heartbeat"))
    env = Live(replace(settings, service=svc), CliBackend())
    script = work / "job.sh"
    script.write_text("#!/bin/sh\nsleep 3600\n")
    script.chmod(0o755)
    if heartbeat:  # held at submit, as with a live service
        write_heartbeat(heartbeat, time.time(), 3600)
    t0 = time.perf_counter()
    mine: list[int] = []
    try:
        mine += submit_many(mixed(args.jobs, env.partition), str(script))
        submit_s = time.perf_counter() - t0
        print(f"submitted {len(mine)} jobs in {submit_s:.1f}s", file=sys.stderr)
        store = env.store(str(work / "state.db"))
        service = shipped_service(env, store, args.policy)
        first = service.round_once()  # solves, starts a first share, re-holds the rest
        time.sleep(5)
        # new jobs: the plan is solved again
        mine += submit_many(mixed(args.arrivals, env.partition), str(script))
        timed = service.round_once()
        size0 = store.size_bytes()
        for _ in range(args.rounds):
            service.round_once()
        per_round = (store.size_bytes() - size0) / max(args.rounds, 1)
        p = timed.record.phase_s
        print(json.dumps({
            "jobs": timed.record.jobs, "policy": args.policy,
            "observe_s": round(p["observe"], 3), "plan_s": round(p["plan"], 3),
            "apply_s": round(p["apply"], 3), "persist_s": round(p["persist"], 3),
            "round_s": round(p["total"], 3), "db_bytes_per_round": round(per_round),
            "db_bytes": store.size_bytes(), "solver": timed.record.solver_status,
            "gap": timed.record.solver_gap, "submit_s": round(submit_s, 1),
            "first_round": {k: round(v, 3) for k, v in first.record.phase_s.items()},
            "machine": machine()}, default=str))
    finally:
        cancel(mine)
        if heartbeat:
            Path(heartbeat).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
