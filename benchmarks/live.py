"""The whole system on a local cluster of its own, against the simulator and Slurm alone.

Starts a cluster of ``--gpus`` GPUs (nodes of 8), the service with ``--policy`` (or, with
``--policy slurm``, no service: Slurm's own multifactor priority with backfill), submits
the trace's emulated jobs at their arrival times divided by ``--time-scale``, waits for
all of them, stops everything it started, and prints one JSON object: policy, jobs,
completed, lost, makespan_s, avg_jct_s, worst_rho (trace seconds), the simulator's
sim_makespan_s, sim_avg_jct_s, sim_worst_rho on the same trace and settings, preemptions,
wall_s, and start_wait and requeue_wait: the actuation waits measured in slurmctld's log
(wall seconds) next to what the simulation charges for them.

    python -m benchmarks.live --trace T --gpus 16 --time-scale 60 --policy shockwave --json
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.args import Parser, floats, policy_config, time_scale_arg
from benchmarks.reference_runs import machine
from slurm_shockwave.live.run import (
    MAX_LIVE_GPUS,
    SLURM_ALONE,
    LiveSettings,
    LiveStatus,
    run_live,
)
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import POLICIES

MAX_RUN_S = 7 * 86400.0
"""The longest --timeout-s (and --kill-service-every): a week of wall time."""
OPTION_FIELDS = ("gpus", "work-dir")
"""run_live's refusals that name one of this command's options."""


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="demo-live",
                    help="trace file (default: the 16-job live demo)")
    ap.add_argument("--gpus", type=int, default=16,
                    help=f"whole nodes of 8, 8 to {MAX_LIVE_GPUS} (default 16)")
    ap.add_argument("--time-scale", default="60", help="1 to 1000 (default 60)")
    ap.add_argument("--policy", default="shockwave", choices=(*POLICIES, SLURM_ALONE))
    ap.add_argument("--throughputs", default=None)
    ap.add_argument("--kill-service-every", default=None, metavar="S",
                    help=f"wall seconds, 1 to {MAX_RUN_S:.0f}")
    ap.add_argument("--no-fill", action="store_true",
                    help="the service takes no fill steps between rounds (the simulator "
                         "then neither), to measure what they do")
    ap.add_argument("--config", default="{}", help="JSON settings of --policy for the "
                    "service and the simulation, e.g. '{\"lease_overhead\": 0.05}'")
    ap.add_argument("--timeout-s", default="1800",
                    help=f"wall seconds, 1 to {MAX_RUN_S:.0f} (default 1800)")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    # a bad setting is named now, not after a ten-minute run
    config = policy_config(ap, "--config", args.config,
                           None if args.policy == SLURM_ALONE else args.policy)
    # before the cluster starts: 0 divided by zero after it had, nan and -60 went into the
    # service's settings
    time_scale = time_scale_arg(ap, args.time_scale)
    # unchecked, 0 and nan timed the run out at once and a negative kill interval killed
    # the service every second, each after the cluster had started
    timeout_s = floats(ap, "--timeout-s", args.timeout_s, count=1, lo=1, hi=MAX_RUN_S)[0]
    kill_every = (None if args.kill_service_every is None else
                  floats(ap, "--kill-service-every", args.kill_service_every, count=1,
                         lo=1, hi=MAX_RUN_S)[0])
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="shockwave-live-"))

    def tick(s: LiveStatus) -> None:
        print(f"\r{s.elapsed_s:6.0f}s submitted {s.submitted}/{s.total} running {s.running} "
              f"done {s.done}", end="", file=sys.stderr, flush=True)

    try:
        result = run_live(LiveSettings(
            trace=args.trace, gpus=args.gpus, time_scale=time_scale, policy=args.policy,
            work_dir=work, throughputs=args.throughputs,
            kill_service_every_s=kill_every, timeout_s=timeout_s,
            fill_freed=not args.no_fill, policy_config=config), tick)
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopped everything it started (logs in {work})", file=sys.stderr)
        raise SystemExit(130) from None
    except InputError as exc:  # a bad trace, --gpus or --work-dir: before the cluster starts
        if not args.work_dir:  # the empty folder made for it
            with contextlib.suppress(OSError):
                work.rmdir()
        ap.error(f"--{exc.field}: {exc.problem}" if exc.field in OPTION_FIELDS else str(exc))
    print(file=sys.stderr)
    checks = issue_checks(result)
    print(json.dumps({**result, "checks": checks, "machine": machine(), "work_dir": str(work)}))
    if not all(checks.values()):
        raise SystemExit(1)


def issue_checks(result: Mapping[str, Any]) -> dict[str, bool]:
    """Issue 8's checks of one run, so that the run fails (exit 1) when one stops holding:
    every job completed and none lost; and, for a policy the service runs, live within
    10% of its simulation on makespan and average JCT (the paper's Table 3). Beating
    Slurm alone needs a second run (``--policy slurm``): docs/evaluation.md compares them."""
    checks = {"all_completed": result["completed"] == result["jobs"] and result["lost"] == 0}
    if result["policy"] != SLURM_ALONE:
        checks["within_10pct_of_sim"] = all(
            result[f"sim_{key}"] > 0
            and abs(result[key] / result[f"sim_{key}"] - 1) <= 0.10
            for key in ("makespan_s", "avg_jct_s"))
    return checks


if __name__ == "__main__":
    main()
