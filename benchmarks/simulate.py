"""Simulator speed: each policy as a user runs it, start-up included.

Each policy runs in its own ``shockwave simulate --json`` process, so ``process_s`` is
what a user waits (interpreter start, imports, trace and profile loading, the run);
``wall_s`` is the simulation loop alone. One JSON object per policy on stdout, with the
machine and each policy's time relative to the first policy measured in the same run.

    python benchmarks/simulate.py --trace T --gpus 256 --policies fifo,gavel --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

from slurm_shockwave.model.bounds import name_list
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import POLICIES


def machine() -> dict[str, object]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "processor": platform.processor() or "unknown"}


def main() -> None:
    # argparse's own usage and error: a standalone script (the repo's benchmarks package
    # is not on its path), checked by the package's rules
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="demo")
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--throughputs", default=None)
    ap.add_argument("--policies", default="fifo,srtf,las,gavel,themis,allox,ossp,mst,gandiva_fair")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON lines)")
    args = ap.parse_args()
    if args.gpus < 1:
        ap.error(f"--gpus: must be >= 1, not {args.gpus}")
    first: float | None = None
    failed = 0
    try:
        wanted = name_list(args.policies, POLICIES, field="--policies")
    except InputError as exc:
        ap.error(str(exc))
    for name in wanted:
        cmd = [sys.executable, "-m", "slurm_shockwave.cli", "simulate", args.trace,
               "--gpus", str(args.gpus), "--policy", name, "--json", "--no-progress"]
        if args.throughputs:
            cmd += ["--throughputs", args.throughputs]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            print(json.dumps({"policy": name, "error": proc.stderr.strip()}), flush=True)
            failed += 1
            continue
        record = json.loads(proc.stdout)
        first = first or elapsed
        record.update(process_s=round(elapsed, 3), ratio_to_first=round(elapsed / first, 3),
                      machine=machine())
        print(json.dumps(record), flush=True)
    if failed:  # each one's error is its line above
        raise SystemExit(1)


if __name__ == "__main__":
    main()
