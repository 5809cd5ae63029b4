"""The service loop: observe -> run_round -> one store transaction -> sleep to the boundary.

Shaped after Nomad's worker (one plan per snapshot; a partial commit is simply
re-observed next round, since observation is level-triggered) and Ray autoscaler v2's
reconciler (the world's passive sync of checkpoint intents, then the active steps, with
a versioned write). A round that fails (Slurm unreachable, or a bug) writes nothing: it
is logged (once per outage for Slurm) and retried with backoff; the loop never dies of it.
Rounds never overlap: one thread, and a round that overruns is followed at once by the
next. Between rounds the same thread takes fill steps (engine/fill.py): when a job's
epilog reports its end, or a poll finds a new job (or, while GPUs idle, a requeued one
Slurm may start again), waiting jobs start on the free GPUs at once; a fill step is
stored as a round of the same index. A fill step that finds a new job the plan must run
now calls the next round at once (engine/fill.py::round_due).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from slurm_shockwave.engine.dry_run import DryRunActuator
from slurm_shockwave.engine.fill import round_due
from slurm_shockwave.engine.ports import Actuator
from slurm_shockwave.engine.round import RoundReport, run_round
from slurm_shockwave.model.job import JobId
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import ActionKind, Memory, Outcome
from slurm_shockwave.model.report import ProgressReport
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.service.feed import ReportFeed
from slurm_shockwave.service.heartbeat import read_heartbeat, write_heartbeat
from slurm_shockwave.service.records import (
    action_rows,
    clock_time,
    job_rows,
    kept_details,
    round_record,
)
from slurm_shockwave.service.store import RoundRecord, Store, StoreGone, unwritable
from slurm_shockwave.slurm.protocol import SlurmError, SlurmUnanswered
from slurm_shockwave.slurm.world import SlurmCluster

log = logging.getLogger("shockwave.service")


@dataclass(frozen=True)
class RoundDone:
    report: RoundReport
    record: RoundRecord
    round_id: int


class Observer(Protocol):
    """What the loop tells an observer (the metrics) as it goes: every step, not only
    the rounds ``run`` counts (a review: the starts of fill steps and the requeues after
    an acknowledgement never reached the metrics, nor a failed fill step)."""

    def round_done(self, done: RoundDone) -> None: ...

    def fill_done(self, done: RoundDone) -> None: ...

    def action_done(self, kind: str, outcome: str) -> None: ...

    def actions_applied(self, report: RoundReport) -> None: ...

    def round_failed(self, cause: str) -> None: ...


class FailedAfterApply(Exception):
    """A round or fill step that failed after Slurm took its actions (its store write,
    say): the actions stand, and the observer counts them
    (``Observer.actions_applied``) beside the failure (a review: they went uncounted)."""

    def __init__(self, report: RoundReport, error: Exception) -> None:
        super().__init__(str(error))
        self.report, self.error = report, error


CAUSES = ("slurm", "store", "error")
"""Why a round or fill step failed: Slurm unreachable, the store not written, a bug."""
SLURM, STORE, ERROR = CAUSES


_WAITING = frozenset(p.value for p in (Phase.PENDING, Phase.HELD, Phase.REQUEUED))
"""The phases of a job row that is not running (``Service.__init__``)."""


class Service:
    def __init__(self, world: SlurmCluster, policy: Policy[Any], policy_name: str,
                 store: Store, *, round_s: float, dry_run: bool = False,
                 heartbeat: str | None = None, stale_after_s: float = 0.0,
                 feed: ReportFeed | None = None, fill_freed: bool = False,
                 fill_poll_s: float = 5.0,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self.world = world
        self.policy = policy
        self.policy_name = policy_name
        store.claim_partition(world.partition, claim=False)  # before anything is read
        self._claimed = False
        """The store claimed for the partition (``Store.claim_partition``): by the first
        round this process writes."""
        self.store = store
        self.round_s = round_s
        self.dry_run = dry_run
        self.actuator: Actuator = DryRunActuator() if dry_run else world
        self.heartbeat = None if dry_run else heartbeat
        self.stale_after_s = stale_after_s or 3 * round_s
        self._beat_failing = False
        """The last heartbeat write failed (said once until one succeeds again)."""
        self.check_lock: Callable[[], None] = lambda: None
        """Raises when the service's lock files are gone or replaced (``ServiceLock``)."""
        self.timer = timer
        self.feed = feed
        if feed is not None:
            # the reports of jobs the last round did not list are an earlier job's whose
            # id Slurm may give out again (Store.save_round forgets them when it does):
            # read once here, never taken as the progress of a job listed now
            feed.refresh()
            feed.keep_only(store.jobs_now())
        self.fill_freed = fill_freed
        world.fill_freed = fill_freed  # the policy plans knowing whether fill steps follow
        self.fill_poll_s = fill_poll_s
        self.memory: Memory = store.memory(policy_name)
        self._acked: queue.SimpleQueue[ProgressReport] = queue.SimpleQueue()
        self._tried: dict[JobId, int] = {}
        """Job -> the round whose acknowledgement of it was tried: once a round each."""
        self._ended = threading.Event()
        self._wake = threading.Event()
        self.observer: Observer | None = None
        """Told each step done or failed (``run``'s, or set before stepping by hand)."""
        self._idle_gpus = 0
        """GPUs the last round or fill step left idle: a new job may take them at once."""
        self._must_start: frozenset[JobId] = frozenset()
        """The last round's jobs that must run now and wait (RoundReport.must_start)."""
        self._take_over = not dry_run and store.held_by_earlier_build()
        """The store is an earlier build's: its admin holds are taken over at the first
        round that reaches Slurm (read once here, not at every round and fill step)."""
        world.origin_s = store.origin_s(world.clock.now())
        if not dry_run:
            # the jobs the last round left waiting, and those it preempted (requeued and
            # held: its row says running); not the others that ran, which the planner
            # never held (a review: one its owner moved and held elsewhere while the
            # service was down was released)
            world.remember_pending(jid for jid, row in store.jobs_now().items()
                                   if row.phase in _WAITING or row.action == "preempt")

    def round_once(self, *, fill: bool = False) -> RoundDone:
        """One whole round (``fill``: a fill step of the last one, engine/fill.py); raises
        if it cannot finish: ``FailedAfterApply`` where its actions were taken."""
        self.store.check_file()  # before anything is applied: a deleted store stops us
        self.check_lock()  # as does a lock another service may now hold
        if self._take_over:
            taken = self.world.take_over_admin_holds()
            self.store.mark_user_holds()
            self._take_over = False
            log.info("took over %d jobs an earlier build held with admin holds: %s",
                     len(taken), " ".join(map(str, taken)) or "none")
        read_id = self.store.last_round_id()
        start = self.timer()
        self.world.round_index = self.store.next_round_index() - (1 if fill else 0)
        self.world.filling = fill  # its starts count as started in the round after
        if self.feed is not None:
            self.feed.refresh()
        report = run_round(self.world, self.policy, self.memory, self.actuator,
                           timer=self.timer, fill=fill)
        try:
            return self._persist(report, fill=fill, start=start, read_id=read_id)
        except StoreGone:
            raise  # the service stops: nothing is counted past it
        except Exception as exc:
            raise FailedAfterApply(report, exc) from exc

    def _persist(self, report: RoundReport, *, fill: bool, start: float,
                 read_id: int) -> RoundDone:
        """The round's record, the store's write and the heartbeat, after its actions."""
        if report.view is not None:
            self._idle_gpus = report.view.total_gpus - report.gpus_busy
        if not fill:
            self._must_start = report.must_start
        before_persist = self.timer()
        phase_s = {**report.phase_s, "persist": 0.0}
        record = round_record(report, policy=self.policy_name, dry_run=self.dry_run,
                              phase_s=phase_s, origin_s=self.world.origin_s)
        memory = self.memory if fill else report.memory  # a fill step keeps the round's
        rows = job_rows(report, self.world.left_out, self.world.left_views)
        if fill:
            rows = kept_details(rows, self.store.jobs_now())
        round_id = self.store.save_round(record, rows, action_rows(report), memory,
                                         read_round_id=read_id)
        if not self._claimed:
            self.store.claim_partition(self.world.partition)
            self._claimed = True
        self.memory = memory
        if self.feed is not None:  # a job being requeued is out of the view, not gone
            self.feed.keep_only(self.world.queued_ids)
        end = self.timer()
        phase_s.update(persist=end - before_persist, total=end - start)
        self.store.set_timings(round_id, phase_s)
        self._beat()
        return RoundDone(report, replace(record, phase_s=phase_s), round_id)

    def _beat(self) -> None:
        """The heartbeat, after a round. One that cannot be written fails the partition
        open (job_submit.lua holds no new job once it is stale) but not the round, which
        Slurm and the store have: one line when it starts failing and one when it is
        written again (a red-team: a traceback every round, each round taken for failed,
        ``--rounds`` never reached and ``plan --apply`` a bug)."""
        if not self.heartbeat:
            return
        try:
            write_heartbeat(self.heartbeat, self.world.clock.now(), self.stale_after_s)
        except OSError as exc:
            if not self._beat_failing:
                log.error("heartbeat %s not written (%s): new jobs run under Slurm alone "
                          "(fail-open) until it is", self.heartbeat, exc)
            self._beat_failing = True
            return
        if self._beat_failing:
            log.warning("heartbeat %s written again: new jobs are held for the planner",
                        self.heartbeat)
        self._beat_failing = False

    def name_uid(self) -> None:
        """The heartbeat names the service's uid before the first round's holds, keeping
        its time (a fresh one stays fresh; none, or a hand-back's removal, is written as
        stale: new jobs run unheld until the first round, as without a file): with no
        uid line yet, job_submit.lua took the holds of a service run as an operator's
        account for a user's, and marked them kept for good (found by a review)."""
        if not self.heartbeat:
            return
        beat = read_heartbeat(self.heartbeat)
        try:
            write_heartbeat(self.heartbeat, beat[0] if beat else 0,
                            beat[1] if beat else self.stale_after_s)
        except OSError as exc:  # the round's own write says it, every round
            log.warning("heartbeat %s not written before the first round: %s",
                        self.heartbeat, exc)

    def run(self, stop: threading.Event, *, max_rounds: int | None = None,
            observer: Observer | None = None) -> int:
        """Plan rounds until ``stop`` is set (SIGTERM/SIGINT) or ``max_rounds`` are done;
        the round in progress always finishes. Returns the rounds completed. The
        ``observer`` is told every round, fill step and action between them done, and
        the cause of every failed round or fill step (``slurm``: unreachable, ``store``:
        not written, ``error``: a bug)."""
        self.observer = observer or self.observer
        self.name_uid()
        done = 0
        backoff = 0.0
        outage_since: float | None = None
        boundary = self.timer()
        tried, down_from_start = 0, False
        while not stop.is_set() and (max_rounds is None or done < max_rounds):
            tried += 1
            try:
                result = self.round_once()
            except SlurmError as exc:
                if outage_since is None:
                    outage_since = self.timer()
                    down_from_start = tried == 1
                    log.error("Slurm unreachable: %s; retrying with backoff", exc)
                self._tell("round_failed", SLURM)
                backoff = min(max(2 * backoff, 1.0), self.round_s)
                stop.wait(backoff)
                continue
            except StoreGone:
                raise  # its writes would go nowhere: stop, and the partition fails open
            except Exception as exc:  # keep the cluster scheduled
                cause = self._failed("round", exc, "; retrying")
                self._tell("round_failed", cause)
                backoff = min(max(2 * backoff, 1.0), self.round_s)
                stop.wait(backoff)
                continue
            if outage_since is not None:
                # down since before the first round: how long it was down is not known
                log.warning("Slurm reachable %.0f s after this service's first round "
                            "tried it" if down_from_start else
                            "Slurm reachable again after %.0f s", self.timer() - outage_since)
                outage_since = None
            backoff = 0.0
            done += 1
            self._log_round(result)
            self._tell("round_done", result)
            boundary += self.round_s
            now = self.timer()
            if now >= boundary:
                boundary = now  # overran: the next round starts at once
            elif (max_rounds is None or done < max_rounds) and self._wait(stop, boundary):
                boundary = self.timer()  # a fill step called the next round now
        return done

    def checkpointed(self, report: ProgressReport) -> None:
        """A job acknowledged its checkpoint (the progress API's thread calls this): its
        requeue need not wait for the next round."""
        self._acked.put(report)
        self._wake.set()

    def ended(self, _report: ProgressReport) -> None:
        """A job's epilog reported its end (the progress API's thread calls this): its GPUs
        are free, and with ``fill_freed`` a fill step gives them out before the round."""
        if self.fill_freed:
            self._ended.set()
            self._wake.set()

    def _wait(self, stop: threading.Event, boundary: float) -> bool:
        """Sleep to the round boundary; requeue acknowledged checkpoints as they come (a
        round is 120 s, and the GPUs a checkpointed job holds idle until it is requeued);
        take a fill step when a job ends, or when a poll finds a new job (a requeued one
        Slurm may start again only while GPUs idle). True when a fill step called the
        next round now (engine/fill.py::round_due)."""
        next_poll = self.timer() + self.fill_poll_s
        next_end = -math.inf
        while not stop.is_set() and (left := boundary - self.timer()) > 0:
            if self._wake.wait(min(left, 0.25)):
                self._wake.clear()
                self.requeue_acknowledged()
            step = None
            # after the requeues (their GPUs are free too); at most one a poll interval,
            # ends in between taken together: a job's owner may send end reports too,
            # and each was a fill step, a Slurm query and a stored round
            if self._ended.is_set() and self.timer() >= next_end:
                self._ended.clear()
                next_end = self.timer() + self.fill_poll_s
                step = self._fill("a job ended")
            elif self.fill_freed and self.timer() >= next_poll and not self.dry_run:
                next_poll = self.timer() + self.fill_poll_s
                try:
                    arrived = self.world.arrived(requeued=self._idle_gpus > 0)
                except SlurmError:  # the round says so, once; no more polls till then:
                    arrived = False  # each unanswered one (9-30 s) followed at once
                    next_poll = math.inf
                if arrived:
                    step = self._fill("a job arrived")
            if step is not None and round_due(step.must_start, self._must_start):
                log.info("job %s must start now: the next round runs at once",
                         ", ".join(map(str, sorted(step.must_start - self._must_start))))
                return True
        return False

    def requeue_acknowledged(self) -> None:
        """Requeue each acknowledged job once a round, its newest acknowledgement tried
        (an older one, flushed late from a spool, answers no signal of this run): a job
        whose requeue Slurm refuses, acknowledging again and again, asked two Slurm
        calls of each (found by a red-team); the round tries it again."""
        latest: dict[int, ProgressReport] = {}
        while not self._acked.empty():
            report = self._acked.get()
            if report.at_s >= latest.get(report.job_id, report).at_s:
                latest[report.job_id] = report
        now = self.world.round_index
        self._tried = {j: r for j, r in self._tried.items() if r == now}
        for job_id, report in latest.items():
            if self.dry_run or self._tried.get(job_id) == now:
                continue
            try:
                # only an acknowledgement that asks Slurm counts as the job's try this
                # round; the rule reads the store (a job's reported epochs), so inside
                if not self.world.requeue_due(report):
                    continue
                self._tried[job_id] = now
                done = self.world.complete_checkpoint(report)
            except SlurmUnanswered as exc:
                # each next one would wait as long: 8 acknowledgements with slurmctld gone
                # made 16 calls, minutes, before the round (a red-team)
                log.warning("job %d: requeue after its checkpoint unanswered: %s (the next "
                            "round retries it and the others)", job_id, exc)
                break
            except SlurmError as exc:
                log.warning("job %d: requeue after its checkpoint failed: %s "
                            "(the next round retries)", job_id, exc)
                continue
            except StoreGone:
                raise
            except Exception as exc:  # a busy or full store: as a failed fill step
                _log_failure(f"job {job_id}: requeue after its checkpoint", exc,
                             " (the next round retries)")
                continue
            if done:
                log.info("job %d: checkpoint acknowledged, requeued", job_id)
                self._tell("action_done", ActionKind.PREEMPT.value, Outcome.APPLIED.value)
                try:
                    self.store.add_action(
                        job_id, ActionKind.PREEMPT.value, Outcome.APPLIED.value,
                        f"requeued between rounds at {clock_time(self.world.clock.now())}, "
                        "after its checkpoint's acknowledgement")
                except StoreGone:
                    raise
                except Exception as exc:  # the store's: the requeue stands, unrecorded
                    _log_failure(f"job {job_id}: its requeue not recorded", exc, "")

    def _fill(self, why: str) -> RoundReport | None:
        """A fill step now; one that fails is logged and left to the next round (None)."""
        try:
            done = self.round_once(fill=True)
        except SlurmError as exc:
            log.warning("fill step (%s) skipped: Slurm unreachable: %s", why, exc)
            self._tell("round_failed", SLURM)
            return None
        except StoreGone:
            raise
        except Exception as exc:
            cause = self._failed(f"fill step ({why})", exc)
            self._tell("round_failed", cause)
            return None
        self._tell("fill_done", done)
        starts = sum(1 for a in done.report.actions if a.kind == ActionKind.START)
        log.info("fill step of round %d (%s): %d starts", done.record.round_index, why,
                 starts)
        return done.report

    def _failed(self, what: str, exc: Exception, then: str = "") -> str:
        """Log a failed round or fill step and return its cause; one that failed after
        Slurm took its actions has them counted first."""
        if isinstance(exc, FailedAfterApply):
            self._tell("actions_applied", exc.report)
            exc = exc.error
        return _log_failure(what, exc, then)

    def _tell(self, event: str, *args: Any) -> None:
        """Tell the observer; its failure is logged, never the loop's (a review: only
        two of its calls were guarded, and one ran before the store's record)."""
        if self.observer is None:
            return
        try:
            getattr(self.observer, event)(*args)
        except Exception:
            log.exception("observer: %s failed", event)

    def _log_round(self, done: RoundDone) -> None:
        r, p = done.record, done.record.phase_s
        text = (f"round {r.round_index}: {r.jobs} jobs, applied {r.applied}, rejected "
                f"{r.rejected}, deferred {r.deferred}, solver {r.solver_status or '-'} gap "
                f"{'-' if r.solver_gap is None else f'{r.solver_gap:.2g}'}; observe "
                f"{p['observe']:.2f}s plan {p['plan']:.2f}s apply {p['apply']:.2f}s persist "
                f"{p['persist']:.2f}s")
        if p["total"] > self.round_s:
            log.warning("%s: overran the %.0f s round (%.1f s)", text, self.round_s,
                        p["total"])
        else:
            log.info(text)


def _log_failure(what: str, exc: Exception, then: str = "") -> str:
    """Log a failed round or fill step, and return its cause for the metrics: a store the
    machine cannot write (a full disk) in one line (``store``), a bug with its traceback
    (``error``)."""
    if unwritable(exc):
        log.error("%s failed: the store could not be written (%s)%s", what, exc, then)
        return STORE
    log.exception("%s failed%s", what, then)
    return ERROR
