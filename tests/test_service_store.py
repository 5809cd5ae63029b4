"""The service's SQLite store, for real: transactions, versions, history, retention."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.service.lock import AlreadyRunning, ServiceLock, heartbeat_identity
from slurm_shockwave.service.store import (
    JobRow,
    RoundRecord,
    StaleWrite,
    Store,
    StoreGone,
    unwritable,
)
from slurm_shockwave.slurm.intents import CheckpointIntent


def record(index: int, at_s: float = 1000.0) -> RoundRecord:
    return RoundRecord(round_index=index, at_s=at_s, policy="fifo", dry_run=False, jobs=1,
                       phase_s={"observe": 0.1, "plan": 0.2, "apply": 0.3},
                       solver_status="optimal", solver_gap=1e-6, applied=1, rejected=0,
                       deferred=0)


def row(jid: int, reason: str = "scheduled", phase: str = "held", **kw: object) -> JobRow:
    return JobRow(job_id=jid, phase=phase, gpus=2, reason=reason, **kw)  # type: ignore[arg-type]


def test_a_round_is_one_transaction_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    rid = store.save_round(record(0), [row(1), row(2)], [(1, "start", "applied", "")],
                           {"k": [1, 2]}, read_round_id=0)
    store.close()
    again = Store(path)
    assert again.last_round_id() == rid and again.next_round_index() == 1
    assert set(again.jobs_now()) == {1, 2}
    assert again.memory("fifo") == {"k": [1, 2]}
    assert again.actions(1)[0]["kind"] == "start"
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_failed_round_writes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.save_round(record(0), [row(1)], [], {}, read_round_id=0)
    with pytest.raises(ValueError):  # NaN memory is refused inside the transaction
        store.save_round(record(1), [row(1, "kept_running", "running")],
                         [(1, "start", "applied", "")], {"x": float("nan")},
                         read_round_id=store.last_round_id())
    assert store.next_round_index() == 1
    assert store.jobs_now()[1].phase == "held"
    assert store.actions(1) == []


def test_a_store_stopped_while_it_is_made_is_not_taken_for_an_earlier_builds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its version and its 'holds' row are written together or not at all: a version
    alone reads as a build whose admin holds the next start would take over."""
    real = sqlite3.connect

    class Failing(sqlite3.Connection):
        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:  # type: ignore[override]
            if "'holds'" in sql:
                raise sqlite3.OperationalError("disk I/O error")
            return super().execute(sql, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real(*a, factory=Failing, **k))
    with pytest.raises(sqlite3.OperationalError):
        Store(tmp_path / "s.db")
    monkeypatch.setattr(sqlite3, "connect", real)
    assert sqlite3.connect(tmp_path / "s.db").execute("SELECT * FROM meta").fetchall() == []
    again = Store(tmp_path / "s.db")
    assert not again.held_by_earlier_build()
    assert again.meta_value("schema_version") is not None


def _schema_1_store(path: Path) -> None:
    """A store as schema 1 left it: runs without ``submitted``, reports without
    ``report_key``; job 7 (elastic) ran
    run 0 on 8 GPUs, reported 5 epochs, and is in job_now."""
    Store(path).close()
    db = sqlite3.connect(path)
    db.executescript("""
        DROP TABLE runs;
        CREATE TABLE runs (
            job_id INTEGER NOT NULL, restart_count INTEGER NOT NULL, gpus INTEGER NOT NULL,
            PRIMARY KEY (job_id, restart_count));
        INSERT INTO runs VALUES (7, 0, 8);
        DROP TABLE reports;
        CREATE TABLE reports (
            id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL,
            at_s REAL NOT NULL, kind TEXT NOT NULL, epoch REAL, batch_size INTEGER,
            samples_per_s REAL, restart_count INTEGER NOT NULL, exit_code INTEGER,
            uid INTEGER NOT NULL);
        CREATE INDEX reports_job ON reports(job_id, id);
        CREATE INDEX reports_at ON reports(at_s);
        UPDATE meta SET value = '1' WHERE key = 'schema_version';
        INSERT INTO job_now VALUES (7, 1, '{"job_id": 7, "user": "alice"}');""")
    db.executemany("INSERT INTO reports (job_id, at_s, kind, epoch, batch_size, "
                   "restart_count, uid) VALUES (7, ?, 'progress', ?, 16, 0, 0)",
                   [(2000.0 + 40.0 * e, float(e)) for e in range(6)])
    db.commit()
    db.close()


def test_a_schema_1_store_is_read_as_it_is_and_migrated_in_place(tmp_path: Path) -> None:
    """A store an earlier release made (schema 1, its runs without the job's first
    submission): its readers (queue, plan) and doctor read it as it is, and the first
    writer (the service) brings it to schema 3 in place, losing nothing: job 7's run
    kept before (no submission known) still counts for job 7, now stamped, and its
    reports are its own."""
    from slurm_shockwave.service.doctor_host import store_check
    from slurm_shockwave.service.feed import ReportFeed
    from slurm_shockwave.slurm.hints import parse_hint
    from slurm_shockwave.slurm.protocol import SlurmJob
    from slurm_shockwave.slurm.table_progress import table_progress
    from slurm_shockwave.workloads.bundled import bundled_table

    path = tmp_path / "s.db"
    _schema_1_store(path)
    reader = Store(path, create=False)
    assert reader.load_runs() == {7: {0: (8, 0)}}
    assert reader.meta_value("schema_version") == "1"  # a reader writes nothing
    reader.close()
    assert "schema 1" in store_check(str(path)).detail
    assert store_check(str(path)).status.name == "OK"
    store = Store(path)
    assert store.meta_value("schema_version") == "3"
    assert Store(path).meta_value("schema_version") == "3"  # a second writer: as it is
    assert store.load_runs() == {7: {0: (8, 0)}} and len(store.reports([7])[7]) == 6
    assert "7" in str(store.jobs_now())
    hint = parse_hint("shockwave: model=my-gpt bs=16 epochs=100 gpus=1-8")
    feed = ReportFeed(lambda since: store.reports(since_id=since),
                      table_progress(bundled_table("tacc")), runs=store.load_runs(),
                      record_run=store.record_run, forget=store.forget_earlier_job)
    feed.refresh()
    job = SlurmJob(7, "gpt", "alice", "shockwave", "RUNNING", gpus=2, restart_count=1,
                   admin_comment=f"{hint.normalised()} submitted=1900")
    seen = feed.progress(job, hint)
    assert seen.epochs_done == 5.0
    assert seen.epoch_s == pytest.approx(40.0 * 1.6 ** 2)  # run 0's 8 GPUs, converted to 2
    assert store.load_runs() == {7: {0: (8, 0), 1: (2, 1900)}}
    assert len(store.reports([7])[7]) == 6


def test_writes_are_versioned(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    a, b = Store(path), Store(path)
    read = a.last_round_id()
    b.save_round(record(0), [], [], {}, read_round_id=read)
    with pytest.raises(StaleWrite):
        a.save_round(record(0), [], [], {}, read_round_id=read)


def test_history_keeps_changes_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    for i, reason in enumerate(["waiting_capacity(rho~0.5)", "waiting_capacity(rho~0.6)",
                                "scheduled(rounds=3/20)"]):
        store.save_round(record(i), [row(7, reason)], [], {},
                         read_round_id=store.last_round_id())
    history = store.history(7)
    assert [h["round"] for h in history] == [0, 2]
    assert store.jobs_now()[7].reason == "scheduled(rounds=3/20)"


def test_jobs_that_leave_leave_the_current_view(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.save_round(record(0), [row(1), row(2)], [], {}, read_round_id=0)
    store.save_round(record(1), [row(2)], [], {}, read_round_id=store.last_round_id())
    assert set(Store(tmp_path / "s.db").jobs_now()) == {2}


def test_retention_bounds_growth(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db", retention_s=100.0)
    for i in range(30):
        store.save_round(record(i, at_s=1000.0 + 10 * i), [row(1, f"r{i % 2}")],
                         [(1, "start", "applied", "")], {}, read_round_id=store.last_round_id())
    rounds = store.rounds(limit=100)
    assert len(rounds) == 11  # the last 100 s
    assert min(r["round_index"] for r in rounds) == 19
    assert len(store.actions(1)) == 11
    assert 1 in store.jobs_now()  # the current row outlives the retention


def test_intents_are_durable_at_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(path)
    store.record_intent(CheckpointIntent(5, "USR1", 10.0, 70.0, 0))
    assert Store(path).load_intents()[5].deadline_s == 70.0  # another process sees it
    store.forget_intent(5)
    assert Store(path).load_intents() == {}


def test_a_file_that_is_not_a_store_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "s.db"
    bad.write_text("hello, not sqlite" * 100)
    with pytest.raises(ValueError, match=r"service\.store"):
        Store(bad)


def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Never stamped with our schema version and written to round after round (every
    round then failed on a table of the same name and other columns)."""
    path = tmp_path / "theirs.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE rounds (id INTEGER, round_index INTEGER)")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(InputError, match=r"not a slurm-shockwave store \(its tables: rounds"):
        Store(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("gone", ["store", "wal"])
def test_a_store_deleted_under_the_service_is_noticed(tmp_path: Path, gone: str) -> None:
    """Its writes would go to an unlinked file (intents too: a restart would signal
    again): check_file, which every round calls first, says so."""
    path = tmp_path / "state.db"
    store = Store(path)
    store.check_file()
    (path if gone == "store" else tmp_path / "state.db-wal").unlink()
    with pytest.raises(StoreGone, match=r"service\.store: (was deleted|lost its write-ahead)"):
        store.check_file()
    store.close()


def test_a_store_error_of_the_machine_is_told_from_a_bug(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.Error) as cantopen:
        sqlite3.connect(tmp_path / "no" / "such" / "x.db")
    assert unwritable(cantopen.value)
    db = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.Error) as bug:
        db.execute("SELECT nope FROM nowhere")
    assert not unwritable(bug.value) and not unwritable(ValueError())


def test_one_lock_for_one_store_whatever_the_path(tmp_path: Path) -> None:
    """A symlink to the store (or to its folder) names the same store: a second service
    through it is refused, as through the same path."""
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    store = tmp_path / "real" / "state.db"
    with ServiceLock(str(store)):
        for other in (store, tmp_path / "alias" / "state.db"):
            with pytest.raises(AlreadyRunning):
                ServiceLock(str(other)).acquire()


def test_a_lock_that_cannot_be_made_is_one_line_naming_the_store(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=r"service\.store: cannot make its lock file"):
        ServiceLock(str(tmp_path / "file" / "state.db")).acquire()
    with pytest.raises(InputError, match=r"service\.store: cannot make its folder"):
        Store(tmp_path / "file" / "state.db")


def test_one_service_per_heartbeat(tmp_path: Path) -> None:
    """Two stores, one heartbeat: the second writer would keep job_submit.lua holding new
    jobs after the first died, and a hand-back over another store would remove a running
    service's heartbeat. Refused, naming the heartbeat's lock; the store lock it took
    first is given back."""
    beat = str(tmp_path / "heartbeat")
    with ServiceLock(str(tmp_path / "a.db"), beat):
        with pytest.raises(AlreadyRunning, match="one service per heartbeat") as err:
            ServiceLock(str(tmp_path / "b.db"), beat).acquire()
        assert err.value.path == tmp_path / "heartbeat.lock"
        ServiceLock(str(tmp_path / "b.db")).acquire().release()  # b's lock was let go
        ServiceLock(str(tmp_path / "c.db"), str(tmp_path / "other")).acquire().release()
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=r"service\.heartbeat: cannot make its lock file"):
        ServiceLock(str(tmp_path / "d.db"), str(tmp_path / "file" / "heartbeat")).acquire()


def test_one_lock_for_one_heartbeat_whatever_the_path(tmp_path: Path) -> None:
    """A heartbeat named through a symlinked folder, or a symlink that the first write
    replaces with a plain file, still shares its one lock."""
    from slurm_shockwave.service.heartbeat import write_heartbeat

    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    beat = tmp_path / "real" / "heartbeat"
    link = tmp_path / "link"
    link.symlink_to(beat)
    with ServiceLock(str(tmp_path / "a.db"), str(link)):
        write_heartbeat(str(link), 1.0, 60.0)  # the symlink is now a plain file
        with pytest.raises(AlreadyRunning):
            ServiceLock(str(tmp_path / "b.db"), str(link)).acquire()
    with ServiceLock(str(tmp_path / "a.db"), str(beat)), pytest.raises(AlreadyRunning):
        ServiceLock(str(tmp_path / "b.db"), str(tmp_path / "alias" / "heartbeat")).acquire()


def test_a_heartbeat_path_is_the_file_its_writes_replace(tmp_path: Path) -> None:
    """What `serve` compares with job_submit.lua's heartbeat: a symlinked folder names the
    same file; a symlink to the file does not (the first write replaces the link, so the
    lua's file would never be refreshed)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    beat = tmp_path / "real" / "heartbeat"
    (tmp_path / "link").symlink_to(beat)
    assert heartbeat_identity(str(tmp_path / "alias" / "heartbeat")) == heartbeat_identity(
        str(beat))
    assert heartbeat_identity(str(tmp_path / "link")) != heartbeat_identity(str(beat))


def test_a_reader_refuses_an_empty_file_and_leaves_it_empty(tmp_path: Path) -> None:
    """queue, explain and a dry-run plan open the store with create=False: an empty file
    at the store's path (touched, or a service that never ran) was stamped with the
    whole schema by ``shockwave explain`` (73,728 bytes; red-team finding)."""
    path = tmp_path / "state.db"
    path.touch()
    with pytest.raises(InputError, match=r"service\.store.*empty database"):
        Store(path, create=False)
    assert path.stat().st_size == 0
    Store(path).close()  # the service itself makes it
    Store(path, create=False).close()


def test_a_symlinked_store_is_not_taken_for_one_that_lost_its_log(tmp_path: Path) -> None:
    """SQLite writes the -wal beside the link's target: the service refused every start
    on a store symlinked onto another disk, saying it "lost its write-ahead log"
    (red-team finding)."""
    (tmp_path / "disk").mkdir()
    link = tmp_path / "state.db"
    link.symlink_to(tmp_path / "disk" / "real.db")
    store = Store(link)
    store.check_file()
    assert (tmp_path / "disk" / "real.db-wal").exists()
    store.close()


def test_a_reader_reads_a_store_on_a_read_only_disk(
        tmp_path: Path, read_only_mount: Callable[[Path], Path]) -> None:
    """queue, explain, a dry-run plan and handback only read the store, but opened it to
    write: with the service stopped and the store on a read-only disk (or in a folder the
    admin cannot write) they said "unable to open database file" (found by a review).
    They open it read-only, also when its write-ahead log was left by a crash; the
    service's own open still refuses it in one line naming service.store."""
    (tmp_path / "stopped").mkdir()
    store = Store(tmp_path / "stopped" / "state.db")
    store.save_round(record(0), [row(1), row(2)], [], {"k": 1}, read_round_id=0)
    store.record_intent(CheckpointIntent(1, "USR1", 1000.0, 1060.0, 0))
    store.close()  # the service stopped: its log folded into the file
    view = read_only_mount(tmp_path / "stopped")
    reader = Store(view / "state.db", create=False)
    assert sorted(reader.jobs_now()) == [1, 2] and list(reader.load_intents()) == [1]
    assert reader.rounds()[0]["round_index"] == 0
    reader.close()
    assert sorted(p.name for p in view.iterdir()) == ["state.db"]
    with pytest.raises(InputError, match=r"nope\.db: service\.store: cannot read it \(No such"):
        Store(view / "nope.db", create=False)
    with pytest.raises(InputError, match=r"service\.store"):
        Store(view / "state.db")
    # a crash leaves the last rounds in the -wal, and its -shm: read through them
    crashed = tmp_path / "crashed"
    code = ("import os, sys\nfrom slurm_shockwave.service.store import Store\n"
            "from tests.test_service_store import record, row\n"
            "store = Store(sys.argv[1])\n"
            "store.save_round(record(0), [row(1), row(3)], [], {}, read_round_id=0)\n"
            "os._exit(9)\n")
    for folder in (crashed, tmp_path / "no-shm"):
        folder.mkdir()
        assert subprocess.run([sys.executable, "-c", code, str(folder / "state.db")],
                              timeout=60, check=False).returncode == 9
    (tmp_path / "no-shm" / "state.db-shm").unlink()
    view = read_only_mount(crashed)
    assert (view / "state.db-wal").stat().st_size > 0
    reader = Store(view / "state.db", create=False)
    assert sorted(reader.jobs_now()) == [1, 3] and reader.last_round_id() == 1
    reader.close()
    # without its -shm, which SQLite cannot make there, the log cannot be read: one line
    view = read_only_mount(tmp_path / "no-shm")
    with pytest.raises(InputError, match=r"service\.store: cannot read it: it has a write-"):
        Store(view / "state.db", create=False)


def test_a_jobs_owner_reads_roots_stopped_store(users: tuple[str, str], open_dir: Path,
                                               system_python: str) -> None:
    """Found by an admin walkthrough: job_submit.lua tells a job's owner to run
    ``shockwave explain``, and on the store of a cleanly stopped service (no -wal, no -shm)
    in root's 0755 folder it said "not a usable store (attempt to write a readonly
    database)": SQLite cannot make the -shm there (READONLY_DIRECTORY, where a read-only
    disk gives CANTOPEN). Read as the whole store, as on a read-only disk."""
    base = open_dir
    package = Path(__import__("slurm_shockwave").__file__).parent
    shutil.copytree(package, base / "code" / "slurm_shockwave",
                    ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
    store = Store(base / "state.db")
    store.save_round(record(0), [row(1), row(2)], [], {}, read_round_id=0)
    store.close()
    assert sorted(p.name for p in base.iterdir()) == ["code", "state.db"]
    code = ("import sys\nfrom slurm_shockwave.service.store import Store\n"
            "print(sorted(Store(sys.argv[1], create=False).jobs_now()))\n")
    done = subprocess.run(["runuser", "-u", users[0], "--", system_python, "-c", code,
                           str(base / "state.db")], env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                                    "PYTHONPATH": str(base / "code")},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "[1, 2]", done.stderr
    assert sorted(p.name for p in base.iterdir()) == ["code", "state.db"]


def test_the_services_store_on_a_read_only_disk_is_refused_at_once(
        tmp_path: Path, read_only_mount: Callable[[Path], Path]) -> None:
    """Found by a review: a store a crash left with its -wal and -shm, on a disk now
    read-only, opened without a word (SQLite falls back to reading): the service started
    and every round failed as "the store could not be written". The writer's open now
    refuses it in one line naming service.store."""
    code = ("import os, sys\nfrom slurm_shockwave.service.store import Store\n"
            "from tests.test_service_store import record, row\n"
            "store = Store(sys.argv[1])\n"
            "store.save_round(record(0), [row(1)], [], {}, read_round_id=0)\n"
            "os._exit(9)\n")
    folder = tmp_path / "crashed"
    folder.mkdir()
    assert subprocess.run([sys.executable, "-c", code, str(folder / "state.db")],
                          timeout=60, check=False).returncode == 9
    view = read_only_mount(folder)
    with pytest.raises(InputError, match=r"state\.db: service\.store: cannot be written"):
        Store(view / "state.db")
    Store(folder / "state.db").close()  # writable where it is: the check writes nothing


def _open_fds(path: Path) -> list[str]:
    """This process's file descriptors open on ``path`` (its -wal and -shm too)."""
    out = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if str(target).startswith(str(path)):
            out.append(str(target))
    return out


@pytest.mark.parametrize(("kind", "create"), [
    (kind, create) for kind in ("another schema", "another program's", "garbage",
                                "meta without values") for create in (True, False)
] + [("empty", False)])  # an empty file is a new store to the service (create)
def test_every_refusal_closes_the_stores_connection(tmp_path: Path, kind: str,
                                                    create: bool) -> None:
    """Found by a review: only a store that could not be written was closed; the other
    refusals (another schema version, not a store, not a database) left the connection
    open while their traceback lived, the file and its -wal held open by a process that
    goes on (a test, a command reporting the one line). A meta table of another shape
    was a traceback, not the one line."""
    path = tmp_path / "s.db"
    if kind == "garbage":
        path.write_bytes(b"not sqlite at all, " * 64)
    elif kind != "empty":
        db = sqlite3.connect(path)
        db.executescript({
            "another schema": "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                              "INSERT INTO meta VALUES ('schema_version', '99');",
            "another program's": "CREATE TABLE users (id INTEGER);",
            "meta without values": "CREATE TABLE meta (key TEXT);"}[kind])
        db.close()
    else:
        path.touch()
    with pytest.raises(InputError) as refused:
        Store(path, create=create)
    assert _open_fds(path) == [], (kind, create)  # while the traceback lives
    assert refused.value.field == "service.store"


def test_a_store_path_that_is_no_regular_file_is_refused_naming_the_option(
        tmp_path: Path) -> None:
    """Found by a red-team and a review: a folder was SQLite's "disk I/O error" under the
    config's key, and a FIFO hung `explain`; now each is one line naming what the path
    came from, for the service (create) and the readers alike."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((tmp_path, "a directory"), (fifo, "a FIFO"),
                       (Path("/dev/null"), "a device or socket")):
        for create in (True, False):
            with pytest.raises(InputError, match=f": --store: {kind}, not a store$") as refused:
                Store(path, create=create, field="--store")
            assert refused.value.field == "--store"
    with pytest.raises(InputError) as refused:
        Store(tmp_path, create=False)
    assert refused.value.field == "service.store"


@pytest.mark.parametrize("damage", ["a later build's row", "text for a number", "job_now garbage",
                                    "tables missing", "runs garbage", "made before runs",
                                    "a history row short of a key", "a time no clock shows",
                                    "text for a time"])
def test_a_store_row_this_build_cannot_read_is_one_line_not_a_bug(tmp_path: Path,
                                                                   damage: str) -> None:
    """Red-team finding: a damaged store, or one a later build wrote under the same schema
    version, made explain exit 1 as a bug. A row with a field this build does not know is
    read without it, a store made before the runs table is read (review: every reader
    refused it); any other unreadable row, or a store missing tables, is one line naming
    the store, exit 2."""
    path = tmp_path / "s.db"
    Store(path).close()
    db = sqlite3.connect(path)
    sql = {"a later build's row":
           "INSERT INTO job_now VALUES (5, 1, '{\"job_id\": 5, \"gpus_range\": \"1-4\"}')",
           "text for a number": "INSERT INTO intents VALUES (5, 'USR1', 'x', 1.0, 0)",
           "job_now garbage": "INSERT INTO job_now VALUES (5, 1, '[1, 2')",
           "tables missing": "DROP TABLE job_history",
           "runs garbage": "INSERT INTO runs VALUES (5, 0, 'four', 0)",
           "made before runs": "DROP TABLE runs",
           # found by a red-team: both were exit 1, a KeyError and an OverflowError
           "a history row short of a key":
           "INSERT INTO job_history VALUES (1, 5, '{\"job_id\": 5, \"zzz\": 1}')",
           "a time no clock shows":
           "INSERT INTO job_history VALUES (1, 5, '{\"job_id\": 5}')",
           "text for a time": "INSERT INTO job_history VALUES (1, 5, '{\"job_id\": 5}')",
           }[damage]
    db.execute(sql)
    at_s = {"a time no clock shows": 1e300, "text for a time": "x"}.get(damage, 1000.0)
    db.execute("INSERT INTO rounds (id, round_index, at_s, policy, dry_run, jobs) "
               "VALUES (1, 0, ?, 'fifo', 0, 1)", (at_s,))
    if damage == "made before runs":
        db.execute("INSERT INTO job_now VALUES (5, 1, '{\"job_id\": 5}')")
    db.commit()
    db.close()
    done = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "explain", "5",
                           "--store", str(path)], capture_output=True, text=True, timeout=60)
    if damage in ("a later build's row", "made before runs",  # read, as an earlier build
                  "a history row short of a key", "a time no clock shows", "text for a time"):
        assert done.returncode == 0, done.stderr
        assert damage != "a time no clock shows" or "1e+300 s" in done.stdout, done.stdout
        return
    if damage == "runs garbage":  # read by the service at start
        with pytest.raises(InputError, match="runs table cannot be read"):
            Store(path).load_runs()
        return
    assert done.returncode == 2, done.stderr
    # named as given: --store (before, always the config's key)
    assert done.stderr.count("\n") == 1 and ": --store: " in done.stderr, done.stderr


def test_reports_over_the_budget_for_all_jobs_cost_the_jobs_with_the_most(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a red-team: the cap was per job only, so an owner of many jobs could grow
    the store and the round's feed without bound. Over the budget for all jobs, the jobs
    with the most reports lose their oldest, down to one level (each keeps its newest);
    a job with few loses none. The store and the feed keep the same ones, the newest as
    made (a review found the store cutting by arrival: after a late spool flush it kept
    the stale reports and dropped the job's latest progress)."""
    import slurm_shockwave.service.feed as feed
    import slurm_shockwave.service.report_budget as budget
    import slurm_shockwave.service.store as store_module
    from slurm_shockwave.model.report import ProgressReport, ReportKind
    from slurm_shockwave.service.feed import ReportFeed
    from slurm_shockwave.slurm.table_progress import table_progress
    from slurm_shockwave.workloads.bundled import bundled_table

    for module in (store_module, feed):
        monkeypatch.setattr(module, "MAX_REPORTS", 10)
    monkeypatch.setattr(budget, "MIN_REPORTS_KEPT", 1)
    store = Store(tmp_path / "s.db")
    store.save_round(record(0), [row(1), row(2)], [], {}, read_round_id=0)
    reports = [(1, e) for e in range(3)] + [(2, e) for e in range(13, 20)]
    reports += [(2, e) for e in range(13)]  # flushed late from a spool: made earlier
    for jid, epoch in reports:
        store.add_report(ProgressReport(jid, ReportKind.PROGRESS, 1000.0 + epoch,
                                        epoch=float(epoch)))
    fed = ReportFeed(lambda since: store.reports(since_id=since),
                     table_progress(bundled_table("tacc")))
    fed.refresh()
    store.save_round(record(1), [row(1), row(2)], [], {}, read_round_id=store.last_round_id())
    kept = {jid: [r.epoch for r in rs] for jid, rs in store.reports().items()}
    assert kept == {1: [0.0, 1.0, 2.0], 2: [float(e) for e in range(13, 20)]}
    assert {jid: [r.epoch for r in rs] for jid, rs in fed.reports.items()} == kept


@pytest.mark.parametrize("counts", [[], [5], [3, 20], [1] * 50, [7, 7, 7, 100, 2],
                                    list(range(40)), [10 ** 6, 1, 10 ** 5]])
@pytest.mark.parametrize("budget_size", [10, 100, 1000])
def test_the_budgets_level_is_the_highest_that_fits(counts: list[int],
                                                     budget_size: int) -> None:
    """Every job keeps min(its count, level): the highest level that fits the budget,
    None when all fit, never below MIN_REPORTS_KEPT."""
    from slurm_shockwave.service.report_budget import MIN_REPORTS_KEPT, level

    got = level(counts, budget_size)
    if sum(counts) <= budget_size:
        assert got is None
        return
    assert got is not None and got >= MIN_REPORTS_KEPT
    if got > MIN_REPORTS_KEPT:
        assert sum(min(c, got) for c in counts) <= budget_size
        assert sum(min(c, got + 1) for c in counts) > budget_size
