"""How Shockwave (or ``--policy stretch_edf``) degrades when its remaining-time
predictions are wrong, beside all nine baselines.

Each job's predicted remaining time is multiplied by a seeded factor in [1-e, 1+e]
(fixed per job) for e from 0 to 100%. Prints one JSON object with makespan, average JCT,
worst rho and unfair fraction per error level (``noise``), and the same for each of the
nine baselines of the scale study (``baselines``; ``gavel`` repeats Gavel's, as before).

The baselines run once each, not once per error level: none has a ``prediction_noise``
setting, and none reads the predictions the noise is applied to (FIFO, LAS, Gavel, MST
and Gandiva-Fair read no remaining time; SRTF, AlloX, OSSP and Themis read the true
remaining time at the current rate, ``Job.remaining_s_now``). Nor do they take a seed,
so their rows hold for every error level and every ``--seed``.

    python -m benchmarks.noise --size 120 --json [--policy stretch_edf] [--seed 0]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from benchmarks.args import Parser, floats
from benchmarks.reference_runs import SETTINGS, machine, reference_workload
from benchmarks.scale import BASELINES
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.report.results import summary_record
from slurm_shockwave.sim.inputs import Workload
from slurm_shockwave.sim.run import simulate

NOISY = tuple(name for name, cls in POLICIES.items()
              if "prediction_noise" in {f.name for f in fields(cls.Config)})
"""The policies with a ``prediction_noise`` setting (Shockwave and stretch_edf)."""
KEYS = ("makespan_s", "avg_jct_s", "worst_rho", "unfair_fraction", "wall_s")
GAVEL_KEYS = ("makespan_s", "worst_rho", "unfair_fraction")
"""The ``gavel`` object's keys, as before the other baselines were added."""
ONCE = ("run once each: no baseline has a prediction_noise setting or reads the "
        "predictions, so their rows hold at every error level and seed")


def measure(workload: Workload, gpus: int, policy: str,
            config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    rec = summary_record(simulate(workload, make_policy(policy, config), gpus=gpus))
    return {k: rec[k] for k in KEYS}


def sweep(workload: Workload, gpus: int, policy: str, errors: Sequence[float],
          seed: int) -> dict[str, Any]:
    """``policy`` at every error level, and each baseline once."""
    rows = []
    for error in errors:
        print(f"{policy}: noise {error:.0%} ...", file=sys.stderr, flush=True)
        rows.append({"error": error, **measure(workload, gpus, policy,
                                               {"prediction_noise": error, "seed": seed})})
    baselines = {}
    for name in BASELINES:
        print(f"{name} (once) ...", file=sys.stderr, flush=True)
        baselines[name] = measure(workload, gpus, name)
    return {"noise": rows, "gavel": {k: baselines["gavel"][k] for k in GAVEL_KEYS},
            "baselines": baselines, "baselines_runs": ONCE}


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
    result = sweep(workload, gpus, args.policy, errors, args.seed)
    print(json.dumps({"size": args.size, "gpus": gpus, "policy": args.policy,
                      "seed": args.seed, **result, "machine": machine()}))


if __name__ == "__main__":
    main()
