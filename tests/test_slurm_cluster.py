"""The Slurm backend against the real local cluster (docker-slurm/start.sh).

Skipped with the reason when no cluster answers; CI sets SHOCKWAVE_REQUIRE_SLURM=1 so a
missing cluster fails instead. Managed jobs are held at submit only while the scheduler
service's heartbeat is fresh: the tests that submit write a fresh one to the file named by
SHOCKWAVE_HEARTBEAT (start.sh prints it) and put the file back as they found it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.hints import split_admin_comment
from slurm_shockwave.slurm.protocol import SlurmError, SlurmJob
from tests.live_cluster import Submitter, job, kept_heartbeat, wait_for, write_fresh

pytestmark = pytest.mark.slurm

HINT = "model=resnet18 bs=32 epochs=9 mode=gns"
WORKER = """#!/bin/sh
echo "start restart=${SLURM_RESTART_COUNT:-0} gpus=${CUDA_VISIBLE_DEVICES:-none}"
trap 'echo ckpt-saved' USR1
while true; do sleep 1; done
"""


@pytest.fixture(scope="module")
def fresh_heartbeat() -> Iterator[Path]:
    """A fresh heartbeat for the module's tests; the file is restored afterwards."""
    with kept_heartbeat("without a fresh heartbeat managed jobs are not held at submit") as path:
        write_fresh(path)
        yield path


@pytest.fixture
def jobs(submitter: Callable[..., Submitter], tmp_path: Path,
         fresh_heartbeat: Path) -> Submitter:
    """Submit jobs that are cancelled when the test ends (with a fresh heartbeat)."""
    return submitter(WORKER, "-o", str(tmp_path / "%j.out"), "--open-mode=append")


def test_nodes_and_gpus(backend: CliBackend) -> None:
    nodes = backend.list_nodes()
    assert len(nodes) >= 2 and all(n.gpus >= 1 for n in nodes)
    assert all("shockwave" in n.partitions for n in nodes)


def test_partition_states_as_scontrol_says(backend: CliBackend) -> None:
    assert backend.partition_state("shockwave") == "UP"
    assert backend.partition_state("nosuchpartition") == ""


def test_managed_jobs_are_held_at_submit_with_the_normalised_hint(backend, jobs) -> None:
    jid = jobs("--gres=gpu:1", f"--comment={HINT}")
    j = job(backend, jid)
    assert j.state == "PENDING" and j.held and j.priority == 0
    hint, submitted = split_admin_comment(j.admin_comment)
    assert hint == "shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=gns"
    assert submitted is not None and abs(submitted - j.submit_time) <= 2


def test_bad_hint_is_rejected_by_sbatch_naming_the_field(backend, jobs) -> None:
    with pytest.raises(SlurmError, match="field 'bs': expected an integer from 1 to 1000000"):
        jobs("--gres=gpu:1", "--comment=model=resnet18 bs=abc epochs=9")


def test_other_partitions_are_untouched(backend, jobs) -> None:
    jid = jobs("-p", "other", "--gres=gpu:1")
    wait_for(lambda: job(backend, jid).state == "RUNNING", 30)
    j = job(backend, jid)
    assert not j.held and j.admin_comment == ""


def test_a_held_job_rejects_a_priority_until_released(backend, jobs) -> None:
    # keep the cluster busy so the released job cannot start under us
    blocker = jobs("-p", "other", "-N", str(len(backend.list_nodes())), "--gres=gpu:8")
    jid = jobs("--gres=gpu:1", f"--comment={HINT}")
    with pytest.raises(SlurmError, match="held"):
        backend.set_priority(jid, 500)
    backend.release([jid])
    backend.set_priority(jid, 500)
    j = job(backend, jid)
    assert not j.held and j.priority == 500  # pinned
    assert blocker


def test_release_respects_priority_order(backend, jobs) -> None:
    n = str(len(backend.list_nodes()))
    blocker = jobs("-p", "other", "-N", n, "--gres=gpu:8")
    wait_for(lambda: job(backend, blocker).state == "RUNNING", 30)
    whole = ("-N", n, "--gres=gpu:8", f"--comment={HINT}")
    a, b, c = jobs(*whole), jobs(*whole), jobs(*whole)
    for jid, prio in ((a, 100), (b, 300), (c, 200)):
        backend.release([jid])
        backend.set_priority(jid, prio)
    backend.cancel(blocker)
    wait_for(lambda: any(job(backend, x).state == "RUNNING" for x in (a, b, c)), 60)
    assert [job(backend, x).state for x in (a, b, c)] == ["PENDING", "RUNNING", "PENDING"]


def test_signal_then_requeue_restarts_with_restart_count(backend, jobs, tmp_path) -> None:
    jid = jobs("--gres=gpu:2", f"--comment={HINT}")
    backend.release([jid])
    wait_for(lambda: job(backend, jid).state == "RUNNING", 30)
    out = tmp_path / f"{jid}.out"
    wait_for(lambda: out.exists() and "start restart=0" in out.read_text(), 20)
    assert "gpus=none" not in out.read_text()  # fake GPUs are visible as devices
    backend.signal(jid, "USR1")
    wait_for(lambda: "ckpt-saved" in out.read_text(), 20)
    requeued_at = int(time.time())
    backend.requeue([jid])
    j = job(backend, jid)
    assert j.state in ("PENDING", "COMPLETING", "REQUEUED") and j.restart_count == 1
    # the requeued job waits cred_expire + 1 s before it may start again, and both
    # listings say until when (the service plans it from then on: slurm/world.py)
    wait_for(lambda: job(backend, jid).state == "PENDING", 20)
    listed = [x for x in backend.list_jobs("shockwave") if x.job_id == jid]
    # cred_expire + 1 >= 5 s after the requeue (whole seconds), in both listings
    assert listed[0].eligible_time >= requeued_at + 4
    assert job(backend, jid).eligible_time == listed[0].eligible_time
    wait_for(lambda: "start restart=1" in out.read_text(), 60)
    assert job(backend, jid).start_time >= listed[0].eligible_time


def test_gres_of_a_pending_job_can_change(backend, jobs) -> None:
    jid = jobs("--gres=gpu:1", f"--comment={HINT}")
    backend.update_gpus(jid, 4)
    assert job(backend, jid).gpus == 4


def test_a_controller_that_is_down_is_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    source = Path(os.environ.get("SLURM_CONF", "/tmp/shockwave-slurm/etc/slurm.conf"))
    if not source.exists():
        pytest.skip("no slurm.conf to copy")
    text = re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=1", source.read_text())
    conf.write_text(text)  # a port nothing listens on: the controller is "down"
    with pytest.raises(SlurmError) as err:
        CliBackend(slurm_conf=str(conf), timeout_s=60).list_jobs()
    assert "\n" not in str(err.value) and str(err.value).startswith("squeue --json: ")


def test_world_reholds_a_job_its_owner_released(backend, jobs) -> None:
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.slurm.world import SlurmCluster

    jid = jobs("--gres=gpu:1", f"--comment={HINT}")
    blocker = jobs("-p", "other", "-N", str(len(backend.list_nodes())), "--gres=gpu:8")
    # the cluster full first (the last test's jobs may still be ending): a release
    # onto free GPUs would start the job before the world could hold it again
    wait_for(lambda: job(backend, blocker).state == "RUNNING", 60, "the cluster is full")
    backend.release([jid])  # the owner, without the planner's approval
    assert not job(backend, jid).held
    world = SlurmCluster(backend, WallClock())
    world.observe()
    world.apply([])
    assert job(backend, jid).held and job(backend, jid).reason == "JobHeldUser"
    assert blocker


def test_an_admins_hold_stays_and_the_owner_cannot_release_the_planners(
        backend: CliBackend, users: tuple[str, str], fresh_heartbeat: Path) -> None:
    """Real slurmctld and job_submit.lua, a real user's job: the planner's hold (a user
    hold, as job_submit.lua's) cannot be released by the job's owner while the service
    lives; root's `scontrol hold` is an admin hold, which the world leaves out of the plan
    and held (a start for it is refused) until root releases it."""
    import subprocess

    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.model.plan import Action, ActionKind, Outcome
    from slurm_shockwave.slurm.world import SlurmCluster

    owner = users[0]

    def as_owner(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["runuser", "-u", owner, "--", *cmd], capture_output=True,
                              text=True, timeout=60, check=False)

    sub = as_owner("sbatch", "--parsable", "-p", "shockwave", "--gres=gpu:1", "-o",
                   "/dev/null", f"--comment={HINT}", "--wrap", "sleep 600")
    assert sub.returncode == 0, sub.stderr
    jid = int(sub.stdout.strip().split(";")[0])
    try:
        assert job(backend, jid).reason == "JobHeldUser"
        refused = as_owner("scontrol", "release", str(jid))
        assert refused.returncode != 0 and job(backend, jid).held
        backend.scontrol("hold", str(jid))  # the admin
        world = SlurmCluster(backend, WallClock())
        assert jid not in {j.job_id for j in world.observe().jobs}
        assert jid in world.left_out.admin_held
        result = world.apply([Action(ActionKind.START, jid)])
        assert result.results[0].outcome == Outcome.REJECTED
        assert job(backend, jid).reason == "JobHeldAdmin"
        backend.release([jid])  # the admin again: back to the planner, which holds it
        assert jid in {j.job_id for j in world.observe().jobs}
        world.apply([])
        assert job(backend, jid).held and job(backend, jid).reason == "JobHeldUser"
    finally:
        backend.cancel(jid)


def test_a_newline_in_a_jobs_strings_loses_nothing_of_the_listing(
        backend: CliBackend, jobs: Callable[..., int]) -> None:
    """Found by a red-team: job_submit.lua takes a newline in a hint as a space, but
    squeue's and scontrol's one-line listings then break the job's line. The partition's
    listing read the comment's first line (an owner's ``held=owner`` mark lost, so the
    planner took the job for its own to release), and scontrol's line ended before the
    admin comment (after the work folder), so the job read as one without a hint, held
    by the planner for good; a newline in the submit line alone (here an --export value)
    did the same. The plugin now keeps a hint's line breaks out of the comment (a
    review: such a comment sent every round down the JSON path), and a cut scontrol line
    is read from JSON: each job is read whole, as squeue's JSON has it."""
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.slurm.world import SlurmCluster

    hint_nl = jobs("--gres=gpu:1", "--comment=model=lm bs=10\nepochs=3")
    submit_nl = jobs("--gres=gpu:1", f"--comment={HINT}", "--export=ALL,SW_X=a\nb")
    owner = jobs("--gres=gpu:1", f"--comment={HINT}", "--export=ALL,SW_X=a\nb")
    backend.set_comment(owner, f"{HINT} held=owner")  # as its owner's hold marks it
    fresh = CliBackend()  # nothing cached: every detail read this round
    listed = {j.job_id: j for j in fresh.list_jobs("shockwave")}
    exact = {j.job_id: j for j in fresh.list_jobs()}  # squeue --json
    for jid in (hint_nl, submit_nl, owner):
        assert listed[jid].admin_comment == exact[jid].admin_comment != "", jid
        assert listed[jid].admin_comment.startswith("shockwave:v1 ")
        assert listed[jid].comment == exact[jid].comment, jid
    assert listed[hint_nl].comment == "model=lm bs=10 epochs=3"
    assert listed[owner].comment.endswith(" held=owner")
    world = SlurmCluster(fresh, WallClock())
    planned = {j.job_id for j in world.observe().jobs}
    assert {hint_nl, submit_nl} <= planned and owner not in planned
    assert owner in world.left_out.owner_held and not world.left_out.bad_hints


@pytest.mark.parametrize("special", [False, True], ids=["held", "special exit"])
def test_a_requeue_hold_is_kept_out_of_the_plan(
        backend: CliBackend, jobs: Callable[..., int], special: bool) -> None:
    """Found by a review: squeue's JSON says JobHeldUser for a job `scontrol requeuehold`
    put back (only its state_description says "job requeued in held state", as scontrol
    and pyslurm show it), so the CLI backend read a requeue-hold as the planner's own
    hold, and the planner released it when it planned the job. A requeue-hold is its
    owner's (Slurm records no requester; its owner may release it). Found by a
    red-team: one with ``State=SpecialExit`` is in state SPECIAL_EXIT, which the
    partition's listing left out, so it was never marked and its owner's release was
    refused for good."""
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.slurm.world import SlurmCluster

    jid = jobs("--gres=gpu:1", f"--comment={HINT}")
    backend.release([jid])  # the planner starts it
    wait_for(lambda: job(backend, jid).state == "RUNNING", 30)
    backend.scontrol("requeuehold", *(["State=SpecialExit"] if special else []), str(jid))
    wait_for(lambda: job(backend, jid).state == "PENDING" and job(backend, jid).held, 60)
    assert job(backend, jid).reason == "job requeued in held state"
    assert ("SPECIAL_EXIT" in job(backend, jid).state_flags) == special
    world = SlurmCluster(backend, WallClock())
    assert jid not in {j.job_id for j in world.observe().jobs}
    assert jid in world.left_out.owner_held


def test_run_round_starts_the_planned_jobs_in_slurm(backend, jobs) -> None:
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.engine.round import run_round
    from slurm_shockwave.policies.registry import make_policy
    from slurm_shockwave.slurm.world import SlurmCluster

    a = jobs("--gres=gpu:2", f"--comment={HINT}")
    b = jobs("--gres=gpu:1", f"--comment={HINT}")
    world = SlurmCluster(backend, WallClock())
    report = run_round(world, make_policy("fifo"), {}, world)
    starts = {x.job_id for x in report.actions if x.kind.value == "start"}
    assert {a, b} <= starts
    wait_for(lambda: all(job(backend, x).state == "RUNNING" for x in (a, b)), 30)


def test_a_job_of_every_gpu_waits_while_a_node_is_drained(backend, jobs) -> None:
    """A drained node: a job of all the partition's GPUs reads that it waits for it, not
    that it is too large, and runs once the node is resumed."""
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.engine.round import run_round
    from slurm_shockwave.policies.registry import make_policy
    from slurm_shockwave.slurm.world import SlurmCluster

    nodes = [n for n in backend.list_nodes() if "shockwave" in n.partitions and n.gpus]
    total, last = sum(n.gpus for n in nodes), nodes[-1]
    wide = jobs("-N", str(len(nodes)), f"--gres=gpu:{last.gpus}", f"--comment={HINT}")
    world = SlurmCluster(backend, WallClock())
    backend.scontrol("update", f"NodeName={last.name}", "State=DRAIN", "Reason=shockwave-test")
    try:
        report = run_round(world, make_policy("fifo"), {}, world)
        assert str(report.reasons[wide]) == (
            f"waiting_capacity(gpus={total} usable={total - last.gpus} of {total}: the rest "
            "drained, down or held by jobs outside the plan)")
        assert job(backend, wide).held
    finally:
        backend.scontrol("update", f"NodeName={last.name}", "State=RESUME")
    wait_for(lambda: next(n for n in backend.list_nodes() if n.name == last.name).usable,
             30, "the node resumed")
    run_round(world, make_policy("fifo"), {}, world)
    wait_for(lambda: job(backend, wide).state == "RUNNING", 30, "the wide job runs")


def test_world_preempts_with_signal_then_requeue_hold(backend, jobs, tmp_path) -> None:
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.model.plan import Action, ActionKind, Outcome
    from slurm_shockwave.slurm.world import SlurmCluster

    jid = jobs("--gres=gpu:1", "--comment=model=lm bs=10 epochs=3 signal=USR1 grace=2")
    backend.release([jid])
    wait_for(lambda: job(backend, jid).state == "RUNNING", 30)
    out = tmp_path / f"{jid}.out"
    wait_for(lambda: out.exists() and "start restart=0" in out.read_text(), 20)
    world = SlurmCluster(backend, WallClock())
    world.observe()
    first = world.apply([Action(ActionKind.PREEMPT, jid)])
    assert first.results[0].outcome == Outcome.DEFERRED
    wait_for(lambda: "ckpt-saved" in out.read_text(), 20)
    time.sleep(2.1)
    world.observe()
    second = world.apply([Action(ActionKind.PREEMPT, jid)])
    assert second.results[0].outcome == Outcome.APPLIED, second.results[0].message
    assert job(backend, jid).restart_count == 1
    # the job passes through COMPLETING while its processes end
    wait_for(lambda: job(backend, jid).state == "PENDING" and job(backend, jid).held, 30)
    # Slurm moved its submit time to the requeue; the planner's view keeps the first
    # (job_submit.lua's stamp), also in a world that never saw the job before
    submitted = split_admin_comment(job(backend, jid).admin_comment)[1]
    assert submitted is not None and job(backend, jid).submit_time > submitted
    fresh = SlurmCluster(backend, WallClock())
    wait_for(lambda: any(v.job_id == jid for v in fresh.observe().jobs), 30)  # eligible
    for w in (world, fresh):
        assert {v.spec.arrival_s for v in w.observe().jobs if v.job_id == jid} == {submitted}


UNTRAPPED = """#!/bin/sh
echo "start restart=${SLURM_RESTART_COUNT:-0}"
while true; do sleep 1; done
"""


def test_a_job_the_checkpoint_signal_kills_is_requeued_held(
        backend, submitter, tmp_path, fresh_heartbeat) -> None:
    """A job whose script does not handle its hint's signal (as one in the first
    milliseconds of its batch script, seen live) dies of it: FAILED, WTERMSIG 10. The
    next observation requeues it, held for the plan, and it runs again when released."""
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.model.plan import Action, ActionKind
    from slurm_shockwave.slurm.world import SlurmCluster

    jobs = submitter(UNTRAPPED, "-o", str(tmp_path / "%j.out"), "--open-mode=append")
    jid = jobs("--gres=gpu:1", "--comment=model=lm bs=10 epochs=3 signal=USR1 grace=30")
    backend.release([jid])
    out = tmp_path / f"{jid}.out"
    wait_for(lambda: out.exists() and "start restart=0" in out.read_text(), 30)
    world = SlurmCluster(backend, WallClock())
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, jid)])
    ended = {}

    def failed() -> bool:
        ended.update({j.job_id: j for j in backend.list_jobs() if j.job_id == jid})
        return ended[jid].state == "FAILED"

    wait_for(failed, 30)
    assert ended[jid].exit_signal == 10 and ended[jid].restart_count == 0
    world.observe()
    world.apply([])
    wait_for(lambda: job(backend, jid).state == "PENDING" and job(backend, jid).held, 30)
    assert job(backend, jid).restart_count == 1 and world.intents == {}
    backend.release([jid])
    wait_for(lambda: "start restart=1" in out.read_text(), 60)


def test_the_planners_requeue_leaves_a_job_that_ended_ended(
        backend, submitter, tmp_path, fresh_heartbeat) -> None:
    """A plain ``scontrol requeue`` of a COMPLETED batch job runs it again (measured on
    22.05); a job that ends between a round's observation and its preemption stays
    ended. The signal-killed job's own requeue does run it again."""
    jobs = submitter("#!/bin/sh\necho ran\n", "-o", str(tmp_path / "%j.out"))
    jid = jobs("--gres=gpu:1", f"--comment={HINT}")
    backend.release([jid])
    wait_for(lambda: [j.state for j in backend.list_jobs() if j.job_id == jid]
             == ["COMPLETED"], 30)
    backend.requeue([jid])
    time.sleep(1)
    assert [(j.state, j.restart_count) for j in backend.list_jobs() if j.job_id == jid] \
        == [("COMPLETED", 0)]
    backend.requeue_ended(jid)
    assert job(backend, jid).state == "PENDING" and job(backend, jid).restart_count == 1


def test_filtered_listing_agrees_with_the_json_one(backend, jobs) -> None:
    held_job = jobs("--gres=gpu:2", f"--comment={HINT}")
    runner = jobs("--gres=gpu:1", "--comment=model=lm bs=10 epochs=3")
    backend.release([runner])
    wait_for(lambda: job(backend, runner).state == "RUNNING", 30)
    fast = {j.job_id: j for j in backend.list_jobs("shockwave")}
    full = {j.job_id: j for j in backend.list_jobs() if j.partition == "shockwave"
            and j.state in ("PENDING", "RUNNING")}
    assert set(fast) == set(full) and {held_job, runner} <= set(fast)
    for jid in (held_job, runner):
        a, b = fast[jid], full[jid]
        for name in ("state", "reason", "priority", "held", "comment", "admin_comment",
                     "gpus", "node_count", "nodes", "restart_count", "submit_time", "user"):
            assert getattr(a, name) == getattr(b, name), (jid, name)


def test_queue_command_shows_managed_jobs(backend, jobs) -> None:
    import json as _json
    import subprocess
    import sys

    jid = jobs("--gres=gpu:2", f"--comment={HINT}")
    proc = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "queue", "--json"],
                          capture_output=True, text=True, timeout=60, check=True)
    rows = {r["job_id"]: r for r in map(_json.loads, proc.stdout.splitlines())}
    assert rows[jid]["model"] == "ResNet-18" and rows[jid]["phase"] == "held"
    assert rows[jid]["gpus"] == 2


def test_queue_command_with_slurm_down_is_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    source = Path(os.environ.get("SLURM_CONF", "/tmp/shockwave-slurm/etc/slurm.conf"))
    if not source.exists():
        pytest.skip("no slurm.conf to copy")
    conf = tmp_path / "slurm.conf"
    conf.write_text(re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=1", source.read_text()))
    proc = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "queue",
                           "--slurm-conf", str(conf)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("error: squeue")


def test_plan_command_is_a_dry_run_unless_applied(backend, jobs) -> None:
    import json as _json
    import subprocess
    import sys

    a = jobs("--gres=gpu:1", f"--comment={HINT}")
    b = jobs("--gres=gpu:2", "--comment=model=lm bs=10 epochs=30 mode=accordion")

    def plan(*extra: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "plan", "--json",
                               *extra], capture_output=True, text=True, timeout=120,
                              check=True)
        return {r["job_id"]: r for r in map(_json.loads, proc.stdout.splitlines())}

    dry = plan()
    assert dry[a]["action"] == "start" and dry[a]["outcome"] == "deferred"
    assert dry[b]["action"] == "start" and dry[a]["reason"]
    assert job(backend, a).held and job(backend, b).held  # nothing changed
    applied = plan("--apply")
    assert applied[a]["outcome"] == "applied"
    wait_for(lambda: all(job(backend, x).state == "RUNNING" for x in (a, b)), 30)


def test_a_cluster_in_a_long_directory_still_launches_jobs(tmp_path: Path) -> None:
    """slurmstepd's socket lives in the spool directory and a Unix socket path has at most
    107 bytes: a cluster started in a deep directory (a test's tmp_path) failed every
    launch ("launch failed requeued held"). start.sh moves such a spool to a short one.
    stop.sh stops a daemon of the cluster that no pid file names (a red-team found a
    slurmd left running, restarted by hand)."""
    import subprocess

    from slurm_shockwave.live.cluster import LocalCluster

    deep = tmp_path / ("d" * 60) / "cluster"
    offset = int(os.environ.get("SHOCKWAVE_TEST_PORT_OFFSET", "0") or 0)
    with LocalCluster(deep, nodes=1, gpus_per_node=1, ctld_port=17817 + offset + 70,
                      node_port_base=17900 + offset + 70) as env:
        root = (deep / "spool-root").read_text().strip()
        assert root.startswith("/tmp/sw-spool.")
        out = tmp_path / "hi.out"
        subprocess.run(["sbatch", "-p", "other", "-o", str(out), "--wrap", "echo hi"],
                       env=env, check=True, capture_output=True, timeout=30)
        wait_for(lambda: out.exists() and "hi" in out.read_text(), 60, "the job ran")
        pidfile = deep / "run" / "slurmd-sw-node1.pid"
        slurmd = int(pidfile.read_text())
        pidfile.unlink()
    assert not Path(root).exists()  # stopped and purged with the cluster
    assert not Path(f"/proc/{slurmd}").exists() or \
        "slurmd" not in Path(f"/proc/{slurmd}/comm").read_text()


def test_jobs_asking_a_gpu_type_run_on_nodes_of_that_type(tmp_path: Path) -> None:
    """Found by a red-team: the GPU type a job named was dropped, so FIFO placed a v100
    job on the a100 node's GPUs in its plan, where Slurm never starts it, and held the
    a100 job that could run there. On a cluster of an a100 node and two v100 nodes, each
    v100 node half taken by another partition's job (4 v100 GPUs free, none on one
    node), the real service's FIFO starts the a100 job and the v100 one waits; the
    listings read the types."""
    import subprocess

    from slurm_shockwave.live.cluster import LocalCluster
    from slurm_shockwave.policies.registry import make_policy
    from slurm_shockwave.service.daemon import Service
    from slurm_shockwave.service.heartbeat import write_heartbeat
    from slurm_shockwave.service.store import Store
    from slurm_shockwave.slurm.world import SlurmCluster
    from tests.builders import WallLikeClock

    offset = int(os.environ.get("SHOCKWAVE_TEST_PORT_OFFSET", "0") or 0)
    with LocalCluster(tmp_path / "typed", nodes=3, gpus_per_node=4,
                      gpu_types=("a100", "v100", "v100"), ctld_port=17817 + offset + 90,
                      node_port_base=17900 + offset + 90) as env:
        backend = CliBackend(slurm_conf=env["SLURM_CONF"], env=env)
        write_heartbeat(env["SHOCKWAVE_HEARTBEAT"], time.time(), 600)
        script = tmp_path / "w.sh"
        script.write_text("#!/bin/sh\nwhile true; do sleep 1; done\n")
        script.chmod(0o755)

        def submit(*args: str) -> int:
            return backend.submit(str(script), ["-o", "/dev/null", *args])

        busy = [submit("-p", "other", "-w", node, "--gres=gpu:v100:2")
                for node in ("sw-node2", "sw-node3")]
        wait_for(lambda: all(job(backend, j).state == "RUNNING" for j in busy), 30,
                 "the v100 nodes half taken")
        v100 = submit("-p", "shockwave", "--gres=gpu:v100:4", f"--comment={HINT}")
        time.sleep(1.1)  # first in FIFO's order by its submission (whole seconds)
        a100 = submit("-p", "shockwave", "--gpus=a100:4", f"--comment={HINT}")
        assert [job(backend, j).gpu_type for j in (*busy, v100, a100)] == [
            "v100", "v100", "v100", "a100"]
        # what the pyslurm backend asks of squeue for a --gpus job: its count and type,
        # and whether it asked them for the job
        assert backend.gpus_per_job([a100, v100]) == {a100: (4, "a100", True),
                                                       v100: (0, "", False)}
        assert {n.name: n.gpu_type for n in backend.list_nodes()} == {
            "sw-node1": "a100", "sw-node2": "v100", "sw-node3": "v100"}
        world = SlurmCluster(backend, WallLikeClock(), round_s=2.0)
        svc = Service(world, make_policy("fifo", None), "fifo", Store(tmp_path / "s.db"),
                      round_s=2.0)
        first = svc.round_once()  # the a100 job started, in the first round
        assert [(a.kind.value, a.job_id) for a in first.report.actions] == [("start", a100)]
        for _ in range(2):
            time.sleep(2)
            svc.round_once()
        wait_for(lambda: job(backend, a100).state == "RUNNING", 30, "the a100 job running")
        assert job(backend, a100).nodes == "sw-node1"
        assert job(backend, v100).state == "PENDING"
        subprocess.run(["scancel", *map(str, busy)], env=env, check=True, timeout=30)


def test_a_dry_run_plan_reads_a_store_many_rounds_on(backend, jobs, tmp_path: Path) -> None:
    """`shockwave plan` (no --apply) over a service's store: the stored memory's window
    plan started at the service's round, so the dry run must count rounds from the store
    as the service does (it counted from 0 and indexed the plan at a negative age: a
    crash once the store was a window or more ahead)."""
    import subprocess
    import sys

    from slurm_shockwave.policies.registry import make_policy
    from slurm_shockwave.service.daemon import Service
    from slurm_shockwave.service.store import Store
    from slurm_shockwave.slurm.fake import FakeSlurm
    from slurm_shockwave.slurm.protocol import SlurmJob, SlurmNode
    from slurm_shockwave.slurm.world import SlurmCluster
    from tests.builders import WallLikeClock

    a = jobs("--gres=gpu:1", f"--comment={HINT}")
    # the service's rounds over the same job (the same job set: the memory's plan is kept)
    store = Store(tmp_path / "state.db")
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    fake.add(SlurmJob(a, "j", "alice", "shockwave", "PENDING", held=True, gpus=1,
                      admin_comment=f"shockwave:v1 {HINT}", submit_time=900))
    clock = WallLikeClock()
    svc = Service(SlurmCluster(fake, clock, intents=store), make_policy("shockwave"),
                  "shockwave", store, round_s=60.0)
    for _ in range(45):  # more than two 20-round windows
        svc.round_once()
        clock.t += 60
    store.close()
    out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "plan", "--json",
                          "--store", str(tmp_path / "state.db")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f'"job_id": {a}' in out.stdout


def test_the_planners_preemption_is_a_user_hold_and_a_requeuehold_is_kept(
        backend: CliBackend, jobs: Submitter) -> None:
    """Real slurmctld: the world preempts job a (no signal: requeue, then its user hold)
    and it waits as JobHeldUser, held once pending; root's `scontrol requeuehold` of
    running job b leaves "job requeued in held state", which the world leaves out of the
    plan and never releases, even when the plan names it (it marks it `held=requeue`
    for job_submit.lua, so that the owner may release it)."""
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.model.plan import Action, ActionKind
    from slurm_shockwave.slurm.world import SlurmCluster

    a = jobs("--gres=gpu:1", f"--comment={HINT}")
    b = jobs("--gres=gpu:1", f"--comment={HINT}")
    backend.release([a, b])
    wait_for(lambda: all(job(backend, x).state == "RUNNING" for x in (a, b)), 60)
    world = SlurmCluster(backend, WallClock())
    world.observe()
    def listed(jid: int) -> SlurmJob:  # as the world reads it: squeue's reason, which
        # is the job's state description when it has one (JSON has both)
        return next(j for j in backend.list_jobs("shockwave") if j.job_id == jid)

    world.apply([Action(ActionKind.PREEMPT, a), Action(ActionKind.KEEP, b)])
    wait_for(lambda: job(backend, a).state == "PENDING", 30, "a requeued")
    assert listed(a).held and listed(a).reason == "JobHeldUser"
    backend.scontrol("requeuehold", str(b))  # the admin
    wait_for(lambda: job(backend, b).state == "PENDING", 30, "b requeued")
    assert listed(b).reason == "job requeued in held state"
    wait_for(lambda: job(backend, b).eligible_time <= time.time(), 30, "b eligible")
    time.sleep(1)
    assert b not in {j.job_id for j in world.observe().jobs}
    assert b in world.left_out.owner_held
    world.apply([Action(ActionKind.START, b)])
    assert job(backend, b).held and job(backend, b).state == "PENDING"
    assert job(backend, b).comment == f"{HINT} held=requeue"


def test_an_admins_hold_of_a_running_job_survives_the_planners_preemption(
        backend: CliBackend, jobs: Submitter) -> None:
    """Real slurmctld: root's `scontrol hold` of a running job shows it RUNNING with
    priority 0 and JobHeldAdmin, and Slurm keeps that hold through a requeue. The world's
    preemption (requeue, then its own `uhold`) made it the planner's user hold; it is
    now left the admin's, out of the plan."""
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.model.plan import Action, ActionKind
    from slurm_shockwave.slurm.world import SlurmCluster

    a = jobs("--gres=gpu:1", f"--comment={HINT}")
    backend.release([a])
    wait_for(lambda: job(backend, a).state == "RUNNING", 60)
    backend.scontrol("hold", str(a))  # the admin
    world = SlurmCluster(backend, WallClock())
    world.observe()
    world.apply([Action(ActionKind.PREEMPT, a)])
    wait_for(lambda: job(backend, a).state == "PENDING", 30, "a requeued")
    listed = next(j for j in backend.list_jobs("shockwave") if j.job_id == a)
    assert listed.held and listed.reason == "JobHeldAdmin", listed
    world.observe()
    assert a in world.left_out.admin_held


STUBBORN = """#!/bin/sh
trap '' TERM
while true; do sleep 1; done
"""


def test_a_requeued_job_completing_never_offers_another_partitions_gpus(
        backend: CliBackend, submitter: Callable[..., Submitter], tmp_path: Path,
        fresh_heartbeat: Path) -> None:
    """Found by a live red-team: while a job of ours is being requeued (COMPLETING: it
    ignores SIGTERM up to KillWait), Slurm 22.05 lists it with no GPU indices; taken from
    index 0, they were another partition's job's on the same node, and a fill step gave
    them out. The view offers the GPUs it saw the job hold, never the other job's."""
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.slurm.world import SlurmCluster

    node = backend.list_nodes()[0]
    wait_for(lambda: next(n for n in backend.list_nodes() if n.name == node.name)
             .gpus_used == 0, 60, f"{node.name} idle (the last test's jobs ending)")
    other = submitter(STUBBORN, "-o", "/dev/null", "-w", node.name)("-p", "other",
                                                                     "--gres=gpu:2")
    wait_for(lambda: job(backend, other).state == "RUNNING", 60, "the other job runs")
    ours = submitter(STUBBORN, "-o", "/dev/null", "-w", node.name, "--requeue")(
        "--gres=gpu:2", f"--comment={HINT}")
    backend.release([ours])
    wait_for(lambda: job(backend, ours).state == "RUNNING", 60, "our job runs")
    held = {j.job_id: {i for _n, idx in j.gpu_alloc for i in idx}
            for j in backend.list_jobs() if j.job_id in (other, ours)}
    assert held[other] and held[ours] and not held[other] & held[ours]
    world = SlurmCluster(backend, WallClock())
    assert ours in {j.job_id for j in world.observe().jobs}
    backend.requeue([ours])
    assert job(backend, ours).state == "COMPLETING"  # for KillWait (10 s) at most
    offered = {i for n in world.observe().nodes if n.name == node.name for i in n.indices}
    assert job(backend, ours).state == "COMPLETING"
    assert held[ours] <= offered and not offered & held[other]
