"""`shockwave serve` as a real process against the real local cluster (marker slurm).

Skipped with the reason when no cluster answers; CI sets SHOCKWAVE_REQUIRE_SLURM=1 so a
missing cluster fails instead. Each test submits its own jobs and cancels exactly them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_shockwave.emulate.submit import (
    GRACE_S,
    EmulatorSettings,
    gpu_args,
    hint_comment,
    job_script,
)
from slurm_shockwave.model.job import AdaptationMode, JobSpec
from slurm_shockwave.service.heartbeat import write_heartbeat
from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.listing import PINNED_BAND, TOP_PRIORITY
from slurm_shockwave.slurm.protocol import SlurmJob
from tests.live_cluster import Submitter, heartbeat_path, job, slurmctld_stopped, wait_for

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slurm

WORKER = """#!/bin/sh
echo "start restart=${SLURM_RESTART_COUNT:-0} gpus=${CUDA_VISIBLE_DEVICES:-none}"
trap 'echo ckpt-signal' USR1
while true; do sleep 1; done
"""


@pytest.fixture(scope="module")
def cluster(backend: CliBackend) -> CliBackend:
    """The backend, on the 4-node test cluster with a heartbeat file named."""
    heartbeat_path("the service writes its heartbeat there")
    assert len(backend.list_nodes()) >= 4, "these tests need the 4-node test cluster"
    return backend


class Env:
    def __init__(self, backend: CliBackend, tmp: Path, submit: Submitter) -> None:
        self.backend = backend
        self.tmp = tmp
        self.submit = submit
        self.mine = submit.mine
        self.procs: list[subprocess.Popen[bytes]] = []
        self.heartbeat = os.environ["SHOCKWAVE_HEARTBEAT"]
        self.store = tmp / "state.db"

    def config(self, round_s: float = 2.0, stale_after_s: float = 0.0,
               service_extra: str = "") -> Path:
        cfg = self.tmp / "shockwave.yaml"
        cfg.write_text(f"slurm: {{round_s: {round_s}}}\n"
                       f"service: {{store: {self.store}, heartbeat: {self.heartbeat}, "
                       # any free port: checkouts testing at once never share 7817
                       f"stale_after_s: {stale_after_s}, listen: '127.0.0.1:0'"
                       f"{service_extra}}}\n")
        return cfg

    def serve(self, policy: str, *extra: str, log: str = "serve.log",
              round_s: float = 2.0, stale_after_s: float = 0.0,
              service_extra: str = "") -> subprocess.Popen[bytes]:
        out = (self.tmp / log).open("ab")
        cfg = self.config(round_s, stale_after_s, service_extra)
        proc = subprocess.Popen([sys.executable, "-m", "slurm_shockwave.cli", "serve",
                                 "--config", str(cfg),
                                 "--policy", policy, *extra], stderr=out, stdout=out)
        self.procs.append(proc)
        return proc

    def cli(self, *args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", *args, "--config",
                              str(self.config())], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def job(self, jid: int) -> SlurmJob:
        return job(self.backend, jid)

    def output(self, jid: int) -> str:
        path = self.tmp / f"{jid}.out"
        return path.read_text() if path.exists() else ""

    def log(self, name: str = "serve.log") -> str:
        return (self.tmp / name).read_text()

    def query(self, sql: str) -> list[tuple[object, ...]]:
        """Read the service's store without creating it; nothing yet reads as zero."""
        try:
            db = sqlite3.connect(f"file:{self.store}?mode=ro", uri=True, timeout=10)
        except sqlite3.OperationalError:
            return [(0,)]
        try:
            return db.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return [(0,)]
        finally:
            db.close()


@pytest.fixture
def env(cluster: CliBackend, tmp_path: Path,
        submitter: Callable[..., Submitter]) -> Iterator[Env]:
    e = Env(cluster, tmp_path,
            submitter(WORKER, "-o", str(tmp_path / "%j.out"), "--open-mode=append"))
    yield e
    for proc in e.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    Path(e.heartbeat).unlink(missing_ok=True)
    for log in sorted(tmp_path.glob("*.log")):  # shown with a failure's report only
        print(f"==> {log.name} (last 40 lines) <==", *log.read_text().splitlines()[-40:],
              sep="\n")


def stop(proc: subprocess.Popen[bytes], signum: int = signal.SIGTERM) -> int:
    proc.send_signal(signum)
    return proc.wait(timeout=60)


HINT = "model=resnet18 bs=32 epochs={e} mode=gns"


def test_serve_plans_mixed_jobs_on_shared_nodes(env: Env) -> None:
    """Shockwave over 1/2/4/8-GPU jobs, a two-node job and another partition's job on a
    shared node: rounds advance, jobs start, the other job is untouched, and a job the
    plan keeps is never preempted for a slot mismatch."""
    write_heartbeat(env.heartbeat, time.time(), 600)
    other = env.submit("-p", "other", "-w", "sw-node1", "--gres=gpu:3")
    wait_for(lambda: env.job(other).state == "RUNNING", 30, "the other partition's job")
    ids = [env.submit(f"--gres=gpu:{g}", f"--comment={HINT.format(e=20 + i)}")
           for i, g in enumerate((1, 1, 2, 2, 4, 8))]
    ids.append(env.submit("-N", "2", "--gres=gpu:8", f"--comment={HINT.format(e=40)}"))
    proc = env.serve("shockwave")
    wait_for(lambda: env.query("SELECT COUNT(*) FROM rounds")[0][0] >= 4, 90, "4 rounds")
    assert stop(proc) == 0
    jobs = {j.job_id: j for j in env.backend.list_jobs() if j.job_id in env.mine}
    running = [j for j in jobs.values() if j.state == "RUNNING"]
    assert len(running) >= 4
    # GPUs never over-committed, the other partition's 3 GPUs included
    per_node: dict[str, set[int]] = {}
    for j in running:
        for node, idx in j.gpu_alloc:
            assert not per_node.setdefault(node, set()) & set(idx), f"{node} shared GPU"
            per_node[node] |= set(idx)
    assert jobs[other].state == "RUNNING" and not jobs[other].admin_comment
    assert any(len(j.gpu_alloc) == 2 for j in running if j.job_id == ids[-1]) or \
        jobs[ids[-1]].state == "PENDING"
    kinds = {k for (k,) in env.query("SELECT DISTINCT kind FROM actions")}
    assert "start" in kinds
    assert all("ckpt-signal" not in env.output(j) for j in ids)
    assert "round 0:" in env.log() and "Traceback" not in env.log()
    # queue: live state plus the last round's plan; explain: the history from the store
    out = env.cli("queue", "--json")
    rows = {r["job_id"]: r for r in map(json.loads, out.splitlines())}
    first = rows[ids[0]]
    assert first["model"] == "ResNet-18" and first["epochs"] == 20 and first["bs"] == 32
    assert first["rho"] is not None and first["planned_rounds"] is not None
    assert first["reason"].split("(")[0] in ("kept_running", "scheduled", "backfilled",
                                             "waiting_capacity")
    assert other not in rows
    story = json.loads(env.cli("explain", str(ids[0]), "--json"))
    assert story["history"] and story["actions"][0]["kind"] == "start"


def test_jobs_that_ask_gpus_per_task_run_on_their_whole_count_and_stay(env: Env) -> None:
    """``-n 3 --gpus-per-task=2`` and ``-n 2 -c 3 --gpus-per-task=1`` beside jobs that ask
    per node: planned at 6 and 2 GPUs while they wait (read as none, they were planned as
    1 GPU), started with them, and neither stopped nor moved in the rounds after."""
    write_heartbeat(env.heartbeat, time.time(), 600)
    per_task = [env.submit("-n", "3", "--gpus-per-task=2", f"--comment={HINT.format(e=40)}"),
                env.submit("-n", "2", "-c", "3", "--gpus-per-task=1",
                           f"--comment={HINT.format(e=40)}")]
    for g in (8, 4, 2):
        env.submit(f"--gres=gpu:{g}", f"--comment={HINT.format(e=40)}")
    assert [env.job(j).gpus for j in per_task] == [6, 2]
    _run_and_stay(env, per_task, "the per-task jobs running", rounds=4)
    for jid, gpus in zip(per_task, (6, 2), strict=True):
        assert sum(len(idx) for _, idx in env.job(jid).gpu_alloc) == gpus
        assert "start restart=0 gpus=" in env.output(jid)


def _run_and_stay(env: Env, jobs: list[int], what: str, *, rounds: int) -> None:
    """Serve until ``jobs`` run, then ``rounds`` more rounds: none stopped or moved."""
    proc = env.serve("shockwave")
    wait_for(lambda: all(env.job(j).state == "RUNNING" for j in jobs), 90, what)
    done = env.query("SELECT COUNT(*) FROM rounds")[0][0]
    wait_for(lambda: env.query("SELECT COUNT(*) FROM rounds")[0][0] >= done + rounds, 90,
             f"{rounds} more rounds")
    assert stop(proc) == 0
    for jid in jobs:
        j = env.job(jid)
        assert (j.state, j.restart_count) == ("RUNNING", 0), j
    assert env.query("SELECT COUNT(*) FROM actions WHERE kind = 'preempt'")[0][0] == 0
    assert "Traceback" not in env.log()


def test_jobs_that_ask_gpus_per_job_over_several_nodes_run_as_slurm_splits_them(
        env: Env) -> None:
    """``-N 2 --gpus=7`` and ``-N 3 --gpus=5`` beside another partition's whole-node job:
    planned over at least their nodes (job_submit.lua's ``asked_nodes=``; planned on one
    node, such a job was released where Slurm cannot start it), started with one GPU or
    more on each node, and neither stopped nor moved in the rounds after. (Beside a
    whole-node job of the plan's, the plan may move one: Slurm, not the plan, chooses
    their nodes, and may leave no node whole; seen once in CI.)"""
    write_heartbeat(env.heartbeat, time.time(), 600)
    other = env.submit("-p", "other", "-w", "sw-node1", "--gres=gpu:8")
    wait_for(lambda: env.job(other).state == "RUNNING", 30, "the other partition's job")
    spread = [env.submit("-N", str(n), f"--gpus={g}", f"--comment={HINT.format(e=40)}")
              for n, g in ((2, 7), (3, 5))]
    _run_and_stay(env, spread, "the jobs over several nodes running", rounds=3)
    for jid, nodes, gpus in zip(spread, (2, 3), (7, 5), strict=True):
        j = env.job(jid)
        assert len(j.gpu_alloc) == nodes and sum(len(i) for _, i in j.gpu_alloc) == gpus, j


def test_a_job_waiting_for_its_dependency_runs_after_it(env: Env) -> None:
    """Found by a red-team: a ``--dependency`` job was planned, and Slurm tests no
    dependency of a held job (measured here on 22.05): under SRTF the short job waiting
    for the long whole-cluster one was started every round and the long one held, so
    nothing ran. On the real slurmctld the job waiting is released and left to Slurm,
    the one it waits for runs, and once that ends the waiting job runs."""
    write_heartbeat(env.heartbeat, time.time(), 600)
    first = env.submit("-N", "4", "--gres=gpu:8", f"--comment={HINT.format(e=400)}")
    after = env.submit("-N", "4", "--gres=gpu:8", f"--dependency=afterany:{first}",
                       f"--comment={HINT.format(e=5)}")
    proc = env.serve("srtf")
    wait_for(lambda: env.job(first).state == "RUNNING", 60, "the job waited for running")
    done = env.query("SELECT COUNT(*) FROM rounds")[0][0]
    wait_for(lambda: env.query("SELECT COUNT(*) FROM rounds")[0][0] >= done + 3, 60,
             "3 more rounds")
    waiting = env.job(after)
    assert (waiting.state, waiting.held, waiting.reason) == ("PENDING", False, "Dependency")
    assert env.job(first).restart_count == 0
    rows = {r["job_id"]: r for r in map(json.loads, env.cli("queue", "--json").splitlines())}
    assert rows[after]["reason"].startswith("held_back(waits for its dependency afterany:")
    env.backend.cancel(first)
    wait_for(lambda: env.job(after).state == "RUNNING", 60, "the waiting job running")
    assert stop(proc) == 0
    assert "Traceback" not in env.log()


def test_fifo_never_signals_a_running_job(env: Env) -> None:
    write_heartbeat(env.heartbeat, time.time(), 600)
    ids = [env.submit(f"--gres=gpu:{g}",
                      f"--comment={HINT.format(e=30)} signal=USR1 grace=5")
           for g in (1, 1, 2, 4, 8, 8, 8, 8)]
    ids.append(env.submit("-N", "2", "--gres=gpu:8",
                          f"--comment={HINT.format(e=30)} signal=USR1 grace=5"))
    proc = env.serve("fifo")
    wait_for(lambda: env.query("SELECT COUNT(*) FROM rounds")[0][0] >= 5, 90, "5 rounds")
    assert stop(proc) == 0
    assert env.query("SELECT COUNT(*) FROM actions WHERE kind = 'preempt'")[0][0] == 0
    assert all("ckpt-signal" not in env.output(j) for j in ids)
    assert sum(1 for j in ids if env.job(j).state == "RUNNING") >= 4


def test_kill9_mid_preemption_never_signals_twice(env: Env) -> None:
    """SRTF preempts a long whole-cluster job for a short one: the service is killed
    after the checkpoint signal, restarted, and completes the requeue without a second
    signal."""
    write_heartbeat(env.heartbeat, time.time(), 600)
    long = env.submit("-N", "4", "--gres=gpu:8",
                      f"--comment={HINT.format(e=900)} signal=USR1 grace=8")
    proc = env.serve("srtf")
    wait_for(lambda: env.job(long).state == "RUNNING", 60, "the long job runs")
    short = env.submit("-N", "4", "--gres=gpu:8", f"--comment={HINT.format(e=1)}")
    wait_for(lambda: env.query(f"SELECT COUNT(*) FROM intents WHERE job_id = {long}")[0][0]
             == 1, 60, "the checkpoint intent")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_for(lambda: "ckpt-signal" in env.output(long), 20, "the job saw the signal")
    proc2 = env.serve("srtf", log="serve2.log")
    wait_for(lambda: env.job(short).state == "RUNNING", 90, "the short job runs")
    assert stop(proc2) == 0
    assert env.output(long).count("ckpt-signal") == 1
    assert env.job(long).restart_count == 1
    assert env.query("SELECT COUNT(*) FROM intents")[0][0] == 0


@contextlib.contextmanager
def serving_with_endpoint(env: Env, policy: str) -> Iterator[subprocess.Popen[bytes]]:
    """The service, writing its URL where the TaskProlog reads it (the test cluster's
    endpoint file, put back as it was afterwards)."""
    endpoint = Path(env.heartbeat).parent / "endpoint"
    saved = endpoint.read_bytes() if endpoint.exists() else None
    try:
        yield env.serve(policy, service_extra=f", endpoint_file: {endpoint}")
    finally:
        if saved is None:
            endpoint.unlink(missing_ok=True)
        else:
            endpoint.write_bytes(saved)


def emulated_trainer(env: Env, submitter: Callable[..., Submitter], *, setup_s: int = 0,
                     grace_s: int = GRACE_S) -> Callable[[], int]:
    """Submits an emulated 8-GPU trainer (its batch script first spends ``setup_s``
    setting up, the checkpoint signal ignored, as the emulator's script ignores it until
    Python handles it); returns its job id."""
    spec = JobSpec(1, "ResNet-18", 32, 8, AdaptationMode.STATIC, 0.0, 5000)
    settings = EmulatorSettings(time_scale=10.0, checkpoint_dir=env.tmp / "ckpt",
                                output_dir=env.tmp, pythonpath=str(ROOT))
    script = job_script(spec, settings)
    if setup_s:
        script = script.replace("\nexec ", f"\necho setting-up; sleep {setup_s}; "
                                "echo set-up\nexec ", 1)
    trainer = submitter(script, "-o", str(env.tmp / "%j.out"), "--open-mode=append",
                        "--requeue")
    hint = hint_comment(spec).replace(f"grace={GRACE_S}", f"grace={grace_s}")
    return lambda: trainer(*gpu_args(8), f"--comment={hint}")


def first_signal_s(env: Env, job_id: int) -> float:
    """When the round that signalled the job (its first deferred preemption) began."""
    [(signalled,)] = env.query(
        "SELECT MIN(r.at_s) FROM actions a JOIN rounds r ON r.id = a.round_id "
        f"WHERE a.kind = 'preempt' AND a.outcome = 'deferred' AND a.job_id = {job_id}")
    assert isinstance(signalled, float)
    return signalled


def test_an_acknowledged_checkpoint_requeues_long_before_the_grace(
        env: Env, submitter: Callable[..., Submitter]) -> None:
    """An emulated 8-GPU trainer, preempted by SRTF for a short whole-cluster job: it
    checkpoints on the signal and reports `checkpointed` through the progress API (found
    by the TaskProlog from the endpoint file), and the service requeues it the next round
    instead of waiting out its 30 s grace."""
    write_heartbeat(env.heartbeat, time.time(), 600)
    submit_trainer = emulated_trainer(env, submitter)
    with serving_with_endpoint(env, "srtf") as proc:
        long = submit_trainer()
        wait_for(lambda: env.job(long).state == "RUNNING", 60, "the trainer runs")
        wait_for(lambda: env.query("SELECT COUNT(*) FROM reports WHERE kind = 'progress' "
                                   f"AND job_id = {long}")[0][0] >= 2, 60, "its reports")
        env.submit("-N", "4", "--gres=gpu:8", f"--comment={HINT.format(e=1)}")
        wait_for(lambda: env.job(long).restart_count >= 1, 60, "the requeue")
        requeued = time.time()
        assert stop(proc) == 0
    assert env.query("SELECT COUNT(*) FROM reports WHERE kind = 'checkpointed' "
                     f"AND job_id = {long}")[0][0] >= 1
    assert requeued - first_signal_s(env, long) < 15.0  # the grace is 30 s
    # requeued as the acknowledgement came, between rounds, not at the next round
    assert f"job {long}: checkpoint acknowledged, requeued" in env.log()
    assert env.job(long).restart_count == 1


def test_a_signal_sent_while_the_job_starts_reaches_it_with_its_first_report(
        env: Env, submitter: Callable[..., Submitter]) -> None:
    """The trainer's batch script spends 10 s setting up (an environment, a container)
    with the checkpoint signal ignored. SRTF preempts it in that time: the signal reaches
    no handler. The answer to its first progress report asks for the checkpoint, so it
    saves, acknowledges, and is requeued long before its 90 s grace."""
    write_heartbeat(env.heartbeat, time.time(), 600)
    submit_trainer = emulated_trainer(env, submitter, setup_s=10, grace_s=90)
    with serving_with_endpoint(env, "srtf") as proc:
        long = submit_trainer()
        wait_for(lambda: env.job(long).state == "RUNNING", 60, "the trainer runs")
        env.submit("-N", "4", "--gres=gpu:8", f"--comment={HINT.format(e=1)}")
        wait_for(lambda: env.query(f"SELECT COUNT(*) FROM intents WHERE job_id = {long}")[0][0]
                 == 1, 30, "the checkpoint intent")
        assert "set-up" not in env.output(long), "signalled after the set-up: no test"
        wait_for(lambda: env.job(long).restart_count >= 1, 60, "the requeue")
        requeued = time.time()
        assert stop(proc) == 0
    assert requeued - first_signal_s(env, long) < 40.0  # the grace is 90 s
    out = env.output(long)
    assert "checkpoint signal: saved" in out and out.index("set-up") < out.index("checkpoint")
    assert f"job {long}: checkpoint acknowledged, requeued" in env.log()
    assert env.job(long).restart_count == 1


def test_a_slurmctld_outage_is_logged_once_and_survived(env: Env) -> None:
    write_heartbeat(env.heartbeat, time.time(), 600)
    conf = Path(os.environ["SLURM_CONF"])
    pidfile = conf.parent.parent / "run" / "slurmctld.pid"
    if not pidfile.exists():
        pytest.skip(f"not the docker-slurm test cluster (no {pidfile})")
    ids = [env.submit("--gres=gpu:1", f"--comment={HINT.format(e=10)}") for _ in range(3)]
    proc = env.serve("fifo", round_s=1.0)
    wait_for(lambda: all(env.job(j).state == "RUNNING" for j in ids), 60, "the jobs run")
    with slurmctld_stopped(conf):
        # a round's listing waits out Slurm's MessageTimeout (9 s here), at most the
        # backend's 30 s timeout, and is then the round's failure
        wait_for(lambda: "unreachable" in env.log(), 90, "the outage logged")
        assert proc.poll() is None, "the service exited in the outage"
        time.sleep(4)
        rounds_before = env.query("SELECT COUNT(*) FROM rounds")[0][0]
    wait_for(lambda: "reachable again" in env.log(), 90, "the service resumes")
    wait_for(lambda: env.query("SELECT COUNT(*) FROM rounds")[0][0] > rounds_before + 1, 60,
             "rounds after the outage")
    wait_for(lambda: all(env.job(j).state == "RUNNING" for j in ids), 60, "no job lost")
    assert stop(proc) == 0
    assert env.log().count("unreachable") == 1


def test_fail_open_and_hand_back(env: Env) -> None:
    """Service stopped: jobs submitted after the stale threshold run under Slurm alone;
    jobs it held stay held until `shockwave handback` releases them, except the one an
    admin holds, which stays held and is named."""
    blocker = env.submit("-p", "other", "-N", "4", "--gres=gpu:8")
    wait_for(lambda: env.job(blocker).state == "RUNNING", 30, "the cluster is full")
    proc = env.serve("fifo", round_s=1.0, stale_after_s=3.0)
    wait_for(lambda: env.query("SELECT COUNT(*) FROM rounds")[0][0] >= 2, 60, "2 rounds")
    # a hangup (serve run from a terminal that went away) ends it as SIGTERM does: it was
    # killed mid-round (review)
    assert stop(proc, signal.SIGHUP) == 0
    held = env.submit("--gres=gpu:1", f"--comment={HINT.format(e=10)}")
    assert env.job(held).held  # the heartbeat is still fresh
    kept = env.submit("--gres=gpu:1", f"--comment={HINT.format(e=10)}")
    env.backend.scontrol("hold", str(kept))  # an admin's hold
    time.sleep(4.5)
    free = env.submit("--gres=gpu:1", f"--comment={HINT.format(e=10)}")
    assert not env.job(free).held  # stale: Slurm alone
    env.backend.cancel(blocker)
    wait_for(lambda: env.job(free).state == "RUNNING", 30, "the unheld job runs")
    assert env.job(held).held
    # a running job the planner had pinned: real Slurm unpins it on root's release
    env.backend.scontrol("update", f"jobid={free}", f"priority={TOP_PRIORITY - 10}")
    assert env.job(free).priority == TOP_PRIORITY - 10
    out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "handback",
                          "--config", str(env.config())], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert env.job(free).priority < TOP_PRIORITY - PINNED_BAND, env.job(free)
    assert "released 1 held" in out.stdout or "released" in out.stdout
    assert f"left held by an admin: {kept}" in out.stdout
    wait_for(lambda: env.job(held).state == "RUNNING", 30, "the released job runs")
    assert env.job(kept).held and env.job(kept).reason == "JobHeldAdmin"
    assert not Path(env.heartbeat).exists()


def _ctld_log() -> str:
    """slurmctld's log of the test cluster ("" when slurm.conf names none)."""
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    for line in conf.read_text().splitlines():
        if line.startswith("SlurmctldLogFile="):
            return Path(line.split("=", 1)[1].strip()).read_text(errors="replace")
    return ""


def test_an_owners_hold_stays_through_rounds_until_they_release_it(
        env: Env, users: tuple[str, str]) -> None:
    """A real user holds their own job (`scontrol hold`, job_submit.lua marks it): the
    running service never releases it, round after round, while it starts the user's other
    job, and `queue` shows it held by its owner; their release returns it to the plan
    (Slurm does not release it then: the planner does, and starts it). Their
    `scontrol requeuehold` of it running is kept the same way (the service marks it
    `held=requeue`); `handback` leaves it held and names it, and their release, the
    service gone, lets it run (found by a review: the planner released an owner's hold
    when it planned the job, and kept an owner's requeue-hold until an admin released
    it)."""
    import pwd

    owner = users[0]
    uid = pwd.getpwnam(owner).pw_uid

    def as_owner(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["runuser", "-u", owner, "--", *cmd], capture_output=True,
                              text=True, timeout=60, check=False, cwd="/tmp")

    def submit(*extra: str) -> int:
        sub = as_owner("sbatch", "--parsable", "-p", "shockwave", "--gres=gpu:1", "-o",
                       "/dev/null", f"--comment={HINT.format(e=10)}", *extra,
                       "--wrap", "sleep 600")
        assert sub.returncode == 0, sub.stderr
        env.mine.append(int(sub.stdout.strip().split(";")[0]))  # cancelled at the end
        return env.mine[-1]

    def rounds() -> int:
        return int(str(env.query("SELECT COUNT(*) FROM rounds")[0][0]))

    def after_rounds(n: int) -> None:
        first = rounds()
        wait_for(lambda: rounds() >= first + n, 60, f"{n} more rounds")

    def row(jid: int) -> dict[str, object]:
        listed = {r["job_id"]: r for r in map(json.loads, env.cli("queue", "--json").splitlines())}
        return listed[jid]

    write_heartbeat(env.heartbeat, time.time(), 3600)  # the service's, as it starts: new jobs held
    held, other = submit(), submit()
    at_submit = submit("--hold")  # found by a review: the planner released it
    done = as_owner("scontrol", "hold", str(held))
    assert done.returncode == 0, done.stderr
    assert env.job(held).comment == f"{HINT.format(e=10)} held=owner"
    assert env.job(at_submit).comment == f"{HINT.format(e=10)} held=owner"
    env.serve("fifo", round_s=1.0)
    wait_for(lambda: env.job(other).state == "RUNNING", 60, "the plan starts the other job")
    after_rounds(3)
    assert env.job(held).state == "PENDING" and env.job(held).held, env.job(held)
    assert env.job(at_submit).state == "PENDING" and env.job(at_submit).held
    reason = f"held_by_owner(scontrol release {held} returns it to the plan)"
    assert row(held)["reason"] == reason
    assert row(at_submit)["reason"] == reason.replace(str(held), str(at_submit))
    done = as_owner("scontrol", "release", str(held))
    assert done.returncode == 0, done.stderr
    assert env.job(held).comment == HINT.format(e=10)
    wait_for(lambda: env.job(held).state == "RUNNING", 60, "the plan starts it")
    assert TOP_PRIORITY - PINNED_BAND < env.job(held).priority <= TOP_PRIORITY
    log = _ctld_log()
    assert f"release hold on JobId={held} by uid {uid}\n" not in log
    assert not log or f"release hold on JobId={held} by uid 0\n" in log
    # requeue-held by its owner, running: kept, marked for job_submit.lua
    done = as_owner("scontrol", "requeuehold", str(held))
    assert done.returncode == 0, done.stderr
    wait_for(lambda: env.job(held).comment.endswith(" held=requeue"), 60, "marked")
    after_rounds(3)
    assert env.job(held).state == "PENDING" and env.job(held).held
    assert row(held)["reason"] == reason
    stop(env.procs[0])
    out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "handback",
                          "--config", str(env.config())], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"left held by their owners (scontrol release N, as the owner, lets it run): " \
           f"{held}" in out.stdout
    assert env.job(held).held
    done = as_owner("scontrol", "release", str(held))  # no service: Slurm alone
    assert done.returncode == 0, done.stderr
    wait_for(lambda: env.job(held).state == "RUNNING", 60, "it runs")
    assert env.job(held).restart_count == 1 and env.job(held).comment == HINT.format(e=10)


def test_reports_are_taken_only_from_a_jobs_owner_with_a_fresh_credential(
        env: Env, users: tuple[str, str], open_dir: Path, system_python: str) -> None:
    """Issue 8's judgement on the real cluster, with Slurm's own jobs (the progress API's
    own tests use store rows): two real local users each submit a job, and the running
    service takes a report for a job from its owner alone, with a fresh MUNGE credential
    made by that user; another user's report (by HTTP, and through the vendored client,
    which says why on stderr) is 403, a replayed credential 401, and neither is stored."""
    from slurm_shockwave.client import reporter
    from slurm_shockwave.service.progress_api import body_digest
    from tests.test_progress_api import body_of, cred_as, post

    def submit(user: str) -> int:
        sub = subprocess.run(["runuser", "-u", user, "--", "sbatch", "--parsable", "-p",
                              "shockwave", "--gres=gpu:1", "-o", "/dev/null",
                              f"--comment={HINT.format(e=10)}", "--wrap", "sleep 600"],
                             capture_output=True, text=True, timeout=60, cwd="/tmp")
        assert sub.returncode == 0, sub.stderr
        env.mine.append(int(sub.stdout.strip().split(";")[0]))  # cancelled at the end
        return env.mine[-1]

    def reports(jid: int) -> int:
        return int(str(env.query(f"SELECT COUNT(*) FROM reports WHERE job_id = {jid}")[0][0]))

    endpoint = Path(env.heartbeat).parent / "endpoint"
    mine, theirs = users
    with serving_with_endpoint(env, "fifo"):
        ours, other = submit(mine), submit(theirs)
        wait_for(lambda: {ours, other} <= {int(str(r[0])) for r in env.query(
            "SELECT job_id FROM job_now")}, 60, "the service lists both jobs")
        url = endpoint.read_text().strip()

        def sent(user: str, jid: int, epoch: float) -> tuple[int, dict[str, object]]:
            body = body_of(job_id=jid, epoch=epoch)
            return post(url, body, cred_as(user, body_digest(body)))

        status, answer = sent(mine, other, 1.0)
        assert (status, answer["field"]) == (403, "job_id"), answer
        assert sent(theirs, ours, 1.0)[0] == 403
        body = body_of(job_id=ours, epoch=2.0)
        cred = cred_as(mine, body_digest(body))
        assert post(url, body, cred)[0] == 202
        status, answer = post(url, body, cred)
        assert status == 401 and "eplayed" in str(answer["error"]), answer
        # the job's side: the vendored client, run by the wrong user for the other's job
        (open_dir / "reporter.py").write_bytes(Path(reporter.__file__).read_bytes())
        told = subprocess.run(
            ["runuser", "-u", mine, "--", "env", f"PYTHONPATH={open_dir}",
             f"SHOCKWAVE_URL={url}", f"SLURM_JOB_ID={other}", system_python, "-c",
             "import reporter; print(reporter.report(epoch=3.0))"],
            capture_output=True, text=True, timeout=60, cwd="/tmp")
        assert told.stdout.split() == ["False"], told.stderr
        assert "403" in told.stderr, told.stderr
        assert (reports(ours), reports(other)) == (1, 0)


def test_hand_back_gives_elastic_jobs_the_gpus_they_asked_for(env: Env) -> None:
    """Found by a red-team: handed back, a pending elastic job kept the count the service
    last gave it, for Slurm alone to wait for and bill. On the real slurmctld, per node
    (``--gres``, resized to 4 on each of 2 nodes) and per job (``--gpus``, resized to 6):
    both go back to the 2 GPUs on one node they were submitted with. Found by a review:
    every elastic job went back to exactly its fewest nodes, so a ``--gpus=12`` job the
    service never resized was pinned to one node of 8 and never ran (BadConstraints), and
    a ``-N 1-2`` job pinned to one node by a resize kept it: each gets its range back."""
    blocker = env.submit("-p", "other", "-N", "4", "--gres=gpu:8")
    wait_for(lambda: env.job(blocker).state == "RUNNING", 30, "the cluster is full")
    comment = f"--comment={HINT.format(e=10)} gpus=1-16"
    per_node, per_job = env.submit("--gres=gpu:2", comment), env.submit("--gpus=2", comment)
    wide = env.submit("--gpus=12", comment)
    ranged = env.submit("-N", "1-2", "--gres=gpu:2", comment)
    env.backend.update_gpus(per_node, 4, nodes=2)  # as the service resizes them
    env.backend.update_gpus(per_job, 6, per_job=True)
    env.backend.update_gpus(ranged, 2, nodes=1)
    assert (env.job(per_node).gpus, env.job(per_job).gpus) == (8, 6)
    assert env.job(ranged).max_nodes == 1
    out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "handback",
                          "--config", str(env.config())], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"submitted with (elastic, as the service may have resized them): {per_node}, " \
        f"{per_job}, {ranged}" in " ".join(out.stdout.split()), out.stdout
    for jid in (per_node, per_job):
        assert (env.job(jid).gpus, env.job(jid).node_count) == (2, 1), env.job(jid)
    assert env.job(ranged).max_nodes == 2, env.job(ranged)
    env.backend.cancel(blocker)
    wait_for(lambda: all(env.job(j).state == "RUNNING"
                         for j in (per_node, per_job, wide, ranged)), 30,
             "all four run under Slurm alone")
    assert [env.job(j).gpus for j in (per_node, per_job, wide)] == [2, 2, 12]


def test_handback_refuses_while_the_service_runs(env: Env) -> None:
    proc = env.serve("fifo")
    wait_for(lambda: env.store.exists() and
             env.query("SELECT COUNT(*) FROM rounds")[0][0] >= 1, 60, "a round")
    out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "handback",
                          "--config", str(env.config())], capture_output=True, text=True)
    assert out.returncode == 2 and "stop it first" in out.stderr
    second = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "serve",
                             "--config", str(env.config()), "--rounds", "1"],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 2 and "one instance at a time" in second.stderr
    # another store, the same heartbeat: still the running service's partition
    for cmd in (["handback"], ["serve", "--rounds", "1"]):
        other = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", *cmd,
                                "--config", str(env.config()),
                                "--store", str(env.tmp / "other.db")],
                               capture_output=True, text=True, timeout=60)
        assert other.returncode == 2 and "heartbeat.lock" in other.stderr, other.stderr
    assert Path(env.heartbeat).exists()
    assert stop(proc) == 0


def test_a_service_on_another_heartbeat_than_job_submit_lua_reads_is_refused(
        env: Env) -> None:
    """Two services of one partition, each with its own store and heartbeat: the lua reads
    one heartbeat, so the service that would write another is refused before it writes
    anything; a dry run writes no heartbeat and may run."""
    other = env.tmp / "other"
    other.mkdir()
    cfg = other / "shockwave.yaml"
    cfg.write_text(f"slurm: {{round_s: 2}}\nservice: {{store: {other / 'state.db'}, "
                   f"heartbeat: {other / 'heartbeat'}, listen: '127.0.0.1:0'}}\n")
    for cmd in (["serve", "--rounds", "1"], ["plan", "--apply"]):
        out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", *cmd,
                              "--config", str(cfg)], capture_output=True, text=True,
                             timeout=60)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, out.stderr
        assert (f"service.heartbeat: this service would write {other / 'heartbeat'}, but "
                in lines[0]) and f"heartbeat {env.heartbeat}: another service" in lines[0]
    assert sorted(p.name for p in other.iterdir()) == ["shockwave.yaml"]
    dry = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "serve", "--dry-run",
                          "--rounds", "1", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr


ENV_PRINTER = """#!/bin/sh
echo "url=${SHOCKWAVE_URL:-none} signal=${SHOCKWAVE_SIGNAL:-none} spool=${SHOCKWAVE_SPOOL:-none}"
[ -n "$SHOCKWAVE_SPOOL" ] && stat -c '%a %U' "$SHOCKWAVE_SPOOL"
"""


def test_a_dry_run_beside_the_service_leaves_its_endpoint_file(env: Env) -> None:
    """A dry run (another store) listens on a free port of its own and writes no endpoint
    file, so the jobs' reports still reach the running service."""
    endpoint = Path(env.heartbeat).parent / "endpoint"
    with serving_with_endpoint(env, "fifo") as proc:
        wait_for(lambda: env.store.exists() and
                 env.query("SELECT COUNT(*) FROM rounds")[0][0] >= 1, 60, "a round")
        before = endpoint.read_text()
        out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "serve",
                              "--config", str(env.config()), "--rounds", "1", "--dry-run",
                              "--store", str(env.tmp / "dry.db")],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "endpoint file none (dry run)" in out.stderr
        assert endpoint.read_text() == before
        assert stop(proc) == 0


def test_a_listen_address_in_use_is_one_line_and_exit_2(env: Env) -> None:
    """Bound before the banner is logged: the refusal is the only line on stderr."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "serve",
                              "--config", str(env.config()), "--rounds", "1", "--dry-run",
                              "--listen", f"127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=60)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert f"127.0.0.1:{port}: --listen: progress API cannot listen there" in lines[0]


def test_a_partition_slurm_does_not_have_is_refused_at_start(env: Env) -> None:
    """Not served as an empty partition round after round (a fresh heartbeat would have
    job_submit.lua hold the real partition's new jobs, with nobody to release them)."""
    out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "serve",
                          "--config", str(env.config()), "--rounds", "1",
                          "--partition", "nosuchpartition"],
                         capture_output=True, text=True, timeout=60)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "--partition: Slurm has no partition 'nosuchpartition'" in lines[0]
    assert not env.store.exists()


def test_a_store_deleted_under_the_service_stops_it(env: Env) -> None:
    """Its writes (checkpoint intents too) would go to a file nobody reads again: it
    stops with one line naming the store, and the partition fails open."""
    proc = env.serve("fifo")
    wait_for(lambda: env.query("SELECT COUNT(*) FROM rounds")[0][0] >= 1, 60, "a round")
    env.store.unlink()
    assert proc.wait(timeout=60) == 2
    assert "service.store: was deleted or replaced while the service had it open" in \
        env.log().strip().splitlines()[-1]


def test_the_task_prolog_tells_the_job_where_the_service_is(
        backend: CliBackend, submitter: Callable[..., Submitter], managed_heartbeat: Path,
        tmp_path: Path) -> None:
    endpoint = managed_heartbeat.parent / "endpoint"
    saved = endpoint.read_bytes() if endpoint.exists() else None
    endpoint.write_text("http://127.0.0.1:7999\n")
    try:
        submit = submitter(ENV_PRINTER, "-o", str(tmp_path / "%j.out"))
        with_signal = submit(f"--comment={HINT.format(e=3)} signal=USR2 grace=9")
        plain = submit(f"--comment={HINT.format(e=3)}")
        backend.release([with_signal, plain])
        out = {j: tmp_path / f"{j}.out" for j in (with_signal, plain)}
        wait_for(lambda: all(p.exists() and "url=" in p.read_text() for p in out.values()),
                 60, "both jobs ran")
        text = out[with_signal].read_text()
        assert "url=http://127.0.0.1:7999 signal=USR2" in text
        assert f"spool=/tmp/shockwave-spool-{with_signal}" in text
        assert "700 root" in text
        assert "signal=none" in out[plain].read_text()
    finally:
        if saved is None:
            endpoint.unlink(missing_ok=True)
        else:
            endpoint.write_bytes(saved)
