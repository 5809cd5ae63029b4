"""How Shockwave (or ``--policy stretch_edf``) degrades when its remaining-time
predictions are wrong.

Each job's predicted remaining time is multiplied by a seeded factor in [1-e, 1+e]
(fixed per job) for e from 0 to 100%. Prints one JSON object with makespan, worst rho
and unfair fraction per error level, next to Gavel on the same trace.

    python benchmarks/noise.py --size 120 --json [--policy stretch_edf]
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields

from benchmarks.args import Parser, floats
from benchmarks.reference_runs import SETTINGS, machine, reference_workload
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.report.results import summary_record
from slurm_shockwave.sim.run import simulate

NOISY = tuple(name for name, cls in POLICIES.items()
              if "prediction_noise" in {f.name for f in fields(cls.Config)})
"""The policies with a ``prediction_noise`` setting (Shockwave and stretch_edf)."""


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="120", choices=tuple(SETTINGS))
    ap.add_argument("--errors", default="0,0.2,0.4,0.6,0.8,1.0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy", default="shockwave", choices=NOISY,
                    help="a policy that uses Shockwave's predictions")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    errors = floats(ap, "--errors", args.errors, lo=0, hi=1)
    try:  # the seed's bounds are the policy's
        make_policy(args.policy, {"seed": args.seed}, source="--seed")
    except InputError as exc:
        ap.error(str(exc))
    workload, gpus = reference_workload(args.size)
    rows = []
    for error in errors:
        print(f"noise {error:.0%} ...", file=sys.stderr, flush=True)
        r = simulate(workload, make_policy(args.policy, {"prediction_noise": error,
                                                         "seed": args.seed}), gpus=gpus)
        rec = summary_record(r)
        rows.append({"error": error, **{k: rec[k] for k in (
            "makespan_s", "avg_jct_s", "worst_rho", "unfair_fraction", "wall_s")}})
    gavel = summary_record(simulate(workload, make_policy("gavel"), gpus=gpus))
    print(json.dumps({"size": args.size, "gpus": gpus, "policy": args.policy, "noise": rows,
                      "gavel": {k: gavel[k] for k in ("makespan_s", "worst_rho",
                                                       "unfair_fraction")},
                      "machine": machine()}))


if __name__ == "__main__":
    main()
