"""The service's loop over thousands of rounds: does anything grow without bound?

``shockwave serve`` runs for months. This drives its loop in-process (``Service``, the
world, the report feed and a real SQLite store, wired as ``cli/live_options.service``
wires them) over the in-memory Slurm (``slurm/fake.py``), rounds of 60 s on a clock of its
own, with churn: 30 to 60 jobs in the partition, arrivals, ends, failures, cancellations,
bad hints, checkpoint signals that most jobs acknowledge, a progress report a round from
each running job written through a second store connection as the progress API does, and
fill steps after ends. Retention is short (``--retention-days``, 72 min by default), so
rounds, actions and reports expire many times over. Every ``--every`` rounds it samples
the process's RSS, the store's size, each table's rows and the round times; at the end it
counts the world's and the feed's per-job entries of jobs no longer listed. One JSON
object; exit 1 when a check fails:

- ``no_step_failed``: no round, fill step or requeue between rounds raised;
- ``rss_flat``: RSS grew by at most 8 MB from the first quarter's sample to the last;
- ``store_bounded``: the store (file and -wal) at most 16 MB, and the rounds table at
  most twice what the retention holds;
- ``caches_forget``: no per-job entry of a job Slurm no longer lists;
- ``rounds_not_slower``: the last quarter's median round at most twice the second
  quarter's, plus 20 ms.

    python -m benchmarks.soak --policy shockwave --rounds 6000 --json
"""

from __future__ import annotations

import json
import logging
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.args import Parser, floats
from benchmarks.reference_runs import machine
from slurm_shockwave.clock import SimClock
from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.service.daemon import Service
from slurm_shockwave.service.feed import ReportFeed
from slurm_shockwave.service.report_budget import MAX_REPORTS_PER_JOB
from slurm_shockwave.service.store import Store
from slurm_shockwave.slurm.fake import FakeSlurm
from slurm_shockwave.slurm.protocol import LISTED_STATES, SlurmJob, SlurmNode
from slurm_shockwave.slurm.table_progress import table_progress
from slurm_shockwave.slurm.world import SlurmCluster
from slurm_shockwave.workloads.bundled import bundled_table

ROUND_S = 60.0
FILL_AFTER_S = 10.0
"""When, after a round with ends, the fill step runs."""
START_S = 1_000_000.0
TABLES = ("rounds", "actions", "job_history", "job_now", "reports", "runs", "intents")
HINT = "shockwave:v1 model=ResNet-18 bs=32 epochs={e} mode=static"
MINJOBAGE_ROUNDS = 5
"""Rounds after which the fake forgets an ended job, as Slurm does after MinJobAge."""
RSS_GROWTH_MB = 8.0
STORE_MB = 16.0


@dataclass
class _Jobs:
    """The benchmark's model of each job: rounds of training it needs and has had."""

    rng: random.Random
    need: dict[int, int] = field(default_factory=dict)
    done: dict[int, float] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)
    ended_at: dict[int, int] = field(default_factory=dict)
    next_id: int = 1

    def submit(self, fake: FakeSlurm, now: float) -> None:
        jid, self.next_id = self.next_id, self.next_id + 1
        rng = self.rng
        gpus, epochs = rng.choice((1, 1, 1, 2, 2, 4, 8)), rng.randint(2, 40)
        text = HINT.format(e=epochs)
        if rng.random() < 0.8:
            text += " signal=USR1 grace=30"
        if rng.random() < 0.03:
            text = "shockwave:v1 model=ResNet-18 bs=-1"  # a bad hint now and then
        fake.add(SlurmJob(jid, f"j{jid}", rng.choice(("alice", "bob", "carol")), "shockwave",
                          "PENDING", held=True, gpus=gpus, reason="JobHeldUser",
                          admin_comment=text, submit_time=int(now)))
        self.need[jid], self.done[jid], self.epochs[jid] = rng.randint(3, 90), 0.0, epochs

    def forget(self, job_id: int) -> None:
        for table in (self.need, self.done, self.epochs, self.ended_at):
            table.pop(job_id, None)


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="shockwave", choices=POLICIES)
    ap.add_argument("--rounds", default="3000", help="100 to 100000 (default 3000)")
    ap.add_argument("--every", default="250", help="rounds between samples, 10 to 10000")
    ap.add_argument("--retention-days", default="0.05",
                    help="the store's retention, 0.01 to 14 days (default 0.05: 72 min)")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = ap.parse_args()
    rounds = int(floats(ap, "--rounds", args.rounds, count=1, lo=100, hi=100_000)[0])
    every = int(floats(ap, "--every", args.every, count=1, lo=10, hi=10_000)[0])
    days = floats(ap, "--retention-days", args.retention_days, count=1, lo=0.01, hi=14)[0]
    seed = int(floats(ap, "--seed", args.seed, count=1, lo=0, hi=2**31)[0])
    logging.disable(logging.WARNING)  # the bad hints' and refusals' lines, by the thousand
    with tempfile.TemporaryDirectory(prefix="shockwave-soak-") as folder:
        result = soak(args.policy, rounds, every, days * 86400.0, seed,
                      Path(folder) / "state.db")
    print(json.dumps({**result, "machine": machine()}))
    if not all(result["checks"].values()):
        raise SystemExit(1)


def soak(policy: str, rounds: int, every: int, retention_s: float, seed: int,
         path: Path) -> dict[str, Any]:
    """Run the loop ``rounds`` rounds; the samples, the end's per-job entries, checks."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",))
                      for i in range(1, 5)])
    clock = SimClock(START_S)  # moved by the benchmark: rounds of 60 s in no time
    store = Store(path, retention_s=retention_s)
    api = Store(path, retention_s=retention_s)  # the progress API's own connection
    feed = ReportFeed(lambda since: store.reports(since_id=since),
                      table_progress(bundled_table("tacc")), clock=clock.now,
                      runs=store.load_runs(), record_run=store.record_run,
                      forget=store.forget_earlier_job)
    feed.refresh()
    world = SlurmCluster(fake, clock, round_s=ROUND_S, progress=feed.progress,
                         acked=feed.acked, intents=store, fill_freed=True)
    world.epochs_reported = store.epochs_reported
    svc = Service(world, make_policy(policy, None), policy, store, round_s=ROUND_S,
                  feed=feed, fill_freed=True)
    jobs = _Jobs(random.Random(seed))
    for _ in range(40):
        jobs.submit(fake, clock.now())
    failures: list[str] = []
    samples: list[dict[str, Any]] = []
    walls: list[float] = []
    seen_signals = 0
    started = time.monotonic()
    for index in range(1, rounds + 1):
        began = time.perf_counter()
        try:
            svc.round_once()
        except Exception as exc:  # a bug: counted, and the soak goes on to show the rest
            failures.append(f"round {index}: {exc!r}")
        walls.append(time.perf_counter() - began)
        try:
            seen_signals = _between_rounds(fake, svc, api, jobs, clock, index, seen_signals)
        except Exception as exc:  # a fill step's, or an acknowledgement's requeue
            failures.append(f"after round {index}: {exc!r}")
            seen_signals = len(fake.signals)
        if index % every == 0 or index == rounds:
            samples.append(_sample(index, store, path, walls[-every:]))
            print(f"\r{index}/{rounds} rounds, {time.monotonic() - started:.0f} s",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    stale = _stale_entries(world, feed)
    return {"policy": policy, "rounds": rounds, "seed": seed,
            "retention_s": retention_s, "jobs_submitted": jobs.next_id - 1,
            "checkpoint_signals": len(fake.signals), "failures": failures[:20],
            "failed": len(failures), "samples": samples, "stale_entries": stale,
            "wall_s": round(time.monotonic() - started, 1),
            "checks": _checks(samples, len(failures), stale, retention_s)}


def _between_rounds(fake: FakeSlurm, svc: Service, api: Store, jobs: _Jobs, clock: SimClock,
                    index: int, seen_signals: int) -> int:
    """What the jobs and Slurm do until the next round; the signals seen so far."""
    rng = jobs.rng
    for jid, _signal in fake.signals[seen_signals:]:  # most acknowledge within the grace
        job = fake.jobs.get(jid)
        if job is None or job.state != "RUNNING" or rng.random() < 0.3:
            continue
        ack = ProgressReport(jid, ReportKind.CHECKPOINTED, clock.now() + 5,
                             restart_count=job.restart_count, uid=1000)
        svc.checkpointed(replace(ack, report_id=_report(api, ack)))
    svc.requeue_acknowledged()  # what the loop does when an acknowledgement wakes it
    ended = False
    for job in [j for j in fake.jobs.values() if j.state == "RUNNING"]:
        jid = job.job_id
        jobs.done[jid] += 1
        share = min(jobs.done[jid] / jobs.need[jid], 1.0)
        _report(api, ProgressReport(jid, ReportKind.PROGRESS, clock.now() + 30,
                                    epoch=round(jobs.epochs[jid] * share, 3), batch_size=32,
                                    restart_count=job.restart_count, uid=1000))
        if share >= 1.0 or rng.random() < 0.005:
            fake.finish(jid, "COMPLETED" if share >= 1.0 else "FAILED")
            _report(api, ProgressReport(jid, ReportKind.END, clock.now() + 31,
                                        exit_code=0 if share >= 1.0 else 1,
                                        restart_count=job.restart_count, uid=1000))
            jobs.ended_at[jid], ended = index, True
    for job in [j for j in fake.jobs.values() if j.state == "PENDING"]:
        if rng.random() < 0.002:  # its owner cancels it
            fake.cancel(job.job_id)
            jobs.ended_at[job.job_id] = index
    listed = sum(1 for j in fake.jobs.values() if j.state in LISTED_STATES)
    arriving = rng.choice((0, 0, 1, 1, 2, 3)) + max(0, 30 - listed)
    for _ in range(min(arriving, max(0, 60 - listed))):
        jobs.submit(fake, clock.now())
    if ended and index % 2 == 0:  # a fill step on the GPUs the ends freed
        _advance(clock, fake, FILL_AFTER_S)
        svc.round_once(fill=True)
        _advance(clock, fake, ROUND_S - FILL_AFTER_S)
    else:
        _advance(clock, fake, ROUND_S)
    for jid in [j for j, at in jobs.ended_at.items() if index - at >= MINJOBAGE_ROUNDS]:
        fake.jobs.pop(jid, None)
        jobs.forget(jid)
    return len(fake.signals)


def _advance(clock: SimClock, fake: FakeSlurm, seconds: float) -> None:
    """The service's clock and Slurm's, moved together."""
    clock.advance_to(clock.now() + seconds)
    fake.tick(int(seconds))


def _report(api: Store, report: ProgressReport) -> int:
    """Store a job's report as the progress API does (its cap per job); its id."""
    return api.add_report(report, keep=MAX_REPORTS_PER_JOB,
                          stored=api.report_count(report.job_id))


def _sample(index: int, store: Store, path: Path, walls: list[float]) -> dict[str, Any]:
    wal = Path(f"{path}-wal")
    return {"round": index, "rss_mb": round(_rss_kb() / 1024, 1),
            "store_kb": (path.stat().st_size + (wal.stat().st_size if wal.exists() else 0))
            // 1024,
            "rows": {t: int(store.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
                     for t in TABLES},
            "round_ms_p50": round(statistics.median(walls) * 1e3, 1),
            "round_ms_max": round(max(walls) * 1e3, 1)}


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _stale_entries(world: SlurmCluster, feed: ReportFeed) -> dict[str, int]:
    """Per container keyed by job id, its entries of jobs Slurm no longer lists."""
    listed = set(world.queued_ids)
    found = {f"world.{name}": value for name, value in vars(world).items()
             if isinstance(value, dict | set | frozenset)}
    found.update({"feed.reports": feed.reports, "feed.runs": feed.runs,
                  "world.intents": world.intents})
    return {name: n for name, value in sorted(found.items())
            if (n := sum(1 for k in value if isinstance(k, int) and k not in listed))}


def _checks(samples: list[dict[str, Any]], failed: int, stale: dict[str, int],
            retention_s: float) -> dict[str, bool]:
    quarter = max(len(samples) // 4, 1)
    first, last = samples[quarter - 1], samples[-1]
    second = samples[quarter:2 * quarter] or samples[:1]
    tail = samples[-quarter:]
    kept_rounds = retention_s / ROUND_S
    return {
        "no_step_failed": failed == 0,
        "rss_flat": last["rss_mb"] - first["rss_mb"] <= RSS_GROWTH_MB,
        "store_bounded": (max(s["store_kb"] for s in samples) <= STORE_MB * 1024
                          and max(s["rows"]["rounds"] for s in samples) <= 2 * kept_rounds + 10),
        "caches_forget": not stale,
        "rounds_not_slower": (statistics.median(s["round_ms_p50"] for s in tail)
                              <= 2 * statistics.median(s["round_ms_p50"] for s in second) + 20),
    }


if __name__ == "__main__":
    main()
