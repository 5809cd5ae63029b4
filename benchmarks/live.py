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
import math
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
from slurm_shockwave.sim.inputs import load_throughputs, load_trace
from slurm_shockwave.sim.trace import trace_digest
from slurm_shockwave.workloads.input_files import strict_json

COMPARED = ("makespan_s", "avg_jct_s", "worst_rho")
"""The Slurm-alone run's figures ``--against`` reads and prints beside this run's."""
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
    ap.add_argument("--ports", default="21817,21900", metavar="CTLD,NODE",
                    help="its cluster's slurmctld port and its slurmd ports' base "
                         "(node n listens on NODE + n), so two runs can share a machine "
                         "(default 21817,21900)")
    ap.add_argument("--against", default=None, metavar="FILE",
                    help="the JSON this command printed for --policy slurm on the same "
                         "trace, GPUs, time scale and throughputs: adds the checks that "
                         "this run is shorter and fairer (worst rho) than Slurm alone")
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
    against = None if args.against is None else _against(ap, args)
    ports = _ports(ap, args.ports, nodes=args.gpus // 8)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="shockwave-live-"))

    def tick(s: LiveStatus) -> None:
        print(f"\r{s.elapsed_s:6.0f}s submitted {s.submitted}/{s.total} running {s.running} "
              f"done {s.done}", end="", file=sys.stderr, flush=True)

    try:
        result = run_live(LiveSettings(
            trace=args.trace, gpus=args.gpus, time_scale=time_scale, policy=args.policy,
            work_dir=work, throughputs=args.throughputs,
            kill_service_every_s=kill_every, timeout_s=timeout_s,
            fill_freed=not args.no_fill, policy_config=config, ports=ports), tick)
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopped everything it started (logs in {work})", file=sys.stderr)
        raise SystemExit(130) from None
    except InputError as exc:  # a bad trace, --gpus or --work-dir: before the cluster starts
        if not args.work_dir:  # the empty folder made for it
            with contextlib.suppress(OSError):
                work.rmdir()
        ap.error(f"--{exc.field}: {exc.problem}" if exc.field in OPTION_FIELDS else str(exc))
    print(file=sys.stderr)
    checks = issue_checks(result, against)
    extra = {} if against is None else {"against": {
        "file": args.against, **{k: against[k] for k in COMPARED}}}
    print(json.dumps({**result, **extra, "checks": checks, "machine": machine(),
                      "work_dir": str(work)}))
    if not all(checks.values()):
        raise SystemExit(1)


def _ports(ap: Parser, text: str, *, nodes: int) -> tuple[int, int]:
    """``--ports CTLD,NODE``: unprivileged, the nodes' run (NODE + 1 to NODE + nodes: node n
    listens on NODE + n, docker-slurm/start.sh's ``--node-port-base``) in range and clear
    of slurmctld's, checked before the cluster starts (a helper's live run: the help said
    NODE was the first node's, so ``27817,27818`` put the nodes on 27819-27821, and the
    check let a node take slurmctld's port)."""
    ctld, node = (int(v) for v in floats(ap, "--ports", text, count=2, lo=1024, hi=65535,
                                         integer=True))
    if node + nodes > 65535 or node < ctld <= node + nodes:
        ap.error(f"--ports: the {nodes} nodes' ports {node + 1}-{node + nodes} must be "
                 f"up to 65535 and not include slurmctld's {ctld}")
    return ctld, node


def _against(ap: Parser, args: Any) -> dict[str, Any]:
    """The Slurm-alone run ``--against`` names, checked now, not after a ten-minute run:
    a run of Slurm alone that completed on the same jobs and settings as this one."""
    try:
        doc = strict_json(Path(args.against).read_text(), source=args.against,
                          field="--against")
        digest = trace_digest(load_trace(args.trace))
        table = load_throughputs(args.throughputs).digest
    except OSError as exc:
        ap.error(f"--against: cannot read {args.against} ({exc.strerror or exc})")
    except (InputError, UnicodeDecodeError) as exc:
        ap.error(str(exc))
    if args.policy == SLURM_ALONE:
        ap.error("--against: compares a policy's run with Slurm alone's; this run is "
                 "Slurm alone")
    if not isinstance(doc, dict):
        ap.error(f"--against: {args.against} is not one JSON object")
    if doc.get("policy") != SLURM_ALONE:
        ap.error(f"--against: {args.against} is a run of policy {doc.get('policy')!r}, "
                 f"not of {SLURM_ALONE} alone")
    ours = {"trace_digest": digest, "gpus": args.gpus,
            "time_scale": time_scale_arg(ap, args.time_scale), "throughputs_digest": table}
    for key, value in ours.items():
        if doc.get(key, "(none)") != value:
            ap.error(f"--against: {args.against} has {key} {doc.get(key, '(none)')!r}, "
                     f"this run {value!r}")
    if doc.get("completed") != doc.get("jobs") or doc.get("lost") != 0:
        ap.error(f"--against: {args.against} did not complete every job")
    for key in COMPARED:
        value = doc.get(key)
        if (not isinstance(value, (int, float)) or isinstance(value, bool)
                or not math.isfinite(value) or value <= 0):
            ap.error(f"--against: {args.against} has {key} {value!r}, not a positive number")
    return doc


def issue_checks(result: Mapping[str, Any],
                 against: Mapping[str, Any] | None = None) -> dict[str, bool]:
    """Issue 8's checks of one run, so that the run fails (exit 1) when one stops holding:
    every job completed and none lost; for a policy the service runs, live within 10% of
    its simulation on makespan and average JCT (the paper's Table 3); and, given the
    Slurm-alone run of the same jobs (``--against``), a shorter makespan and a lower
    worst rho than it."""
    checks = {"all_completed": result["completed"] == result["jobs"] and result["lost"] == 0}
    if result["policy"] != SLURM_ALONE:
        checks["within_10pct_of_sim"] = all(
            result[f"sim_{key}"] > 0
            and abs(result[key] / result[f"sim_{key}"] - 1) <= 0.10
            for key in ("makespan_s", "avg_jct_s"))
    if against is not None:
        checks["shorter_than_slurm_alone"] = result["makespan_s"] < against["makespan_s"]
        checks["fairer_than_slurm_alone"] = result["worst_rho"] < against["worst_rho"]
    return checks


if __name__ == "__main__":
    main()
