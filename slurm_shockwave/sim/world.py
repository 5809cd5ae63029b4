"""The simulated cluster: the only place the progress model lives.

Time model (../shared/reference/shockwave/NOTES.md §3.2, the paper's simulator):
synchronous rounds of ``round_s``;
a job started (first start, restart after preemption, or migration) loses the first
``restore_s`` of its run to checkpoint restore; a GPU freed mid-round stays idle until the round
ends, unless ``fill_freed``: then the round stops at each finish that leaves a job
waiting and, while GPUs are free, at each arrival and each moment a preempted job may
start again; the driver runs a fill step (engine.fill: the policy plans, waiting jobs
start on the GPUs free now, nobody is preempted or moved) and the round goes on to its
end, as the live service does when a job's epilog reports its end or its poll sees a new
or newly eligible job; a preempted job may start
again only ``requeue_delay_s`` later (0 as in the paper; a live Slurm's cred_expire +
1 s), and a job moved (preempted and started in one round) holds its new GPUs idle for
that delay before its restore; a round ends early only when every running job finished
early; with nothing running and nothing waiting the clock jumps to the next arrival. A
batch-size change takes effect at the end of the round in which the job reached the epoch
that calls for it, and progress is kept in epochs, so steps are rescaled and epochs preserved. An
elastic job runs at the throughput of the count it was started on (its profile's epoch
times at that count); a resize is a preemption plus a start, so it pays ``restore_s``
(and the requeue delay) as a migration does.
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
    restore_left_s: float = 0.0
    """Restore still to pay before this run makes progress (set at each start)."""
    hold_left_s: float = 0.0
    """A moved job's requeue delay still to wait on its new GPUs before its restore: they
    are its, but it is pending (live, Slurm holds it), so the wait is neither run time
    nor attained service nor busy GPU time."""
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
                 requeue_delay_s: float = 0.0, fill_freed: bool = False) -> None:
        if round_s <= 0 or restore_s < 0 or restore_s >= round_s:
            raise ValueError("need 0 <= restore_s < round_s")
        if requeue_delay_s < 0:
            raise ValueError("need requeue_delay_s >= 0")
        self.requeue_delay_s = requeue_delay_s
        self.fill_freed = fill_freed
        self._round_start: float | None = None
        """Set while a round is under way (fill steps stop it before its end)."""
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
        self.timeline: list[tuple[float, int]] = []
        """(time, GPUs busy from then): each stretch's start, each job's finish and the
        end of its requeue delay within it, and 0 before an idle jump; its steps' area is
        ``busy_gpu_s``."""

    # -- ClusterSource ----------------------------------------------------------------------
    def observe(self) -> ClusterView:
        now = self.clock.now()
        end = bisect.bisect_right(self._arrivals, now)
        for j in self._all[self._next:end]:
            self._active[j.spec.job_id] = j
        self._next = max(self._next, end)
        return ClusterView(now_s=now, round_index=self.round_index, round_s=self.round_s,
                           nodes=self.nodes,
                           jobs=tuple(j.view() for j in self._active.values()
                                      if j.phase == Phase.RUNNING or j.eligible_s <= now),
                           returning=tuple(j.view() for j in self._active.values()
                                           if j.phase != Phase.RUNNING and j.eligible_s > now),
                           num_jobs_total=len(self._all), restart_cost_s=self.restore_s,
                           fills=self.fill_freed)

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
                if job.hold_left_s > 0:  # moved, still in its requeue delay: live it is
                    job.hold_left_s = 0.0  # held, its eligible time unchanged
                else:
                    job.eligible_s = self.clock.now() + self.requeue_delay_s
            elif action.kind == ActionKind.START:
                if held.intersection(action.gpu_slots):
                    results.append(ActionResult(action, Outcome.REJECTED, "GPU already in use"))
                    continue
                held.update(action.gpu_slots)
                job.set_phase(Phase.RUNNING)
                job.slots = action.gpu_slots
                job.gpus = len(action.gpu_slots)
                # a job moved this round (preempted, then started) waits out its requeue
                # delay on the GPUs it moved to, as Slurm holds a requeued job live
                job.hold_left_s = max(0.0, job.eligible_s - self.clock.now())
                job.restore_left_s = self.restore_s
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

    def _waiting_at(self, t: float) -> bool:
        """A job not running is in the view at ``t`` (arrived, past its requeue delay)."""
        return (any(j.phase != Phase.RUNNING and j.eligible_s <= t
                    for j in self._active.values())
                or (self._next < len(self._all) and self._arrivals[self._next] <= t))

    def _fill_at(self, now: float, round_end: float, running: Sequence[_SimJob],
                 need: dict[int, float]) -> float:
        """When a fill step is due before the round's end: the first finish if a job then
        waits; while GPUs are free, the moment a preempted job may start again; and the
        next arrival, free GPUs or not (the service's poll sees both; a new job that must
        run now calls the next round at once, engine/fill.py)."""
        stop = round_end
        first_end = min((now + n for n in need.values()), default=round_end)
        if first_end < round_end and self._waiting_at(first_end):
            stop = first_end
        # GPUs are free now, or from the first finish on
        free_from = now if sum(n.gpus for n in self.nodes) > sum(j.gpus for j in running) \
            else first_end
        joins = [j.eligible_s for j in self._active.values()
                 if j.phase != Phase.RUNNING and j.eligible_s >= free_from]
        if self._next < len(self._all):
            joins.append(self._arrivals[self._next])
        return min([stop, *(t for t in joins if now < t < stop)])

    def end_round(self) -> None:
        """End the current round now (at its boundary, or after a fill step that called
        the next one, engine/fill.py::round_due): a batch-size change applies here."""
        for job in self._active.values():
            if job.phase == Phase.RUNNING:
                job.bs = job.profile.bs_by_epoch[min(int(job.epochs_done),
                                                     job.spec.num_epochs - 1)]
        self.round_index += 1
        self._round_start = None

    def advance(self) -> bool:
        """Run the current round and move the clock to its end; with ``fill_freed`` stop
        instead where a fill step is due. True when the round ended (False: run the fill
        step, then ``advance`` again)."""
        now = self.clock.now()
        start = now if self._round_start is None else self._round_start
        running = [j for j in self._active.values() if j.phase == Phase.RUNNING]
        if not running and self._round_start is None:
            if not self._active:  # idle: jump to the next arrival
                if not self.timeline or self.timeline[-1][1]:
                    self.timeline.append((now, 0))  # the plot's step: idle until then
                if self._next < len(self._all):
                    self.clock.advance_to(max(start, self._arrivals[self._next]))
                return True
            stop = self._fill_at(now, start + self.round_s, [], {}) if self.fill_freed \
                else start + self.round_s
            self.timeline.append((start, 0))
            if stop < start + self.round_s:  # an arrival, or a requeue delay's end, on
                self._round_start = start    # idle GPUs: a fill step, as in a round
                self.clock.advance_to(stop)  # with jobs running
                return False
            self.clock.advance_to(start + self.round_s)
            self.round_index += 1
            return True
        self._round_start = start
        round_end = start + self.round_s
        need = {id(j): j.hold_left_s + j.restore_left_s
                + (j.spec.num_epochs - j.epochs_done) * j.epoch_s for j in running}
        stop = round_end
        if self.fill_freed:
            stop = self._fill_at(now, round_end, running, need)
        # busy from the end of its requeue delay (a moved job's wait on its new GPUs is
        # not busy time) to its finish: a step at each (the plot, found by red-teams, drew
        # them busy from the stretch's start to the next round)
        steps = [(now, 0), *((now + min(j.hold_left_s, stop - now), j.gpus) for j in running)]
        last = now
        for job in running:
            ends = now + need[id(job)] <= stop  # the same sum as ``stop``: exact for its job
            self._run(job, need[id(job)] if ends else stop - now, ends)
            if job.finish_s is not None:
                last = max(last, job.finish_s)
                steps.append((job.finish_s, -job.gpus))
        busy = 0
        for at, change in sorted(steps):
            busy += change
            if self.timeline and self.timeline[-1][0] == at:
                self.timeline[-1] = (at, busy)
            else:
                self.timeline.append((at, busy))
        unfinished = any(j.finish_s is None for j in running)
        if stop < round_end:  # a fill step: the round goes on after it
            for job in running:
                if job.finish_s is not None:
                    self._complete(job)
            self.clock.advance_to(stop)
            return False
        end = round_end if unfinished else last
        for job in running:
            if job.finish_s is not None:
                self._complete(job)
        self.clock.advance_to(end)
        self.end_round()
        return True

    def _run(self, job: _SimJob, used: float, finishes: bool) -> None:
        """``used`` seconds of the job's run from now; ``finishes``: it ends within them."""
        now = self.clock.now()
        held = min(job.hold_left_s, used)
        job.hold_left_s -= held
        used -= held
        now += held
        paid = min(job.restore_left_s, used)
        job.restore_left_s -= paid
        before = job.epochs_done
        job.epochs_done = float(job.spec.num_epochs) if finishes else (
            job.epochs_done + (used - paid) / job.epoch_s)
        self._record_bs(job, before)
        job.run_s += used
        job.attained_gpu_s += used * job.gpus
        if used > 0 and job.last_run_round != self.round_index:
            job.rounds_run += 1
            job.last_run_round = self.round_index
        self.busy_gpu_s += used * job.gpus
        self.restore_gpu_s += paid * job.gpus
        over = (self.deadline_factor is not None
                and job.run_s > self.deadline_factor * job.profile.exclusive_s)
        if finishes or over:
            job.finish_s = now + used
            job.cut_off = over and not finishes

    def _complete(self, job: _SimJob) -> None:
        job.set_phase(Phase.DONE)
        job.slots = ()
        del self._active[job.spec.job_id]
        assert job.finish_s is not None
        self.finished.append(JobOutcome(job.spec.job_id, job.spec.arrival_s, job.finish_s,
                                        job.spec.gpus, job.profile.exclusive_s, job.run_s,
                                        job.rounds_run, job.cut_off))
