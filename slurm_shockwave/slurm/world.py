"""The live cluster as the engine sees it: ClusterSource and Actuator over Slurm.

Observe is level-triggered: every round starts from what Slurm reports, never from what
we did last round. Only jobs of the managed partition are ever touched. Slurm's rules are
encoded once, here, as the order of operations:

- a held job rejects a priority update, so START is release, then priority (plan order,
  highest first; a set priority stays pinned);
- suspend keeps the GPUs, so PREEMPT is the job's checkpoint signal, then (after its
  acknowledgement or its grace time, possibly rounds later: the action is deferred
  meanwhile) requeue-hold; the requeued job waits cred_expire + 1 s before it may run;
- a managed job pending without the planner's approval (released by its owner) is held
  again, and so is every managed pending job the plan does not start; user holds become
  admin holds so owners cannot release them behind the planner's back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slurm_shockwave.clock import Clock
from slurm_shockwave.model.cluster import ClusterView, GpuNode
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import Job, JobProgress, JobSpec
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import Action, ActionKind, ActionResult, ApplyResult, Outcome
from slurm_shockwave.model.throughputs import ThroughputTable
from slurm_shockwave.slurm.hints import Hint, parse_hint
from slurm_shockwave.slurm.protocol import SlurmBackend, SlurmError, SlurmJob
from slurm_shockwave.workloads.bundled import bundled_table
from slurm_shockwave.workloads.catalog import MODELS
from slurm_shockwave.workloads.profile import epoch_seconds

ProgressFn = Callable[[SlurmJob, Hint], JobProgress]
"""What the job reported of its progress (the service's store)."""

TOP_PRIORITY = 1_000_000


def table_progress(table: ThroughputTable) -> ProgressFn:
    """Before a job reports anything: no epochs done, epoch times from the throughput
    table for its model and GPU count (what the simulator knows too)."""

    def progress(job: SlurmJob, hint: Hint) -> JobProgress:
        gpus = max(job.gpus, 1)
        known = tuple(sorted(
            (bs, epoch_seconds(hint.model, bs, gpus, table))
            for bs in {hint.bs, *MODELS[hint.model].batch_sizes, MODELS[hint.model].max_bs}
            if table.has(hint.model, bs, gpus)))
        durations = dict(known)
        return JobProgress(bs=hint.bs, epoch_s=durations.get(hint.bs, 0.0),
                           epoch_s_by_bs=known)

    return progress


@dataclass
class _Checkpoint:
    deadline_s: float
    signal: str


class SlurmCluster:
    def __init__(self, backend: SlurmBackend, clock: Clock, *, partition: str = "shockwave",
                 round_s: float = 120.0, progress: ProgressFn | None = None,
                 acked: Callable[[int], bool] = lambda _job_id: False) -> None:
        self.backend = backend
        self.clock = clock
        self.partition = partition
        self.round_s = round_s
        self.progress = progress or table_progress(bundled_table("tacc"))
        self.acked = acked
        self.round_index = 0
        self._checkpointing: dict[int, _Checkpoint] = {}
        self._jobs: dict[int, SlurmJob] = {}
        self._hints: dict[int, Hint] = {}
        self.bad_hints: dict[int, str] = {}
        self.rehold_failures: dict[int, str] = {}

    # -- ClusterSource ----------------------------------------------------------------------
    def observe(self) -> ClusterView:
        jobs = [j for j in self.backend.list_jobs(self.partition)
                if j.partition == self.partition and j.state in ("PENDING", "RUNNING")]
        self._jobs = {j.job_id: j for j in jobs}
        nodes = tuple(GpuNode(n.name, n.gpus) for n in self.backend.list_nodes()
                      if n.usable and self.partition in n.partitions and n.gpus > 0)
        views = []
        for j in jobs:
            hint = self._hint(j)
            if hint is None:
                continue
            phase = (Phase.CHECKPOINTING if j.job_id in self._checkpointing
                     else Phase.RUNNING if j.state == "RUNNING"
                     else Phase.HELD if j.held else Phase.PENDING)
            spec = JobSpec(j.job_id, hint.model, hint.bs, max(j.gpus, 1), hint.mode,
                           float(j.submit_time), hint.epochs, user=j.user)
            slots = tuple(f"{j.nodes}:{i}" for i in range(j.gpus)) if j.state == "RUNNING" \
                else ()
            views.append(Job(spec, self.progress(j, hint), phase, slots))
        view = ClusterView(now_s=self.clock.now(), round_index=self.round_index,
                           round_s=self.round_s, nodes=nodes, jobs=tuple(views))
        self.round_index += 1
        return view

    def _hint(self, job: SlurmJob) -> Hint | None:
        if job.job_id not in self._hints:
            try:
                hint = parse_hint(job.admin_comment or job.comment)
                if hint.model not in MODELS:  # a free label: no throughput to plan with
                    raise InputError(f"model {hint.model or '(none)'} is not in the "
                                     f"catalogue ({', '.join(MODELS)}); not planned",
                                     source="hint", field="model")
                self._hints[job.job_id] = hint
            except InputError as exc:
                self.bad_hints[job.job_id] = str(exc)
                return None
        return self._hints[job.job_id]

    # -- Actuator -----------------------------------------------------------------------------
    def apply(self, actions: Sequence[Action]) -> ApplyResult:
        now = self.clock.now()
        results: list[ActionResult] = []
        starts = [a for a in actions if a.kind == ActionKind.START]
        preempts = [a for a in actions if a.kind == ActionKind.PREEMPT]
        approved = {a.job_id for a in actions if a.kind != ActionKind.PREEMPT}

        # 1. preemption: signal now, requeue-hold once acknowledged or past the grace time
        requeue: list[Action] = []
        for a in preempts:
            job = self._jobs.get(a.job_id)
            if job is None or job.state != "RUNNING":
                self._checkpointing.pop(a.job_id, None)
                results.append(ActionResult(a, Outcome.APPLIED, "no longer running"))
                continue
            ck = self._checkpointing.get(a.job_id)
            if ck is None:
                hint = self._hints[a.job_id]
                if hint.signal is None:  # no checkpoint signal: requeue as Slurm does
                    requeue.append(a)
                    continue
                try:
                    self.backend.signal(a.job_id, hint.signal)
                except SlurmError as exc:
                    results.append(ActionResult(a, Outcome.REJECTED, str(exc)))
                    continue
                ck = self._checkpointing[a.job_id] = _Checkpoint(now + hint.grace_s,
                                                                 hint.signal)
            if self.acked(a.job_id) or now >= ck.deadline_s:
                requeue.append(a)
            else:
                results.append(ActionResult(a, Outcome.DEFERRED,
                                            f"SIG{ck.signal} sent; requeue after ack or at "
                                            f"+{ck.deadline_s - now:.0f}s"))
        results += self._batch(requeue, lambda ids: self.backend.requeue(ids, hold=True))
        for a in requeue:
            self._checkpointing.pop(a.job_id, None)
        # a job the plan keeps or restarts is no longer being checkpointed
        for jid in list(self._checkpointing):
            if jid in approved:
                self._checkpointing.pop(jid)

        # 2. starts: release (held jobs reject priorities), then pin priorities in plan order
        to_release = [a for a in starts if (j := self._jobs.get(a.job_id)) and j.held]
        release_results = {r.action.job_id: r for r in
                           self._batch(to_release, self.backend.release)}
        for rank, a in enumerate(starts):
            if a.job_id in release_results and release_results[a.job_id].outcome != \
                    Outcome.APPLIED:
                results.append(release_results[a.job_id])
                continue
            job = self._jobs.get(a.job_id)
            if job is None:
                results.append(ActionResult(a, Outcome.REJECTED, "not in the managed queue"))
                continue
            if job.state == "RUNNING":
                results.append(ActionResult(a, Outcome.APPLIED, "already running"))
                continue
            try:
                self.backend.set_priority(a.job_id, TOP_PRIORITY - rank)
                results.append(ActionResult(a, Outcome.APPLIED))
            except SlurmError as exc:
                results.append(ActionResult(a, Outcome.REJECTED, str(exc)))
        results += [ActionResult(a, Outcome.APPLIED) for a in actions
                    if a.kind == ActionKind.KEEP]

        # 3. everything else pending in the managed partition waits, held by the admin:
        # job_submit.lua's hold is a user hold (JobHeldUser) that the owner may release;
        # root's `scontrol hold` turns it into JobHeldAdmin, which users cannot release
        rehold = [j.job_id for j in self._jobs.values()
                  if j.state == "PENDING" and j.job_id not in approved
                  and j.job_id in self._hints
                  and (not j.held or j.reason == "JobHeldUser")]
        self.rehold_failures = {jid: err for jid, err in _each(rehold, self.backend.hold).items()
                                if err}
        return ApplyResult(tuple(results))

    def _batch(self, actions: Sequence[Action],
               call: Callable[[list[int]], None]) -> list[ActionResult]:
        errors = _each([a.job_id for a in actions], call)
        return [ActionResult(a, Outcome.REJECTED, err) if err else
                ActionResult(a, Outcome.APPLIED) for a in actions
                for err in (errors[a.job_id],)]


def _each(job_ids: list[int], call: Callable[[list[int]], None]) -> dict[int, str | None]:
    """One Slurm call for all; if it fails, one call each, so one bad job can neither
    block nor hide the others. Maps each job to Slurm's error, or None."""
    if not job_ids:
        return {}
    try:
        call(job_ids)
        return dict.fromkeys(job_ids)
    except SlurmError:
        pass
    out: dict[int, str | None] = {}
    for jid in job_ids:
        try:
            call([jid])
            out[jid] = None
        except SlurmError as exc:
            out[jid] = str(exc)
    return out

