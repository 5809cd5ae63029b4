"""The live cluster as the engine sees it: ClusterSource and Actuator over Slurm.

Observe is level-triggered: every round starts from what Slurm reports, never from what
we did last round. Only jobs of the managed partition are ever touched. Slurm's rules are
encoded once, here, as the order of operations:

- a held job rejects a priority update, so START is release, then priority (the widest
  start highest, as the plan places them; a set priority stays pinned, also under
  priority/multifactor);
- suspend keeps the GPUs, so PREEMPT frees them by requeue, then the planner's hold. A
  job whose hint names a checkpoint signal gets that signal first and is requeued after
  its acknowledgement or its grace time, possibly rounds later (the action is deferred
  meanwhile); a job that named no signal is requeued at once, as Slurm itself preempts
  (SIGTERM, KillWait, SIGKILL), so no process that does not expect a signal dies of one;
- the signal is an intent that spans rounds: it is written to the intent log *before* it
  is sent (kube-scheduler's "assume"), so a restarted service never signals twice, and it
  is confirmed by observation (the job left RUNNING or its restart count rose) or
  forgotten when the plan keeps the job after all;
- an elastic job (hint ``gpus=LO-HI``) started at another count than Slurm holds gets
  its GRES (and node count, for several nodes) updated while pending, before its
  release: Slurm accepts GRES updates only for pending jobs. A running one is resized
  as it is moved (a preempt plus a start): its checkpoint and requeue-hold, and once
  pending, the GRES update and release (docs/elastic.md);
- a managed job pending without the planner's approval is held again, and so is every
  managed pending job the plan does not start. The planner's hold is a user hold, as
  job_submit.lua's is (job_submit.lua refuses the owner's release while the service is
  alive), so that an admin's ``scontrol hold`` (an admin hold) is told apart: such a job
  is left out of the plan, held, until an admin gives it back. A job its owner (or their
  account's coordinator) holds (``scontrol hold``: job_submit.lua marks its comment
  ``held=owner``) or that is requeue-held (``scontrol requeuehold``, a user hold its owner
  may release: marked ``held=requeue`` here, so that job_submit.lua lets the owner's
  release through) is left out too, until released: the planner never releases either.

GPU slots are the real ones: ``<node>:<device index>`` from the job's allocation, and a
node offers the planner only the GPUs no job of another partition (or unplanned job of
this one) holds.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from slurm_shockwave.clock import Clock
from slurm_shockwave.model.cluster import ClusterView, GpuNode, slot_node
from slurm_shockwave.model.job import Job, JobSpec
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import Action, ActionKind, ActionResult, ApplyResult, Outcome
from slurm_shockwave.model.report import ProgressReport
from slurm_shockwave.prediction.observed import acknowledged
from slurm_shockwave.slurm.asked import asked_request, restore_request
from slurm_shockwave.slurm.hints import (
    PREFIX,
    Hint,
    split_hold_mark,
    with_hold_mark,
)
from slurm_shockwave.slurm.intents import (
    CheckpointIntent,
    IntentLog,
    MemoryIntents,
    killed_by,
    signalled_run,
)
from slurm_shockwave.slurm.job_gpus import (
    asked_nodes,
    fewest_nodes,
    gres_count,
    job_slots,
    request_gpus,
    set_gpus,
    usable_gpus,
    with_found_alloc,
)
from slurm_shockwave.slurm.listing import (
    ADMIN_HOLD,
    TOP_PRIORITY,
    first_submitted,
    held_back,
    held_by_admin,
    held_by_owner,
    held_by_someone,
    hint_text,
    managed,
    pinned,
    read_hint,
    requeue_held,
)
from slurm_shockwave.slurm.protocol import (
    SlurmBackend,
    SlurmError,
    SlurmJob,
    SlurmNotAsked,
    SlurmUnanswered,
)
from slurm_shockwave.slurm.table_progress import ProgressFn, table_progress
from slurm_shockwave.slurm.until_silent import NOT_ASKED, asking_anyway, until_silent
from slurm_shockwave.workloads.bundled import bundled_table

log = logging.getLogger(__name__)


CLOSED = ("DOWN", "INACTIVE")
"""Partition states in which Slurm allocates nothing (DRAIN still runs what is queued)."""
STALE_CHECKPOINT_S = 300.0
"""The least time no step looked at a checkpoint in flight after which it is asked for
again (``SlurmCluster._stale_after_s``)."""
WAITING_BAND = 50_000
"""A start whose GPUs a running job still holds (its checkpoint under way) ranks this far
below every start that can run now: Slurm's main scheduler stops at the first job of a
partition that cannot start and leaves the rest to the backfill pass (``bf_interval``,
30 s by default), so a waiting job ranked first would hold back every start after it."""


@dataclass(frozen=True)
class LeftOut:
    """Managed jobs an observation left out of the view, so that queue and explain still
    show them: a bad hint (left to Slurm), a pending job Slurm will not start before its
    eligible time, a job an admin holds, a job its owner holds, and a job running on a
    node Slurm gives no new work (drained, not responding)."""

    bad_hints: Mapping[int, str] = field(default_factory=dict)
    not_eligible: Mapping[int, int] = field(default_factory=dict)
    """Job -> its eligible time (epoch seconds)."""
    admin_held: Mapping[int, SlurmJob] = field(default_factory=dict)
    on_closed_node: Mapping[int, str] = field(default_factory=dict)
    """Job -> its node and that node's state."""
    without_gpus: frozenset[int] = frozenset()
    """Running jobs that asked for no GPU (planned as 1-GPU jobs while pending): Slurm gave
    them none, so the plan has no GPU to keep them on, and placed on one it took each
    for a move and requeued it round after round (found by a review): left to Slurm
    until they end."""
    ending: frozenset[int] = frozenset()
    """Jobs Slurm lists COMPLETING (ended, or being requeued: their Epilog runs)."""
    suspended: frozenset[int] = frozenset()
    """Jobs an admin suspended (``scontrol suspend``): left to Slurm until resumed. Their
    rows keep them in the store's jobs, so their reports stay theirs (the store forgets
    the reports of a job id that comes back after a round without a row: a reused id)."""
    owner_held: Mapping[int, SlurmJob] = field(default_factory=dict)
    """Pending jobs their owner holds (``held_by_owner``): out of the view until released."""
    listed: Mapping[int, SlurmJob] = field(default_factory=dict)
    """Every job listed, as Slurm lists it (a running one with its GPU indices): its
    row names its owner, whose reports the progress API accepts only for a job the
    store shows as theirs (found by a review: a job on a drained node got 403, an ending
    one's end report 404), and shows the GPUs, nodes and hint Slurm has for it (a
    red-team: a job running on a drained node, suspended or ending read 0 GPUs, nowhere,
    no model)."""
    held_back: Mapping[int, str] = field(default_factory=dict)
    """Pending jobs Slurm will not start whatever the plan (``held_back``): job -> why."""
    killed: Mapping[int, str] = field(default_factory=dict)
    """Jobs the checkpoint signal killed before they could handle it, which this round's
    apply runs again (``_rerun_killed``): job -> the signal. Their rows keep them in the
    store's jobs, so their reports stay theirs (a review: out of the view as FAILED for
    one round, back PENDING the next, each read as another job under the id, its reports
    deleted and its progress 0)."""
    not_requeueable: frozenset[int] = frozenset()
    """Running jobs Slurm will not requeue (``SlurmJob.requeue``: submitted
    ``--no-requeue`` and moved into the partition, which job_submit.lua cannot see):
    the planner cannot stop them, so they are left to Slurm until they end and their
    GPUs are given to no other job. Planned while pending, such a job was preempted
    round after round, each refused, while the plan counted its GPUs free."""
    requeuing: frozenset[int] = frozenset()
    """Of ``ending``, the jobs being requeued (a plan's preemption or resize, an admin's
    requeue): back after their requeue delay, not ended (a red-team: rows said "its
    Epilog runs")."""


@dataclass(frozen=True)
class _Move:
    """A job a plan moved or resized, until it runs again (``SlurmCluster._moving``)."""

    restart_count: int
    """Its restart count when moved: a higher one while running is the run after it."""
    gpus: int | None = None
    """Its count in the last round's plan that started it (``ClusterView.moving_to``);
    None until a round has (a fill step's move)."""
    round_index: int = -1
    """The round whose plan set ``gpus``: only that round's fill steps keep GPUs for it
    while its job is out of the view (COMPLETING), where a later round planned without
    it (and a hung Epilog would keep them for ever)."""


@dataclass
class _Served:
    """One job's service: earlier runs', and the run under way (its restart count and
    start time) as far as last seen."""

    done_s: float = 0.0
    done_gpu_s: float = 0.0
    run: tuple[int, int] | None = None
    run_s: float = 0.0
    gpus: int = 1


class SlurmCluster:
    def __init__(self, backend: SlurmBackend, clock: Clock, *, partition: str = "shockwave",
                 round_s: float = 120.0, progress: ProgressFn | None = None,
                 acked: Callable[[int, float, int], bool] = lambda _job, _since, _run: False,
                 intents: IntentLog | None = None, round_index: int = 0,
                 origin_s: float = 0.0, restart_cost_s: float = 60.0,
                 fill_freed: bool = False) -> None:
        self.backend = backend
        self.restart_cost_s = restart_cost_s
        self.fill_freed = fill_freed
        """The service takes fill steps between rounds (``service.fill_freed``): the
        view says so to the policy (``ClusterView.fills``; ``shockwave plan`` plans as
        the service would)."""
        self.clock = clock
        self.partition = partition
        self.round_s = round_s
        self.progress = progress or table_progress(bundled_table("tacc"))
        self.acked = acked
        self.epochs_reported: Callable[[int, int], float] = lambda _job_id, _run: 0.0
        """The most epochs a run of a job has reported, read afresh (the service's store):
        a job that acknowledged its checkpoint and then reported its last epoch is let
        end, not requeued (``_epochs_left``)."""
        self._let_end: set[int] = set()
        """Jobs let end after their last epoch's report, logged once each."""
        self.intent_log: IntentLog = intents or MemoryIntents()
        self.intents = self.intent_log.load_intents()
        self.round_index = round_index
        self.origin_s = origin_s
        """The view's time zero (wall clock): the policies' times are measured from it, as
        the simulator's are from the trace's start, so they stay small numbers. No
        policy's decisions depend on it (Shockwave's ratios are of times since arrival)."""
        self._jobs: dict[int, SlurmJob] = {}
        self._parsed: dict[int, tuple[str, Hint | str]] = {}
        """Each observed job's hint text and what it parsed to (a Hint, or the error)."""
        self._submitted: dict[int, tuple[int | None, float]] = {}
        """Each queued job's first submission seen (``_arrival``)."""
        self.bad_hints: dict[int, str] = {}
        self.not_eligible: dict[int, int] = {}
        """Pending jobs of the partition left out of the view until their eligible time
        (epoch seconds): listed so that queue and explain still show them."""
        self._pinned_waiting: frozenset[int] = frozenset()
        """Jobs out of the view until their eligible time at the planner's pinned priority,
        not held: requeued while their hold was lost (unanswered, or the listing after an
        acknowledged requeue), Slurm would start them at that priority, ahead of the plan
        (a red-team). The next apply holds them."""
        self.held_back: dict[int, tuple[SlurmJob, str]] = {}
        """Pending jobs of the partition Slurm will not start whatever the plan
        (``held_back``): out of the view, released, left to Slurm until it lets them go."""
        self.admin_held: dict[int, SlurmJob] = {}
        """Pending jobs of the partition an admin holds: out of the view until released."""
        self.owner_held: dict[int, SlurmJob] = {}
        """Pending jobs of the partition their owner holds: out of the view until released."""
        self.mark_failures: dict[int, str] = {}
        """Requeue-held jobs whose ``held=requeue`` mark Slurm refused (logged once each)."""
        self.on_closed_node: dict[int, str] = {}
        """Running jobs on a node Slurm gives no new work: out of the view, left to Slurm."""
        self._served: dict[int, _Served] = {}
        """Each job's service so far (``attained``), from the runs this process saw."""
        self.partition_state = "UP"
        """The managed partition's state at the last observation (CLOSED: apply waits)."""
        self._ending: frozenset[int] = frozenset()
        self._without_gpus: frozenset[int] = frozenset()
        self._not_requeueable: frozenset[int] = frozenset()
        self._looked: dict[int, float] = {}
        """Job -> when a step last looked at its checkpoint in flight and waited on
        (``_preempt``); the signal's time before the first."""
        self._unanswered_signals: set[int] = set(self.intents)
        """Jobs whose checkpoint signal this process cannot vouch for: a later step says
        "perhaps sent", not "sent" (a review: it read as delivered). Slurm left it
        unanswered ("perhaps not sent"), or an earlier process of the service sent it:
        its intent is written before the signal goes out, so one loaded from the store
        may never have gone (before, it read "sent" after a restart)."""
        self._pending: frozenset[int] = frozenset()
        self._let_go_failed: set[int] = set()
        """Held-back jobs whose release failed, warned about once."""
        self._gone_pending: frozenset[int] = frozenset()
        self._suspended: frozenset[int] = frozenset()
        self._listed_jobs: dict[int, SlurmJob] = {}
        self.queued_ids: frozenset[int] = frozenset()
        """Every job of the partition the last observation listed, in any state: one
        being requeued (COMPLETING) is out of the view but not gone."""
        self._started_in: dict[int, int] = {}
        """Job -> the round index whose start released or ranked it: a fill step of that
        round (same index) must not hold it again while it waits for GPUs to free."""
        self._waiting_since: dict[int, tuple[int, int]] = {}
        """Job -> the first of the rounds in a row that started it on GPUs free then (a
        fill step's: the round after, as it counts them), with its restart count: one
        Slurm does not start (a node's CPUs or memory all taken, which the plan does not
        see) is said so with Slurm's reason, not read ``scheduled``. A job that ran in
        between (its restart count moved) starts afresh."""
        self.filling = False
        """The next apply is a fill step's (the service sets it): its starts are still
        starting (``ClusterView.starting``) when the round it calls observes them."""
        self._fill_started: dict[int, int] = {}
        """Job -> the round index of the fill step that released it."""
        self._resized: dict[int, tuple[int, int, int]] = {}
        """Job -> (restart count, GPUs, nodes) this service set while it was pending: what
        the service reads it as until it runs, where the listing may say its last run's
        node count (``_assumed``)."""
        self._ran_at: dict[int, int] = {}
        """Job -> the restart count of the last run of it this process saw: a requeued job
        it saw run, and did not resize since, is listed at its own node count."""
        self._node_gpus: dict[str, int] = {}
        """Node -> the GPUs the plan may use there, at the last observation."""
        self._refused_gpus: dict[int, set[int]] = {}
        """Elastic job -> GPU counts Slurm refused it (a QOS's MaxTRESPerJob, say): its
        range is narrowed past them while it is queued, or the plan would ask for the
        same count every round and the job stay held beside idle GPUs (found by a
        review)."""
        self._requeuing: set[int] = set()
        """Jobs Slurm is requeueing (COMPLETING, their restart count grown since seen
        running): ``returning`` until pending."""
        self._killed: dict[int, str] = {}
        """Jobs the checkpoint signal killed, seen by the last observation, and the
        signal: the first ``apply`` after it runs them again (``_reran``), and their rows
        say so (``LeftOut.killed``)."""
        self._reran = False
        """``_rerun_killed`` ran since the last observation."""
        self._moving: dict[int, _Move] = {}
        """Jobs a plan moved or resized (preempt + start in one round), until they run
        again: the requeue is the plan's, so the job stays in the view through the
        requeue delay and keeps the GPUs planned for it."""

    @property
    def left_out(self) -> LeftOut:
        return LeftOut(dict(self.bad_hints), dict(self.not_eligible), dict(self.admin_held),
                       dict(self.on_closed_node), self._without_gpus, self._ending,
                       self._suspended, dict(self.owner_held), dict(self._listed_jobs),
                       {jid: why for jid, (_j, why) in self.held_back.items()},
                       dict(self._killed), self._not_requeueable,
                       self._ending & (self._requeuing | set(self._moving)))

    def left_views(self, job_ids: Iterable[int]) -> dict[int, Job]:
        """Those of ``job_ids`` the last observation listed whose hint reads, as the
        policies would see them (their progress from the feed): queue's rows of the jobs
        the plan leaves out show what they have done (a red-team: a held job 14 epochs in
        read 0)."""
        now = self.clock.now()
        return {jid: self._job_view(job, parsed, now) for jid in job_ids
                if (job := self._listed_jobs.get(jid)) is not None
                and isinstance(parsed := self._parse(job), Hint)}

    # -- ClusterSource ----------------------------------------------------------------------
    def _listed(self) -> list[SlurmJob]:
        """The managed partition's jobs, in any state the backend lists."""
        jobs = [j for j in self.backend.list_jobs(self.partition)
                if j.partition == self.partition]
        by_id = {j.job_id: j for j in jobs}
        self._resized = {jid: r for jid, r in self._resized.items()
                         if (j := by_id.get(jid)) is not None and j.state == "PENDING"
                         and j.restart_count == r[0]}
        self._ran_at = {**{jid: r for jid, r in self._ran_at.items() if jid in by_id},
                        **{j.job_id: j.restart_count for j in jobs if j.state == "RUNNING"}}
        return [self._assumed(j) for j in jobs]

    def _shape_known(self, job: SlurmJob) -> bool:
        """Whether the listing's node count of a pending job is the one Slurm will start
        it on: a job never run, one this service resized (``_assumed``), or one whose
        last run this process saw; not a requeued job another process of the service may
        have resized (a restart between the resize and its start: listed at its last
        run's nodes, a plan on as many nodes sent its GRES alone, and Slurm held 16 GPUs
        on 2 nodes for a job planned on 8 on one; found by a review)."""
        return (job.restart_count == 0 or job.job_id in self._resized
                or self._ran_at.get(job.job_id) == job.restart_count - 1)

    def _assumed(self, job: SlurmJob) -> SlurmJob:
        """A pending job this service resized, at the GPUs and nodes it was given: squeue
        lists a requeued one with its last run's node count until it runs (8 GPUs on 2
        nodes read as 4 on 1: its GRES was set again after its release, and the view
        took it as 4; tests/test_slurm_contract.py). Unless its GPUs per node (a count
        per job: its GPUs) are no longer those set: someone else changed them."""
        set_ = self._resized.get(job.job_id)
        if set_ is None:
            return job
        _, count, nodes = set_
        if gres_count(job, job.gpus, max(job.node_count, 1)) != gres_count(job, count, nodes):
            return job
        return replace(job, gpus=count, node_count=nodes)

    def _plannable(self, job: SlurmJob, now: float) -> bool:
        """Running, or pending and eligible now. A requeued job may not start before its
        eligible time (cred_expire + 1 s after the requeue; a ``--begin`` too): planned
        earlier, the GPUs kept for it would idle until then (seen live: 20-25% of starts
        waited 4-5 s for it), so it joins the view when Slurm could start it, as the
        simulator's preempted jobs rejoin after ``requeue_delay_s``. A job the plan moves
        or resizes stays: its new GPUs are the plan's, not a fill step's to give away."""
        return job.state == "RUNNING" or (job.state == "PENDING" and not held_by_someone(job)
                                          and held_back(job) is None
                                          and (job.eligible_time <= now
                                               or job.job_id in self._moving))

    def _track_moves(self, listed: Sequence[SlurmJob]) -> None:
        """Forget a move once its job runs again (a later run) or leaves the queue."""
        by_id = {j.job_id: j for j in listed}
        self._moving = {jid: m for jid, m in self._moving.items()
                        if (j := by_id.get(jid)) is not None
                        and not (j.state == "RUNNING" and j.restart_count > m.restart_count)}

    def _with_last_alloc(self, listed: Sequence[SlurmJob]) -> list[SlurmJob]:
        """``listed`` with each COMPLETING job the listing gives no GPU indices those the
        last observation saw it hold: Slurm 22.05 lists none for a job being requeued (its
        Epilog runs, its processes end, up to KillWait), and pyslurm none for any
        completing job, while it still holds them. Not seen holding any (a job that ran
        between two looks, or a service restarted since), it claims none: its GPUs read
        as Slurm's count of the node's used ones says."""
        out = []
        for j in listed:
            last = self._listed_jobs.get(j.job_id)
            # the run it ends is the one last seen: running then (ended or requeued
            # since), or completing then with the same restart count
            same_run = {"RUNNING": (0, 1), "COMPLETING": (0,)}.get(
                last.state, ()) if last is not None else ()
            if (j.state == "COMPLETING" and not j.gpu_alloc and last is not None
                    and j.restart_count - last.restart_count in same_run):
                j = replace(j, gpu_alloc=last.gpu_alloc)
            out.append(j)
        return out

    def observe(self) -> ClusterView:
        listed = self._with_last_alloc(self._listed())
        self._read_partition_state()
        # jobs the planner held or pinned gone since the last observation: cancelled, or
        # moved to another partition (``_give_back_moved_out``); not the other released
        # ones, which vanish whenever a short job starts and ends between two looks (a
        # review)
        self._gone_pending |= self._pending - {j.job_id for j in listed}
        self._pending = frozenset(j.job_id for j in listed if j.state == "PENDING" and (
            (j.held and not held_by_someone(j)) or pinned(j)))
        self.queued_ids = frozenset(j.job_id for j in listed)
        self.mark_failures = {jid: err for jid, err in self.mark_failures.items()
                              if jid in self.queued_ids}
        self._track_moves(listed)
        now = self.clock.now()
        jobs: list[SlurmJob] = []
        self.not_eligible = {}
        self.held_back = {}
        self.admin_held = {j.job_id: j for j in listed if held_by_admin(j)}
        self.owner_held = {j.job_id: j for j in listed if held_by_owner(j)}
        self._listed_jobs = {j.job_id: j for j in listed}
        self._ending = frozenset(j.job_id for j in listed
                                 if j.state == "COMPLETING" and managed(j))
        self._suspended = frozenset(j.job_id for j in listed
                                    if j.state == "SUSPENDED" and managed(j))
        self._without_gpus = frozenset(j.job_id for j in listed
                                       if j.state == "RUNNING" and j.gpus == 0
                                       and not job_slots(j))
        self._not_requeueable = frozenset(j.job_id for j in listed
                                          if j.state == "RUNNING" and not j.requeue)
        for j in listed:
            if j.job_id in self._without_gpus or j.job_id in self._not_requeueable:
                continue
            if self._plannable(j, now):
                jobs.append(j)
            elif j.state == "PENDING" and not held_by_someone(j):
                if (why := held_back(j)) is not None:
                    self.held_back[j.job_id] = (j, why)
                else:
                    self.not_eligible[j.job_id] = j.eligible_time
        self._pinned_waiting = frozenset(j.job_id for j in listed
                                         if j.job_id in self.not_eligible and pinned(j))
        # a job the last observation saw running and Slurm now requeues (COMPLETING, its
        # restart count grown: its Epilog runs) is back in a moment, as one in its delay
        self._requeuing = {j.job_id for j in listed if j.state == "COMPLETING" and (
            j.job_id in self._requeuing
            or ((seen := self._jobs.get(j.job_id)) is not None and seen.state == "RUNNING"
                and j.restart_count > seen.restart_count))}
        self._jobs = {j.job_id: j for j in jobs}
        self._sync_intents(listed)
        self.bad_hints = {}
        listed_nodes = self.backend.list_nodes()
        jobs = with_found_alloc(jobs, listed_nodes, listed)
        self._jobs = {j.job_id: j for j in jobs}
        self._listed_jobs.update(self._jobs)
        closed = {n.name: "+".join(n.state) for n in listed_nodes
                  if not n.usable and self.partition in n.partitions}
        # a node taken out of the partition (or out of slurm.conf) while a job of ours
        # runs there: Slurm lets the job run on; unknown to the view, it was preempted
        ours = {n.name for n in listed_nodes if self.partition in n.partitions}
        closed.update({node: f"no longer in partition {self.partition}"
                       for j in jobs if j.state == "RUNNING"
                       for node in {slot_node(s) for s in job_slots(j)} - ours})
        self.on_closed_node = {}
        views: list[Job] = []
        for j in jobs:
            hint = self._hint(j)
            if hint is None:
                continue
            shut = sorted({slot_node(s) for s in job_slots(j)} & set(closed)) \
                if j.state == "RUNNING" else []
            if shut:  # a drain lets running jobs finish, and a node not responding for a
                # moment still runs them: left to Slurm, its GPUs given to no other job,
                # rather than moved off, stopped, or its GPUs dropped from the view
                self.on_closed_node[j.job_id] = f"{shut[0]} is {closed[shut[0]]}"
                continue
            views.append(self._job_view(j, hint, now))
        # a requeued job in its requeue delay (it has run: not a --begin in the future)
        returning = [self._job_view(j, parsed, now) for j in listed
                     if ((j.job_id in self.not_eligible and j.restart_count > 0)
                         or j.job_id in self._requeuing)
                     and isinstance(parsed := self._parse(j), Hint)]
        self._parsed = {jid: v for jid, v in self._parsed.items()
                        if jid in self._jobs or jid in self.not_eligible}
        self._refused_gpus = {jid: v for jid, v in self._refused_gpus.items()
                              if jid in self.queued_ids}
        # kept while the job is queued: in its requeue delay it is out of the plan, and
        # its earlier runs must not be forgotten
        self._served = {jid: v for jid, v in self._served.items() if jid in self.queued_ids}
        self._submitted = {jid: t for jid, t in self._submitted.items()
                           if jid in self.queued_ids}
        # the GPUs the planner gives out: those its jobs hold, and those of a job of ours
        # that is ending or being requeued (COMPLETING: its Epilog runs), free in a
        # moment (Slurm starts a released job there once they are), not another
        # partition's; two jobs in the view claiming one GPU is worth a warning
        claims = [(v.job_id, v.gpu_slots, True) for v in views]
        claims += [(j.job_id, job_slots(j), False) for j in listed if j.state == "COMPLETING"]
        planned: dict[str, set[int]] = {}
        for job_id, slots, in_view in claims:
            for slot in slots:
                node, index = slot.rsplit(":", 1)
                if in_view and int(index) in planned.get(node, set()):
                    log.warning("job %d: GPU %s is claimed by another job too", job_id, slot)
                planned.setdefault(node, set()).add(int(index))
        nodes = []
        for n in listed_nodes:
            if n.usable and self.partition in n.partitions and n.gpus > 0:
                idx = usable_gpus(n, planned.get(n.name, set()))
                if idx:
                    nodes.append(GpuNode(n.name, len(idx), idx, n.gpu_type))
        self._node_gpus = {n.name: n.gpus for n in nodes}
        # this round's starts still waiting for GPUs, and moves in their requeue delay:
        # a fill step of the round places them first (engine.fill)
        reserved = frozenset(v.job_id for v in views if not v.is_running and (
            self._started_in.get(v.job_id) == self.round_index or v.job_id in self._moving))
        # and moves still COMPLETING: a fill step keeps their GPUs (engine.fill)
        back = {v.job_id for v in returning}
        moving_to = tuple((jid, m.gpus) for jid, m in self._moving.items()
                          if m.gpus is not None and (jid in reserved or (
                              jid in back and m.round_index == self.round_index)))
        # released by the last round's fill step, and Slurm has not started them yet
        starting = frozenset(v.job_id for v in views if v.phase == Phase.PENDING
                             and self._fill_started.get(v.job_id) == self.round_index - 1)
        view = ClusterView(now_s=now - self.origin_s,
                           round_index=self.round_index,
                           round_s=self.round_s, nodes=tuple(nodes), jobs=tuple(views),
                           restart_cost_s=self.restart_cost_s,
                           reserved=reserved | starting, starting=starting,
                           moving_to=moving_to,
                           returning=tuple(returning), fills=self.fill_freed,
                           configured=tuple((n.gpu_type, n.gpus) for n in listed_nodes
                                            if self.partition in n.partitions),
                           exact_slots=True)
        return view

    def _job_view(self, j: SlurmJob, hint: Hint, now: float) -> Job:
        """One listed job as the policies see it."""
        phase = (Phase.CHECKPOINTING if j.job_id in self.intents
                 else Phase.RUNNING if j.state == "RUNNING"
                 else Phase.HELD if j.held else Phase.PENDING)
        spec = JobSpec(j.job_id, hint.model, hint.bs, request_gpus(j, hint), hint.mode,
                       self._arrival(j), hint.epochs, user=j.user,
                       gpus_range=self._allowed_range(j, hint),
                       nodes=0 if hint.gpus_range else asked_nodes(j),
                       gpu_type=j.gpu_type, spreads=j.per_job or bool(hint.gpus_range),
                       max_nodes=j.max_nodes if j.per_job and not hint.gpus_range else 0,
                       min_nodes=fewest_nodes(j) if j.per_job and not hint.gpus_range else 0)
        slots = job_slots(j) if j.state == "RUNNING" else ()
        run_s, gpu_s = self._attained(j, now)
        return Job(spec, replace(self.progress(j, hint), run_s=run_s, attained_gpu_s=gpu_s),
                   phase, slots)

    def _attained(self, job: SlurmJob, now: float) -> tuple[float, float]:
        """The job's run seconds and GPU-seconds so far, over its restarts: what LAS,
        Gavel's and Themis's deficits read, as the simulator counts them (they stayed 0
        live, so those policies ran jobs in arrival order and never rotated). Runs before
        this process started are not known: a restarted service counts from the run
        under way, by its start time in Slurm."""
        served = self._served.setdefault(job.job_id, _Served())
        run = (job.restart_count, job.start_time) if job.state == "RUNNING" else None
        if run != served.run:  # the run it was in ended (a requeue), or one began
            served.done_s += served.run_s
            served.done_gpu_s += served.run_s * served.gpus
            served.run, served.run_s = run, 0.0
        if run is not None:
            served.run_s = max(0.0, now - job.start_time) if job.start_time > 0 else 0.0
            served.gpus = max(job.gpus, 1)
        return (served.done_s + served.run_s,
                served.done_gpu_s + served.run_s * served.gpus)

    def arrived(self, *, requeued: bool = True) -> bool:
        """A pending job in the partition that the last observation did not see, or
        (``requeued``) a requeued one whose eligible time has come (one squeue): the
        service's poll for a fill step between rounds. A job the last observation saw
        running counts once it is pending and eligible (preempted in that round, its
        Epilog's report, which wakes a fill step too, may not come). Also a job at the
        planner's pinned priority, unheld, that someone else requeued (an admin, a node
        failure) and that waits out its requeue delay, not seen so: the step holds it
        (``_pinned_waiting``), or Slurm starts it at the top of the queue when its delay
        ends, ahead of the plan (found by a red-team: no step ran within the delay)."""
        now = self.clock.now()

        def new(j: SlurmJob) -> bool:
            seen = self._jobs.get(j.job_id)
            return seen is None or (requeued and seen.state != "PENDING"
                                    and j.eligible_time <= now)

        def left_pinned(j: SlurmJob) -> bool:
            return (j.state == "PENDING" and pinned(j) and j.eligible_time > now
                    and j.job_id not in self._pinned_waiting)

        return any((j.state == "PENDING" and self._plannable(j, now) and new(j))
                   or left_pinned(j) for j in self._listed())

    def take_over_admin_holds(self) -> list[int]:
        """Earlier builds held jobs with admin holds and requeue-holds: once, over a store
        such a build wrote, every managed job held so becomes the planner's user hold
        (``scontrol uhold`` turns an admin hold into a user hold; a requeue-held job is
        released first, its reason staying through any hold; measured on 22.05), or it
        would be taken for an admin's and left out. Returns the jobs taken over."""
        ours = [j for j in self._listed() if (held_by_admin(j) or requeue_held(j))
                and j.admin_comment.startswith(PREFIX)]
        requeued = [j.job_id for j in ours if requeue_held(j)]
        each_job(requeued, self.backend.release)  # its reason stays through any hold
        done = each_job([j.job_id for j in ours], self.backend.hold)
        return sorted(jid for jid, err in done.items() if err is None)

    def _read_partition_state(self) -> None:
        """The managed partition's state, said in the log when it changes."""
        state = self.backend.partition_state(self.partition)
        if state != self.partition_state:
            if state in CLOSED:
                log.warning("partition %s is %s: running jobs keep running; nothing is "
                            "started or preempted until it is UP", self.partition, state)
            elif self.partition_state in CLOSED:
                log.warning("partition %s is %s, no longer %s", self.partition,
                            state or "gone", self.partition_state)
        self.partition_state = state

    def _sync_intents(self, listed: Sequence[SlurmJob]) -> None:
        """Passive sync: a checkpoint intent whose job left RUNNING, or was requeued and
        restarted since, is confirmed and forgotten; one whose job is COMPLETING in the
        same run is kept until it is seen how that run ended, and one whose job the
        signal killed until ``apply`` runs it again (``_rerun_killed``). A job not in the
        managed partition's listing is looked for in all of Slurm first: a store written
        before stores were claimed by one partition (``Store.claim_partition``) may hold
        another partition's intents, and forgetting that service's intent would make it
        signal again (its job still runs, checkpointing), or lose its job the signal killed;
        only a job gone, restarted or ended otherwise is confirmed."""
        ours = {j.job_id: j for j in listed}
        elsewhere: dict[int, SlurmJob] = {}
        if any(jid not in ours for jid in self.intents):
            elsewhere = {j.job_id: j for j in self.backend.list_jobs()}
        self._killed, self._reran = {}, False
        for jid, ck in list(self.intents.items()):
            job = ours.get(jid) or elsewhere.get(jid)
            if job is not None and signalled_run(job, ck):
                if job.state in ("RUNNING", "COMPLETING"):
                    continue
                if killed_by(job, ck):
                    if job.partition == self.partition:
                        self._killed[jid] = ck.signal
                        self._listed_jobs[jid] = job  # its row names its owner
                    continue  # another partition's: its service runs it again
            try:
                self._forget(jid)
            except Exception as exc:  # the store's: kept in both, forgotten later
                log.error("job %d: checkpoint intent not forgotten (%s)", jid, exc)
                continue
            if job is None:
                # it ended and was purged (MinJobAge, 300 s by default) before it was seen
                # how: killed by the signal while the service was down, it is lost; said
                # once, not silently
                log.warning("job %d: signalled for its checkpoint, and Slurm no longer "
                            "lists it (purged after MinJobAge before it was seen how it "
                            "ended): not run again; if the signal killed it, its owner "
                            "must resubmit it", jid)

    def _rerun_killed(self) -> list[ActionResult]:
        """Requeue and hold each job the checkpoint signal killed (``_sync_intents``). It
        came before the job could handle it: between Slurm's start of the batch script
        and its ``trap`` or ``reporter.install()`` the signal's default action applies
        (SIGUSR1's kills). Seen live: a job a fill step started was preempted 81 ms later
        and died of SIGUSR1 (WTERMSIG 10), and Slurm counted it FAILED, not requeued: the
        job was lost. Run again, it loses what it did since its last checkpoint, as a job
        preempted without a signal does. Not done by observing: a dry run changes nothing.
        Each is the round's preemption of it, with what happened (a user walkthrough: only
        the service's log said why the job died; ``explain`` showed the signal alone)."""
        done: list[ActionResult] = []
        if self._reran:
            return done
        self._reran = True
        for jid, signame in self._killed.items():
            killed = f"killed by SIG{signame}, the checkpoint signal, before it could handle it"
            preempt = Action(ActionKind.PREEMPT, jid)
            try:
                self.backend.requeue_ended(jid)
            except SlurmUnanswered as exc:
                # kept: the next observation finds it again, or requeued after all (its
                # restart count grew: the intent is forgotten, and the pending job held
                # again by the first apply that sees it eligible)
                log.error("job %d: killed by SIG%s, not requeued yet (%s)", jid, signame, exc)
                done.append(ActionResult(preempt, Outcome.DEFERRED,
                                         f"{killed}; not requeued yet ({exc})"))
                continue
            except SlurmError as exc:
                log.error("job %d: %s, and Slurm refused to requeue it (%s)", jid, killed, exc)
                done.append(ActionResult(preempt, Outcome.REJECTED,
                                         f"{killed}; Slurm refused to requeue it ({exc})"))
            else:
                log.warning("job %d: %s: requeued, to restart from its last checkpoint",
                            jid, killed)
                self._hold_requeued([jid])
                done.append(ActionResult(preempt, Outcome.APPLIED, f"{killed}: requeued, to "
                                         "restart from its last checkpoint"))
            self._forget(jid)
        return done

    def _arrival(self, job: SlurmJob) -> float:
        """When the job was first submitted, on the view's clock. Slurm sets a requeued
        job's submit time to the requeue, which would make every preemption a new arrival
        (a fresh fair finish time, a new place in arrival order): the admin comment's
        stamp (job_submit.lua) says when it came, else the earliest submit time seen."""
        stamp = first_submitted(job)
        # the earliest seen is of this submission only: a job Slurm gave an earlier job's
        # id between two observations has another stamp
        seen_stamp, seen = self._submitted.get(job.job_id, (stamp, 0.0))
        known = [float(t) for t in (stamp, seen if seen_stamp == stamp else 0.0,
                                    job.submit_time) if t]
        first = min(known, default=0.0)
        self._submitted[job.job_id] = (stamp, first)
        return first - self.origin_s

    def _hint(self, job: SlurmJob) -> Hint | None:
        """The job's validated hint; a bad one leaves that job to Slurm, never the round."""
        parsed = self._parse(job)
        if isinstance(parsed, str):
            self.bad_hints[job.job_id] = parsed
            return None
        return parsed

    def _parse(self, job: SlurmJob) -> Hint | str:
        """The job's hint, or why it does not read (logged once per text)."""
        text = hint_text(job)
        cached = self._parsed.get(job.job_id)
        if cached is None or cached[0] != text:
            parsed = read_hint(text)
            if isinstance(parsed, str):
                log.warning("job %d: not planned: %s", job.job_id, parsed)
            cached = self._parsed[job.job_id] = (text, parsed)
        return cached[1]

    def _planned_hint(self, job_id: int) -> Hint | None:
        """The hint of a job this round planned (None: unreadable, or not observed)."""
        parsed = self._parsed.get(job_id)
        return parsed[1] if parsed is not None and isinstance(parsed[1], Hint) else None

    # -- Actuator -----------------------------------------------------------------------------
    def apply(self, actions: Sequence[Action]) -> ApplyResult:
        """The plan's actions, through a backend that stops asking once Slurm stops
        answering (``slurm.until_silent``): what is not asked waits for the next round."""
        backend = self.backend
        self.backend = until_silent(backend)
        try:
            return self._apply(actions)
        finally:
            self.backend = backend

    def _apply(self, actions: Sequence[Action]) -> ApplyResult:
        reruns = self._rerun_killed()
        self._mark_requeue_holds()
        self._let_go_held_back()
        self._give_back_moved_out()
        if self.partition_state in CLOSED:
            # Slurm starts nothing in it: a preemption would only idle the GPUs it frees
            why = (f"partition {self.partition} is {self.partition_state}: nothing is "
                   "started or preempted until it is UP")
            return ApplyResult((*reruns, *(
                ActionResult(a, Outcome.APPLIED) if a.kind == ActionKind.KEEP
                else ActionResult(a, Outcome.DEFERRED, why) for a in actions)))
        now = self.clock.now()
        results: list[ActionResult] = []
        moving = ({a.job_id for a in actions if a.kind == ActionKind.PREEMPT}
                  & {a.job_id for a in actions if a.kind == ActionKind.START})
        # a migration (preempt + start of one job) is a preemption now and a start once
        # the job is pending again: its checkpoint must not be forgotten as "kept"
        starts = [a for a in actions if a.kind == ActionKind.START and a.job_id not in moving]
        approved = {a.job_id for a in actions
                    if a.kind != ActionKind.PREEMPT and a.job_id not in moving}
        # a move ends when the plan keeps the job where it runs, or only preempts it
        kept = {jid for jid in approved
                if (job := self._jobs.get(jid)) is not None and job.state == "RUNNING"}
        preempted = {a.job_id for a in actions if a.kind == ActionKind.PREEMPT} - moving
        self._moving = {jid: m for jid, m in self._moving.items()
                        if jid not in kept and jid not in preempted}
        for jid in moving:
            if (job := self._jobs.get(jid)) is not None and jid not in self._moving:
                self._moving[jid] = _Move(job.restart_count)
        if not self.filling:
            # a moved job back in the queue (pending: in the round's view) that the round no
            # longer starts is moved no more (a fill step would have started it ahead of
            # the plan's order); one still COMPLETING, out of the view, stays moved
            started = {a.job_id: len(a.gpu_slots) for a in actions
                       if a.kind == ActionKind.START}
            self._moving = {
                jid: replace(m, gpus=started[jid], round_index=self.round_index)
                if jid in started else m
                for jid, m in self._moving.items() if jid in started
                or (job := self._jobs.get(jid)) is None or job.state != "PENDING"}

        # 1. preemption: signal (if the job handles one) then requeue-hold. A checkpoint
        # in flight from an earlier round (or an earlier process) goes on unless the plan
        # now keeps or starts the job: the round's plan sees it as not running.
        preempts = [a for a in actions if a.kind == ActionKind.PREEMPT]
        named = {a.job_id for a in preempts}
        # (one whose job is COMPLETING waits for the next observation: _sync_intents)
        preempts += [Action(ActionKind.PREEMPT, jid) for jid in sorted(self.intents)
                     if jid not in approved and jid not in named and jid in self._jobs]
        requeue: list[Action] = []
        for a in preempts:
            outcome = self._preempt(a, now)
            if outcome is None:
                requeue.append(a)
            else:
                results.append(outcome)
        requeued, relisted = self._requeue(requeue)
        self._hold_requeued([r.action.job_id for r in requeued if r.outcome == Outcome.APPLIED],
                            relisted)
        for r in requeued:
            if r.outcome == Outcome.APPLIED:
                self._forget(r.action.job_id)
        results += requeued
        # a job the plan keeps or restarts is no longer being checkpointed (a moving or
        # resized job is neither: its checkpoint and requeue come first)
        for jid in list(self.intents):
            if jid in approved:
                self._forget(jid)

        # 2. starts: a pending elastic job's GRES first (only pending jobs accept it), then
        # release (held jobs reject priorities), then pin priorities, widest first
        regres_failed = self._update_gpus(starts)
        results += regres_failed.values()
        starts = [a for a in starts if a.job_id not in regres_failed]
        # widest first: Slurm starts them in priority order, each where it fits, and a
        # small job ranked first took the node the plan kept for a wide one, which then
        # waited (found by a red-team); the plan places the widest first too. Released
        # and ranked in that order, so a pass of Slurm's between two calls sees it too.
        busy = {slot for j in self._jobs.values() if j.state == "RUNNING"
                for slot in job_slots(j)}
        ready = sorted((a for a in starts if not busy.intersection(a.gpu_slots)),
                       key=lambda a: -len(a.gpu_slots))
        ranks = {a.job_id: i for i, a in enumerate(ready)}
        ranks.update({a.job_id: WAITING_BAND + i for i, a in enumerate(starts)
                      if a.job_id not in ranks})
        starts.sort(key=lambda a: ranks[a.job_id])
        to_release = [a for a in starts if (j := self._jobs.get(a.job_id)) and j.held]
        held_since = self._held_since(to_release)
        release_results = {r.action.job_id: r for r in
                           self._batch([a for a in to_release if a.job_id not in held_since],
                                       self.backend.release)}
        release_results.update({jid: ActionResult(
            a, Outcome.DEFERRED, f"held by {who} since this round's observation: left held")
            for a in to_release if (who := held_since.get(jid := a.job_id))})
        for a in starts:
            rank = ranks[a.job_id]
            released = release_results.get(a.job_id)
            if released is not None and released.outcome != Outcome.APPLIED:
                results.append(released)
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
                results.append(ActionResult(a, Outcome.APPLIED, self._not_started(job, rank)))
            except SlurmError as exc:
                results.append(not_done(a, exc))
        results += [ActionResult(a, Outcome.APPLIED) for a in actions
                    if a.kind == ActionKind.KEEP]
        results += [ActionResult(a, Outcome.DEFERRED, "moving: starts once requeued")
                    for a in actions if a.kind == ActionKind.START and a.job_id in moving]

        # 3. everything else pending in the managed partition waits, held (a user hold,
        # as job_submit.lua's, whose release by the owner job_submit.lua refuses)
        for a in starts:
            self._started_in[a.job_id] = self.round_index
        # a round keeps its own starts that took effect, on GPUs free then (not those
        # waiting for a preemption the plan asked for); a fill step adds its own
        done = {r.action.job_id for r in results
                if r.action.kind == ActionKind.START and r.outcome == Outcome.APPLIED}
        since = {a.job_id: self._since(job, self.round_index + (1 if self.filling else 0))
                 for a in starts if ranks[a.job_id] < WAITING_BAND and a.job_id in done
                 and (job := self._jobs.get(a.job_id)) is not None}
        self._waiting_since = {**self._waiting_since, **since} if self.filling else since
        self._started_in = {jid: r for jid, r in self._started_in.items() if jid in self._jobs}
        self._fill_started = {jid: r for jid, r in self._fill_started.items()
                              if jid in self._jobs}
        if self.filling:
            self._fill_started.update((r.action.job_id, self.round_index) for r in results
                                      if r.action.kind == ActionKind.START
                                      and r.outcome == Outcome.APPLIED)
        rehold = [j.job_id for j in self._jobs.values()
                  if j.state == "PENDING" and j.job_id not in approved
                  and self._started_in.get(j.job_id) != self.round_index
                  and self._planned_hint(j.job_id) is not None and not j.held]
        rehold += sorted(self._pinned_waiting - approved)
        each_job(rehold, self.backend.hold)  # one that fails is held again next round
        # each job whose hold or priority this step set is looked for if it leaves the
        # partition before the next observation sees it pending (a red-team: held by a
        # preemption, then moved out by its owner, it stayed held for ever)
        self._pending |= frozenset(rehold) | frozenset(
            a.job_id for a in actions if a.kind in (ActionKind.START, ActionKind.PREEMPT))
        return ApplyResult((*reruns, *results))

    def _since(self, job: SlurmJob, now: int) -> tuple[int, int]:
        """The round since which ``job`` has been started and not run (``now`` if it ran
        since the last start), with its restart count."""
        since = self._waiting_since.get(job.job_id)
        return since if since is not None and since[1] == job.restart_count \
            else (now, job.restart_count)

    def _not_started(self, job: SlurmJob, rank: int) -> str:
        """For a job started on free GPUs by an earlier round and pending still, unheld,
        not run since: since when, and Slurm's reason (``Resources``: room the plan
        counted is not there)."""
        first, restarts = self._waiting_since.get(job.job_id, (self.round_index, -1))
        if first >= self.round_index or restarts != job.restart_count \
                or rank >= WAITING_BAND or job.held:
            return ""
        return (f"started since round {first}, not running yet: Slurm says "
                f"{job.reason or 'nothing'}")

    def _held_since(self, releases: Sequence[Action]) -> dict[int, str]:
        """Jobs to release that an admin or their owner has held since the round's
        observation (job -> "an admin" or "its owner"): the plan took seconds, and
        ``scontrol release`` lifts any hold (and clears an owner's mark), so releasing them
        would undo a hold the service never lifts (found by a review: a hold made while
        the round planned was released by it). One listing, and only when there is a
        release to make; a listing that fails checks nothing (the releases fail too)."""
        if not releases:
            return {}
        try:
            now = {j.job_id: j for j in self._listed()}
        except SlurmError:
            return {}
        return {a.job_id: "an admin" if held_by_admin(j) else "its owner" for a in releases
                if (j := now.get(a.job_id)) is not None and held_by_someone(j)}

    def _let_go_held_back(self) -> None:
        """Release the jobs Slurm holds back that the planner holds or pinned: Slurm tests
        a dependency only of a job not held, and a pinned one would start ahead of the
        plan's once Slurm lets it go. One warning a job that cannot be."""
        ours = [jid for jid, (j, _why) in self.held_back.items() if j.held or pinned(j)]
        for jid, err in each_job(ours, self.backend.release).items():
            if err and jid not in self._let_go_failed:
                log.warning("job %d: held back by Slurm (%s), and its hold or priority "
                            "could not be given back: %s", jid, self.held_back[jid][1], err)
            if err:
                self._let_go_failed.add(jid)
        self._let_go_failed &= set(self.held_back)

    def remember_pending(self, job_ids: Iterable[int]) -> None:
        """Jobs of an earlier process's last round (the store's job_now rows), which may
        have held or pinned them: one moved out of the partition while the service was
        down is then looked for at the first apply, as if it had left between two rounds
        (``_give_back_moved_out``), instead of keeping the planner's hold for ever."""
        self._pending |= frozenset(job_ids)

    def _give_back_moved_out(self) -> None:
        """Release the jobs moved out of the partition while held by the planner (a user
        hold its comment does not mark) that still carry that hold, or pinned at the
        planner's priority, which ranked them above every job of their new partition:
        the service lists its own partition only, so nothing else ever would (found by a
        red-team: held for ever). A release gives back the priority Slurm computes. An
        admin's hold, an owner's marked one and a requeue-hold stay. One listing of every
        partition, only when a held or pinned job has gone (cancelled and started ones
        too). A job moved while the service was down is found from the store's last rows
        (``remember_pending``)."""
        gone, self._gone_pending = self._gone_pending, frozenset()
        if not gone:
            return
        try:
            everyone = self.backend.list_jobs()
        except SlurmError as exc:  # asked again at the next apply
            self._gone_pending |= gone
            log.warning("pending jobs %s left the partition; not yet checked for the "
                        "planner's hold (%s)", sorted(gone)[:5], exc)
            return
        # one still COMPLETING (moved while its requeue ends: the step its own Epilog
        # wakes sees it so) is looked for again at the next apply, held by then (found
        # by a red-team: looked for once, it stayed held in its new partition for ever)
        self._gone_pending |= {j.job_id for j in everyone if j.job_id in gone
                               and j.state == "COMPLETING" and j.partition != self.partition}
        ours = [j.job_id for j in everyone if j.job_id in gone and j.state == "PENDING"
                and j.partition != self.partition and (pinned(j) or (
                    j.held and j.reason == "JobHeldUser"
                    and split_hold_mark(j.comment)[1] is None))]
        restored = self._restore_moved_out([j for j in everyone if j.job_id in ours])
        for jid, err in each_job(ours, self.backend.release).items():
            if err:
                log.warning("job %d: moved out of %s, the planner's hold or priority "
                            "could not be given back: %s", jid, self.partition, err)
            else:
                log.info("job %d: moved out of %s; the planner's hold or priority given "
                         "back%s", jid, self.partition,
                         ", and the GPUs it asked for" if jid in restored else "")

    def _restore_moved_out(self, jobs: Sequence[SlurmJob]) -> set[int]:
        """Give each elastic job of ``jobs`` (moved out, about to be released) the GPUs and
        nodes it was submitted with where the service's resizes left others, before its
        release, as ``shockwave handback`` does: in a partition nobody resizes it waited
        for, and would be billed for, the count the plan last gave it (a live red-team: a
        2-GPU job left at 8 on two nodes). A refusal is logged, and the job released all
        the same. Returns the jobs given their request."""
        asked = {j.job_id: a for j in jobs if (a := asked_request(j)) is not None}
        if not asked:
            return set()
        try:
            nodes = self.backend.list_nodes()
        except SlurmError as exc:
            log.warning("jobs %s moved out: the GPUs they asked for not given back (%s)",
                        sorted(asked)[:5], exc)
            return set()
        done = set()
        for j in jobs:
            if j.job_id not in asked:
                continue
            try:
                if restore_request(self.backend, j, asked[j.job_id],
                                   sum(j.partition in n.partitions for n in nodes)):
                    done.add(j.job_id)
            except SlurmError as exc:
                log.warning("job %d: moved out of %s, the GPUs it asked for could not be "
                            "given back: %s", j.job_id, self.partition, exc)
        return done

    def _mark_requeue_holds(self) -> None:
        """Mark each requeue-held job of the last observation ``held=requeue`` in its
        comment, where it is not yet: job_submit.lua never sees a requeue-hold, and lets
        the owner's release of a held job through only when the comment says whose hold
        it is (else it takes it for the planner's, and refuses it). One update per job,
        once; a refusal (a job_submit.lua that predates the mark refuses any comment
        change) is logged once per job and the job stays held, its owner's release
        refused until an admin releases it."""
        for job in self.owner_held.values():
            text, mark = split_hold_mark(job.comment)
            if not requeue_held(job) or mark == "requeue" or job.job_id in self.mark_failures:
                continue
            try:
                self.backend.set_comment(job.job_id, with_hold_mark(text, "requeue"))
            except SlurmUnanswered:
                return  # Slurm is not answering: the next round asks again
            except SlurmError as exc:
                self.mark_failures[job.job_id] = str(exc)
                log.warning("job %d: requeue-held, but its comment could not be marked "
                            "held=requeue (%s): its owner's release is refused until an "
                            "admin releases it", job.job_id, exc)

    def _allowed_range(self, job: SlurmJob, hint: Hint) -> tuple[int, int] | None:
        """The job's range, cut at the count Slurm holds for it on the side of a count
        Slurm refused: a limit (a QOS's MaxTRESPerJob) says no once, not once a count
        (stepping down one count a round, a range of 1-64 under a limit of 4 waited 60
        rounds); the count it holds, Slurm's own, stays."""
        rng = hint.gpus_range
        refused = self._refused_gpus.get(job.job_id)
        if rng is None or not refused:
            return rng
        lo, hi = rng
        held = max(job.gpus, 1)
        if any(count > held for count in refused):
            hi = held
        if any(count < held for count in refused):
            lo = held
        return min(lo, held), max(hi, held)

    def _update_gpus(self, starts: Sequence[Action]) -> dict[int, ActionResult]:
        """Set each pending elastic job's GRES to the count its start places it on: GPUs
        per node and, when the node count changes, the node count (a job held as 8 GPUs
        on 2 nodes placed as 8 on one is one node of 8; before, the same count was left
        as it was, and Slurm ran it over 2 nodes where the plan had given out their
        GPUs). Returns the refusals."""
        failed: dict[int, ActionResult] = {}
        for a in starts:
            job = self._jobs.get(a.job_id)
            hint = self._planned_hint(a.job_id)
            if job is None or job.state != "PENDING" or not a.gpu_slots \
                    or hint is None or hint.gpus_range is None:
                continue
            count = len(a.gpu_slots)
            shares = Counter(slot_node(s) for s in a.gpu_slots)
            nodes = len(shares)
            listed = (job.gpus, max(job.node_count, 1))
            known = self._shape_known(job)
            if known and (count, nodes) == listed:
                continue
            try:
                if not job.asks_per_job and (count % nodes or any(
                        self._node_gpus.get(n, 0) < count // nodes for n in shares)):
                    # Slurm gives each node of a job the same count: 3+4+1 on nodes of 3,
                    # 4 and 4 ran on 2+2+2, and the next round resized it again, round
                    # after round (a review); 8+4 on two whole nodes of 8 is 6+6, fine.
                    # Placement splits evenly (engine/placement.py): a guard
                    raise SlurmError(f"{count} GPUs cannot be split evenly over the {nodes} "
                                     f"nodes placed ({'+'.join(map(str, shares.values()))}):"
                                     " Slurm gives every node of a job the same count")
                # its node count always where the listing's may be stale
                set_gpus(self.backend, job, count, nodes, max_nodes=None if known else nodes)
                self._resized[a.job_id] = (job.restart_count, count, nodes)
                # an admin reads a resize here, not only in slurmctld.log (a live run of
                # an elastic trace: 31 GRES updates, none in serve.log)
                log.info("job %d: %s %d GPUs%s (its range %d-%d)", a.job_id,
                         f"resized from {job.gpus} to" if (count, nodes) != listed
                         else "set again to", count, f" on {nodes} nodes" if nodes > 1 else "",
                         *hint.gpus_range)
            except SlurmError as exc:  # not released: never at a size the plan did not give
                if not isinstance(exc, SlurmUnanswered):  # refused: not asked again
                    self._refused_gpus.setdefault(a.job_id, set()).add(count)
                    log.warning("job %d: %d GPUs refused (%s): planned within the counts "
                                "Slurm accepts from now on", a.job_id, count, exc)
                failed[a.job_id] = not_done(a, exc)
        return failed

    def _preempt(self, a: Action, now: float) -> ActionResult | None:
        """None: requeue it now. Otherwise the result for this round (deferred, done)."""
        job = self._jobs.get(a.job_id)
        if job is None or job.state != "RUNNING":
            self._forget(a.job_id)
            return ActionResult(a, Outcome.APPLIED, "no longer running")
        ck = self.intents.get(a.job_id)
        if ck is not None and self._due(ck, now):
            if now - self._looked.get(a.job_id, ck.sent_s) <= self._stale_after_s():
                return None  # requeue it now
            # no step looked at it for that long (the service stopped, the partition
            # closed, Slurm unreachable): the job trained on from that checkpoint all
            # the while, and a requeue now would throw that away (found by a red-team:
            # hours of training lost). A fresh checkpoint is asked for instead
            log.info("job %d: its checkpoint of %.0f s ago was never followed by a "
                     "requeue: signalled again", a.job_id, now - ck.sent_s)
            self._forget(a.job_id)
            ck = None
        if ck is None:
            hint = self._planned_hint(a.job_id)
            if hint is None or hint.signal is None:
                return None  # the job handles no signal: preempt as Slurm does
            ck = CheckpointIntent(a.job_id, hint.signal, now, now + hint.grace_s,
                                  job.restart_count)
            try:
                self.intent_log.record_intent(ck)
            except Exception as exc:  # the store's (sqlite3, OSError): no signal without
                # its intent written, but the rest of the round goes on (found by a
                # review: a full disk stopped every release, round after round)
                log.error("job %d: checkpoint intent not written (%s): not preempted",
                          a.job_id, exc)
                return ActionResult(a, Outcome.DEFERRED, f"not signalled: the store could "
                                    f"not be written ({exc})")
            self.intents[a.job_id] = ck
            try:
                self.backend.signal(a.job_id, hint.signal)
            except SlurmNotAsked as exc:  # never sent: no checkpoint to wait for
                self._forget(a.job_id)
                return ActionResult(a, Outcome.DEFERRED, str(exc))
            except SlurmUnanswered as exc:
                # it may have arrived: keep the intent, so the job's acknowledgement
                # counts and no second signal asks for a second checkpoint (found by a
                # review); the deadline requeues it if it never came
                self._unanswered_signals.add(a.job_id)
                return ActionResult(a, Outcome.DEFERRED, f"SIG{ck.signal} perhaps not "
                                    f"sent ({exc}); requeue after ack or at the deadline")
            except SlurmError as exc:
                self._forget(a.job_id)
                return ActionResult(a, Outcome.REJECTED, str(exc))
            if self._due(ck, now):  # a grace of 0
                return None
        self._looked[a.job_id] = now
        # one sent by an earlier step is not sent again (found by a red-team: a fill
        # step's "sent" read as a second signal)
        sent = "sent" if ck.sent_s == now else (
            f"{'perhaps ' if a.job_id in self._unanswered_signals else ''}sent "
            f"{now - ck.sent_s:.0f}s ago, not again")
        return ActionResult(a, Outcome.DEFERRED, f"SIG{ck.signal} {sent}; requeue after "
                                                 f"ack or at +{ck.deadline_s - now:.0f}s")

    def _due(self, ck: CheckpointIntent, now: float) -> bool:
        """The job acknowledged the checkpoint, or its grace ran out: requeue it. Not on
        the acknowledgement of a job that has since reported its last epoch: it ends on
        its own (its grace's end requeues it if it does not)."""
        return now >= ck.deadline_s or (self.acked(ck.job_id, ck.sent_s, ck.restart_count)
                                         and self._epochs_left(ck.job_id) > 0)

    def _epochs_left(self, job_id: int) -> float:
        """Epochs the job's hint asks for beyond those its current run has reported (the
        store's, read afresh; inf where there is no hint to read). Found by a user
        walkthrough: a job acknowledged its checkpoint at its last epoch's last step,
        trained on as told, reported that epoch 7 ms later and was requeued 60 ms after
        the acknowledgement, to train the epoch again from its checkpoint."""
        job = self._jobs.get(job_id)
        hint = self._hint(job) if job is not None else None
        if job is None or hint is None:
            return math.inf
        left = hint.epochs - self.epochs_reported(job_id, job.restart_count)
        if left <= 0 and job_id not in self._let_end:
            self._let_end.add(job_id)
            log.info("job %d: acknowledged its checkpoint, then reported its last epoch: "
                     "not requeued (it ends on its own; at its grace's end it is requeued "
                     "if it has not)", job_id)
        return left

    def _stale_after_s(self) -> float:
        """How long no step may have looked at a checkpoint in flight before it is taken
        for one the job has trained past: two rounds, and never under five minutes, so a
        round late or rounds slower than their period (a short ``round_s``) never ask a
        job for its checkpoint twice (a review: rounds 6 s late with a 5 s grace did,
        every round)."""
        return max(2 * self.round_s, STALE_CHECKPOINT_S)

    def requeue_due(self, ack: ProgressReport) -> bool:
        """Whether ``complete_checkpoint`` would ask Slurm for this acknowledgement: it
        answers the signal in flight to this run, the partition is open, and the job is
        not in its last epoch (there it may report its end a moment after its
        acknowledgement, as it trains on as told: the round decides, with its reports by
        then; a review found the requeue beating that report)."""
        ck = self.intents.get(ack.job_id)
        return (ck is not None and acknowledged((ack,), ck.sent_s, ck.restart_count)
                and self.partition_state not in CLOSED
                and self._epochs_left(ack.job_id) > 1)

    def complete_checkpoint(self, ack: ProgressReport) -> bool:
        """Between rounds: requeue-hold a job whose checkpoint (signalled by an earlier
        round) it acknowledged just now. False when no checkpoint of it is in flight, or
        the acknowledgement is older than its signal (a spool flushed late): the same
        rule as a round's (``acknowledged``); and while the partition was last seen DOWN
        or INACTIVE, where a round defers every preemption (``apply``): the job keeps its
        GPUs, which nothing could start on, and the first round after it reopens requeues
        it."""
        ck = self.intents.get(ack.job_id)
        if ck is None or not self.requeue_due(ack):
            return False
        try:
            self.backend.requeue([ack.job_id])
            refused: SlurmError | None = None
        except SlurmError as exc:
            refused = exc
        # requeued if its restart count grew: the reply may be lost with the requeue done
        # (a job requeued and left unheld keeps its pinned priority and runs again before
        # the plan's: found by a review), and a job that ended since is left ended by
        # the requeue, no error (the next observation sees how it ended). Answered, the
        # requeue is done even if the listing after it is lost: held all the same (a
        # red-team: the listing's error left it unheld, signalled again next round)
        lost: SlurmError | None = None
        try:
            again = {j.job_id: j for j in self._listed()}.get(ack.job_id)
        except SlurmError as exc:
            if refused is not None:
                raise refused from None
            again, lost = None, exc
        else:
            if again is None or again.restart_count <= ck.restart_count:
                if refused is not None:
                    raise refused
                return False
        self._hold_requeued([ack.job_id], {ack.job_id: again} if again else None)
        self._forget(ack.job_id)
        if isinstance(lost, SlurmUnanswered):  # done, and the caller asks no more
            raise SlurmUnanswered(f"requeued and held; then {lost}")
        return True

    def _hold_requeued(self, job_ids: list[int],
                       relisted: Mapping[int, SlurmJob] | None = None) -> None:
        """The planner's hold on jobs it just requeued, at once: a user hold, as every one
        of its holds (``scontrol requeuehold`` leaves "job requeued in held state", which
        stays through any later hold and is how someone else's requeue-hold is told apart).
        Slurm starts a requeued job no sooner than ``cred_expire`` + 1 s (at least 5 s),
        and a hold of a job still completing takes effect when it is pending again
        (measured on 22.05). A job Slurm refuses to hold is pending without approval, so
        the next round or fill step holds it again; the refusal is logged. A job an admin
        held while it ran (reason JobHeldAdmin on a running job) is left as it is: Slurm
        keeps that hold through the requeue, and the planner's ``uhold`` would have made
        it the planner's, released at the next plan (measured on 22.05); ``relisted``,
        the listing read after the requeue, shows one made since the observation (an
        admin's hold while the job checkpointed: found by a review)."""
        relisted = relisted or {}
        admin = {jid for jid in job_ids
                 if any(j is not None and j.reason == ADMIN_HOLD
                        for j in (relisted.get(jid), self._jobs.get(jid)))}
        with asking_anyway(self.backend):  # a lost reply before it must not leave a job
            # requeued unheld at its pinned priority, run again ahead of the plan
            held = each_job([j for j in job_ids if j not in admin], self.backend.hold)
        for jid, err in held.items():
            if err:
                log.warning("job %d: requeued but not held (%s): held again at the next "
                            "round", jid, err)
        self._pending |= frozenset(held)  # looked for if it leaves (``_apply``)

    def _forget(self, job_id: int) -> None:
        self._looked.pop(job_id, None)
        self._unanswered_signals.discard(job_id)
        if job_id in self.intents:  # the store first: if it cannot be written, the intent
            self.intent_log.forget_intent(job_id)  # stays in both and a round forgets it
            del self.intents[job_id]

    def _requeue(self, actions: Sequence[Action]
                 ) -> tuple[list[ActionResult], dict[int, SlurmJob]]:
        """One ``scontrol requeue Incomplete`` for all, then the queue read again: a job the
        call requeued (its restart count grew) is done; one that ended since the
        observation was left ended, silently (no hold for it, and its intent stays for the
        next observation: killed by the signal, it is run again); one still running, its
        requeue refused or unanswered, is tried alone. Unlike a hold or a release, a
        requeue cannot be sent twice, and Slurm goes on past a job it refuses, so none is
        left requeued without its hold. Unread, the batch's answer stands. Returns the
        results and the listing read after the requeue (empty if it could not be)."""
        ids = [a.job_id for a in actions]
        if not ids:
            return [], {}
        try:
            self.backend.requeue(ids)
            failed = False
        except SlurmNotAsked as exc:  # never sent: each stays as it is, its intent with it
            return [ActionResult(a, Outcome.DEFERRED, str(exc)) for a in actions], {}
        except SlurmError:
            failed = True
        try:
            now: dict[int, SlurmJob] | None = {j.job_id: j for j in self._listed()}
        except SlurmError:
            now = None  # each job alone, as a hold or a release
        if now is None and not failed:
            return [ActionResult(a, Outcome.APPLIED) for a in actions], {}
        results = []
        silent: str | None = None  # asked anyway and still no answer: ask no more
        for a in actions:
            before, job = self._jobs.get(a.job_id), (now or {}).get(a.job_id)
            if job is not None and before is not None \
                    and job.restart_count > before.restart_count:
                results.append(ActionResult(a, Outcome.APPLIED))
                continue
            if now is not None and (job is None or job.state != "RUNNING"):
                results.append(ActionResult(a, Outcome.REJECTED, "ended before its requeue ("
                                            f"{job.state if job else 'gone'})"))
                continue
            if silent is not None:  # its intent stays: the next round sees how it is
                results.append(ActionResult(a, Outcome.DEFERRED, silent))
                continue
            try:
                with asking_anyway(self.backend):  # a lost reply is not a silent Slurm
                    self.backend.requeue([a.job_id])
                results.append(ActionResult(a, Outcome.APPLIED))
            except SlurmUnanswered as exc:
                silent = f"{NOT_ASKED} ({exc})"
                results.append(ActionResult(a, Outcome.DEFERRED, f"{exc} (perhaps done)"))
            except SlurmError as exc:
                # ``requeue Incomplete`` leaves a job that is not running as it is, without
                # an error (measured on 22.05): refused, the job still runs and cannot be
                # requeued (``--no-requeue``), or is gone. Before, a hold that took was read
                # as proof of a requeue the batch had done; Slurm holds a running job too
                results.append(ActionResult(a, Outcome.REJECTED, str(exc)))
        return results, now or {}

    def _batch(self, actions: Sequence[Action],
               call: Callable[[list[int]], None]) -> list[ActionResult]:
        errors = each_job([a.job_id for a in actions], call)
        return [ActionResult(a, Outcome.APPLIED) if err is None else not_done(a, err)
                for a in actions for err in (errors[a.job_id],)]


def not_done(action: Action, exc: SlurmError) -> ActionResult:
    """What a request Slurm did not do as asked says: deferred when never asked (Slurm
    stopped answering earlier in the step) or unanswered, "perhaps done" (its reply may
    be what was lost: read as rejected, the store said a release that took was refused),
    rejected when Slurm refused it."""
    if isinstance(exc, SlurmNotAsked):
        return ActionResult(action, Outcome.DEFERRED, str(exc))
    if isinstance(exc, SlurmUnanswered):
        return ActionResult(action, Outcome.DEFERRED, f"{exc} (perhaps done)")
    return ActionResult(action, Outcome.REJECTED, str(exc))


def each_job(job_ids: list[int], call: Callable[[list[int]], None]
             ) -> dict[int, SlurmError | None]:
    """One Slurm call for all; if Slurm refuses it, one call each, so one bad job can
    neither block nor hide the others. Maps each job to Slurm's error, or None. When
    Slurm does not answer, no more calls: each would wait its timeout too (found by a
    review: 308 calls of 30 s, a round of hours, against a controller gone mid-round)."""
    if not job_ids:
        return {}
    try:
        call(job_ids)
        return dict.fromkeys(job_ids)
    except SlurmUnanswered as exc:
        return dict.fromkeys(job_ids, exc)
    except SlurmError:
        pass
    out: dict[int, SlurmError | None] = {}
    for i, jid in enumerate(job_ids):
        try:
            call([jid])
            out[jid] = None
        except SlurmUnanswered as exc:
            out.update(dict.fromkeys(job_ids[i:], exc))
            break
        except SlurmError as exc:
            out[jid] = exc
    return out
