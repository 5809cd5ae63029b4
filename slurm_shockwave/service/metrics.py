"""The service's Prometheus metrics, served on the progress API's ``GET /metrics``.

Updated by the round loop as its observer (a round, a fill step or an action between
them done, a round or fill step failed) and, for what can be
read at any moment (the fail-open heartbeat, whether slurmctld's SlurmUser can read it,
the progress API's counts), computed at scrape time. A registry of its own, not the
process-global one, so two services in one process (tests) never share series. Names
are listed in docs/admin.md. Every counter's labelled series (each failure cause, action
kind and outcome, solver status) is there from the start, at 0 (a review: a first
failure made its series appear at 1, which ``increase()`` cannot see); the per-phase
gauges and histograms appear with the first round. No ``_created`` series are served.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from slurm_shockwave.engine.round import RoundReport
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import ActionKind, Outcome
from slurm_shockwave.service.daemon import CAUSES, SLURM, RoundDone
from slurm_shockwave.service.doctor_host import heartbeat_closed
from slurm_shockwave.service.heartbeat import read_heartbeat
from slurm_shockwave.service.progress_api import Counts
from slurm_shockwave.service.records import action_rows, solved_in
from slurm_shockwave.solver.plan_window import WINDOW_STATUSES

PHASES = ("observe", "plan", "apply", "persist", "total")
_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
            1800.0)
# a ``_created`` twin of every counter and histogram: series nobody reads
disable_created_metrics()  # type: ignore[no-untyped-call]


class _LiveState(Collector):
    """What is read when scraped: the heartbeat file and the progress API's counts."""

    def __init__(self, heartbeat: str | None, counts: Callable[[], Counts] | None,
                 clock: Callable[[], float], slurm_user: str | None) -> None:
        self.heartbeat = heartbeat
        self.counts = counts
        self.clock = clock
        self.slurm_user = slurm_user

    def collect(self) -> Iterator[Metric]:
        beat = read_heartbeat(self.heartbeat) if self.heartbeat else None
        age = math.nan if beat is None else self.clock() - beat[0]
        # read by the service (root) the heartbeat is fresh, but job_submit.lua reads it
        # inside slurmctld as SlurmUser: doctor's check of that, or 0 here was a lie
        closed = self.heartbeat is not None and \
            heartbeat_closed(self.heartbeat, self.slurm_user) is not None
        stale = beat is None or age > beat[1] or closed
        yield GaugeMetricFamily("shockwave_heartbeat_age_seconds",
                                "Age of the fail-open heartbeat file (NaN: missing)", value=age)
        yield GaugeMetricFamily("shockwave_fail_open",
                                "1 when the heartbeat is missing, stale or not readable by "
                                "slurmctld's SlurmUser: new jobs of the partition are not "
                                "held and run under Slurm alone", value=1.0 if stale else 0.0)
        if self.counts is not None:
            counts = self.counts()
            family = CounterMetricFamily("shockwave_progress_reports",
                                         "Progress reports jobs sent, by outcome",
                                         labels=["outcome"])
            family.add_metric(["accepted"], counts.accepted)
            family.add_metric(["rejected"], counts.rejected)
            family.add_metric(["busy"], counts.busy)
            yield family


class ServiceMetrics:
    def __init__(self, *, policy: str, partition: str, backend: str,
                 heartbeat: str | None = None, counts: Callable[[], Counts] | None = None,
                 clock: Callable[[], float] = time.time,
                 slurm_user: str | None = None) -> None:
        """``slurm_user``: SlurmUser as ``scontrol show config`` prints it (None:
        unknown, so the heartbeat must be readable by every user, as doctor asks)."""
        self.registry = r = CollectorRegistry()
        info = Gauge("shockwave_info", "The service's policy, partition and Slurm backend",
                     ["policy", "partition", "backend"], registry=r)
        info.labels(policy, partition, backend).set(1)
        self.rounds = Counter("shockwave_rounds", "Rounds completed", registry=r)
        self.round_index = Gauge("shockwave_round_index", "Index of the last round (NaN "
                                 "before this process's first)", registry=r)
        self.round_time = Gauge("shockwave_last_round_timestamp_seconds",
                                "When the last round completed (Unix time; NaN before this "
                                "process's first)", registry=r)
        self.phase = Histogram("shockwave_round_phase_seconds", "Seconds per round phase",
                               ["phase"], buckets=_BUCKETS, registry=r)
        self.last_phase = Gauge("shockwave_last_round_phase_seconds",
                                "Seconds per phase of the last round", ["phase"], registry=r)
        self.failures = Counter("shockwave_round_failures",
                                "Rounds and fill steps that failed, by cause (slurm: "
                                "unreachable; store: could not be written, e.g. a full "
                                "disk; error: a bug, in the log)", ["cause"], registry=r)
        self.slurm_up = Gauge("shockwave_slurm_reachable",
                              "0 while the last round or fill step could not reach Slurm "
                              "(NaN before this process's first)", registry=r)
        self.solver_gap = Gauge("shockwave_solver_gap",
                                "Relative gap of the window plan that runs, solved in this "
                                "round or kept from an earlier one (NaN: no window plan, "
                                "or its gap unknown)", registry=r)
        self.solves = Counter("shockwave_solver_solves", "Window programs solved, by status "
                              "(a plan kept for later rounds counts once)", ["status"],
                              registry=r)
        self.jobs = Gauge("shockwave_jobs", "Managed jobs the last round saw, by phase",
                          ["phase"], registry=r)
        self.actions = Counter("shockwave_actions", "Actions sent to Slurm (keeping a job "
                               "running is none) in rounds, fill steps and between them, by "
                               "kind and outcome", ["kind", "outcome"], registry=r)
        for gauge in (self.solver_gap, self.slurm_up, self.round_index, self.round_time):
            gauge.set(math.nan)
        for cause in CAUSES:
            self.failures.labels(cause)
        for status in WINDOW_STATUSES:
            self.solves.labels(status)
        for kind in (ActionKind.START, ActionKind.PREEMPT):
            for outcome in Outcome:
                self.actions.labels(kind.value, outcome.value)
        r.register(_LiveState(heartbeat, counts, clock, slurm_user))
        self.clock = clock

    def round_done(self, done: RoundDone) -> None:
        """A round done. Its failures are the loop's to contain, as every observer call's
        (``Service._tell``: a metrics bug never stops the scheduling loop)."""
        record, report = done.record, done.report
        self.rounds.inc()
        self.round_index.set(record.round_index)
        self.round_time.set(self.clock())
        self.slurm_up.set(1)
        for name in PHASES:
            seconds = float(record.phase_s.get(name, 0.0))
            self.phase.labels(name).observe(seconds)
            self.last_phase.labels(name).set(seconds)
        self.solver_gap.set(math.nan if record.solver_gap is None else record.solver_gap)
        if record.solver_status is not None and solved_in(report.memory, record.round_index):
            self.solves.labels(record.solver_status).inc()
        by_phase = {p.value: 0 for p in Phase}
        for job in report.view.jobs if report.view else ():
            by_phase[job.phase.value] += 1
        for name, count in by_phase.items():
            self.jobs.labels(name).set(count)
        self.actions_applied(done.report)

    def fill_done(self, done: RoundDone) -> None:
        """A fill step between rounds: its actions. The rounds, phases, jobs and solves
        are the rounds' (a fill step keeps the round's plan)."""
        self.slurm_up.set(1)
        self.actions_applied(done.report)

    def actions_applied(self, report: RoundReport) -> None:
        """The actions of a round or fill step, also of one that failed after Slurm took
        them (its store write, say)."""
        for _job, kind, outcome, _message in action_rows(report):
            self.actions.labels(kind, outcome).inc()

    def action_done(self, kind: str, outcome: str) -> None:
        """An action taken between rounds: a requeue after a checkpoint's acknowledgement."""
        self.actions.labels(kind, outcome).inc()

    def round_failed(self, cause: str) -> None:
        self.failures.labels(cause).inc()
        if cause == SLURM:
            self.slurm_up.set(0)

    def exposition(self) -> tuple[bytes, str]:
        """(body, content type) for GET /metrics."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
