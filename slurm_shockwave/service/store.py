"""The service's memory: one SQLite file (WAL) beside the loop.

What it keeps: rounds (time, phase timings, solver status and gap), every action with its
outcome and Slurm's message, each job's row as last planned plus a history row whenever
its phase, GPUs, reason or action changed (so a queue that does not change costs nothing),
the policy's memory, checkpoint intents that span rounds, the progress reports jobs
send (written by the HTTP thread through its own connection), and the GPU count of each
run of an elastic job (so a restarted service converts its earlier runs' epoch times).
Reports and runs are kept by Slurm job id, which Slurm gives out again: a job stamped
with its first submission (job_submit.lua's ``submitted=``) owns only the reports made
since then and the runs written with its stamp (``service/feed.py``).

Writes: a whole round is one transaction (a crash leaves the last complete round, never
half of one), and it is versioned: it commits only if no newer round was written since
this writer read the store (the lock makes that the normal case; a second writer that
slipped past it fails instead of interleaving). A checkpoint intent is written on its
own, before its signal is sent. Growth is bounded: rounds older than the retention, and
their actions and history, are deleted as new ones come.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.service.report_budget import MAX_REPORTS, level
from slurm_shockwave.slurm.intents import CheckpointIntent

log = logging.getLogger(__name__)

_REPORT_KEYS = ("CREATE UNIQUE INDEX IF NOT EXISTS reports_key ON reports(job_id, "
                "report_key) WHERE report_key IS NOT NULL")
"""A report is kept once per key (``add_report``)."""
SCHEMA_VERSION = 3
MIGRATED = ("1", "2")
"""Earlier schema versions this release reads, and migrates in place when it writes
(``Store._migrate``): 1 had no ``runs.submitted``."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rounds (
    id INTEGER PRIMARY KEY, round_index INTEGER NOT NULL, at_s REAL NOT NULL,
    policy TEXT NOT NULL, dry_run INTEGER NOT NULL, jobs INTEGER NOT NULL,
    observe_s REAL, plan_s REAL, apply_s REAL, persist_s REAL, total_s REAL,
    solver_status TEXT, solver_gap REAL,
    applied INTEGER, rejected INTEGER, deferred INTEGER);
CREATE INDEX IF NOT EXISTS rounds_at ON rounds(at_s);
CREATE TABLE IF NOT EXISTS actions (
    round_id INTEGER NOT NULL, job_id INTEGER NOT NULL, kind TEXT NOT NULL,
    outcome TEXT NOT NULL, message TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS actions_job ON actions(job_id, round_id);
CREATE INDEX IF NOT EXISTS actions_round ON actions(round_id);
CREATE TABLE IF NOT EXISTS job_history (
    round_id INTEGER NOT NULL, job_id INTEGER NOT NULL, row TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS history_job ON job_history(job_id, round_id);
CREATE INDEX IF NOT EXISTS history_round ON job_history(round_id);
CREATE TABLE IF NOT EXISTS job_now (
    job_id INTEGER PRIMARY KEY, round_id INTEGER NOT NULL, row TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memory (
    policy TEXT PRIMARY KEY, round_id INTEGER NOT NULL, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS intents (
    job_id INTEGER PRIMARY KEY, signal TEXT NOT NULL, sent_s REAL NOT NULL,
    deadline_s REAL NOT NULL, restart_count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL, at_s REAL NOT NULL,
    kind TEXT NOT NULL,
    epoch REAL, batch_size INTEGER, samples_per_s REAL, restart_count INTEGER NOT NULL,
    exit_code INTEGER, uid INTEGER NOT NULL, report_key TEXT);
CREATE INDEX IF NOT EXISTS reports_job ON reports(job_id, id);
CREATE INDEX IF NOT EXISTS reports_at ON reports(at_s);
CREATE TABLE IF NOT EXISTS runs (
    job_id INTEGER NOT NULL, restart_count INTEGER NOT NULL, gpus INTEGER NOT NULL,
    submitted INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job_id, restart_count));
"""


GONE = "gone"
"""A history row's phase in the round that first missed its job from the queue."""


@dataclass(frozen=True)
class JobRow:
    """One managed job as a round saw and decided it (what `queue` and `explain` show)."""

    job_id: int
    user: str = ""
    model: str = ""
    phase: str = ""
    gpus: int = 0
    where: str = ""
    epochs_done: float = 0.0
    epochs: int = 0
    bs: int = 0
    remaining_s: float = 0.0
    rho: float | None = None
    planned_rounds: int | None = None
    reason: str = ""
    action: str = "wait"
    outcome: str = ""
    message: str = ""
    submitted: int = 0
    """The job's first submission (job_submit.lua's ``submitted=`` stamp; 0: not known):
    a row of another stamp under the id is another job (Slurm gave the id out again)."""

    def change_key(self) -> tuple[Any, ...]:
        """What makes a history row: details such as rho drift every round and do not."""
        return (self.phase, self.gpus, self.where, self.reason.split("(", 1)[0],
                self.action, self.outcome)


class Run(NamedTuple):
    """One run of an elastic job: the GPUs it ran on, and the job's first submission
    (job_submit.lua's ``submitted=`` stamp; 0: not known, a job submitted before the
    stamp or a run kept by schema 1), which tells it from an earlier job's run."""

    gpus: int
    submitted: int = 0


@dataclass(frozen=True)
class RoundRecord:
    round_index: int
    at_s: float
    policy: str
    dry_run: bool
    jobs: int
    phase_s: Mapping[str, float]
    solver_status: str | None
    solver_gap: float | None
    applied: int
    rejected: int
    deferred: int


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``; None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


_MACHINE_ERRORS = ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_BUSY",
                   "SQLITE_LOCKED", "SQLITE_CANTOPEN")


def unwritable(exc: BaseException) -> bool:
    """An SQLite error of the machine (a full disk, an I/O error, a read-only or locked
    file), not of our code: worth one log line and a retry, not a traceback."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    return isinstance(exc, sqlite3.Error) and name.startswith(_MACHINE_ERRORS)


class StaleWrite(RuntimeError):
    """Another writer committed a newer round since this one read the store."""


class StoreGone(InputError):
    """The store's file was deleted or replaced while the service had it open: its
    writes go to a file nobody will read again (intents too, so a restart would signal
    jobs twice). The service stops, loudly, and fails open."""


class Store:
    def __init__(self, path: str | Path, *, retention_s: float = 14 * 86400.0,
                 create: bool = True, field: str = "service.store") -> None:
        """``create=False``: a reader (queue, explain, a dry-run plan, hand-back) opens a
        store the service made, read-only (``_open_reader``: also on a read-only mount);
        any other file, an empty one included, is refused and left as it was, never
        stamped with the schema. ``field``: what a refusal names (``--store`` where the
        path was given so)."""
        self.path = str(path)
        self.field = field
        self.retention_s = retention_s
        self._identity: tuple[int, int] | None = None
        if self.path != ":memory:":
            kind = _not_a_file(self.path)
            if kind is not None:  # SQLite said "disk I/O error", or waited on a FIFO
                raise InputError(f"{kind}, not a store", source=self.path, field=field)
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(f"cannot make its folder ({exc.strerror or exc})",
                                 source=self.path, field=self.field) from None
        try:
            if create:
                self.db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
            else:
                self.db, tables = _open_reader(self.path, field)
        except sqlite3.DatabaseError as exc:
            raise InputError(f"not a usable store ({exc})", source=self.path,
                             field=self.field) from None
        try:
            self._check(create, None if create else tables)
        except BaseException:
            # every refusal closes the connection: SQLite shares a file's shared memory
            # among a process's connections, and one left open (held by the traceback)
            # kept the file open after the one-line refusal (found by a review)
            self.db.close()
            raise
        self._now_rows: dict[int, JobRow] | None = None
        if self.path != ":memory:":
            self._identity = _identity(self.path)

    def _check(self, create: bool, tables: set[str] | None) -> None:
        """Refuse (InputError naming service.store) what is not this release's store;
        make a new one (``create``). ``tables``: a reader's, already read."""
        try:
            if tables is None:
                tables = _tables(self.db)
            if tables and "meta" not in tables:  # never stamp another program's database
                raise InputError(f"not a slurm-shockwave store (its tables: "
                                 f"{', '.join(sorted(tables)[:5])})", source=self.path,
                                 field=self.field)
            if not tables and not create:
                raise InputError("not a slurm-shockwave store (an empty database: has the "
                                 "service run?)", source=self.path, field=self.field)
            if not create and (missing := sorted(set(_TABLES) - set(_LATER_TABLES) - tables)):
                raise InputError(f"not a whole store (no table {', '.join(missing)})",
                                 source=self.path, field=self.field)
            if create:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(_SCHEMA)
            version = self._meta("schema_version")
        except sqlite3.DatabaseError as exc:
            raise InputError(f"not a usable store ({exc})", source=self.path,
                             field=self.field) from None
        if version is None and create:  # both or neither: a store with a version and no
            # 'holds' reads as an earlier build's, whose admin holds the next start takes over
            with self._transaction():
                self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                                (str(SCHEMA_VERSION),))
                self.db.execute("INSERT OR REPLACE INTO meta VALUES ('holds', 'user')")
        elif version != str(SCHEMA_VERSION) and version not in MIGRATED:
            raise InputError(f"schema version {version}, this release reads "
                             f"{SCHEMA_VERSION}", source=self.path, field=self.field)
        if create:
            self._check_writable()
            if version in MIGRATED:
                self._migrate()
            with self._transaction():  # after the migration: a column it adds
                self.db.execute(_REPORT_KEYS)

    def _migrate(self) -> None:
        """An earlier schema's store brought to this one in place, in one transaction (a
        reader reads it as it is: ``load_runs``). 1 -> 2: each run's ``submitted``, 0
        (not known) for the runs kept so far, which count for any job of their id, as
        they did. 2 -> 3: each report's ``report_key``, none for the reports kept so far."""
        try:
            with self._transaction():
                if self._meta("schema_version") not in MIGRATED:
                    return  # another writer (the progress API's connection) did it
                if "submitted" not in _columns(self.db, "runs"):
                    self.db.execute("ALTER TABLE runs ADD COLUMN submitted INTEGER NOT "
                                    "NULL DEFAULT 0")
                if "report_key" not in _columns(self.db, "reports"):
                    self.db.execute("ALTER TABLE reports ADD COLUMN report_key TEXT")
                self.db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                                (str(SCHEMA_VERSION),))
        except sqlite3.Error as exc:  # closed by __init__, as every refusal
            raise InputError(f"cannot be brought to schema version {SCHEMA_VERSION} "
                             f"({exc})", source=self.path, field=self.field) from None

    def _check_writable(self) -> None:
        """A writer's store must take writes now, not at its first round: SQLite opens a
        file it cannot write read-only without a word (a read-only disk whose store a
        crash left with its -wal and -shm), and the service then started and failed
        every round as "the store could not be written" (found by a review). One write
        of the store's own, rolled back."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute("INSERT OR REPLACE INTO meta VALUES ('writable', '1')")
            finally:
                self.db.execute("ROLLBACK")
        except sqlite3.Error as exc:  # closed by __init__, as every refusal
            raise InputError(f"cannot be written ({exc})", source=self.path,
                             field=self.field) from None

    def check_file(self) -> None:
        """Raise StoreGone when the file at the store's path is no longer the one open
        here (deleted, or replaced), or its write-ahead log was deleted under it."""
        if self._identity is None:
            return
        now = _identity(self.path)
        # SQLite keeps the log beside the file a symlinked store points at
        wal = Path(f"{os.path.realpath(self.path)}-wal")
        if now != self._identity or not wal.exists():
            what = ("was deleted or replaced" if now != self._identity
                    else "lost its write-ahead log (-wal)")
            raise StoreGone(f"{what} while the service had it open; stopping (its last "
                            "writes are lost to it: restart the service to start "
                            "afresh)", source=self.path, field=self.field)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def _decoding(self, table: str) -> Iterator[None]:
        """A row this build cannot read (a damaged store, or one a later build wrote under
        the same schema version) is the one line naming the store, not a traceback."""
        try:
            yield
        except (TypeError, ValueError, KeyError) as exc:
            raise InputError(f"a row of its {table} table cannot be read ({exc})",
                             source=self.path, field=self.field) from None

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def meta_value(self, key: str) -> str | None:
        return self._meta(key)

    def held_by_earlier_build(self) -> bool:
        """Written by a build whose service held jobs with admin holds (before the planner's
        hold became a user hold, so that an admin's own is told apart)."""
        return self._meta("holds") != "user"

    def mark_user_holds(self) -> None:
        with self._transaction():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('holds', 'user')")

    def claim_partition(self, partition: str, *, claim: bool = True) -> None:
        """The store is one partition's: its job rows, progress reports, holds and
        checkpoints. The first round written over it claims it (``claim``; not before: a
        service started on a mistyped partition while Slurm did not answer, so that the
        typo went unseen, would have claimed it for good); another partition's is refused
        (found by a red-team: a one-shot ``plan --apply --partition other`` over the
        service's store replaced its job rows, so the service's next round took its jobs
        for new ones and deleted their progress reports, and the one-shot round released
        the jobs it held, taking them for jobs moved out)."""
        value = self._meta("partition")
        if value is None and claim:
            with self._transaction():
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('partition', ?)",
                                (partition,))
            value = self._meta("partition")
        if value not in (None, partition):
            raise InputError(f"this store is partition {value}'s (its jobs' progress reports, "
                             f"holds and checkpoints); give partition {partition} a store "
                             "of its own (--store)", source=self.path, field=self.field)

    def origin_s(self, default: float) -> float:
        """The live view's time zero, fixed when the store is first used (``default``)."""
        value = self._meta("origin_s")
        if value is None:
            with self._transaction():
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('origin_s', ?)",
                                (repr(float(default)),))
            value = self._meta("origin_s")
        return float(value or default)

    def add_action(self, job_id: int, kind: str, outcome: str, message: str) -> None:
        """An action taken between rounds (its own short transaction), under the last
        round written, whose time ``explain`` shows beside it: ``message`` says its own.
        Found by a red-team: a requeue after a job's acknowledgement between rounds left
        no trace in ``explain``. None before the first round."""
        round_id = self.last_round_id()
        if not round_id:
            return
        with self._transaction():
            self.db.execute("INSERT INTO actions VALUES (?, ?, ?, ?, ?)",
                            (round_id, job_id, kind, outcome, message))

    # -- reads --------------------------------------------------------------------------------
    def last_round_id(self) -> int:
        row = self.db.execute("SELECT MAX(id) FROM rounds").fetchone()
        return int(row[0] or 0)

    def next_round_index(self) -> int:
        row = self.db.execute("SELECT MAX(round_index) FROM rounds").fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    def memory(self, policy: str) -> dict[str, Any]:
        row = self.db.execute("SELECT value FROM memory WHERE policy = ?", (policy,)).fetchone()
        with self._decoding("memory"):
            return {} if row is None else dict(json.loads(row[0]))

    def rounds(self, limit: int = 20) -> list[dict[str, Any]]:
        cur = self.db.execute("SELECT * FROM rounds ORDER BY id DESC LIMIT ?", (limit,))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def jobs_now(self) -> dict[int, JobRow]:
        """Each job as the last round that saw it planned it."""
        if self._now_rows is None:
            with self._decoding("job_now"):
                self._now_rows = {int(jid): _job_row(row) for jid, row in
                                  self.db.execute("SELECT job_id, row FROM job_now")}
        return dict(self._now_rows)

    def history(self, job_id: int) -> list[dict[str, Any]]:
        """The job's rows whenever something changed, with each round's actions."""
        out: list[dict[str, Any]] = []
        with self._decoding("job_history"):
            for round_id, at_s, round_index, row in self.db.execute(
                    "SELECT h.round_id, r.at_s, r.round_index, h.row FROM job_history h "
                    "JOIN rounds r ON r.id = h.round_id WHERE h.job_id = ? "
                    "ORDER BY h.round_id, h.rowid",  # a gone row before its successor's
                    (job_id,)):
                # through JobRow, as job_now's rows: a key this build lacks takes its
                # default (a red-team's damaged row was a KeyError in `explain`)
                out.append({"round": round_index, "at_s": at_s, "round_id": round_id,
                            **asdict(_job_row(row))})
        return out

    def actions(self, job_id: int) -> list[dict[str, Any]]:
        return [{"round": ri, "at_s": at, "round_id": rid, "kind": k, "outcome": o,
                 "message": m}
                for ri, at, rid, k, o, m in self.db.execute(
                    "SELECT r.round_index, r.at_s, a.round_id, a.kind, a.outcome, a.message "
                    "FROM actions a JOIN rounds r ON r.id = a.round_id WHERE a.job_id = ? "
                    "ORDER BY a.round_id", (job_id,))]

    def size_bytes(self) -> int:
        page = self.db.execute("PRAGMA page_count").fetchone()[0]
        size = self.db.execute("PRAGMA page_size").fetchone()[0]
        return int(page) * int(size)

    # -- intents (IntentLog): each durable on its own, before the signal goes out ------------
    def load_intents(self) -> dict[int, CheckpointIntent]:
        with self._decoding("intents"):
            return {int(r[0]): CheckpointIntent(int(r[0]), str(r[1]), float(r[2]),
                                                float(r[3]), int(r[4]))
                    for r in self.db.execute("SELECT * FROM intents")}

    def record_intent(self, intent: CheckpointIntent) -> None:
        with self._transaction():
            self.db.execute("INSERT OR REPLACE INTO intents VALUES (?, ?, ?, ?, ?)",
                            (intent.job_id, intent.signal, intent.sent_s, intent.deadline_s,
                             intent.restart_count))

    def forget_intent(self, job_id: int) -> None:
        with self._transaction():
            self.db.execute("DELETE FROM intents WHERE job_id = ?", (job_id,))

    def epochs_reported(self, job_id: int, restart_count: int) -> float:
        """The most epochs a run of the job (``restart_count``) has reported, read afresh
        (between rounds the feed's reports are a round old); 0 with none."""
        row = self.db.execute(
            "SELECT MAX(epoch) FROM reports WHERE job_id = ? AND restart_count = ? "
            "AND kind = 'progress'", (job_id, restart_count)).fetchone()
        return float(row[0]) if row and row[0] is not None else 0.0

    def signalled_s(self, job_id: int, restart_count: int) -> float | None:
        """When a checkpoint signal went to this run of the job, if one did and its intent
        is not forgotten."""
        row = self.db.execute(
            "SELECT sent_s FROM intents WHERE job_id = ? AND restart_count = ?",
            (job_id, restart_count)).fetchone()
        return None if row is None else float(row[0])

    def checkpoint_wanted(self, job_id: int, restart_count: int) -> bool:
        """A checkpoint signal went to this run of the job (``restart_count``) and no
        acknowledgement of this run came since: the progress API tells the job in its
        answer, so a signal that reached no handler (sent as the job was starting) still
        reaches the job at its next report."""
        sent = self.signalled_s(job_id, restart_count)
        if sent is None:
            return False
        acked = self.db.execute(
            "SELECT 1 FROM reports WHERE job_id = ? AND restart_count = ? "
            "AND kind = 'checkpointed' AND at_s >= ? LIMIT 1",
            (job_id, restart_count, sent)).fetchone()
        return acked is None

    # -- runs: the GPU count an elastic job ran on in each run (restart), as seen ---------
    def load_runs(self) -> dict[int, dict[int, Run]]:
        """Each job's runs, by restart count; a store an earlier build made (read-only,
        so without the table, or without ``submitted``: schema 1) has none, or runs of
        no known submission."""
        columns = _columns(self.db, "runs")
        if not columns:
            return {}
        submitted = "submitted" if "submitted" in columns else "0"
        out: dict[int, dict[int, Run]] = {}
        with self._decoding("runs"):
            for jid, restarts, gpus, stamp in self.db.execute(
                    f"SELECT job_id, restart_count, gpus, {submitted} FROM runs"):
                out.setdefault(int(jid), {})[int(restarts)] = Run(int(gpus), int(stamp))
        return out

    def record_run(self, job_id: int, restart_count: int, gpus: int,
                   submitted: int = 0) -> None:
        """A run seen running on ``gpus`` GPUs (its own short transaction): a restarted
        service converts that run's epoch times to the count the job holds now.
        ``submitted``: the job's first submission (0: not known). Later runs than this
        one, and runs of another known submission, are an earlier job's that had the id
        (Slurm gives ids out again): forgotten."""
        with self._transaction():
            self.db.execute("DELETE FROM runs WHERE job_id = ? AND (restart_count > ? OR "
                            "(? != 0 AND submitted NOT IN (0, ?)))",
                            (job_id, restart_count, submitted, submitted))
            self.db.execute("INSERT OR REPLACE INTO runs (job_id, restart_count, gpus, "
                            "submitted) VALUES (?, ?, ?, ?)",
                            (job_id, restart_count, gpus, submitted))

    def forget_earlier_job(self, job_id: int, submitted: int, before_s: float) -> None:
        """Forget what an earlier job given ``job_id`` left (its own short transaction):
        the reports made before ``before_s`` and the runs of another known submission
        than ``submitted``, the first submission of the job that has the id now."""
        with self._transaction():
            self.db.execute("DELETE FROM reports WHERE job_id = ? AND at_s < ?",
                            (job_id, before_s))
            self.db.execute("DELETE FROM runs WHERE job_id = ? AND submitted NOT IN (0, ?)",
                            (job_id, submitted))

    # -- progress reports (the HTTP thread writes them through its own Store) ---------------
    def add_report(self, r: ProgressReport, *, keep: int | None = None,
                   stored: int = 0) -> int:
        """Keep one accepted report (its own short transaction); its id. ``keep``: at most
        that many for the job, its oldest deleted first (``stored``: how many it had, as
        the caller counted them). A report whose key (``ProgressReport.key``) the job's
        reports have already is not kept again: the id of the one kept."""
        with self._transaction():
            if r.key:
                row = self.db.execute("SELECT id FROM reports WHERE job_id = ? AND "
                                      "report_key = ?", (r.job_id, r.key)).fetchone()
                if row is not None:
                    return int(row[0])
            over = stored + 1 - keep if keep is not None else 0
            if over > 0:
                self.db.execute(_OLDEST_OF_JOB, (r.job_id, over))
            cur = self.db.execute(
                "INSERT INTO reports (job_id, at_s, kind, epoch, batch_size, samples_per_s, "
                "restart_count, exit_code, uid, report_key) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (r.job_id, r.at_s, r.kind.value, r.epoch, r.batch_size, r.samples_per_s,
                 r.restart_count, r.exit_code, r.uid, r.key or None))
            return int(cur.lastrowid or 0)

    def report_count(self, job_id: int) -> int:
        """How many reports the store keeps for ``job_id`` (an index range count)."""
        row = self.db.execute("SELECT COUNT(*) FROM reports WHERE job_id = ?",
                              (job_id,)).fetchone()
        return int(row[0])

    def reports(self, job_ids: Iterable[int] | None = None,
                since_id: int = 0) -> dict[int, list[ProgressReport]]:
        """Reports with id > ``since_id`` (of ``job_ids``, or all), per job, oldest first."""
        sql = ("SELECT job_id, kind, at_s, epoch, batch_size, samples_per_s, restart_count, "
               "exit_code, uid, id FROM reports WHERE id > ?")
        args: list[Any] = [since_id]
        if job_ids is not None:
            ids = sorted({int(j) for j in job_ids})
            if not ids:
                return {}
            sql += f" AND job_id IN ({','.join('?' * len(ids))})"
            args += ids
        out: dict[int, list[ProgressReport]] = {}
        with self._decoding("reports"):
            for jid, kind, at_s, epoch, bs, sps, restarts, exit_code, uid, rid in (
                    self.db.execute(sql + " ORDER BY id", args)):
                out.setdefault(int(jid), []).append(ProgressReport(
                    job_id=int(jid), kind=ReportKind(kind), at_s=float(at_s), epoch=epoch,
                    batch_size=bs, samples_per_s=sps, restart_count=int(restarts),
                    exit_code=exit_code, uid=int(uid), report_id=int(rid)))
        return out

    def last_report_id(self) -> int:
        row = self.db.execute("SELECT MAX(id) FROM reports").fetchone()
        return int(row[0] or 0)

    def job_user(self, job_id: int) -> str | None:
        """The owner of a job in job_now, read afresh (not the cached rows: another
        connection, the round loop's, writes them); None when the job is not there."""
        row = self.db.execute("SELECT row FROM job_now WHERE job_id = ?", (job_id,)).fetchone()
        with self._decoding("job_now"):
            return None if row is None else str(dict(json.loads(row[0])).get("user", ""))

    # -- the round: one versioned transaction -------------------------------------------------
    def save_round(self, record: RoundRecord, rows: Iterable[JobRow],
                   actions: Iterable[tuple[int, str, str, str]], memory: Mapping[str, Any],
                   *, read_round_id: int) -> int:
        """Write the round; raise StaleWrite if a round newer than ``read_round_id`` exists."""
        rows = list(rows)
        previous = self.jobs_now()
        memory_json = json.dumps(memory, sort_keys=True, allow_nan=False)
        with self._transaction():
            if self.last_round_id() != read_round_id:
                raise StaleWrite(f"round {self.last_round_id()} was written by another writer")
            cur = self.db.execute(
                "INSERT INTO rounds (round_index, at_s, policy, dry_run, jobs, observe_s, "
                "plan_s, apply_s, persist_s, total_s, solver_status, solver_gap, applied, "
                "rejected, deferred) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (record.round_index, record.at_s, record.policy, int(record.dry_run),
                 record.jobs, record.phase_s.get("observe"), record.phase_s.get("plan"),
                 record.phase_s.get("apply"), record.phase_s.get("persist"),
                 record.phase_s.get("total"), record.solver_status, record.solver_gap,
                 record.applied, record.rejected, record.deferred))
            round_id = int(cur.lastrowid or 0)
            self.db.executemany("INSERT INTO actions VALUES (?, ?, ?, ?, ?)",
                                [(round_id, *a) for a in actions])
            seen = {r.job_id for r in rows}
            gone = {jid for jid in previous if jid not in seen}
            # an id whose job has another first submission is another job, Slurm's ids
            # given out again between two rounds (rounds failing while slurmctld restarted
            # with its state lost: a review)
            replaced = {r.job_id for r in rows if (old := previous.get(r.job_id)) is not None
                        and old.submitted and r.submitted and old.submitted != r.submitted}
            # the round that first missed a job, in its history: explain tells an earlier
            # job under a reused id from this one by it, and says when it left (a
            # red-team: two users' jobs read as one story, "after round N" the last change)
            self.db.executemany("INSERT INTO job_history VALUES (?, ?, ?)", [
                (round_id, jid, _row_json(JobRow(
                    job_id=jid, user=previous[jid].user, model=previous[jid].model,
                    phase=GONE, reason="not in the partition's queue: ended, cancelled "
                    "or moved out", action="", submitted=previous[jid].submitted)))
                for jid in sorted(gone | replaced)])
            changed = [r for r in rows if (old := previous.get(r.job_id)) is None
                       or r.job_id in replaced or old.change_key() != r.change_key()]
            self.db.executemany("INSERT INTO job_history VALUES (?, ?, ?)",
                                [(round_id, r.job_id, _row_json(r)) for r in changed])
            # a job id new to job_now is a new job, whatever reports that id has: the
            # progress API takes reports only for jobs in job_now, so those are an earlier
            # job's that had the id (Slurm gives ids out again once its state is lost or
            # MaxJobId wraps), and would read as this one's progress
            self.db.executemany("DELETE FROM reports WHERE job_id = ?",
                                [(jid,) for jid in seen if jid not in previous])
            self.db.executemany("DELETE FROM job_now WHERE job_id = ?", [(j,) for j in gone])
            self.db.executemany("INSERT OR REPLACE INTO job_now VALUES (?, ?, ?)",
                                [(r.job_id, round_id, _row_json(r)) for r in rows
                                 if previous.get(r.job_id) != r])
            self.db.execute("INSERT OR REPLACE INTO memory VALUES (?, ?, ?)",
                            (record.policy, round_id, memory_json))
            self._expire(record.at_s)
        self._now_rows = {r.job_id: r for r in rows}
        return round_id

    def set_timings(self, round_id: int, phase_s: Mapping[str, float]) -> None:
        """Persist and total time are known only after the round's commit."""
        self.db.execute("UPDATE rounds SET persist_s = ?, total_s = ? WHERE id = ?",
                        (phase_s.get("persist"), phase_s.get("total"), round_id))

    def _expire(self, now_s: float) -> None:
        self.db.execute("DELETE FROM reports WHERE at_s < ? AND job_id NOT IN "
                        "(SELECT job_id FROM job_now)", (now_s - self.retention_s,))
        self._within_budget()
        # a run's count serves its reports: kept while the job is planned or has some
        self.db.execute("DELETE FROM runs WHERE job_id NOT IN (SELECT job_id FROM job_now) "
                        "AND NOT EXISTS (SELECT 1 FROM reports WHERE reports.job_id = "
                        "runs.job_id)")
        cut = self.db.execute("SELECT MIN(id) FROM rounds WHERE at_s >= ?",
                              (now_s - self.retention_s,)).fetchone()[0]
        if cut is None:
            return
        for table in ("actions", "job_history"):
            self.db.execute(f"DELETE FROM {table} WHERE round_id < ?", (cut,))
        self.db.execute("DELETE FROM rounds WHERE id < ?", (cut,))

    def _within_budget(self) -> None:
        """Over ``MAX_REPORTS`` for all jobs, the jobs with the most lose their oldest down
        to one level (``report_budget.level``); one warning names the biggest."""
        if self.db.execute("SELECT COUNT(*) FROM reports").fetchone()[0] <= MAX_REPORTS:
            return
        counts = dict(self.db.execute("SELECT job_id, COUNT(*) FROM reports GROUP BY job_id"))
        keep = level(counts.values(), MAX_REPORTS)
        if keep is None:
            return
        over = {jid: n - keep for jid, n in counts.items() if n > keep}
        self.db.executemany(_OLDEST_OF_JOB, over.items())
        top = max(counts, key=counts.__getitem__)
        log.warning("progress reports over the store's budget of %d: %d job(s) lost their "
                    "oldest, down to %d each (job %d had %d)", MAX_REPORTS, len(over), keep,
                    top, counts[top])

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)


_OLDEST_OF_JOB = ("DELETE FROM reports WHERE id IN (SELECT id FROM reports WHERE job_id = ? "
                  "ORDER BY restart_count, at_s, id LIMIT ?)")
"""Delete a job's N oldest reports in the order they were made (run, time, arrival), as
the round's feed keeps them (``feed.made``): by arrival alone, a report flushed late from
a spool stayed while the job's latest progress went (found by a review)."""

_TABLES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", _SCHEMA))
_LATER_TABLES = ("runs",)
"""Tables added within schema version 1: a store made before them has none until the
service next writes it, and its readers (``queue``, ``explain``, ``handback``) read it."""
_ROW_FIELDS = frozenset(f.name for f in fields(JobRow))


def _job_row(text: str) -> JobRow:
    """A job_now row; keys this build does not know (a later build's) are left out."""
    return JobRow(**{k: v for k, v in dict(json.loads(text)).items() if k in _ROW_FIELDS})


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    """The table's columns (none when there is no such table)."""
    return {str(r[1]) for r in db.execute(f"PRAGMA table_info({table})")}


def _tables(db: sqlite3.Connection) -> set[str]:
    """The database's tables: also the first read, where SQLite reports a file it cannot
    open (connecting does not)."""
    return {str(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


_NO_SHM = ("SQLITE_CANTOPEN", "SQLITE_READONLY_DIRECTORY")
"""What SQLite says when it cannot make a WAL store's ``-shm`` beside it."""


def _not_a_file(path: str) -> str | None:
    """What a path that is there but no regular file is (a red-team's folder and FIFO),
    or None."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None  # not there (made, or refused, as the caller decides)
    return (None if stat.S_ISREG(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket")


def _open_reader(path: str, field: str) -> tuple[sqlite3.Connection, set[str]]:
    """A reader's connection, read-only (``mode=ro``), and its tables: it writes nothing,
    and a store on a read-only mount or folder is read too. There SQLite cannot make the
    ``-shm`` a WAL store is read through; with no ``-wal`` beside it either (the service
    stopped: its last close folded the log into the file) the file is the whole store,
    read as it is (``immutable=1``). A store with a ``-wal`` is never read that way: the
    rounds in its log would be missed. A folder this user may not write (a job's owner
    running ``explain`` on root's store) is SQLite's READONLY_DIRECTORY, a read-only
    mount its CANTOPEN: both the same here (an admin walkthrough: the first read as "not
    a usable store")."""
    uri = Path(path).absolute().as_uri()
    try:
        return _connected(f"{uri}?mode=ro")
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorname", "") not in _NO_SHM:
            raise
        problem = _unreadable(path)
        if problem is not None:
            raise InputError(f"cannot read it ({problem})", source=path,
                             field=field) from None
        if Path(f"{os.path.realpath(path)}-wal").exists():
            raise InputError("cannot read it: it has a write-ahead log (-wal), which SQLite "
                             "reads through a -shm file it cannot make beside it (a "
                             "read-only folder?)", source=path, field=field) from None
    return _connected(f"{uri}?mode=ro&immutable=1")


def _connected(uri: str) -> tuple[sqlite3.Connection, set[str]]:
    """A connection to ``uri`` and its tables; closed again when they cannot be read."""
    db = sqlite3.connect(uri, uri=True, timeout=10.0, isolation_level=None)
    try:
        return db, _tables(db)
    except BaseException:
        db.close()
        raise


def _unreadable(path: str) -> str | None:
    """Why the file at ``path`` cannot be read (none there, no permission), or None. Asked
    without opening it: closing a descriptor of the file would drop the POSIX locks any
    SQLite connection of this process holds on it."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None if os.access(path, os.R_OK) else os.strerror(errno.EACCES)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any error: never half a write."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_rest: object) -> None:
        if kind is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.Error:
                if self.db.in_transaction:  # never leave the connection inside it
                    self.db.execute("ROLLBACK")
                raise
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")


def _row_json(row: JobRow) -> str:
    return json.dumps(asdict(row), sort_keys=True, allow_nan=False)

