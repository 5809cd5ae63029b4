"""What ``shockwave queue``, ``explain`` and a dry-run ``plan`` tell a user about their
jobs, over the in-memory fake and a real SQLite store: the commands themselves (click),
the rounds the service's own loop (logic only; against the real daemons:
tests/test_service_live.py). Found by a red-team of these reports."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import slurm_shockwave.cli.live_options as live_options
import slurm_shockwave.cli.plan as plan_cli
from slurm_shockwave.cli.main import cli
from slurm_shockwave.cli.queue import STALE_ROUNDS, _reason
from slurm_shockwave.service.heartbeat import write_heartbeat
from slurm_shockwave.service.records import clock_time
from slurm_shockwave.service.store import JobRow, Store
from slurm_shockwave.slurm.fake import FakeSlurm
from slurm_shockwave.slurm.protocol import SlurmError, SlurmNode
from tests.builders import WallLikeClock as Clock
from tests.test_service_loop import PLAIN, fake_cluster, job, service

T0 = 1_700_000_000.0


class Cli:
    """The CLI over ``fake`` and the service's store, the way the service ran it."""

    def __init__(self, fake: FakeSlurm, tmp_path: Path) -> None:
        self.fake, self.store_path = fake, tmp_path / "s.db"
        self.config = tmp_path / "c.yaml"
        self.config.write_text(
            "slurm: {partition: shockwave, backend: cli, round_s: 60}\n"
            f"service: {{policy: srtf, store: {self.store_path}, "
            f"heartbeat: {tmp_path / 'hb'}}}\n")

    def __call__(self, *args: str, code: int = 0) -> Result:
        done = CliRunner().invoke(cli, [*args[:1], "--config", str(self.config), *args[1:]])
        assert done.exit_code == code, (done.output, done.exception)
        return done


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[
        tuple[FakeSlurm, Store, Clock, Cli]]:
    fake = fake_cluster(nodes=1, gpus=4)
    clock = Clock()
    clock.t = T0
    monkeypatch.setattr(live_options, "open_backend", lambda kind, slurm_conf=None: (fake, None))
    monkeypatch.setattr(live_options, "WallClock", lambda: clock)
    monkeypatch.setattr(plan_cli, "running_config", lambda env: None)
    store = Store(tmp_path / "s.db")
    yield fake, store, clock, Cli(fake, tmp_path)
    store.close()


def test_queue_says_when_its_reasons_were_decided_and_when_they_are_stale(
        setup: tuple[FakeSlurm, Store, Clock, Cli], monkeypatch: pytest.MonkeyPatch) -> None:
    """A service stopped for hours left reasons that read as now: queue says which round
    decided them, when, and that they are stale after three rounds without one."""
    fake, store, clock, run = setup
    assert "no round yet" in run("queue").output
    fake.add(job(1, 4, epochs=500))
    svc = service(fake, store, clock, policy="srtf")
    svc.round_once()
    monkeypatch.setattr(time, "time", lambda: T0 + 30)
    shown = run("queue").output
    assert f"reasons from round 0 at {clock_time(T0, date=True)} (0:00:30 ago)" in shown
    assert "stale" not in shown and "is the service running" not in shown
    assert "none since" not in run("explain", "1").output
    monkeypatch.setattr(time, "time", lambda: T0 + 3 * 3600)
    shown = " ".join(run("queue").output.split())
    assert "(3:00:00 ago); none since for over 0:03:00" in shown, shown  # 3 x 60 s rounds
    assert "is it running? shockwave doctor" in shown
    assert STALE_ROUNDS == 3
    # explain too (a red-team: a job of a service stopped for a while read as now)
    shown = " ".join(run("explain", "1").output.split())
    assert "none since for over 0:03:00" in shown, shown
    # with a heartbeat, its own limit, whatever rounds the service runs (serve --round-s)
    write_heartbeat(run.config.parent / "hb", T0, 4 * 3600)
    assert "none since" not in run("queue").output
    monkeypatch.setattr(time, "time", lambda: T0 + 5 * 3600)
    assert "none since for over 4:00:00" in " ".join(run("queue").output.split())


def test_queue_shows_the_users_asked_for_as_squeue_does(
        setup: tuple[FakeSlurm, Store, Clock, Cli], monkeypatch: pytest.MonkeyPatch) -> None:
    """``-u a,b`` and ``--me`` as squeue takes them: only those users' jobs, while the
    title still counts the partition's (the contention a user's jobs wait in)."""
    import pwd

    fake, store, clock, run = setup
    for jid, user in ((1, "alice"), (2, "bob"), (3, "carol")):
        fake.add(replace(job(jid, 1), user=user))
    service(fake, store, clock, policy="srtf").round_once()

    def users(*args: str) -> tuple[set[str], str]:
        shown = run("queue", "--json", *args).output.splitlines()
        title = " ".join(run("queue", *args).output.split())
        return {json.loads(line)["user"] for line in shown}, title

    assert users() == ({"alice", "bob", "carol"}, users()[1])
    assert "3 jobs (3 to plan)" in users()[1] and " of the " not in users()[1]
    seen, title = users("-u", "bob")
    assert seen == {"bob"} and "3 jobs (3 to plan)" in title and "1 of the 3 jobs are bob's" \
        in title, title
    assert users("--user", "alice,carol")[0] == users("-u", "alice", "-u", "carol")[0] == \
        {"alice", "carol"}
    # a name no user has here nor among the jobs: squeue's "Invalid user", not an empty
    # table read as "no jobs of theirs" (a red-team); a user here without jobs: none
    bad = run("queue", "-u", "bob,nobody-here", code=2).output
    assert bad.strip().splitlines() == [
        "error: --user: no user nobody-here on this host or among the partition's jobs"], bad
    assert users("-u", "root")[0] == set()
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: pwd.struct_passwd(
        ("carol", "x", uid, 0, "", "/", "/bin/sh")))
    assert users("--me")[0] == {"carol"}
    assert users("--me", "-u", "bob")[0] == {"bob", "carol"}
    assert users("-u", "4242")[0] == {"carol"}  # a uid, as squeue takes one
    # eleven digits is no uid squeue takes: a name no one has (a review)
    assert "--user: no user 12345678901" in run("queue", "-u", "12345678901", code=2).output
    bad = run("queue", "-u", "alice,", code=2).output
    assert bad.count("\n") == 1 and "--user: expected user names" in bad, bad


def test_jobs_left_out_of_the_plan_show_what_slurm_lists(
        setup: tuple[FakeSlurm, Store, Clock, Cli]) -> None:
    """Found by a red-team: a job the plan leaves out (running on a drained node,
    suspended, held by its owner) read 0 GPUs, nowhere, no model and 0 epochs done in
    queue, and so in explain's history, though Slurm lists all of it."""
    from tests.test_service_loop import _epochs

    fake, store, clock, run = setup
    fake.add(job(1, 2, epochs=500))
    fake.add(job(2, 2, epochs=500))
    svc = service(fake, store, clock, policy="srtf")
    svc.round_once()
    fake.tick()
    clock.t += 60
    _epochs(store, 1, 7, clock.t)
    _epochs(store, 2, 3, clock.t)
    svc.round_once()
    where = {jid: store.jobs_now()[jid].where for jid in (1, 2)}
    assert all(where.values()), where

    def shown() -> dict[int, dict[str, object]]:
        rows = (json.loads(line) for line in run("queue", "--json").output.splitlines())
        return {r["job_id"]: r for r in rows}

    fake.jobs[1] = replace(fake.jobs[1], state="SUSPENDED")
    fake.nodes[0] = replace(fake.nodes[0], state=("MIXED", "DRAIN"))
    clock.t += 60
    svc.round_once()
    for jid, phase in ((1, "suspended"), (2, "running")):
        row = shown()[jid]
        assert (row["phase"], row["gpus"], row["where"], row["model"], row["epochs"]) == (
            phase, 2, where[jid], "ResNet-18", 500), row
        stored = store.jobs_now()[jid]
        assert (stored.phase, stored.gpus, stored.where) == (phase, 2, where[jid])
    # a running job's read forward from its last report (docs/progress.md)
    assert shown()[1]["epochs_done"] == 7 and shown()[2]["epochs_done"] >= 3
    assert "on_closed_node" in shown()[2]["reason"]
    # held by its owner once requeued: its epochs done are not lost
    fake.jobs[1] = replace(fake.jobs[1], state="PENDING", held=True, priority=0,
                           reason="JobHeldUser", gpu_alloc=(), nodes="",
                           comment="held=owner")
    row = shown()[1]
    assert (row["phase"], row["gpus"], row["where"], row["epochs_done"]) == (
        "held", 2, "", 7), row


def test_a_running_job_someone_holds_says_it_stays_held_if_stopped(
        setup: tuple[FakeSlurm, Store, Clock, Cli]) -> None:
    """Found by a red-team: ``scontrol hold`` on a running job (squeue: JobHeldUser,
    priority 0) read plain ``kept_running``, though Slurm keeps the hold through a
    requeue: stopped by the plan, the job waits held until released."""
    fake, store, clock, run = setup
    fake.add(job(1, 1, epochs=500))
    fake.add(job(2, 1, epochs=500))
    fake.add(job(3, 1, epochs=500))
    svc = service(fake, store, clock, policy="srtf")
    svc.round_once()
    fake.tick()
    fake.jobs[1] = replace(fake.jobs[1], reason="JobHeldUser", priority=0,
                           comment=f"{fake.jobs[1].comment} held=owner".strip())
    fake.jobs[2] = replace(fake.jobs[2], reason="JobHeldAdmin", priority=0)
    clock.t += 60
    svc.round_once()
    rows = {r["job_id"]: r for r in map(json.loads, run("queue", "--json").output.splitlines())}
    assert rows[1]["phase"] == "running" and rows[1]["reason"].endswith(
        "; held by its owner: if stopped, it stays held (scontrol release 1 returns it to "
        "the plan)"), rows[1]
    assert rows[2]["reason"].endswith(
        "; held by an admin: if stopped, it stays held (scontrol uhold 2 returns it to the "
        "plan)"), rows[2]
    assert "held" not in rows[3]["reason"], rows[3]


def test_queue_without_the_configs_store_says_so(setup: tuple[FakeSlurm, Store, Clock, Cli]
                                                 ) -> None:
    """Found by a review: with no store where the config says (the service runs on
    another host), queue said the service had planned nothing."""
    fake, store, _clock, run = setup
    store.close()
    run.store_path.unlink()
    fake.add(job(1, 4))
    shown = " ".join(run("queue").output.split())
    assert f"no store at {run.store_path}" in shown and "no round yet" not in shown


def test_explain_says_a_job_left_the_queue(setup: tuple[FakeSlurm, Store, Clock, Cli]) -> None:
    """An ended (or cancelled, or moved out) job's last row read as still running."""
    fake, store, clock, run = setup
    fake.add(job(1, 4, epochs=500))
    svc = service(fake, store, clock, policy="srtf")
    svc.round_once()
    fake.tick()
    clock.t += 60
    svc.round_once()
    # as of which round: a fill step since may have started or stopped it (an admin
    # walkthrough read "now: held" for a job queue showed running)
    shown = " ".join(run("explain", "1").output.split())
    assert f"(as of round 1 at {clock_time(clock.t)}; `shockwave queue` asks Slurm)" in shown
    fake.cancel(1)
    fake.tick()
    clock.t += 60
    svc.round_once()
    shown = " ".join(run("explain", "1").output.split())
    # the round that first missed it (a red-team: "after round N" was the last change)
    assert "now: not in the partition's queue since round 2 (ended, cancelled or moved " \
           "out)" in shown, shown
    assert json.loads(run("explain", "1", "--json").output)["now"] is None
    # the id given out again (Slurm's state lost): another user's job, its story apart
    # (a red-team: the earlier job's rows read as this one's)
    bob = replace(job(1, 2, epochs=5, hint=PLAIN), user="bob", submit_time=5000,
                  admin_comment=PLAIN.format(e=5) + " submitted=5000")
    fake.add(bob)
    clock.t += 60
    svc.round_once()
    story = run("explain", "1").output
    shown = " ".join(story.split())
    earlier = "job 1, alice's ResNet-18, gone at round 2: an earlier job under this id"
    now = "job 1, bob's ResNet-18: the job now under this id"
    assert earlier in shown and now in shown and shown.index(earlier) < shown.index(now)
    assert "now: held, scheduled (as of round 3 at " + clock_time(clock.t) + "; `shockwave " \
           "queue` asks Slurm)" in shown, shown

    def actions(part: str) -> list[str]:
        """The rounds of a part's actions table."""
        table = part.split("its actions", 1)[1].split("job 1,", 1)[0]
        return [line.split("│")[1].strip() for line in table.splitlines()
                if line.startswith("│") and line.split("│")[1].strip()]

    parts = story.split("job 1, ")[1:]
    assert [actions(p) for p in parts] == [["0"], ["3"]], story
    # given out again between two rounds, with no round in between to miss the earlier
    # job (rounds failing while slurmctld restarted with its state lost): its first
    # submission tells it (a review)
    fake.jobs[1] = replace(bob, user="carol", submit_time=6000,
                           admin_comment=PLAIN.format(e=5) + " submitted=6000")
    clock.t += 60
    svc.round_once()
    parts = run("explain", "1").output.split("job 1, ")[1:]
    assert [p.split(":", 1)[0] for p in parts] == [
        "alice's ResNet-18, gone at round 2", "bob's ResNet-18, gone at round 4",
        "carol's ResNet-18"], parts
    assert [actions(p) for p in parts][:2] == [["0"], ["3"]]
    # --json keeps every row in order, a gone row after each earlier job's, and each
    # action's round id (docs/service.md)
    story = json.loads(run("explain", "1", "--json").output)
    assert [h["user"] for h in story["history"] if h["phase"] == "gone"] == ["alice", "bob"]
    assert [h["phase"] for h in story["history"]][-1] != "gone"
    assert all(isinstance(a["round_id"], int) for a in story["actions"])


def test_a_fill_step_keeps_who_a_job_was_stopped_for_and_sends_no_second_signal(
        setup: tuple[FakeSlurm, Store, Clock, Cli]) -> None:
    """A fill step names no one (it stops no one), so a job the round preempted ``for
    4`` read plain ``preempted_priority`` after it, and its deferred preemption read
    "SIGUSR1 sent" again though one signal went."""
    fake, store, clock, run = setup
    for jid, epochs in ((1, 500), (2, 500), (3, 1)):
        fake.add(job(jid, 2, epochs=epochs))
    svc = service(fake, store, clock, policy="srtf", fill_freed=True)
    svc.round_once()
    fake.tick()
    fake.add(job(4, 2, epochs=1))
    clock.t += 60
    svc.round_once()
    stopped = next(jid for jid in (1, 2) if fake.signals == [(jid, "USR1")])
    fake.finish(3)
    clock.t += 5
    svc.round_once(fill=True)
    assert fake.signals == [(stopped, "USR1")]
    assert store.jobs_now()[stopped].reason == "preempted_priority(for 4)"
    story = json.loads(run("explain", str(stopped), "--json").output)
    messages = [a["message"] for a in story["actions"] if a["kind"] == "preempt"]
    assert messages[0].startswith("SIGUSR1 sent; requeue after ack or at +30s"), messages
    assert messages[1].startswith("SIGUSR1 sent 5s ago, not again; requeue after ack or "
                                  "at +25s"), messages


def test_a_fill_step_gives_its_own_detail_of_a_wait(tmp_path: Path) -> None:
    """Found by a review: the round's detail of any repeated reason was kept, so a wait
    for a drained node (``the rest drained``) still read so after the node was back and
    the fill step's own reason was a wait for free GPUs."""
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",)),
                      SlurmNode("n2", ("IDLE", "DRAIN"), 4, 0, ("shockwave",))])
    fake.add(job(1, 4, epochs=500))
    fake.add(job(2, 8, epochs=500, nodes=2))
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, policy="fifo", fill_freed=True)
    svc.round_once()
    fake.tick()
    assert "drained" in store.jobs_now()[2].reason
    fake.nodes[1] = replace(fake.nodes[1], state=("IDLE",))
    clock.t += 5
    done = svc.round_once(fill=True)
    assert store.jobs_now()[2].reason == str(done.report.reasons[2])
    assert "drained" not in store.jobs_now()[2].reason


def test_a_refused_start_shows_the_count_slurm_holds(setup: tuple[FakeSlurm, Store, Clock, Cli]
                                                     ) -> None:
    """Found by a review: a start Slurm refused (a GRES update over a QOS limit) read as
    held on the planned 4 GPUs and their nodes, where Slurm held it at its 2."""
    fake, store, clock, run = setup
    fake.add(job(1, 2, hint="shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=static "
                            "gpus=1-4 signal=USR1 grace=30"))

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise SlurmError("Job violates accounting/QOS policy")

    fake.update_gpus = refuse  # type: ignore[method-assign]
    service(fake, store, clock, policy="shockwave").round_once()
    row = json.loads(run("explain", "1", "--json").output)["history"][0]
    assert (row["action"], row["outcome"]) == ("start", "rejected"), row
    assert (row["gpus"], row["where"]) == (2, ""), row


def test_an_action_slurm_refused_is_said_beside_the_reason() -> None:
    """queue showed the round's reason alone, so a job whose start Slurm refused read
    ``scheduled`` round after round."""
    row = JobRow(job_id=2, phase="held", reason="scheduled", action="start",
                 outcome="rejected", message="QOSMaxGRESPerUser")
    assert _reason(row) == "scheduled; start rejected: QOSMaxGRESPerUser"
    down = JobRow(job_id=1, phase="running", reason="preempted_priority(for 2)",
                  action="preempt", outcome="deferred", message="partition is DOWN")
    assert _reason(down) == "preempted_priority(for 2); preempt deferred: partition is DOWN"
    assert _reason(JobRow(job_id=3, reason="scheduled", action="start",
                          outcome="applied")) == "scheduled"


def test_read_only_commands_refuse_another_partitions_store_and_a_missing_one(
        setup: tuple[FakeSlurm, Store, Clock, Cli]) -> None:
    """``queue --partition other`` over the service's store showed its rows as the other
    partition's, a dry-run ``plan`` loaded its policy memory, and a mistyped ``--store``
    read every job as "not planned yet"."""
    fake, store, clock, run = setup
    fake.add(job(1, 4))
    service(fake, store, clock, policy="srtf").round_once()
    for command in ("queue", "plan"):
        shown = run(command, "--partition", "other", code=2).output
        assert "this store is partition shockwave's" in shown and "service.store" in shown
        shown = run(command, "--store", str(run.store_path) + ".typo", code=2).output
        assert "--store: no store here" in shown, shown
        assert len(shown.strip().splitlines()) == 1


def test_explain_shows_where_a_start_puts_a_job(setup: tuple[FakeSlurm, Store, Clock, Cli]
                                                ) -> None:
    """A start's row said the job's request and no node: an elastic job started on more
    GPUs than it asked read as its request, nowhere. It says they are the plan's, which
    Slurm may give it elsewhere on a node (a red-team read the plan's GPUs as Slurm's)."""
    fake, store, clock, run = setup
    fake.add(job(1, 2, hint="shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=static "
                            "gpus=1-4 signal=USR1 grace=30"))
    service(fake, store, clock, policy="shockwave").round_once()
    row = json.loads(run("explain", "1", "--json").output)["history"][0]
    started = next(a for a in store.actions(1) if a["kind"] == "start")
    assert started["outcome"] == "applied"
    assert row["action"] == "start" and row["where"].startswith("plan: n1[")
    assert row["gpus"] == len(row["where"].split("[", 1)[1].rstrip("]").split(","))


def test_where_lists_nodes_and_gpus_in_order() -> None:
    """A red-team: one job's GPUs read ``sw-node2[2,3] sw-node1[0,1]``, then the other
    way round, as Slurm or the plan listed them."""
    from slurm_shockwave.service.records import where

    assert where(("n10:1", "n2:10", "n2:9", "n10:0")) == "n2[9,10] n10[0,1]"
    assert where(()) == ""


def test_queue_shows_epochs_as_people_read_them() -> None:
    """A user walkthrough read ``1.14299/4``: epochs read forward between reports are
    fractions; whole ones stay whole."""
    from slurm_shockwave.cli.queue import _epochs

    assert [_epochs(e) for e in (1.14299, 3.0, 0.0, 7.999)] == ["1.14", "3", "0", "8.00"]


def test_queue_shows_a_job_in_its_requeue_delay_with_its_model_gpus_and_epochs(
        setup: tuple[FakeSlurm, Store, Clock, Cli]) -> None:
    """Found by a researcher's walkthrough: a requeued job, out of the plan until its
    eligible time, read model "-" and 0 GPUs, as if the service knew nothing of it."""
    fake, store, clock, run = setup
    fake.now = int(clock.t)  # one clock for Slurm's eligible time and the service's
    fake.add(job(1, 4, epochs=6))
    service(fake, store, clock, policy="srtf").round_once()
    fake.tick()
    assert fake.jobs[1].state == "RUNNING"
    fake.requeue([1])
    row = next(json.loads(line) for line in run("queue", "--json").output.splitlines()
               if json.loads(line)["job_id"] == 1)
    assert (row["phase"], row["gpus"], row["epochs"]) == ("pending", 4, 6), row
    assert row["model"] and row["reason"].startswith("not_eligible(until "), row
    assert row["action"] == "" and row["bs"] > 0, row


def test_a_job_the_planner_requeues_is_not_said_to_end() -> None:
    """Found by a red-team: a job the plan preempted or resized, COMPLETING while Slurm
    requeues it, read ``ending(COMPLETING: its Epilog runs)``: to its owner, finished."""
    from slurm_shockwave.service.records import unplanned_rows
    from slurm_shockwave.slurm.world import LeftOut

    rows = {r.job_id: r for r in unplanned_rows(LeftOut(
        ending=frozenset({1, 2}), requeuing=frozenset({2}),
        listed={jid: replace(job(jid, 2), state="COMPLETING") for jid in (1, 2)}))}
    assert (rows[1].phase, rows[1].reason) == (
        "ending", "ending(COMPLETING: Slurm ends its processes and runs its Epilog)")
    assert (rows[2].phase, rows[2].reason) == (
        "requeuing", "ending(COMPLETING: requeued, back after its requeue delay)")
    assert (rows[2].user, rows[2].gpus, rows[2].model) == ("alice", 2, "ResNet-18")


def test_a_narrow_terminal_folds_queues_cells_and_cuts_none() -> None:
    """Found by a red-team: at 80 columns cells were cut with an ellipsis, a rho of 1.23
    read "1.…" and a place "sw-node3[0…"."""
    from rich.console import Console

    from slurm_shockwave.cli import queue as queue_cli
    from slurm_shockwave.report.tables import rows_table

    cells = ("1234", "alice", "ResNet-18", "running", "4", "sw-node3[0,1,2,3]", "12/100",
             "64", "1:02:03", "1.23", "11", "waiting_capacity(remaining~24s)")
    out = Console(width=80, record=True)
    out.print(rows_table("t", queue_cli._COLUMNS, [cells]))
    text = out.export_text()
    assert "…" not in text
