"""What makespan a trace can have in the simulator, offline and online (solver/round_grid.py).

For each trace: issue 10's lower bound (max of latest arrival + exclusive runtime, and
GPU-work / GPUs); the shortest schedule without preemption that the round-grid MILP
finds (each job as early as that makespan allows), knowing every arrival and runtime in
advance (each job's runtime the simulator's
own, measured by running the job alone: a batch-size change applies at a round's end,
so a job runs a little longer than its exclusive runtime); and that schedule replayed
in the simulator, each job started in its planned round (the figure that counts: a
round the simulator ends early moves the later ones earlier). Then ``Replan``: the
same MILP re-solved every round for the jobs known so far, with those runtimes but not
the arrivals to come, each job as early as that makespan allows (``online_*``). Not
lower bounds: they show how close to the bound a schedule gets when everything is known,
and when only the arrivals are not, so a policy's makespan can be read against them.
One JSON object.

    python -m benchmarks.grid --json [--traces small]
    python -m benchmarks.grid --json --trace FILE --gpus G [--time-scale X]

``--trace`` takes a trace file as ``benchmarks.live`` does; ``--time-scale`` charges each
start the restore a live run pays at that scale, on its rounds of 120 trace s, so the
figures sit beside that run's (without it, ``etc/shockwave.yaml``'s simulator settings).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import traces
from benchmarks.args import Parser, floats, names
from benchmarks.reference_runs import machine
from slurm_shockwave.config import load_settings
from slurm_shockwave.live.run import ROUND_TRACE_S, live_restore_s
from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import Job, JobId
from slurm_shockwave.model.plan import Memory, Plan, Planned
from slurm_shockwave.policies.base import NoConfig, Policy
from slurm_shockwave.policies.fifo import Fifo
from slurm_shockwave.sim.inputs import Workload, build_workload, load_throughputs, load_trace
from slurm_shockwave.sim.run import check_placeable, simulate
from slurm_shockwave.solver.round_grid import (
    GridJobs,
    grid_jobs,
    schedule_makespan_s,
    shortest_schedule,
)
from slurm_shockwave.workloads.profile import JobProfile

SHIPPED = Path(__file__).resolve().parents[1] / "etc" / "shockwave.yaml"


def contiguous_runtime_s(workload: Workload, index: int, round_s: float,
                         restore_s: float) -> float:
    """The job's runtime in the simulator run alone from a round's start, restore aside."""
    job = workload.jobs[index]
    alone = replace(workload, jobs=(replace(job, spec=replace(job.spec, arrival_s=0.0)),),
                    profiles={job.spec.job_id: workload.profiles[job.spec.job_id]})
    r = simulate(alone, Fifo(), gpus=job.spec.gpus, round_s=round_s, restore_s=restore_s)
    return r.summary.makespan_s - restore_s


def runtimes_s(workload: Workload, round_s: float, restore_s: float) -> np.ndarray:
    """Every job's ``contiguous_runtime_s``, in the workload's order (one simulation a job:
    measured once, for the offline schedule and the re-planner both)."""
    return np.array([contiguous_runtime_s(workload, i, round_s, restore_s)
                     for i in range(len(workload.jobs))])


def lags(workload: Workload, run_s: np.ndarray) -> np.ndarray:
    """Each job's simulator runtime over its exclusive runtime: not 1 where batch sizes
    change, since a change applies at a round's end (above 1 where the job keeps a slower
    batch size a while, below where it keeps a faster one: 0.9914 at least on the 120-job
    trace)."""
    exclusive = np.array([workload.profiles[j.spec.job_id].exclusive_s
                          for j in workload.jobs])
    return np.asarray(run_s / exclusive)


class Replay(Policy[NoConfig]):
    """Starts each job in its planned round (a schedule, not a policy: it knows the
    future). A job is due once its round's number or its round's time has come: where
    the simulator ends a round early (every job in it finished) later rounds start early
    and are counted, and where it jumps over an idle gap to the next arrival the time
    tells. Running jobs come first, so a job that starts late waits rather than preempts."""

    name = "replay"
    summary = "a precomputed schedule"

    def __init__(self, start_round: Mapping[JobId, int], t0_s: float) -> None:
        super().__init__()
        self.start_round = start_round
        self.t0_s = t0_s

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        def due(job: Job) -> bool:
            s = self.start_round[job.job_id]
            return s <= view.round_index or self.t0_s + s * view.round_s <= view.now_s + 1e-6

        running = [j.job_id for j in view.jobs if j.is_running]
        waiting = sorted((j for j in view.jobs if not j.is_running and due(j)),
                         key=lambda j: (self.start_round[j.job_id], j.job_id))
        return Planned(Plan(tuple(running + [j.job_id for j in waiting])), memory)


def remaining_s(profile: JobProfile, epochs_done: float) -> float:
    """The runtime a job still needs by its profile's epochs left (an oracle; no lag)."""
    whole = int(epochs_done)
    left = sum(profile.epoch_s_by_bs[b] for b in profile.bs_by_epoch[whole:])
    if whole < profile.num_epochs:
        left -= (epochs_done - whole) * profile.epoch_s(whole)
    return max(left, 1e-3)


class Replan(Policy[NoConfig]):
    """Every round, the shortest schedule without preemption of the jobs known now (the
    running ones run on), each as early as that makespan allows; starts what it starts
    now. It knows each job's runtime as the simulator runs it alone (the profile's
    epochs left, times ``lag``: that run over the exclusive runtime), not the arrivals
    to come: what not knowing the future costs a makespan-only planner."""

    name = "replan"
    summary = "the least makespan of the jobs known now, re-planned every round"

    def __init__(self, profiles: Mapping[JobId, JobProfile],
                 lag: Mapping[JobId, float]) -> None:
        super().__init__()
        self.profiles = profiles
        self.lag = lag

    def _left_s(self, job: Job) -> float:
        return remaining_s(self.profiles[job.job_id], job.progress.epochs_done) \
            * self.lag[job.job_id]

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        running = [j for j in view.jobs if j.is_running]
        waiting = [j for j in view.jobs if not j.is_running]
        if not waiting:
            return Planned(Plan(tuple(j.job_id for j in running)), memory)
        held = np.zeros(0, dtype=int)
        floor = view.now_s
        for job in running:
            left = self._left_s(job)
            rounds = int(np.ceil(left / view.round_s - 1e-9))
            held = np.pad(held, (0, max(0, rounds - len(held))))
            held[:rounds] += job.gpus
            floor = max(floor, view.now_s + left)
        jobs = GridJobs(
            np.full(len(waiting), view.now_s),
            np.array([self._left_s(j) for j in waiting]),
            np.array([j.gpus for j in waiting]), view.total_gpus, view.round_s,
            view.restart_cost_s, view.now_s)
        _, starts = shortest_schedule(jobs, held=held, floor_s=floor)
        now = [j.job_id for j, s in zip(waiting, starts, strict=True) if s == 0]
        return Planned(Plan(tuple([j.job_id for j in running] + sorted(now))), memory)


def measure(name: str, workload: Workload, gpus: int, run_s: np.ndarray, round_s: float,
            restore_s: float) -> dict[str, Any]:
    """The trace's offline figures (module docstring); ``run_s`` from ``runtimes_s``."""
    bound = traces.lower_bound_s(workload, gpus)
    arrival = np.array([j.spec.arrival_s for j in workload.jobs])
    count = np.array([j.spec.gpus for j in workload.jobs])
    jobs = grid_jobs(arrival, run_s, count, gpus, round_s, restore_s)
    t = time.perf_counter()
    _, starts = shortest_schedule(jobs)
    schedule_s = time.perf_counter() - t
    planned = schedule_makespan_s(jobs, starts)
    start_round = {j.spec.job_id: int(s) for j, s in zip(workload.jobs, starts, strict=True)}
    replayed = simulate(workload, Replay(start_round, jobs.t0_s), gpus=gpus, round_s=round_s,
                        restore_s=restore_s)
    return {
        "trace": name, "jobs": len(workload.jobs), "gpus": gpus,
        "lower_bound_s": round(bound, 1),
        "schedule_makespan_s": round(planned, 1),
        "schedule_over_bound": round(planned / bound, 4),
        "replayed_makespan_s": round(replayed.summary.makespan_s, 1),
        "replayed_restarts": replayed.starts - len(workload.jobs),
        "runtime_lag_max": round(float(np.max(lags(workload, run_s))), 4),
        "replayed_over_bound": round(replayed.summary.makespan_s / bound, 4),
        "schedule_wall_s": round(schedule_s, 1),
    }


def online(workload: Workload, gpus: int, run_s: np.ndarray, round_s: float,
           restore_s: float) -> dict[str, Any]:
    """``Replan`` in the simulator; ``run_s`` from ``runtimes_s``."""
    bound = traces.lower_bound_s(workload, gpus)
    lag = {j.spec.job_id: float(f) for j, f in zip(workload.jobs, lags(workload, run_s),
                                                   strict=True)}
    t = time.perf_counter()
    r = simulate(workload, Replan(workload.profiles, lag), gpus=gpus, round_s=round_s,
                 restore_s=restore_s)
    return {"online_makespan_s": round(r.summary.makespan_s, 1),
            "online_over_bound": round(r.summary.makespan_s / bound, 4),
            "online_wall_s": round(time.perf_counter() - t, 1)}


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default=None,
                    help=f"comma-separated, of {', '.join(traces.ALL)} (default small; the "
                         "MILP grows with jobs x rounds: small takes seconds, 900 jobs may "
                         "not finish)")
    ap.add_argument("--trace", default=None, metavar="FILE",
                    help="a trace file instead of --traces, with --gpus")
    ap.add_argument("--gpus", type=int, default=None, help="the cluster's GPUs, with --trace")
    ap.add_argument("--time-scale", default=None, metavar="X",
                    help="a start's restore as a live run pays it at time scale X")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    sim = load_settings(SHIPPED).simulator
    round_s, restore_s = sim.round_s, sim.restore_s
    if args.time_scale is not None:
        scale = floats(ap, "--time-scale", args.time_scale, count=1)[0]
        if scale <= 0:
            ap.error(f"--time-scale: must be above 0, got {args.time_scale!r}")
        round_s, restore_s = ROUND_TRACE_S, live_restore_s(scale)
    if args.trace is None:
        if args.gpus is not None:
            ap.error("--gpus: only with --trace")
        chosen = [(name, *traces.load(name))
                  for name in names(ap, "--traces", args.traces or "small", traces.ALL)]
    else:
        if args.traces is not None:
            ap.error("--traces: not with --trace")
        chosen = [(args.trace, _trace_file(ap, args.trace, args.gpus), args.gpus)]
    rows = []
    for name, workload, gpus in chosen:
        print(f"{name} ...", file=sys.stderr, flush=True)
        run_s = runtimes_s(workload, round_s, restore_s)
        rows.append({**measure(name, workload, gpus, run_s, round_s, restore_s),
                     **online(workload, gpus, run_s, round_s, restore_s)})
    print(json.dumps({"round_s": round_s, "restore_s": restore_s, "traces": rows,
                      "machine": machine()}))


def _trace_file(ap: Parser, path: str, gpus: int | None) -> Workload:
    """The trace file's workload, checked against ``gpus`` before any solve: a bad file,
    or a job wider than the cluster (no schedule exists), is one line."""
    if gpus is None or gpus < 1:
        ap.error("--gpus: a count from 1, with --trace")
    try:
        workload = build_workload(load_trace(path), load_throughputs(None), source=path)
    except InputError as exc:
        ap.error(f"--trace: {exc}")
    try:
        check_placeable(workload, gpus)
    except InputError as exc:
        ap.error(f"--gpus: {exc.problem}")
    return workload


if __name__ == "__main__":
    main()
