"""The ways a job reaches the managed partition, against the real local cluster
(docker-slurm/start.sh): no -p (the default partition), a partition list, a later
`scontrol update partition=`, a later comment change, and the fail-open heartbeat.

Skipped with the reason when no cluster answers or SHOCKWAVE_HEARTBEAT (printed by
start.sh) is unset; SHOCKWAVE_REQUIRE_SLURM=1 turns a missing cluster into a failure.
Every test cancels its jobs and puts the heartbeat file back as it found it.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_shockwave.slurm.cli_backend import CliBackend, detail_from_line
from slurm_shockwave.slurm.hints import (
    asked_gpus,
    asked_max_nodes,
    asked_min_nodes,
    split_admin_comment,
)
from slurm_shockwave.slurm.protocol import SlurmError
from tests.live_cluster import Submitter, job, kept_heartbeat, wait_for, write_fresh

pytestmark = pytest.mark.slurm

GOOD = "model=resnet18 bs=32 epochs=9 mode=gns"
NORMALISED = "shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=gns"
WORKER = "#!/bin/sh\nwhile true; do sleep 1; done\n"


class Heartbeat:
    """The scheduler service's heartbeat file, as job_submit.lua reads it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fresh(self) -> None:
        write_fresh(self.path, 3600)

    def stale(self) -> None:
        self.path.write_text(f"{int(time.time()) - 600} 30\n")

    def missing(self) -> None:
        self.path.unlink(missing_ok=True)


@pytest.fixture
def heartbeat(backend: CliBackend) -> Iterator[Heartbeat]:
    with kept_heartbeat() as path:
        yield Heartbeat(path)


@pytest.fixture
def jobs(submitter: Callable[..., Submitter]) -> Submitter:
    """Submit jobs that are cancelled when the test ends."""
    return submitter(WORKER, "-o", "/dev/null")


def stamped(admin_comment: str) -> bool:
    """The plugin's normalised hint, stamped with the submission (or move) time."""
    hint, submitted = split_admin_comment(admin_comment)
    return hint == NORMALISED and submitted is not None \
        and abs(submitted - time.time()) < 120


def scontrol_update(job_id: int, *settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", "update", f"jobid={job_id}", *settings],
                          capture_output=True, text=True, timeout=60, check=False)


def ctld_log() -> Path:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    m = re.search(r"(?m)^SlurmctldLogFile\s*=\s*(\S+)", out)
    assert m, "no SlurmctldLogFile in scontrol show config"
    return Path(m.group(1))


def managed_is_default() -> bool:
    out = subprocess.run(["scontrol", "show", "partition", "shockwave"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return "Default=YES" in out


def test_no_partition_is_managed_iff_the_default_is(backend, jobs, heartbeat) -> None:
    heartbeat.fresh()
    jid = jobs("--gres=gpu:1", f"--comment={GOOD}")
    j = job(backend, jid)
    if managed_is_default():
        assert j.partition == "shockwave" and j.held and j.priority == 0
        assert stamped(j.admin_comment)
        with pytest.raises(SlurmError, match="field 'epochs': expected an integer"):
            jobs("--gres=gpu:1", "--comment=bs=32 epochs=0")
    else:
        assert j.partition != "shockwave" and j.admin_comment == ""


def test_a_job_with_no_hint_is_told_what_one_is(backend, jobs, heartbeat) -> None:
    """An admin walkthrough: a user who never wrote a hint read "field 'bs': missing"."""
    heartbeat.fresh()
    told = r"say what they train in --comment, at least the batch size and epochs, e\.g\. " \
           r"--comment \"bs=32 epochs=90\""
    for comment in ((), ("--comment=  ",)):
        with pytest.raises(SlurmError, match=told):
            jobs("-p", "shockwave", "--gres=gpu:1", *comment)
    with pytest.raises(SlurmError, match="field 'epochs': missing"):
        jobs("-p", "shockwave", "--gres=gpu:1", "--comment=bs=32")


def test_managed_partition_in_a_list_is_rejected(backend, jobs, heartbeat) -> None:
    heartbeat.fresh()
    with pytest.raises(SlurmError, match="cannot be combined with other partitions"):
        jobs("-p", "other,shockwave", "--gres=gpu:1", f"--comment={GOOD}")
    with pytest.raises(SlurmError, match="cannot be combined with other partitions"):
        jobs("-p", "shockwave,other", "--gres=gpu:1", f"--comment={GOOD}")


def test_moving_a_job_into_the_managed_partition_validates_it(backend, jobs,
                                                              heartbeat) -> None:
    heartbeat.fresh()
    # pending for another reason than a hold (a begin time), so the hold is ours
    bad = jobs("-p", "other", "--begin=now+3600", "--gres=gpu:1", "--comment=bs=abc epochs=9")
    proc = scontrol_update(bad, "partition=shockwave")
    assert proc.returncode != 0, proc.stdout
    assert job(backend, bad).partition == "other"
    pattern = f"job {bad}: shockwave: bad hint in --comment: field 'bs'"
    wait_for(lambda: pattern in ctld_log().read_text(errors="replace"), 10)

    good = jobs("-p", "other", "--begin=now+3600", "--gres=gpu:1", f"--comment={GOOD}")
    assert not job(backend, good).held
    proc = scontrol_update(good, "partition=shockwave")
    assert proc.returncode == 0, proc.stderr
    j = job(backend, good)
    # not held by the plugin: a hold set in root's update is root's (JobHeldAdmin), which
    # the planner never lifts (a red-team: held for ever beside idle GPUs)
    assert j.partition == "shockwave" and not j.held and j.reason != "JobHeldAdmin"
    assert stamped(j.admin_comment)


def test_a_job_an_admin_moves_in_is_the_planners_to_hold_or_start(backend, jobs,
                                                                  heartbeat) -> None:
    """Found by a red-team: job_submit.lua held a job moved into the managed partition,
    and Slurm records a hold set in an admin's update as the admin's (JobHeldAdmin), so
    the planner, which never lifts an admin's hold, left it waiting for ever with every
    GPU idle. Moved in unheld, it is the planner's: here every GPU is taken, so the
    service's next round holds it with its own (user) hold."""
    from slurm_shockwave.clock import WallClock
    from slurm_shockwave.engine.round import run_round
    from slurm_shockwave.policies.registry import make_policy
    from slurm_shockwave.slurm.world import SlurmCluster

    heartbeat.fresh()
    nodes = [n for n in backend.list_nodes() if "shockwave" in n.partitions and n.gpus]
    busy = jobs("-p", "other", "-N", str(len(nodes)), f"--gres=gpu:{min(n.gpus for n in nodes)}")
    wait_for(lambda: job(backend, busy).state == "RUNNING", 30)
    moved = jobs("-p", "other", "--gres=gpu:1", f"--comment={GOOD}")
    assert scontrol_update(moved, "partition=shockwave").returncode == 0
    j = job(backend, moved)
    assert j.partition == "shockwave" and j.state == "PENDING" and not j.held
    time.sleep(1.1)  # eligible from the second of its move on
    world = SlurmCluster(backend, WallClock())
    run_round(world, make_policy("fifo"), {}, world)
    j = job(backend, moved)
    assert j.held and j.reason == "JobHeldUser", j


def test_a_job_moved_out_of_the_managed_partition_leaves_the_planners_hold(
        backend, jobs, heartbeat) -> None:
    """Found by a red-team: a job moved out kept the planner's hold, and the service, which
    lists its own partition only, never released it. The service's next apply gives it
    back (on the real slurmctld), and the priority Slurm computes to a job released at the
    planner's pinned priority; the owner's own hold and an admin's stay."""
    from slurm_shockwave.slurm.listing import PINNED_BAND, TOP_PRIORITY
    from slurm_shockwave.slurm.world import SlurmCluster
    from tests.builders import WallLikeClock

    heartbeat.fresh()
    planner = jobs("-p", "shockwave", "--begin=now+3600", "--gres=gpu:1", f"--comment={GOOD}")
    owner = jobs("-p", "shockwave", "--hold", "--gres=gpu:1", f"--comment={GOOD}")
    admin = jobs("-p", "shockwave", "--begin=now+3600", "--gres=gpu:1", f"--comment={GOOD}")
    assert scontrol_update(admin, "priority=0").returncode == 0  # root's: an admin hold
    pin = jobs("-p", "shockwave", "--begin=now+3600", "--gres=gpu:1", f"--comment={GOOD}")
    # released at the planner's priority, as the service starts a job
    backend.release([pin])
    assert scontrol_update(pin, f"priority={TOP_PRIORITY - 1}").returncode == 0
    world = SlurmCluster(backend, WallLikeClock())
    world.observe()
    for jid in (planner, owner, admin, pin):
        assert job(backend, jid).held == (jid != pin)
        assert scontrol_update(jid, "partition=other").returncode == 0
    world.observe()
    world.apply([])
    moved = job(backend, planner)
    assert moved.partition == "other" and not moved.held and moved.priority > 0
    assert job(backend, owner).held and job(backend, admin).held
    assert 0 < job(backend, pin).priority < TOP_PRIORITY - PINNED_BAND


def test_a_job_name_holding_a_key_does_not_forge_the_admin_comment(
        backend, jobs, heartbeat) -> None:
    """Found by a review: ``scontrol -o`` prints the job's name first, and the backend
    took the first ``AdminComment=`` it found, so a job named ``x AdminComment=shockwave:v1
    ... submitted=1`` was planned with the hint, submission time and GPUs of its name.
    Such a line is read from Slurm's JSON instead (on the real slurmctld), and a name
    holding a newline, which breaks Slurm's one-line listings (the job was not listed at
    all, and its line could pass for another job's), is refused, and so is a rename to
    one; another partition's such job forges nothing."""
    heartbeat.fresh()
    forged = "x AdminComment=shockwave:v1 bs=1 epochs=1 mode=static submitted=1"
    jid = jobs("-p", "shockwave", "-J", forged, "--gres=gpu:1", f"--comment={GOOD}")
    victim = jobs("-p", "shockwave", "--gres=gpu:1", f"--comment={GOOD}")
    line = f"y\nJobId={victim} JobName=z {forged.removeprefix('x ')} Partition=shockwave"
    with pytest.raises(SlurmError, match="may not hold a control character"):
        jobs("-p", "shockwave", "-J", line, "--gres=gpu:1", f"--comment={GOOD}")
    assert scontrol_update(victim, f"name={line}").returncode != 0
    jobs("-p", "other", "--begin=now+3600", "-J", line, "--gres=gpu:1")
    listed = {j.job_id: j for j in backend.list_jobs("shockwave")}
    for j in (jid, victim):
        assert stamped(listed[j].admin_comment), (j, listed[j].admin_comment)
        assert asked_gpus(listed[j].admin_comment) == 1
    # Slurm's own line is read as text: its admin comment right after the work directory
    line = subprocess.run(["scontrol", "-o", "-d", "show", "job", str(victim)],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    detail = detail_from_line(line.strip())
    assert detail is not None and detail.admin_comment == listed[victim].admin_comment, line


def test_the_hint_of_a_managed_job_cannot_change(backend, jobs, heartbeat) -> None:
    heartbeat.fresh()
    jid = jobs("-p", "shockwave", "--gres=gpu:1", f"--comment={GOOD}")
    proc = scontrol_update(jid, "comment=bs=64 epochs=9")
    assert proc.returncode != 0
    j = job(backend, jid)
    assert j.comment == GOOD and stamped(j.admin_comment)
    assert scontrol_update(jid, "comment=" + GOOD).returncode == 0  # no change: fine
    assert scontrol_update(jid, "timelimit=10").returncode == 0  # anything else passes


def test_an_elastic_job_is_given_no_other_gres_by_an_update(backend, jobs, heartbeat) -> None:
    """Found by a review: refused at submit, other GRES could still be given to a queued
    elastic job by ``scontrol update gres=...``, and its next resize dropped them. The
    service's own resize (GPUs alone) passes."""
    heartbeat.fresh()
    jid = jobs("-p", "shockwave", "--gres=gpu:2", f"--comment={GOOD} gpus=1-4")
    assert scontrol_update(jid, "gres=gpu:2,nvme:1").returncode != 0
    # Slurm drops a job_modify's message to the user ("Unspecified error"); its log has it
    assert f"lua: job {jid}: shockwave: an elastic job (gpus=LO-HI in --comment) asks for " \
        "no GRES but GPUs" in ctld_log().read_text()
    assert scontrol_update(jid, "gres=gpu:4").returncode == 0


@pytest.mark.parametrize("gpus", [("--gres=gpu:2",), ("--gres=gpu:1", "-N", "2"),
                                  ("--gpus=3",)])
def test_the_gpus_a_job_asked_for_are_stamped_as_the_service_reads_them(
        backend, jobs, heartbeat, gpus: tuple[str, ...]) -> None:
    """job_submit.lua's asked_gpus (an elastic job's request, which the service's GRES
    updates do not move) is the count the backend lists for the job before any resize,
    whatever sbatch option asked for it (docs/hints.md)."""
    heartbeat.fresh()
    j = job(backend, jobs("-p", "shockwave", *gpus, f"--comment={GOOD}"))
    assert j.gpus > 0 and asked_gpus(j.admin_comment) == j.gpus, j.admin_comment


@pytest.mark.parametrize(("args", "fewest", "most"), [(("--gpus=7", "-N", "2"), 2, 2),
                                                     (("--gpus=12", "-N", "2-4"), 2, 4),
                                                     (("--gres=gpu:1", "-N", "3"), 3, 3),
                                                     (("--gpus=7",), 1, 0),
                                                     (("--gpus=3", "-N", "1-2"), 1, 2)])
def test_the_node_range_a_job_asked_for_is_stamped(backend, jobs, heartbeat,
                                                   args: tuple[str, ...], fewest: int,
                                                   most: int) -> None:
    """job_submit.lua's asked_nodes: the ``-N`` range (1-0 where none, 0 no most), which
    Slurm's listing cannot give (a requeued ``--gpus=8`` that ran 7 + 1 lists 2 nodes,
    then runs on one: measured), so a per-job count placed over at least that many nodes
    is read from the stamp, and the hand-back gives the range back; checked on the real
    slurmctld."""
    heartbeat.fresh()
    j = job(backend, jobs("-p", "shockwave", *args, f"--comment={GOOD}"))
    assert asked_min_nodes(j.admin_comment) == fewest, j.admin_comment
    assert asked_max_nodes(j.admin_comment) == most, j.admin_comment
    assert split_admin_comment(j.admin_comment)[1]


@pytest.mark.parametrize("state", ["stale", "missing"])
def test_without_a_fresh_heartbeat_jobs_run_under_slurm_alone(backend, jobs, heartbeat,
                                                              state: str) -> None:
    getattr(heartbeat, state)()
    jid = jobs("-p", "shockwave", "--gres=gpu:1", f"--comment={GOOD}")
    j = job(backend, jid)
    assert not j.held and stamped(j.admin_comment)  # validated, not held
    wait_for(lambda: job(backend, jid).state == "RUNNING", 30)
    with pytest.raises(SlurmError, match="field 'bs'"):  # still validated
        jobs("-p", "shockwave", "--gres=gpu:1", "--comment=bs=0 epochs=1")


def test_with_a_fresh_heartbeat_jobs_are_held(backend, jobs, heartbeat) -> None:
    heartbeat.fresh()
    jid = jobs("-p", "shockwave", "--gres=gpu:1", f"--comment={GOOD}")
    j = job(backend, jid)
    assert j.state == "PENDING" and j.held and j.priority == 0


def test_a_job_that_asks_gpus_per_task_is_counted_whole(backend, jobs, heartbeat) -> None:
    """``-n 3 --gpus-per-task=2`` is 6 GPUs while it waits, in the listing the planner
    reads and in job_submit.lua's stamp (the fields ``tres_per_task`` and ``num_tasks``,
    checked here on the real slurmctld); read as none, it was planned as 1 GPU. An
    elastic job cannot ask per task: Slurm refuses its GRES update (measured on 22.05)."""
    heartbeat.fresh()
    for args, gpus in ((("-n", "3", "--gpus-per-task=2"), 6),
                       # Slurm makes the counts agree (found by a review: read as 16)
                       (("--gpus=8", "--gpus-per-task=1"), 8),
                       (("-n", "2", "--gres=gpu:4", "--gpus-per-task=2"), 4)):
        j = job(backend, jobs("-p", "shockwave", *args, f"--comment={GOOD}"))
        assert (j.state, j.gpus, asked_gpus(j.admin_comment)) == ("PENDING", gpus, gpus)
    with pytest.raises(SlurmError, match="cannot be resized"):
        jobs("-p", "shockwave", "-n", "2", "--gpus-per-task=1", f"--comment={GOOD} gpus=1-4")


def test_gpus_asked_two_ways_or_of_two_types_are_refused(backend, jobs, heartbeat) -> None:
    """Found by a red-team: Slurm gives ``--gres=gpu:1 --gpus-per-node=2`` 1 GPU a node
    and spreads ``--gres=gpu:1 --gpus=2`` over two nodes, where the sum of the requests
    read 3 and 4 (job_submit.lua's stamp, the CLI backend's count); no node has two types.
    Refused at submit on the real slurmctld (the fields job_desc carries for them); per
    task beside per node is admitted, Slurm's to make agree."""
    heartbeat.fresh()
    for args in (("--gres=gpu:1", "--gpus-per-node=2"), ("--gres=gpu:1", "--gpus=2"),
                 ("--gres=gpu:1,gpu:2",)):
        with pytest.raises(SlurmError, match="asks for its GPUs one way"):
            jobs("-p", "shockwave", *args, f"--comment={GOOD}")
    j = job(backend, jobs("-p", "shockwave", "-n", "2", "--gres=gpu:4", "--gpus-per-task=2",
                          f"--comment={GOOD}"))
    assert j.gpus == asked_gpus(j.admin_comment) == 4


def test_a_job_that_cannot_be_requeued_is_refused(backend, jobs, heartbeat) -> None:
    """The planner stops a job by requeueing it; Slurm refuses that for a
    ``--no-requeue`` job, which then could never be preempted: refused at submit and as
    an update (job_submit.lua's ``requeue`` field, checked on the real slurmctld)."""
    heartbeat.fresh()
    with pytest.raises(SlurmError, match="must be requeueable"):
        jobs("-p", "shockwave", "--no-requeue", "--gres=gpu:1", f"--comment={GOOD}")
    jid = jobs("-p", "shockwave", "--gres=gpu:1", f"--comment={GOOD}")
    proc = scontrol_update(jid, "requeue=0")  # 22.05 says only "Unspecified error"
    assert proc.returncode != 0, proc.stdout
    shown = subprocess.run(["scontrol", "show", "job", str(jid)], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert " Requeue=1 " in shown


def test_interactive_and_heterogeneous_jobs_are_refused(backend, jobs, heartbeat,
                                                         tmp_path: Path) -> None:
    """Slurm requeues only batch jobs, and a het job's hold or requeue acts on all its
    components, so the planner could never stop either: ``salloc``, ``srun`` and a het
    ``sbatch`` are refused in the managed partition (job_submit.lua's ``script`` and
    ``het_job_offset``, checked on the real slurmctld); another partition's het job is
    not."""
    heartbeat.fresh()
    for tool in ("salloc", "srun"):
        proc = subprocess.run([tool, "-p", "shockwave", "--gres=gpu:1", f"--comment={GOOD}",
                               "true"], capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "interactive jobs (salloc, srun)" in proc.stderr, \
            proc.stderr
    with pytest.raises(SlurmError, match="heterogeneous jobs are not planned"):
        jobs("-p", "shockwave", "--gres=gpu:1", f"--comment={GOOD}", ":", "-p",
             "shockwave", "--gres=gpu:1")
    jobs("-p", "other", "--begin=now+3600", "--gres=gpu:1", ":", "-p", "other",
         "--gres=gpu:1")


def test_a_hold_mark_in_the_users_comment_is_dropped(backend, jobs, heartbeat) -> None:
    """Found by a red-team: a comment ending in ``held=requeue`` was kept, so the owner's
    release of the planner's hold passed as if of a requeue-hold. The mark is dropped
    (checked on the real slurmctld) and the job is the planner's to release."""
    heartbeat.fresh()
    jid = jobs("-p", "shockwave", "--gres=gpu:1", f"--comment={GOOD} held=requeue")
    listed = job(backend, jid)
    assert listed.comment == GOOD and stamped(listed.admin_comment)
    assert listed.held and listed.reason == "JobHeldUser"


def test_a_job_array_is_refused_in_the_managed_partition(backend, jobs, heartbeat) -> None:
    """``sbatch --array`` reaches job_submit.lua as ``array_inx`` (checked here on the real
    slurmctld): refused with what to do instead; moved in later, refused too; another
    partition's arrays are untouched."""
    heartbeat.fresh()
    with pytest.raises(SlurmError, match="job arrays are not planned"):
        jobs("-p", "shockwave", "--array=0-1", "--gres=gpu:1", f"--comment={GOOD}")
    other = jobs("-p", "other", "--array=0-1", "--begin=now+3600", "--gres=gpu:1",
                 f"--comment={GOOD}")
    proc = scontrol_update(other, "partition=shockwave")
    assert proc.returncode != 0, proc.stdout
    assert job(backend, other).partition == "other"
