"""One contract for every Slurm backend: the CLI one against the real cluster, pyslurm
where it imports (it needs Slurm 25.11: tests/run-25.11.sh, which CI runs; skipped with the
reason elsewhere, failed instead under SHOCKWAVE_REQUIRE_PYSLURM)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from slurm_shockwave.slurm.cli_backend import detail_from_line
from slurm_shockwave.slurm.hints import with_hold_mark
from slurm_shockwave.slurm.protocol import SlurmBackend, SlurmError, SlurmJob
from slurm_shockwave.slurm.pyslurm_backend import make_backend, pyslurm_problem
from tests.live_cluster import answering


def _backend(kind: str) -> SlurmBackend:
    if kind == "pyslurm":
        problem = pyslurm_problem()
        if problem and os.environ.get("SHOCKWAVE_REQUIRE_PYSLURM"):
            pytest.fail(problem)
        if problem:
            pytest.skip(problem)
    # SHOCKWAVE_REQUIRE_SLURM makes a missing cluster fail for the CLI backend only
    return answering(lambda: make_backend(kind), required=kind == "cli")


@pytest.mark.slurm
@pytest.mark.usefixtures("managed_heartbeat")
@pytest.mark.parametrize("kind", ["cli", "pyslurm"])
def test_backend_contract(kind: str, tmp_path) -> None:
    b = _backend(kind)
    nodes = b.list_nodes()
    assert nodes and all(n.gpus > 0 for n in nodes)
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    # --begin: released, it still cannot start before the hold below
    jid = b.submit(str(script), ["-o", "/dev/null", "--gres=gpu:1", "--begin=now+3600",
                                 "--comment=model=lm bs=10 epochs=3"])
    try:
        job = next(j for j in b.list_jobs() if j.job_id == jid)
        assert job.held and job.gpus == 1 and job.admin_comment.startswith("shockwave:v1")
        # the CLI backend reads it from scontrol's line as text (JSON only for a line it
        # cannot trust): this Slurm prints the admin comment right after the work folder
        line = subprocess.run(["scontrol", "-o", "-d", "show", "job", str(jid)],
                              capture_output=True, text=True, timeout=60, check=True).stdout
        detail = detail_from_line(line.strip())
        assert detail is not None and detail.admin_comment == job.admin_comment, line
        b.update_gpus(jid, 2)
        assert next(j for j in b.list_jobs() if j.job_id == jid).gpus == 2
        with pytest.raises(SlurmError):
            b.set_priority(jid, 10)  # held jobs reject priorities
        b.release([jid])
        b.hold([jid])
        held = next(j for j in b.list_jobs() if j.job_id == jid)
        assert held.held and held.reason == "JobHeldUser"  # a user hold: an admin's stay apart
        # the requeue-hold mark, the one comment change job_submit.lua lets through
        b.set_comment(jid, with_hold_mark(held.comment, "requeue"))
        marked = next(j for j in b.list_jobs() if j.job_id == jid)
        assert marked.comment == f"{held.comment} held=requeue" and marked.held
        with pytest.raises(SlurmError):
            b.set_comment(jid, "model=gpt bs=1 epochs=1")  # the hint itself is fixed
        assert next(j for j in b.list_jobs() if j.job_id == jid).gpu_alloc == ()
    finally:
        b.cancel(jid)


@pytest.mark.slurm
@pytest.mark.usefixtures("managed_heartbeat")
@pytest.mark.parametrize("kind", ["cli", "pyslurm"])
def test_a_job_that_asked_gpus_per_job_is_given_a_count_per_job(kind: str, tmp_path) -> None:
    """``--gpus=1``: Slurm refuses it a GRES per node (measured on 22.05 and 25.11), so a
    resize writes its count per job, on one node or with its node count on two; a job
    that asked per node is refused a count per job, and is given a count per node with
    its node count (which pyslurm 25.11 ignores on an update: the backend asks scontrol)."""
    b = _backend(kind)
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    jids = [b.submit(str(script), ["-o", "/dev/null", asked, "--begin=now+3600",
                                   "--comment=model=lm bs=10 epochs=3"])
            for asked in ("--gpus=1", "--gres=gpu:1")]
    try:
        per_job, per_node = jids
        with pytest.raises(SlurmError):
            b.update_gpus(per_job, 2)
        b.update_gpus(per_job, 4, per_job=True)
        listed = next(j for j in b.list_jobs() if j.job_id == per_job)
        assert (listed.gpus, listed.asks_per_job) == (4, True), listed
        b.update_gpus(per_job, 12, nodes=2, per_job=True)
        listed = next(j for j in b.list_jobs() if j.job_id == per_job)
        assert (listed.gpus, listed.node_count, listed.asks_per_job) == (12, 2, True), listed
        with pytest.raises(SlurmError):
            b.update_gpus(per_node, 2, per_job=True)
        listed = next(j for j in b.list_jobs() if j.job_id == per_node)
        assert (listed.gpus, listed.asks_per_job) == (1, False), listed
        # per node onto two nodes: pyslurm 25.11 left the node count as it was
        b.update_gpus(per_node, 4, nodes=2)
        listed = next(j for j in b.list_jobs() if j.job_id == per_node)
        assert (listed.gpus, listed.node_count) == (8, 2), listed
    finally:
        for jid in jids:
            b.cancel(jid)


@pytest.mark.slurm
@pytest.mark.parametrize("kind", ["cli", "pyslurm"])
def test_backend_contract_gpu_alloc(kind: str, tmp_path) -> None:
    """A running job's real GPU indices, in both listings, and on its node."""
    b = _backend(kind)
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    jid = b.submit(str(script), ["-o", "/dev/null", "-p", "other", "--gres=gpu:2"])
    try:
        deadline = time.monotonic() + 60
        job = None
        while time.monotonic() < deadline:
            job = next((j for j in b.list_jobs("other") if j.job_id == jid), None)
            if job and job.state == "RUNNING" and job.gpu_alloc:
                break
            time.sleep(0.5)
        assert job is not None and job.state == "RUNNING", job
        ((node, idx),) = job.gpu_alloc
        assert len(idx) == 2 and node == job.nodes
        assert next(j for j in b.list_jobs() if j.job_id == jid).gpu_alloc == job.gpu_alloc
        used = next(n for n in b.list_nodes() if n.name == node).gpus_used_idx
        assert set(idx) <= set(used)
    finally:
        b.cancel(jid)


def _wait_state(b: SlurmBackend, jid: int, state: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if [j.state for j in b.list_jobs() if j.job_id == jid] == [state]:
            return
        time.sleep(0.5)
    pytest.fail(f"job {jid} not {state}: {[j for j in b.list_jobs() if j.job_id == jid]}")


@pytest.mark.slurm
@pytest.mark.parametrize("kind", ["cli", "pyslurm"])
def test_a_requeued_job_lists_its_last_runs_node_count_after_a_resize(kind: str,
                                                                      tmp_path) -> None:
    """Why the service remembers its own resizes (world.py, ``_assumed``): a job that ran
    on one node, requeued and given GPUs on two, is listed by squeue with its last run's
    node count until it runs again (22.05 and 25.11), so the listing reads it as half its
    GPUs (seen live: its GRES was set a second time after its release); pyslurm 25.11
    lists the new count."""
    b = _backend(kind)
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    jid = b.submit(str(script), ["-o", "/dev/null", "-p", "other", "--gres=gpu:1"])
    try:
        _wait_state(b, jid, "RUNNING")
        b.hold([jid])  # kept through the requeue: it stays pending
        b.requeue([jid])
        _wait_state(b, jid, "PENDING")
        b.update_gpus(jid, 1, nodes=2)
        listed = next(j for j in b.list_jobs() if j.job_id == jid)
        wanted = (1, 1, 0, 1) if kind == "cli" else (2, 2, 2, 1)
        assert (listed.gpus, listed.node_count, listed.max_nodes,
                listed.restart_count) == wanted, listed
    finally:
        b.cancel(jid)


@pytest.mark.slurm
def test_the_live_runs_poll_sees_a_job_end(tmp_path) -> None:
    """``benchmarks.live``, ``shockwave demo`` and the live tests follow their jobs with
    one ``squeue --json``: on 25.11 it left ended jobs out unless asked, so a run never
    saw its jobs end and waited out its timeout (a live run with the pyslurm backend)."""
    from slurm_shockwave.live.run import JobState, _poll

    b = _backend("cli")
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    jid = b.submit(str(script), ["-o", "/dev/null", "-p", "other", "--gres=gpu:1"])
    jobs = {0: JobState(trace_id=0, slurm_id=jid, submit_wall=time.time())}
    deadline = time.monotonic() + 60
    while jobs[0].state != "COMPLETED" and time.monotonic() < deadline:
        _poll(dict(os.environ), jobs)
        time.sleep(0.5)
    assert jobs[0].state == "COMPLETED" and jobs[0].end_wall > 0, jobs[0]


@pytest.mark.slurm
@pytest.mark.parametrize("kind", ["cli", "pyslurm"])
def test_a_job_a_signal_killed_is_listed_and_requeued_only_when_asked(kind: str,
                                                                      tmp_path) -> None:
    """The whole listing has ended jobs, with the signal that ended them (24.x's squeue
    --json leaves them out unless asked: --states=all); the planner's requeue leaves an
    ended job ended; ``requeue_ended`` runs it again."""
    b = _backend(kind)
    script, started = tmp_path / "w.sh", tmp_path / "started"
    script.write_text(f"#!/bin/sh\ntouch {started}\nsleep 600\n")
    jid = b.submit(str(script), ["-o", "/dev/null", "-p", "other", "--gres=gpu:1"])
    try:
        _wait_state(b, jid, "RUNNING")
        # RUNNING is listed before the batch script runs: a signal then was lost (once
        # in a 25.11 run)
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        b.signal(jid, "USR1")
        _wait_state(b, jid, "FAILED")
        ended = next(j for j in b.list_jobs() if j.job_id == jid)
        assert ended.exit_signal == 10 and ended.restart_count == 0
        b.requeue([jid])
        assert next(j for j in b.list_jobs() if j.job_id == jid).state == "FAILED"
        b.requeue_ended(jid)
        again = next(j for j in b.list_jobs() if j.job_id == jid)
        assert again.state in ("PENDING", "RUNNING") and again.restart_count == 1
    finally:
        b.cancel(jid)


def _lines(path: Path) -> int:
    """The lines a job's trap wrote to ``path`` (none before its first)."""
    return len(path.read_text().split()) if path.exists() else 0


@pytest.mark.slurm
@pytest.mark.usefixtures("managed_heartbeat")
@pytest.mark.parametrize("kind", ["cli", "pyslurm"])
def test_a_signal_to_a_job_no_longer_running_returns_at_once(kind: str, tmp_path) -> None:
    """Found by a red-team: a checkpoint signal to a job that stopped running since the
    listing (requeued, held) made scancel retry "Job can not be altered now" for over a
    minute, past the CLI backend's timeout, stalling the round, and pyslurm refused it at
    once where the CLI sent it. Both leave such a job alone at once, and signal a running
    one again and again (pyslurm alone refused 5 of 6 such signals). Each signal is sent
    once the job has answered the last: signals are not queued, and two reaching the
    shell before it runs its trap are one (a CI run on a busy machine saw 2 of 3)."""
    b = _backend(kind)
    script, got, ready = tmp_path / "w.sh", tmp_path / "got", tmp_path / "ready"
    script.write_text(f"#!/bin/sh\ntrap 'echo usr1 >> {got}' USR1\ntouch {ready}\n"
                      "while true; do sleep 1; done\n")
    held = b.submit(str(script), ["-o", "/dev/null", "--gres=gpu:1",
                                  "--comment=model=lm bs=10 epochs=3"])
    running = b.submit(str(script), ["-o", "/dev/null", "-p", "other", "--gres=gpu:1"])
    try:
        started = time.monotonic()
        b.signal(held, "USR1")
        assert time.monotonic() - started < 10
        assert next(j for j in b.list_jobs() if j.job_id == held).state == "PENDING"
        _wait_state(b, running, "RUNNING")
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:  # its trap is set
            time.sleep(0.1)
        for sent in range(1, 4):  # in quick succession, each once the last was seen
            b.signal(running, "USR1")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _lines(got) < sent:
                time.sleep(0.05)
            assert _lines(got) == sent
    finally:
        b.cancel(held)
        b.cancel(running)


@pytest.mark.slurm
@pytest.mark.usefixtures("managed_heartbeat")
@pytest.mark.parametrize("kind", ["cli", "pyslurm"])
def test_a_special_exit_requeue_hold_is_in_the_partitions_listing(kind: str,
                                                                  tmp_path) -> None:
    """Found by a red-team: ``scontrol requeuehold State=SpecialExit`` leaves a job in
    state SPECIAL_EXIT, which neither backend's partition listing held, so the service
    never marked it ``held=requeue`` and job_submit.lua refused its owner's release for
    good. Both list it as a pending, held job, its flag kept."""
    b = _backend(kind)
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    jid = b.submit(str(script), ["-o", "/dev/null", "--gres=gpu:1",
                                 "--comment=model=lm bs=10 epochs=3"])
    try:
        b.release([jid])
        _wait_state(b, jid, "RUNNING")
        subprocess.run(["scontrol", "requeuehold", "State=SpecialExit", str(jid)],
                       check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = {j.job_id: j for j in b.list_jobs("shockwave")}
            if jid in listed and listed[jid].state == "PENDING":
                break
            time.sleep(0.5)
        job = {j.job_id: j for j in b.list_jobs("shockwave")}[jid]
        assert (job.state, job.held, job.state_flags) == ("PENDING", True,
                                                          ("SPECIAL_EXIT",)), job
        assert job.reason == "job requeued in held state"
    finally:
        b.cancel(jid)


def test_unknown_backend_and_missing_pyslurm_are_one_line(monkeypatch, tmp_path) -> None:
    with pytest.raises(SlurmError, match="unknown backend 'slurmrestd'"):
        make_backend("slurmrestd")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "absent.conf"))
    problem = pyslurm_problem()
    assert problem is not None and "no Slurm configuration" in problem and "\n" not in problem


def test_a_missing_slurm_conf_is_one_line(monkeypatch, tmp_path) -> None:
    from click.testing import CliRunner

    from slurm_shockwave.cli.main import cli
    from slurm_shockwave.slurm.cli_backend import CliBackend

    missing = str(tmp_path / "missing.conf")
    want = (f"no Slurm configuration: {missing} does not exist "
            "(set SLURM_CONF or --slurm-conf)")
    with pytest.raises(SlurmError) as err:
        make_backend("cli", slurm_conf=missing)
    assert str(err.value) == want
    monkeypatch.setenv("SLURM_CONF", missing)
    with pytest.raises(SlurmError, match="no Slurm configuration"):
        CliBackend()
    with pytest.raises(SlurmError, match="no Slurm configuration"):
        make_backend("pyslurm")
    result = CliRunner().invoke(cli, ["queue", "--slurm-conf", missing])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == f"error: {want}"


# What the world reads of a job and a node; both backends must say the same of each.
_JOB_FIELDS = ("job_id", "name", "user", "partition", "state", "held", "priority", "comment",
               "admin_comment", "gpus", "node_count", "nodes", "restart_count",
               "submit_time", "start_time", "eligible_time", "gpu_alloc", "time_limit_s",
               "requeue", "gpu_type", "per_job", "asks_per_job")
_NODE_FIELDS = ("name", "state", "gpus", "gpus_used", "gpus_used_idx", "partitions",
                "gpu_type")


def _fields(jobs: Iterable[SlurmJob]) -> dict[int, dict[str, object]]:
    """What both backends must say alike of each job of a listing."""
    return {j.job_id: {name: getattr(j, name) for name in _JOB_FIELDS} for j in jobs}


@pytest.mark.slurm
@pytest.mark.usefixtures("managed_heartbeat")
def test_both_backends_give_the_same_answers(tmp_path) -> None:
    """On one cluster, the CLI and pyslurm backends list the same jobs (held and pending
    with --gres, --gpus or --gpus-per-task, running on one node and on two, one of them
    ``--no-requeue``, a suspended --gpus one) and the same nodes."""
    cli, py = _backend("cli"), _backend("pyslurm")
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    out = ["-o", "/dev/null"]
    mine = [cli.submit(str(script), [*out, "--gres=gpu:1",
                                     "--comment=model=lm bs=10 epochs=3"]),
            cli.submit(str(script), [*out, "--gpus=3", "-t", "90",
                                     "--comment=model=lm bs=20 epochs=2"]),
            cli.submit(str(script), [*out, "-p", "other", "--gres=gpu:2", "-J", "one node",
                                     "--no-requeue"]),
            cli.submit(str(script), [*out, "-p", "other", "-N", "2", "--gres=gpu:8"]),
            cli.submit(str(script), [*out, "-n", "2", "--gpus-per-task=2",
                                     "--comment=model=lm bs=10 epochs=3"])]
    mine.append(cli.submit(str(script), [*out, "-p", "other", "--gres=gpu:1",
                                         f"--dependency=afterok:{mine[2]}"]))
    # per job, but held to one node: not Slurm's to spread (a review)
    mine.append(cli.submit(str(script), [*out, "-N", "1", "--gpus=2",
                                         "--comment=model=lm bs=10 epochs=3"]))
    # waits while "one node" (the same user and name) runs
    mine.append(cli.submit(str(script), [*out, "-p", "other", "--gres=gpu:1",
                                         "-J", "one node", "--dependency=singleton"]))
    # asked per job, then suspended: pyslurm read neither this nor its GPU type
    mine.append(cli.submit(str(script), [*out, "-p", "other", "-N", "1", "--gpus=2"]))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            running = [j for j in cli.list_jobs("other")
                       if j.job_id in (*mine[2:4], mine[8])]
            if len(running) == 3 and all(j.state == "RUNNING" and j.gpu_alloc
                                         for j in running):
                break
            time.sleep(0.5)
        assert _fields(cli.list_jobs("other")) == _fields(py.list_jobs("other"))
        assert {j.job_id: j for j in py.list_jobs("other")}[mine[8]].asks_per_job
        cli.scontrol("suspend", str(mine[8]))
        by_cli = {j.job_id: j for j in cli.list_jobs() if j.job_id in mine}
        by_py = {j.job_id: j for j in py.list_jobs() if j.job_id in mine}
        assert sorted(by_cli) == sorted(by_py) == sorted(mine)
        for jid in mine:
            for name in _JOB_FIELDS:
                assert getattr(by_py[jid], name) == getattr(by_cli[jid], name), (jid, name)
        assert [by_cli[j].gpus for j in mine] == [1, 3, 2, 16, 4, 1, 2, 1, 2]
        assert [by_cli[j].requeue for j in mine] == [
            True, True, False, True, True, True, True, True, True]
        assert (by_cli[mine[8]].state, by_cli[mine[8]].asks_per_job) == ("SUSPENDED", True)
        # --gpus and --gpus-per-task are the job's to spread unless held to one node
        # (25.11 holds a --gpus job without -N to one, 22.05 does not: measured); --gres
        # is per node
        assert [by_cli[j].per_job for j in mine] == [
            False, by_cli[mine[1]].max_nodes != 1, False, False,
            by_cli[mine[4]].max_nodes != 1, False, False, False,
            by_cli[mine[8]].max_nodes != 1]
        assert (by_cli[mine[6]].max_nodes, by_py[mine[6]].max_nodes) == (1, 1)
        # one dependency reads alike (of several, pyslurm's dict has its own order)
        assert by_cli[mine[5]].dependency == f"afterok:{mine[2]}(unfulfilled)"
        assert by_py[mine[5]].dependency == by_cli[mine[5]].dependency
        # pyslurm drops singleton's mark (dependency_text)
        assert by_py[mine[7]].dependency == by_cli[mine[7]].dependency == \
            "singleton(unfulfilled)"
        assert [j for j in mine if by_cli[j].dependency or by_py[j].dependency] == [
            mine[5], mine[7]]
        listed = {j.job_id: j for j in cli.list_jobs("other")}  # the round's listing
        assert _fields(listed.values()) == _fields(py.list_jobs("other"))
        assert (listed[mine[2]].requeue, listed[mine[3]].requeue) == (False, True)
        assert listed[mine[5]].dependency == by_cli[mine[5]].dependency
        assert listed[mine[2]].dependency == ""
        assert len(by_cli[mine[3]].gpu_alloc) == 2
        nodes_cli = {n.name: n for n in cli.list_nodes()}
        nodes_py = {n.name: n for n in py.list_nodes()}
        assert sorted(nodes_cli) == sorted(nodes_py)
        for node in nodes_cli:
            for name in _NODE_FIELDS:
                assert getattr(nodes_py[node], name) == getattr(nodes_cli[node], name), \
                    (node, name)
    finally:
        for jid in mine:
            cli.cancel(jid)


@pytest.mark.slurm
@pytest.mark.usefixtures("managed_heartbeat")
def test_gpus_per_job_reads_what_gpus_asked(tmp_path) -> None:
    """What the pyslurm backend asks of squeue for a pending --gpus job (on 22.05 too);
    a job id not listed is left out."""
    cli = _backend("cli")
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    jid = cli.submit(str(script), ["-o", "/dev/null", "--gpus=3", "-H",
                                   "--comment=model=lm bs=20 epochs=2"])
    one = cli.submit(str(script), ["-o", "/dev/null", "-N", "1", "--gpus=3", "-H",
                                   "--comment=model=lm bs=20 epochs=2"])
    try:
        assert cli.gpus_per_job([jid, 999999]) == {jid: (3, "", True)}
        listed = {j.job_id: j for j in cli.list_jobs()}
        # Slurm's to spread unless held to one node: no -N is no limit on 22.05 (squeue's
        # MaxNodes says 1 for it, scontrol's NumNodes does not), one node on 25.11
        assert listed[jid].gpus == 3 and listed[jid].per_job is (listed[jid].max_nodes != 1)
        assert (listed[one].max_nodes, listed[one].per_job) == (1, False)
        assert listed[jid].asks_per_job and listed[one].asks_per_job
    finally:
        cli.cancel(jid)
        cli.cancel(one)
