"""The Shockwave policy: plan a window of rounds with the market program, run its first.

Per round (../shared/reference/shockwave/NOTES.md §2): predict each job's remaining time;
when the job set changed, re-estimate fair finish times; re-solve the window program on
arrival, completion and every ``reopt_rounds`` rounds, otherwise follow the cached
window; when the fairness constraints cannot all hold, drop them and weight each job's
log progress by ``rho^lambda`` so the furthest-behind jobs move first; pack the rounds
per job into a schedule; run the current round's jobs and backfill idle GPUs with the longest
predicted remaining work. Last, a lookahead (lookahead.py) projects that order and a few
others over the jobs present, and the round runs whichever projects best.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from slurm_shockwave.model.cluster import ClusterView
from slurm_shockwave.model.job import Job, JobId
from slurm_shockwave.model.plan import Memory, Plan, Planned, Reason, ReasonCode
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.policies.shockwave import elastic, fairness, lookahead
from slurm_shockwave.policies.shockwave.commitments import (
    critical_path,
    finishing,
    lease_rounds,
    leased,
    run_places,
    run_starts,
)
from slurm_shockwave.policies.shockwave.config import ShockwaveConfig
from slurm_shockwave.policies.shockwave.estimates import Estimate, estimate
from slurm_shockwave.policies.shockwave.schedule import pack, window_order
from slurm_shockwave.policies.stretch_edf import jobs_least_stretch, request_sizes
from slurm_shockwave.solver.milp import relative_gap
from slurm_shockwave.solver.plan_window import WindowSolution, solve_window
from slurm_shockwave.solver.window import WindowInputs, evaluate


def window_inputs(jobs: Sequence[Job], est: Mapping[JobId, Estimate], *, capacity: int,
                  rounds: int, round_s: float, k: float,
                  cap_s: np.ndarray | None = None) -> WindowInputs:
    """The window program's arrays for these jobs: no fairness caps unless given, equal
    weights."""
    n = len(jobs)
    return WindowInputs(
        gpus=np.array([j.gpus for j in jobs], dtype=float),
        epochs_total=np.array([j.spec.num_epochs for j in jobs], dtype=float),
        epochs_done=np.array([min(j.progress.epochs_done, j.spec.num_epochs) for j in jobs]),
        epoch_s=np.array([est[j.job_id].epoch_s for j in jobs]),
        remaining_s=np.array([est[j.job_id].remaining_s for j in jobs]),
        cap_s=np.full(n, np.inf) if cap_s is None else cap_s, weight=np.ones(n),
        capacity=capacity, rounds=rounds, round_s=round_s, k=k)


def certificate(inputs: WindowInputs, solution: WindowSolution, schedule: list[list[JobId]],
                ids: Sequence[JobId]) -> dict[str, Any]:
    """The gap of the plan that runs: the packed schedule (what ``pack`` kept of the
    solver's rounds) valued by the window program, against the solver's bound.

    ``gap`` is None ("unknown") when no finished solve gave a bound, or when packing lost
    rounds a fairness cap needed (the plan that runs then breaks the program). Values are
    finite or None: the live store keeps memory as strict JSON.
    """
    index = {jid: i for i, jid in enumerate(ids)}
    placed = np.zeros(len(ids), dtype=int)
    for round_jobs in schedule:
        for jid in round_jobs:
            placed[index[jid]] += 1
    objective, feasible = evaluate(inputs, placed)
    gap = relative_gap(solution.bound, objective) if feasible else float("inf")
    return {"gap": _known(gap), "objective": _known(objective),
            "bound": _known(solution.bound),
            "solver_gap": _known(solution.gap),  # of the unpacked rounds: packing's cost shows
            "feasible": feasible, "rounds_lost": int((solution.rounds - placed).sum())}


def _known(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


_FALLBACKS = ("rounded_lp", "greedy")


class Shockwave(Policy[ShockwaveConfig]):
    name = "shockwave"
    summary = "Shockwave: Nash-welfare market over a window of future rounds, fairness-bounded"
    Config = ShockwaveConfig

    def plan(self, view: ClusterView, memory: Memory) -> Planned:
        if any(j.spec.is_elastic for j in view.jobs):  # elastic jobs: elastic.py
            return elastic.plan_elastic(self._plan_fixed, view, memory, self.config)
        return self._plan_fixed(view, memory)

    def _plan_fixed(self, view: ClusterView, memory: Memory,
                    fair_scale: Mapping[JobId, float] | None = None) -> Planned:
        """``fair_scale``: per elastic job, its throughput at the planned count relative to
        its request, so its fair finish time stays the one of its request (elastic.py)."""
        cfg = self.config
        jobs = sorted(view.jobs, key=lambda j: j.job_id)
        if not jobs:
            return Planned(Plan(()), {**memory, "plan": None, "jobset": []})
        est = {j.job_id: estimate(j, noise=cfg.prediction_noise, seed=cfg.seed) for j in jobs}
        ids = [j.job_id for j in jobs]
        share = min(1.0, view.total_gpus / len(jobs))
        fair_states: dict[JobId, Any] = {int(k): v for k, v in memory.get("fair", {}).items()}
        changed = ids != memory.get("jobset")
        if changed:
            fair_states = fairness.update_all(fair_states, {
                j.job_id: j.spec.arrival_s + (est[j.job_id].done_work_s
                                              + est[j.job_id].remaining_s)
                * (fair_scale or {}).get(j.job_id, 1.0) / share
                for j in jobs}, view.round_index)
        fair = {jid: fairness.target(fair_states[jid], view.round_index, cfg.momentum)
                for jid in ids}
        most = {j.job_id: est[j.job_id].most_remaining_s for j in jobs}
        # jobs in their requeue delay count for the path (ClusterView.returning) but
        # cannot run this round
        back = {j.job_id: estimate(j, noise=cfg.prediction_noise, seed=cfg.seed)
                .most_remaining_s for j in view.returning}
        crit = [jid for jid in critical_path({**most, **back},
                                             {j.job_id: j.gpus for j in (*jobs, *view.returning)},
                                             view.total_gpus, cfg.critical_frac)
                if jid in most]
        cached = memory.get("plan")
        age = view.round_index - cached["start"] if cached else None
        if changed or cached is None or age is None or age >= min(cfg.reopt_rounds,
                                                                  cfg.window_rounds):
            cached = self._solve(view, jobs, est, fair, share, crit)
            age = 0
        scheduled = [jid for jid in cached["rounds"][age] if jid in est]
        starts = run_starts(jobs, memory.get("run_start", {}), view.round_index,
                            view.starting, memory.get("run_places"))
        lease = lease_rounds(view.restart_cost_s, cfg.lease_overhead, view.round_s)
        ending = finishing(jobs, most, lease, view.round_s, view.fills)
        keep = list(dict.fromkeys([*ending, *crit,
                                   *leased(jobs, starts, view.round_index, lease)]))
        new_memory = {"fair": fair_states, "jobset": ids, "plan": cached,
                      "solves": memory.get("solves", 0) + (age == 0), "run_start": starts,
                      "run_places": run_places(jobs, starts)}
        plan = self._order(jobs, est, scheduled, cached, keep, crit, set(ending), lease)
        if cfg.lookahead:
            plan = self._look_ahead(view, jobs, est, plan, scheduled, cached, keep,
                                    fair_scale or {})
        return Planned(plan, new_memory)

    def _look_ahead(self, view: ClusterView, jobs: list[Job], est: Mapping[JobId, Estimate],
                    plan: Plan, scheduled: list[JobId], cached: Mapping[str, Any],
                    keep: list[JobId], fair_scale: Mapping[JobId, float]) -> Plan:
        """The round's order chosen among candidates by projecting each (lookahead.py);
        the market's plan as it is when it wins, else its order replaced and each
        uncommitted job's reason saying which order placed it."""
        size = request_sizes(jobs, est, fair_scale)
        present = lookahead.Jobs(
            gpus={j.job_id: j.gpus for j in jobs},
            remaining_s={j.job_id: est[j.job_id].remaining_s for j in jobs},
            size_s=size, arrival_s={j.job_id: j.spec.arrival_s for j in jobs},
            running=frozenset(j.job_id for j in jobs if j.is_running))
        committed = set(keep)
        # the market's later rounds: its window order (the packing's)
        then = (*keep, *(j for j in plan.order if j not in committed and j in scheduled),
                *cached.get("order", ()), *plan.order)
        market = lookahead.Candidate("market", plan.order,
                                     tuple(j for j in dict.fromkeys(then) if j in size))
        least = jobs_least_stretch(jobs, est, fair_scale, size, view.now_s, view.total_gpus)
        tried = lookahead.candidates(market, keep, present, least)
        chosen = tried[lookahead.choose(
            [lookahead.project(c, present, now_s=view.now_s, capacity=view.total_gpus,
                               round_s=view.round_s, restore_s=view.restart_cost_s,
                               critical_frac=self.config.critical_frac) for c in tried],
            self.config.lookahead_tol)]
        if chosen is market:
            return plan
        reasons = {**plan.reasons, **{
            jid: Reason(ReasonCode.SCHEDULED,
                        f"{chosen.name}: remaining~{est[jid].remaining_s:.0f}s")
            for jid in chosen.now if jid not in committed}}
        return replace(plan, order=chosen.now, reasons=reasons)

    def _solve(self, view: ClusterView, jobs: list[Job], est: Mapping[JobId, Estimate],
               fair: Mapping[JobId, float], share: float,
               crit: Sequence[JobId]) -> dict[str, Any]:
        """``crit``: the critical path, whose jobs granted the whole window are packed first."""
        cfg = self.config
        t, tau = cfg.window_rounds, view.round_s
        remaining = np.array([est[j.job_id].remaining_s for j in jobs])
        t_end = view.now_s + tau * t
        arrival = np.array([j.spec.arrival_s for j in jobs])
        fair_s = fairness.fair_span(np.array([fair[j.job_id] for j in jobs]), arrival)
        # Differences of absolute times carry float noise (1e-12 here) that depends on
        # where time zero is, and a solve stopped at its node limit can turn on it: on a
        # grid, a trace shifted by a day is solved alike (tests/test_replayable.py).
        cap = np.round(share * (arrival + cfg.rho_max * fair_s - t_end), 6)
        projected = np.round((view.now_s - arrival + remaining / share) / fair_s, 9)
        inputs = window_inputs(jobs, est, capacity=view.total_gpus, rounds=t, round_s=tau,
                               k=cfg.k, cap_s=np.maximum(cap, 0.0))
        # A job whose fair finish time falls inside the window must finish within it
        # (cap 0); the paper's form makes the whole program infeasible instead.
        reachable = remaining - tau * t <= np.maximum(cap, 0.0)
        # every job weighted by its lateness, its cap held or not (fairness.py)
        weight = fairness.lateness_weight(projected, remaining < tau, cfg.lam)
        # Relax in two steps: first only the caps no schedule can meet, then, if the rest
        # still cannot all hold, all.
        inputs = replace(inputs, cap_s=np.where(reachable, inputs.cap_s, np.inf),
                         weight=weight)
        solution = self._run(inputs)
        relaxed = not bool(reachable.all())
        if solution.status == "infeasible":
            relaxed = True
            inputs = replace(inputs, cap_s=np.full(len(jobs), np.inf))
            solution = self._run(inputs)
        rescue = max(cfg.rescue_rho, 1.0) ** cfg.lam if cfg.rescue_rho > cfg.rho_max else 1.0
        # the rescued jobs by deadline, each at arrival + S x its fair time in the system,
        # S the most any job is projected to take of its own (never below the rescue
        # line): the stretch the schedule is heading for, as the max-stretch rule of
        # Bender et al. sets it (schedule.py::window_order)
        stretch = max(cfg.rescue_rho, 1.0, float(projected.max()))
        order = window_order(solution.rounds, remaining, weight, rescue, tau,
                             [j.is_running for j in jobs], ids_of=[j.job_id for j in jobs],
                             due_s=np.round(arrival + stretch * fair_s, 6))
        ids = [jobs[i].job_id for i in order]
        rounds = {jobs[i].job_id: int(solution.rounds[i]) for i in range(len(jobs))}
        schedule = pack(rounds, {j.job_id: j.gpus for j in jobs}, ids, view.total_gpus, t,
                        first=crit)
        # string keys: memory must survive a JSON round trip unchanged
        return {
            "start": view.round_index,
            "rounds": schedule,
            "per_job": {str(jid): n for jid, n in rounds.items()},
            "rho": {str(jobs[i].job_id): round(float(projected[i]), 3)
                    for i in range(len(jobs))},
            "relaxed": relaxed,
            "order": ids,  # the window's order: the lookahead projects the market by it
            "solve": {"status": solution.status, "wall_s": solution.wall_s,
                      "build_s": solution.build_s,
                      "backend": solution.backend, "message": solution.message,
                      **certificate(inputs, solution, schedule, [j.job_id for j in jobs])},
        }

    def _run(self, inputs: WindowInputs) -> WindowSolution:
        cfg = self.config
        return solve_window(inputs, backend=cfg.solver, time_limit_s=cfg.time_limit_s,
                            max_nodes=cfg.max_nodes, rel_gap=cfg.rel_gap, threads=cfg.threads)

    def _order(self, jobs: list[Job], est: Mapping[JobId, Estimate], scheduled: list[JobId],
               cached: Mapping[str, Any], keep: list[JobId], crit: list[JobId],
               ending: set[JobId], lease: int) -> Plan:
        """Finishing jobs, the critical path and leased jobs first, then the window's
        round, then backfill."""
        running = {j.job_id for j in jobs if j.is_running}
        # Every commitment goes ahead of the window's round, the round's own included:
        # left at its place there, a leased job lost its GPUs to any job ranked above it.
        committed = set(keep)
        scheduled = keep + [jid for jid in scheduled if jid not in committed]
        chosen = set(scheduled)
        backfill = sorted((j for j in jobs if j.job_id not in chosen),
                          key=lambda j: (-est[j.job_id].remaining_s, j.job_id))
        status = cached["solve"]["status"]
        reasons: dict[JobId, Reason] = {}
        for jid in keep:
            why = ("critical path" if jid in crit else
                   f"finishes within its lease of {lease} rounds" if jid in ending else
                   f"lease of {lease} rounds")
            reasons[jid] = Reason(ReasonCode.KEPT_RUNNING if jid in running else
                                  ReasonCode.SCHEDULED, why)
        for jid in scheduled[len(keep):]:
            detail = (f"rounds={cached['per_job'].get(str(jid), 0)}/"
                      f"{self.config.window_rounds} rho~{cached['rho'].get(str(jid), 0.0):.2f}")
            if status in _FALLBACKS:
                reasons[jid] = Reason(ReasonCode.SOLVER_TIMEOUT_FALLBACK,
                                      f"{detail} solver={status}")
            else:
                reasons[jid] = Reason(ReasonCode.SCHEDULED, detail)
        for j in backfill:
            if j.is_running and cached.get("relaxed"):
                reasons[j.job_id] = Reason(ReasonCode.PREEMPTED_FAIRNESS,
                                           f"rho~{cached['rho'].get(str(j.job_id), 0.0):.2f}")
            else:
                reasons[j.job_id] = Reason(ReasonCode.BACKFILLED,
                                           f"remaining~{est[j.job_id].remaining_s:.0f}s")
        return Plan(tuple(scheduled) + tuple(j.job_id for j in backfill), reasons,
                    moves_for=frozenset(crit), avoid_idle=True,
                    rho={int(jid): r for jid, r in cached["rho"].items()})
