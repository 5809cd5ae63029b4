"""The simulated cluster: the only place the progress model lives.

Time model (../shared/reference/shockwave/NOTES.md §3.2, the paper's simulator):
synchronous rounds of ``round_s``;
a job started this round (first start, restart after preemption, or migration) loses
``restore_s`` to checkpoint restore; a GPU freed mid-round stays idle until the round
ends; a preempted job may start again only ``requeue_delay_s`` later (0 as in the
paper; a live Slurm's cred_expire + 1 s); a round ends early only when every running job
finished early; with nothing
running and nothing waiting the clock jumps to the next arrival. A batch-size change
takes effect at the end of the round in which the job reached the epoch that calls for
it, and progress is kept in epochs, so steps are rescaled and epochs preserved. An
elastic job runs at the throughput of the count it was started on (its profile's epoch
times at that count); a resize is a preemption plus a start, so it pays ``restore_s``
as a migration does.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from slurm_shockwave.clock import SimClock
from slurm_shockwave.model.cluster import ClusterView, GpuNode
from slurm_shockwave.model.job import Job, JobId, JobProgress, JobSpec
from slurm_shockwave.model.lifecycle import Phase, transition
from slurm_shockwave.model.plan import (
    Action,
    ActionKind,
    ActionResult,
    ApplyResult,
    Outcome,
)
from slurm_shockwave.sim.inputs import Workload
from slurm_shockwave.workloads.profile import JobProfile


@dataclass(eq=False)
class _SimJob:
    spec: JobSpec
    profile: JobProfile
    bs: int
    epochs_done: float = 0.0
    run_s: float = 0.0
    attained_gpu_s: float = 0.0
    rounds_run: int = 0
    last_run_round: int = -1
    phase: Phase = Phase.PENDING
    slots: tuple[str, ...] = ()
    started_this_round: bool = False
    eligible_s: float = 0.0
    """A requeued job is back in the view only from here (Slurm's BeginTime)."""
    finish_s: float | None = None
    cut_off: bool = False
    history: list[list[int]] = field(default_factory=list)
    gpus: int = 0
    """The count it runs (or last ran) on: its request until an elastic resize."""

    def __post_init__(self) -> None:
        self.gpus = self.spec.gpus

    @property
    def epoch_s(self) -> float:
        return self.profile.epoch_s_at(self.bs, self.gpus)

    def view(self) -> Job:
        by_bs = self.profile.epoch_s_by_gpus.get(self.gpus, self.profile.epoch_s_by_bs)
        rates = tuple((c, self.profile.epoch_s_by_bs[self.bs] / self.profile.epoch_s_at(self.bs, c))
                      for c in self.spec.gpu_counts()) if self.spec.is_elastic else ()
        progress = JobProgress(
            epochs_done=self.epochs_done, bs=self.bs, epoch_s=self.epoch_s,
            run_s=self.run_s, attained_gpu_s=self.attained_gpu_s, rounds_run=self.rounds_run,
            last_run_round=self.last_run_round,
            bs_history=tuple((b, n) for b, n in self.history),
            epoch_s_by_bs=tuple(sorted(by_bs.items())), gpus=self.gpus, rate_by_gpus=rates)
        return Job(self.spec, progress, self.phase, self.slots)

    def set_phase(self, dst: Phase) -> None:
        self.phase = transition(self.phase, dst, job_id=self.spec.job_id)


@dataclass(frozen=True)
class JobOutcome:
    job_id: JobId
    arrival_s: float
    finish_s: float
    gpus: int
    exclusive_s: float
    run_s: float
    rounds_run: int
    cut_off: bool


class SimulatedCluster:
    """Implements ClusterSource and Actuator over a trace; ``advance`` runs one round."""

    def __init__(self, workload: Workload, nodes: Sequence[GpuNode], *, round_s: float = 120.0,
                 restore_s: float = 20.0, deadline_factor: float | None = None,
                 requeue_delay_s: float = 0.0) -> None:
        if round_s <= 0 or restore_s < 0 or restore_s >= round_s:
            raise ValueError("need 0 <= restore_s < round_s")
        if requeue_delay_s < 0:
            raise ValueError("need requeue_delay_s >= 0")
        self.requeue_delay_s = requeue_delay_s
        self.nodes = tuple(nodes)
        self.round_s = round_s
        self.restore_s = restore_s
        self.deadline_factor = deadline_factor
        self.clock = SimClock(0.0)
        self.round_index = 0
        by_arrival = sorted(workload.jobs, key=lambda t: (t.spec.arrival_s, t.spec.job_id))
        self._all = [_SimJob(tj.spec, workload.profiles[tj.spec.job_id], tj.spec.init_bs)
                     for tj in by_arrival]
        self._arrivals = [j.spec.arrival_s for j in self._all]
        self._next = 0  # index of the first job not yet arrived
        self._active: dict[JobId, _SimJob] = {}
        self.finished: list[JobOutcome] = []
        self.busy_gpu_s = 0.0
        self.restore_gpu_s = 0.0
        self.starts = 0
        """Jobs started (first starts, restarts after a preemption, moves, resizes)."""
        self.timeline: list[tuple[float, int]] = []  # (round start, GPUs busy)

    # -- ClusterSource ----------------------------------------------------------------------
    def observe(self) -> ClusterView:
        now = self.clock.now()
        end = bisect.bisect_right(self._arrivals, now)
        for j in self._all[self._next:end]:
            self._active[j.spec.job_id] = j
        self._next = max(self._next, end)
        return ClusterView(now_s=now, round_index=self.round_index, round_s=self.round_s,
                           nodes=self.nodes, jobs=tuple(j.view() for j in self._active.values()
                                                        if j.eligible_s <= now),
                           num_jobs_total=len(self._all), restart_cost_s=self.restore_s)

    # -- Actuator ---------------------------------------------------------------------------
    def apply(self, actions: Sequence[Action]) -> ApplyResult:
        held = {s for j in self._active.values() for s in j.slots}
        results = []
        for action in actions:
            job = self._active.get(action.job_id)
            if job is None:
                results.append(ActionResult(action, Outcome.REJECTED, "no such active job"))
                continue
            if action.kind == ActionKind.PREEMPT:
                held.difference_update(job.slots)
                for phase in (Phase.CHECKPOINTING, Phase.REQUEUED, Phase.PENDING):
                    job.set_phase(phase)
                job.slots = ()
                job.eligible_s = self.clock.now() + self.requeue_delay_s
            elif action.kind == ActionKind.START:
                if held.intersection(action.gpu_slots):
                    results.append(ActionResult(action, Outcome.REJECTED, "GPU already in use"))
                    continue
                held.update(action.gpu_slots)
                job.set_phase(Phase.RUNNING)
                job.slots = action.gpu_slots
                job.gpus = len(action.gpu_slots)
                job.started_this_round = True
                self.starts += 1
            results.append(ActionResult(action, Outcome.APPLIED))
        return ApplyResult(tuple(results))

    # -- time -------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return not self._active and self._next >= len(self._all)

    def _record_bs(self, job: _SimJob, epochs_before: float) -> None:
        gained = math.floor(job.epochs_done) - math.floor(epochs_before)
        if gained <= 0:
            return
        if job.history and job.history[-1][0] == job.bs:
            job.history[-1][1] += gained
        else:
            job.history.append([job.bs, gained])

    def advance(self) -> None:
        """Run the current round and move the clock to its end."""
        start = self.clock.now()
        running = [j for j in self._active.values() if j.phase == Phase.RUNNING]
        if not running:
            if not self._active:  # idle: jump to the next arrival
                if self._next < len(self._all):
                    self.clock.advance_to(max(start, self._arrivals[self._next]))
                return
            self.timeline.append((start, 0))
            self.clock.advance_to(start + self.round_s)
            self.round_index += 1
            return
        self.timeline.append((start, sum(j.gpus for j in running)))
        round_end = start
        for job in running:
            penalty = self.restore_s if job.started_this_round else 0.0
            epoch_s = job.epoch_s
            left = job.spec.num_epochs - job.epochs_done
            need_s = penalty + left * epoch_s
            used = min(self.round_s, need_s)
            before = job.epochs_done
            job.epochs_done = float(job.spec.num_epochs) if need_s <= self.round_s else (
                job.epochs_done + (self.round_s - penalty) / epoch_s)
            self._record_bs(job, before)
            job.run_s += used
            job.attained_gpu_s += used * job.gpus
            job.rounds_run += 1
            job.last_run_round = self.round_index
            job.started_this_round = False
            self.busy_gpu_s += used * job.gpus
            self.restore_gpu_s += min(penalty, used) * job.gpus
            over = (self.deadline_factor is not None
                    and job.run_s > self.deadline_factor * job.profile.exclusive_s)
            if need_s <= self.round_s or over:
                job.finish_s = start + used
                job.cut_off = over and need_s > self.round_s
            round_end = max(round_end, start + used)
        end = start + self.round_s if any(j.finish_s is None for j in running) else round_end
        for job in running:
            if job.finish_s is not None:
                self._complete(job)
            else:  # a batch-size change applies at the round boundary
                job.bs = job.profile.bs_by_epoch[min(int(job.epochs_done),
                                                     job.spec.num_epochs - 1)]
        self.clock.advance_to(end)
        self.round_index += 1

    def _complete(self, job: _SimJob) -> None:
        job.set_phase(Phase.DONE)
        job.slots = ()
        del self._active[job.spec.job_id]
        assert job.finish_s is not None
        self.finished.append(JobOutcome(job.spec.job_id, job.spec.arrival_s, job.finish_s,
                                        job.spec.gpus, job.profile.exclusive_s, job.run_s,
                                        job.rounds_run, job.cut_off))
