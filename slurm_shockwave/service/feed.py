"""The round's view of what jobs reported: read from the store once per round, never
from the HTTP thread directly (it only writes reports into the store)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping

from slurm_shockwave.model.job import JobProgress
from slurm_shockwave.model.report import ProgressReport
from slurm_shockwave.prediction.observed import (
    acknowledged,
    advanced,
    observed_elastic,
    observed_progress,
)
from slurm_shockwave.service.report_budget import MAX_REPORTS, MAX_REPORTS_PER_JOB, level
from slurm_shockwave.service.store import Run
from slurm_shockwave.slurm.hints import Hint
from slurm_shockwave.slurm.intents import CLOCK_SKEW_S
from slurm_shockwave.slurm.listing import first_submitted
from slurm_shockwave.slurm.protocol import SlurmJob
from slurm_shockwave.slurm.table_progress import ProgressFn

log = logging.getLogger(__name__)


def made(r: ProgressReport) -> tuple[int, float, int]:
    """When a report was made: its run, its (dated-back) time, then its arrival."""
    return r.restart_count, r.at_s, r.report_id


ReadReports = Callable[[int], Mapping[int, Iterable[ProgressReport]]]
"""Reports with an id above the given one, by job (the store's ``reports``)."""
RecordRun = Callable[[int, int, int, int], None]
"""Keep a job's GPU count of one run: (job id, restart count, GPUs, the job's first
submission or 0) (``record_run``)."""
ForgetEarlier = Callable[[int, int, float], None]
"""Forget an earlier job's reports and runs under a job id: (job id, the first submission
of the job that has it now, its reports' cut) (``forget_earlier_job``)."""


class ReportFeed:
    """Caches every report of the jobs still around; each round adds the new ones.

    Slurm gives a job id out again (its state lost, ``FirstJobId``, ``MaxJobId``
    wrapped), and the store keeps reports and runs by id. A job stamped with its first
    submission (``first_submitted``) reads only the reports made since then, less
    ``CLOCK_SKEW_S`` (the stamp is slurmctld's clock, a report's time the progress
    API's), and the runs of its own submission or of none known; what an earlier job
    left is dropped, and the service's feed (``forget``) forgets it in the store. A job
    without the stamp reads every report and run of its id."""

    def __init__(self, read: ReadReports, table: ProgressFn,
                 clock: Callable[[], float] | None = None,
                 runs: Mapping[int, Mapping[int, Run]] | None = None,
                 record_run: RecordRun | None = None,
                 forget: ForgetEarlier | None = None, startup_s: float = math.inf) -> None:
        self.read = read
        self.table = table
        self.startup_s = startup_s
        """The most a run's start-up takes (``slurm.restart_cost_s``): a run's first
        report interval less this bounds its epoch time from below (``observed``)."""
        self.clock = clock
        """The clock the reports are dated by (the progress API's): with it, a running
        job's progress is read forward from its latest report (``advanced``); without
        it, progress is as reported."""
        self.reports: dict[int, list[ProgressReport]] = {}
        self.last_id = 0
        self.runs: dict[int, dict[int, Run]] = {j: dict(r) for j, r in (runs or {}).items()}
        """Elastic jobs: the GPU count of each run (restart count) seen running, from the
        store (``runs``) and written back to it (``record_run``) as runs are seen. Kept
        in memory only before a review found it: after a service restart an earlier
        run's epoch times read as if on the count the job holds now (unconverted: 2.6
        times too short for a job moved from 8 GPUs to 2) until its new run's second
        report interval."""
        self.record_run = record_run
        self.forget = forget
        self.cut: dict[int, float] = {}
        """Job -> the time before which its id's reports are an earlier job's (its first
        submission less the clock skew), for the jobs seen with the stamp."""

    def refresh(self) -> int:
        """Read the reports that arrived since the last call; how many arrived. Each job's
        reports are kept in the order they were made, run by run (restart count), then by
        time (a spooled report is dated back by its age), not in the order they arrived:
        a report flushed late from a spool, or sent again because its answer came after
        the client's deadline, must not read as the job's latest progress."""
        new = 0
        for jid, reports in self.read(self.last_id).items():
            kept = self.reports.setdefault(jid, [])
            cut = self.cut.get(jid, -math.inf)
            for r in reports:
                self.last_id = max(self.last_id, r.report_id)
                if r.at_s >= cut:  # else an earlier job's, flushed late from its spool
                    kept.append(r)
                    new += 1
            kept.sort(key=made)
            del kept[:-MAX_REPORTS_PER_JOB]  # as the store keeps them: the oldest go
        keep = level((len(kept) for kept in self.reports.values()), MAX_REPORTS)
        if keep is not None:  # over the budget for all jobs: as the store, the most go
            for kept in self.reports.values():
                del kept[:-keep]
        return new

    def keep_only(self, job_ids: Iterable[int]) -> None:
        """Forget the reports of jobs no longer around (no I/O)."""
        wanted = set(job_ids)
        self.reports = {j: r for j, r in self.reports.items() if j in wanted}
        self.runs = {j: r for j, r in self.runs.items() if j in wanted}
        self.cut = {j: c for j, c in self.cut.items() if j in wanted}

    def _own(self, job: SlurmJob) -> list[ProgressReport]:
        """The job's reports, its runs left in ``runs``, without an earlier job's of the
        same id (see the class): dropped the first time the job is seen with its stamp,
        and forgotten in the store."""
        jid = job.job_id
        reports = self.reports.get(jid, [])
        stamp = first_submitted(job)
        if stamp is None:
            return reports
        cut = stamp - CLOCK_SKEW_S  # the service's clock may be behind slurmctld's
        if reports and job.state == "PENDING" and job.restart_count == 0:
            # it has never run, so none is its own: within the clock skew allowed, an
            # earlier job's last reports were read as its progress (a red-team)
            cut = max(cut, max(r.at_s for r in reports) + 1e-3)
        if self.cut.get(jid) == cut:
            return reports
        self.cut[jid] = cut
        own = [r for r in reports if r.at_s >= cut]
        runs = self.runs.get(jid, {})
        others = [n for n, run in runs.items() if run.submitted not in (0, stamp)]
        for n in others:
            del runs[n]
        if len(own) < len(reports):
            reports = self.reports[jid] = own
        elif not others:
            return reports
        log.info("job %d: an earlier job's reports and runs under its id (from before its "
                 "submission at %d) left out", jid, stamp)
        if self.forget is not None:
            try:
                self.forget(jid, stamp, cut)
            except Exception as exc:  # the store's (sqlite3, OSError): left out all the same
                log.warning("job %d: an earlier job's reports not forgotten in the store "
                            "(%s)", jid, exc)
        return reports

    def progress(self, job: SlurmJob, hint: Hint) -> JobProgress:
        """The table's guess updated by the job's reports. An elastic job's throughput at
        the counts it has run on is its own, and an epoch time measured on another count
        (before a resize, or a pending job whose GRES was changed) is converted to the
        count it holds now by those rates (``prediction/observed.py``)."""
        # a later run's reports than the job's own are an earlier job's of the same id,
        # whatever their time (found by a review: sorted by restart count, they passed
        # for the latest)
        reports = [r for r in self._own(job) if r.restart_count <= job.restart_count]
        guess = self.table(job, hint)
        if not guess.rate_by_gpus:
            seen = observed_progress(guess, reports, startup_s=self.startup_s)
        else:
            runs = self.runs.setdefault(job.job_id, {})
            run = Run(job.gpus, first_submitted(job) or 0)
            if job.state == "RUNNING" and job.gpus > 0 and runs.get(job.restart_count) != run:
                for later in [r for r in runs if r > job.restart_count]:
                    del runs[later]  # an earlier job's that had the id (as in the store)
                runs[job.restart_count] = run
                self._record(job.job_id, job.restart_count, run)
            seen = observed_elastic(guess, reports, {n: r.gpus for n, r in runs.items()},
                                    max(job.gpus, 1), startup_s=self.startup_s)
        if self.clock is None or job.state != "RUNNING":
            return seen
        return advanced(seen, reports, job.restart_count, self.clock(), hint.epochs)

    def _record(self, job_id: int, restart_count: int, run: Run) -> None:
        """Write a run's count to the store; a failed write (a full disk) keeps it in
        memory and fails no round."""
        if self.record_run is None:
            return
        try:
            self.record_run(job_id, restart_count, run.gpus, run.submitted)
        except Exception as exc:  # the store's (sqlite3, OSError)
            log.warning("job %d: the GPU count of run %d not written to the store (%s)",
                        job_id, restart_count, exc)

    def acked(self, job_id: int, since_s: float, run: int) -> bool:
        return acknowledged(self.reports.get(job_id, ()), since_s, run)
