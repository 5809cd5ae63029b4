"""The scale study: Shockwave and stretch_edf against all nine baselines, on the paper's
traces and ours.

For each trace (benchmarks/traces.py): every policy's metrics, the trace's makespan lower
bound, and the four targets of issue 10 as pass/fail (``targets`` for Shockwave,
``targets_stretch_edf`` for the max-stretch rule), each measured against the best of all
nine baselines:

- makespan <= 1.10 x the lower bound (max of latest arrival + exclusive runtime, and
  total GPU-work / GPUs);
- worst rho <= the lowest worst rho of the nine;
- average JCT <= 1.10 x the lowest of the nine;
- unfair fraction (rho > 1.05) <= 2%.

The targets compare the figures as measured (the JSON rounds them), and are withheld
(``targets_withheld``) on a trace where the simulator's cut-off ended any job.

Every policy runs as configured in ``--settings`` (default: etc/shockwave.yaml as
shipped); ``--config`` overrides Shockwave's section. The JSON says so: ``config`` (the
override), ``simulator`` (the simulator's settings) and ``as_shipped`` (the shipped
settings, no override: what issue 10's targets are of). Prints one JSON object; ``--out
DIR`` also writes a Pareto plot per trace (``pareto_<trace>.png``: makespan and average
JCT against worst rho, one point per policy) and the CDF plots (``scale_<trace>/``).

``--critical-path-baselines NAMES`` also runs each of those baselines with Shockwave's
critical path put ahead of its own order (``<name>+critical_path``, reported beside the
others and never counted as a baseline in the targets): what that rule of ours, which no
published baseline has, gives them (docs/deviations.md).

``--bounds`` adds, per trace, what no schedule can do (``fluid``: the least makespan,
worst rho and average JCT of the fluid relaxation, solved exactly as LPs; a schedule that
knows the future included) and whether that proves a combination of the targets
unreachable on the trace.

    python -m benchmarks.scale --json [--traces 120,220,small] [--out docs/img] [--bounds]
        [--critical-path-baselines srtf,gavel]
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, ClassVar

from benchmarks import traces
from benchmarks.args import Parser, floats, names, policy_config, round_limit
from benchmarks.reference_runs import machine
from slurm_shockwave.cli.errors import writable_dir
from slurm_shockwave.config import Settings, load_settings
from slurm_shockwave.metrics.summary import contention
from slurm_shockwave.model.bounds import MAX_SEED
from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.plan import Memory, Planned
from slurm_shockwave.policies import registry
from slurm_shockwave.policies.base import NoConfig, Policy
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.policies.shockwave.commitments import critical_path
from slurm_shockwave.policies.shockwave.estimates import estimate
from slurm_shockwave.report.results import summary_record
from slurm_shockwave.sim.inputs import Workload
from slurm_shockwave.sim.run import SimResult, simulate
from slurm_shockwave.solver import fluid

SHIPPED = Path(__file__).resolve().parents[1] / "etc" / "shockwave.yaml"
# ours: Shockwave, and stretch_edf (the max-stretch rule the targets were met with); the
# nine published baselines by name (elastic_greedy is the elastic comparison,
# benchmarks/elastic.py, and on these fixed-count traces runs exactly as FIFO:
# tests/test_elastic_policy.py)
CONTENDERS = registry.OURS
BASELINES = tuple(sorted(registry.BASELINES))
MAKESPAN_SLACK = 1.10
JCT_SLACK = 1.10
UNFAIR_LIMIT = 0.02


CRITICAL = "+critical_path"
"""The suffix of a baseline run with Shockwave's critical path first."""


class _CriticalFirst(Policy[NoConfig]):
    """A baseline with Shockwave's critical path (``commitments.critical_path`` on the
    same estimates, at Shockwave's ``critical_frac``) put ahead of its own order: the
    rule of ours alone, given to a published policy."""

    summary = "a baseline with Shockwave's critical path first"
    inner: ClassVar[Policy[Any]]
    frac: ClassVar[float]

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        planned = self.inner.plan(view, memory)
        crit = critical_path({j.job_id: estimate(j).most_remaining_s for j in view.jobs},
                             {j.job_id: j.gpus for j in view.jobs}, view.total_gpus,
                             self.frac)
        first = set(crit)
        order = (*crit, *(jid for jid in planned.plan.order if jid not in first))
        return replace(planned, plan=replace(planned.plan, order=order))


def make(name: str, settings: Settings, override: Mapping[str, Any] | None = None
         ) -> Policy[Any]:
    """The policy ``name`` as ``settings`` configure it, or ``<baseline>+critical_path``."""
    base = name.removesuffix(CRITICAL)
    policy = make_policy(base, {**(settings.policies.get(base) or {}), **(override or {})})
    if base == name:
        return policy
    frac = float((settings.policies.get("shockwave") or {}).get("critical_frac", 0.95))
    wrapped: type[_CriticalFirst] = type("CriticalFirst", (_CriticalFirst,),
                                         {"name": name, "inner": policy, "frac": frac})
    return wrapped()


def run_policy(name: str, workload: Workload, gpus: int, settings: Settings,
               override: Mapping[str, Any] | None = None) -> SimResult:
    return simulate(workload, make(name, settings, override), gpus=gpus,
                    **settings.simulator.simulate_kwargs())


def best_baseline(records: Mapping[str, Mapping[str, Any]], key: str) -> tuple[float, str]:
    """The lowest ``key`` among the nine baselines run, and whose it is."""
    r = min((records[b] for b in BASELINES if b in records),
            key=lambda r: (float(r[key]), r["policy"]))
    return float(r[key]), str(r["policy"])


def limits(records: Mapping[str, Mapping[str, Any]], bound_s: float
           ) -> dict[str, tuple[str, float, str]]:
    """The four targets' limits, against the best of the nine baselines: for each, the
    record's key it limits, the limit, and what it is."""
    rho, rho_by = best_baseline(records, "worst_rho")
    jct, jct_by = best_baseline(records, "avg_jct_s")
    return {
        "makespan": ("makespan_s", MAKESPAN_SLACK * bound_s, f"{MAKESPAN_SLACK} x lower bound"),
        "worst_rho": ("worst_rho", rho, f"best baseline ({rho_by})"),
        "avg_jct": ("avg_jct_s", JCT_SLACK * jct, f"{JCT_SLACK} x best baseline ({jct_by})"),
        "unfair_fraction": ("unfair_fraction", UNFAIR_LIMIT, "2%"),
    }


def plot_limits(records: Mapping[str, Mapping[str, Any]], bound_s: float
                ) -> dict[str, float] | None:
    """The Pareto plot's lines: the targets' own limits, once all nine baselines ran (the
    plot once took the best of every policy but Shockwave, stretch_edf included)."""
    if not all(b in records for b in BASELINES):
        return None
    return {k: lim for k, (_, lim, _) in limits(records, bound_s).items()}


def targets(records: Mapping[str, Mapping[str, Any]], bound_s: float,
            policy: str = "shockwave") -> dict[str, dict[str, Any]]:
    """The four targets for ``policy`` against the best of the nine baselines."""
    sw = records[policy]
    rows = {k: (float(sw[key]), lim, what)
            for k, (key, lim, what) in limits(records, bound_s).items()}
    return {k: {"value": round(v, 5), "limit": round(lim, 5), "against": what,
                "ratio": round(v / lim, 4) if lim > 0 else None, "pass": v <= lim + 1e-9}
            for k, (v, lim, what) in rows.items()}


def fluid_bounds(workload: Workload, gpus: int, bound_s: float,
                 records: Mapping[str, Mapping[str, Any]], slot_s: float) -> dict[str, Any]:
    """What no schedule can do on this trace, from the fluid relaxation (solver/fluid.py),
    and which targets that proves unreachable together: the least worst rho of a schedule
    within the makespan limit, and the least average JCT of one within both the makespan
    and the worst-rho limits. The unfair fraction has no bound here."""
    started = time.perf_counter()
    jobs = traces.fluid_jobs(workload, gpus)
    c = contention(len(workload.jobs), gpus)
    m_limit = MAKESPAN_SLACK * bound_s
    row: dict[str, Any] = {
        "slot_s": slot_s,
        "makespan_s": fluid.min_makespan_s(jobs, slot_s),
        "worst_rho": fluid.min_worst_rho(jobs, c, slot_s),
        "worst_rho_within_makespan_limit": fluid.min_worst_rho(jobs, c, slot_s,
                                                               makespan_s=m_limit),
        "avg_jct_s": fluid.min_avg_jct_s(jobs, fluid.deadlines(jobs), slot_s),
    }
    if any(b in records for b in BASELINES):
        rho_limit = best_baseline(records, "worst_rho")[0]
        jct_limit = JCT_SLACK * best_baseline(records, "avg_jct_s")[0]
        within = fluid.deadlines(jobs, worst_rho=rho_limit, contention=c, makespan_s=m_limit)
        row["avg_jct_s_within_limits"] = fluid.min_avg_jct_s(jobs, within, slot_s)
        row["proven_unreachable"] = {
            "makespan_and_worst_rho": row["worst_rho_within_makespan_limit"] > rho_limit,
            "makespan_worst_rho_and_avg_jct": row["avg_jct_s_within_limits"] > jct_limit,
        }
    row["wall_s"] = time.perf_counter() - started
    return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else
                (None if isinstance(v, float) else v)) for k, v in row.items()}


def study(name: str, policies: list[str], settings: Settings,
          override: Mapping[str, Any] | None, out: Path | None,
          bounds_slot_s: float | None = None) -> dict[str, Any]:
    workload, gpus = traces.load(name)
    bound = traces.lower_bound_s(workload, gpus)
    results = []
    for policy in policies:
        print(f"{name}: {policy} ...", file=sys.stderr, flush=True)
        results.append(run_policy(policy, workload, gpus, settings,
                                  override if policy == "shockwave" else None))
    records = {r.policy: summary_record(r, trace=name) for r in results}
    for r in records.values():
        r["makespan_vs_bound"] = round(float(r["makespan_s"]) / bound, 4)
    # the targets on the figures as measured, not as rounded for the JSON (a red-team: a
    # worst rho of 1.0870049 passed against 1.087)
    exact = {r.policy: {"policy": r.policy, **asdict(r.summary)} for r in results}
    row: dict[str, Any] = {"jobs": len(workload.jobs), "gpus": gpus,
                           "lower_bound_s": round(bound, 1), "policies": records}
    cut = {r.policy: r.cut_off for r in results if r.cut_off}
    if cut:  # the targets are of runs to completion (a red-team: they counted cut jobs)
        row["cut_off"] = cut
        row["targets_withheld"] = ("jobs were cut off (simulator.deadline_factor): the "
                                   "targets are for every job run to its end")
    elif all(b in records for b in BASELINES):
        for policy in (p for p in CONTENDERS if p in records):
            checked = targets(exact, bound, policy)
            key = "" if policy == "shockwave" else f"_{policy}"
            row[f"targets{key}"] = checked
            row[f"all_pass{key}"] = all(t["pass"] for t in checked.values())
    if bounds_slot_s is not None:
        print(f"{name}: fluid bounds ...", file=sys.stderr, flush=True)
        row["fluid"] = fluid_bounds(workload, gpus, bound, exact, bounds_slot_s)
    if out is not None:
        from slurm_shockwave.report.plots import write_pareto, write_plots

        title = f"{name}: {len(workload.jobs)} jobs, {gpus} GPUs"
        write_pareto(list(records.values()), out / f"pareto_{name}.png", title, bound,
                     None if cut else plot_limits(exact, bound))
        write_plots(results, out / f"scale_{name}", title)
    return row


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", "--sizes", dest="traces", default=",".join(traces.ALL),
                    help=f"comma-separated, of: {', '.join(traces.ALL)}")
    ap.add_argument("--policies", default=",".join((*CONTENDERS, *BASELINES)))
    ap.add_argument("--settings", default=str(SHIPPED), help="YAML settings (all policies)")
    ap.add_argument("--config", default="{}", help="JSON overrides of shockwave's settings")
    ap.add_argument("--out", default=None, help="directory for the plots")
    ap.add_argument("--bounds", action="store_true",
                    help="also what no schedule can do (the fluid relaxation's LPs)")
    ap.add_argument("--slot-s", type=float, default=120.0,
                    help="the relaxation's slot (smaller: tighter, slower)")
    ap.add_argument("--critical-path-baselines", default="", metavar="NAMES",
                    help="also run these baselines with Shockwave's critical path first "
                         "(<name>+critical_path; never counted as baselines)")
    ap.add_argument("--seeds", default="", metavar="N,N",
                    help="our shapes drawn with these seeds instead (held out: no default "
                         "was chosen on them), named shape@seed; the paper's traces have none")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    if not 1.0 <= args.slot_s <= 3600.0:
        ap.error(f"--slot-s: must be from 1 to 3600 seconds, not {args.slot_s}")
    # everything named now, not after the first traces' minutes of simulation
    wanted = names(ap, "--traces", args.traces, traces.ALL)
    if args.seeds:
        seeds = floats(ap, "--seeds", args.seeds, lo=0, hi=MAX_SEED, integer=True)
        paper = [t for t in wanted if t not in traces.GENERATED]
        if paper and args.traces != ap.get_default("traces"):
            ap.error(f"--seeds: the paper's traces have no seed ({', '.join(paper)})")
        wanted = [f"{t}@{int(n)}" for t in wanted if t in traces.GENERATED for n in seeds]
    policies = names(ap, "--policies", args.policies, POLICIES)
    if args.critical_path_baselines:
        policies += [f"{b}{CRITICAL}" for b in names(
            ap, "--critical-path-baselines", args.critical_path_baselines, BASELINES)]
    try:  # load_settings checks every policy's section; --config is shockwave's on top
        settings = load_settings(args.settings)
        writable_dir(args.out, "--out")
    except InputError as exc:
        ap.error(str(exc))
    override = policy_config(ap, "--config", args.config, "shockwave",
                             settings.policies.get("shockwave"))
    out = Path(args.out) if args.out else None
    slot = args.slot_s if args.bounds else None
    sim = settings.simulator
    table: dict[str, dict[str, Any]] = {}
    for name in wanted:
        with round_limit(ap, "--settings", f"on trace {name}: rounds of {sim.round_s:g} s, "
                         f"less restores of {sim.restore_s:g} s and requeue delays of "
                         f"{sim.requeue_delay_s:g} s, leave too little of a round to run in "
                         f"({args.settings}); give a longer simulator.round_s"):
            table[name] = study(name, policies, settings, override, out, slot)
    # how it was measured (a red-team: a --config override left the JSON as a shipped
    # run's): issue 10's targets are of etc/shockwave.yaml as shipped
    shipped = Path(args.settings).resolve() == SHIPPED.resolve() and not override
    print(json.dumps({"scale": table, "settings": args.settings, "config": override,
                      "simulator": sim.simulate_kwargs(), "as_shipped": shipped,
                      "machine": machine()}))


if __name__ == "__main__":
    main()
