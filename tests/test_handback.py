"""Handing the partition back (service/handback.py) over the fake Slurm: what it releases."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurm_shockwave.service.handback import hand_back
from slurm_shockwave.slurm.fake import FakeSlurm
from slurm_shockwave.slurm.listing import TOP_PRIORITY
from slurm_shockwave.slurm.protocol import SlurmJob, SlurmNode

HINT = "shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=static submitted=900"


def cluster(*jobs: SlurmJob) -> FakeSlurm:
    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave",))])
    for j in jobs:
        fake.add(j)
    return fake


def test_a_job_planned_from_its_raw_comment_is_handed_back_too(tmp_path: Path) -> None:
    """The planner plans a job whose hint is only its --comment (submitted while
    job_submit.lua was not loaded). Found by a review: hand_back looked for the admin
    comment alone, so such jobs stayed held, or pinned, after the service was gone."""
    comment = "model=ResNet-18 bs=32 epochs=9"
    fake = cluster(
        SlurmJob(2, "j2", "alice", "shockwave", "PENDING", held=True, priority=0, gpus=1,
                 reason="JobHeldUser", comment=comment, submit_time=901),
        SlurmJob(3, "j3", "alice", "shockwave", "PENDING", priority=TOP_PRIORITY - 50,
                 gpus=1, comment=comment, submit_time=902),
        SlurmJob(4, "j4", "bob", "shockwave", "PENDING", held=True, priority=0, gpus=1,
                 reason="JobHeldUser", comment="not a hint", submit_time=903))
    done = hand_back(fake, "shockwave", str(tmp_path / "heartbeat"))
    assert done.released == (2,) and done.unpinned == (3,) and not done.errors
    assert not fake.jobs[2].held and fake.jobs[4].held  # not ours: left as it is


def test_a_job_still_completing_its_requeue_is_waited_for(tmp_path: Path) -> None:
    """The last round requeued job 5 and held it; a hold of a job still completing takes
    effect once it is pending (measured on 22.05). Found by a review: hand_back skipped
    it, and it came back held with nothing left to release it."""
    fake = cluster(SlurmJob(5, "j5", "alice", "shockwave", "COMPLETING", gpus=1, nodes="n1",
                            admin_comment=HINT, submit_time=900, restart_count=1))
    now = [0.0]

    def requeue_done(seconds: float) -> None:  # Slurm finishes the requeue meanwhile
        now[0] += seconds
        if now[0] >= 3:
            fake.jobs[5] = replace(fake.jobs[5], state="PENDING", held=True, priority=0,
                                   reason="JobHeldUser", nodes="")

    done = hand_back(fake, "shockwave", str(tmp_path / "heartbeat"), sleep=requeue_done,
                     clock=lambda: now[0])
    assert done.released == (5,) and not fake.jobs[5].held
    fake.jobs[5] = replace(fake.jobs[5], state="COMPLETING")  # one that never ends in time
    late = hand_back(fake, "shockwave", str(tmp_path / "heartbeat"), wait_s=5,
                     sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    assert "still completing after 5 s" in late.errors[5]


def test_a_running_job_s_pinned_priority_is_unpinned_too(tmp_path: Path) -> None:
    """Left from the last review: only pending jobs were unpinned (by a hold and a
    release); a running one kept the planner's priority, and ran before every other job
    if Slurm requeued it later. Root's release unpins a job that is not held, running or
    pending (measured on 22.05), so no hold is needed either."""
    fake = cluster(
        SlurmJob(6, "j6", "alice", "shockwave", "RUNNING", priority=TOP_PRIORITY - 7,
                 gpus=1, nodes="n1", admin_comment=HINT, submit_time=900),
        SlurmJob(7, "j7", "alice", "shockwave", "RUNNING", priority=1000, gpus=1,
                 nodes="n1", admin_comment=HINT, submit_time=901))
    done = hand_back(fake, "shockwave", str(tmp_path / "heartbeat"))
    assert done.unpinned == (6,) and not done.errors
    assert fake.jobs[6].priority < TOP_PRIORITY - 100_000 and fake.jobs[7].priority == 1000


def test_jobs_their_owners_hold_are_left_held_and_named(tmp_path: Path) -> None:
    """A job its owner holds (job_submit.lua's `held=owner` mark) or requeue-held is the
    owner's to release, not the service's: a hand-back leaves it held and names it, and
    releases the planner's own holds. Over an earlier build's store, a requeue-hold was
    that build's own and is released; an owner's marked hold never was."""
    def pending(jid: int, reason: str, comment: str = "") -> SlurmJob:
        return SlurmJob(jid, f"j{jid}", "alice", "shockwave", "PENDING", held=True,
                        priority=0, gpus=1, reason=reason, comment=comment,
                        admin_comment=HINT, submit_time=900 + jid)
    jobs = (pending(1, "JobHeldUser", "bs=32 epochs=9 held=owner"),
            pending(2, "job requeued in held state"), pending(3, "JobHeldUser"))
    done = hand_back(cluster(*jobs), "shockwave", str(tmp_path / "heartbeat"))
    assert done.released == (3,) and done.owner_held == (1, 2) and not done.errors
    fake = cluster(*jobs)
    earlier = hand_back(fake, "shockwave", str(tmp_path / "heartbeat"), earlier_build=True)
    assert earlier.released == (2, 3) and earlier.owner_held == (1,)
    assert fake.jobs[1].held


ELASTIC = ("shockwave:v1 model=ResNet-18 bs=32 epochs=9 mode=static gpus=1-8 submitted=900 "
           "asked_gpus=2 asked_nodes=1")


def test_an_elastic_job_is_handed_back_at_the_count_its_owner_asked(tmp_path: Path) -> None:
    """Found by a red-team: a pending elastic job the service last resized (8 GPUs on 2
    nodes) was released at that count, for Slurm alone to wait for and bill; a running
    one cannot change, and is named. Per node and per job (``--gpus=2``) alike."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 4, 0, ("shockwave",)) for i in (1, 2)])
    fake.add(SlurmJob(2, "j2", "alice", "shockwave", "PENDING", held=True, priority=0,
                      gpus=8, node_count=2, reason="JobHeldUser", admin_comment=ELASTIC,
                      submit_time=901))
    fake.add(SlurmJob(3, "j3", "alice", "shockwave", "PENDING", held=True, priority=0,
                      gpus=4, node_count=1, reason="JobHeldUser", admin_comment=ELASTIC,
                      submit_time=902, asks_per_job=True))
    fake.add(SlurmJob(4, "j4", "alice", "shockwave", "RUNNING", gpus=4, node_count=1,
                      nodes="n1", admin_comment=ELASTIC, submit_time=903))
    fake.add(SlurmJob(5, "j5", "alice", "shockwave", "PENDING", held=True, priority=0,
                      gpus=4, reason="JobHeldUser", admin_comment=HINT, submit_time=904))
    done = hand_back(fake, "shockwave", str(tmp_path / "heartbeat"))
    assert done.restored == (2, 3) and done.resized_running == (4,) and not done.errors
    assert (fake.jobs[2].gpus, fake.jobs[2].node_count) == (2, 1)
    assert (fake.jobs[3].gpus, fake.jobs[3].asks_per_job) == (2, True)
    assert fake.jobs[5].gpus == 4  # a fixed job's count is never the service's
    assert done.released == (2, 3, 5)


def test_a_job_the_checkpoint_signal_killed_is_run_again(tmp_path: Path) -> None:
    """Found by a red-team: stopped right after a round signalled it, the service left a
    job its signal killed before it could handle it (FAILED, SIGUSR1); its next round
    would have run it again, the hand-back did not, and the job was lost."""
    from slurm_shockwave.slurm.intents import CheckpointIntent

    fake = cluster(SlurmJob(6, "j6", "alice", "shockwave", "FAILED", gpus=1,
                            admin_comment=HINT, submit_time=900, start_time=990,
                            exit_signal=10),
                   SlurmJob(7, "j7", "alice", "shockwave", "FAILED", gpus=1,
                            admin_comment=HINT, submit_time=900, start_time=990,
                            exit_signal=9))
    intents = {jid: CheckpointIntent(jid, "USR1", 1000.0, 1030.0, 0) for jid in (6, 7)}
    done = hand_back(fake, "shockwave", str(tmp_path / "heartbeat"), intents=intents)
    assert done.rerun == (6,) and fake.jobs[6].state == "PENDING"
    assert not fake.jobs[6].held and fake.jobs[7].state == "FAILED"


def test_a_job_that_ended_and_is_stuck_completing_is_not_waited_for(tmp_path: Path) -> None:
    """Found by a red-team: a job that ended and sits in COMPLETING (a hung Epilog) made
    every hand-back wait 120 s and exit 1, telling the admin to wait for it to be
    pending, which it never is. Only the jobs the service requeued (its store says) are
    waited for."""
    fake = cluster(SlurmJob(8, "j8", "alice", "shockwave", "COMPLETING", gpus=1, nodes="n1",
                            admin_comment=HINT, submit_time=900))
    now = [0.0]
    done = hand_back(fake, "shockwave", str(tmp_path / "heartbeat"), requeued={5},
                     sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    assert not done.errors and now[0] == 0.0


def test_the_jobs_the_service_requeued_are_read_from_its_store() -> None:
    """What a hand-back waits for while completing: a checkpoint in flight, a preemption,
    a move (the round's own words, ``engine.round.MOVED``); not a job that ran on."""
    from slurm_shockwave.engine.round import MOVED
    from slurm_shockwave.service.handback import requeued_by_service
    from slurm_shockwave.service.store import JobRow
    from slurm_shockwave.slurm.intents import CheckpointIntent

    rows = {1: JobRow(1, reason="preempted_priority(for 4)", action="preempt"),
            2: JobRow(2, reason=f"kept_running({MOVED} for 9)", action="start"),
            3: JobRow(3, reason="kept_running", action="keep")}
    intents = {4: CheckpointIntent(4, "USR1", 1.0, 2.0, 0)}
    assert requeued_by_service(rows, intents) == {1, 2, 4}


def test_an_elastic_job_gets_back_its_node_range_and_one_never_resized_is_left() -> None:
    """Found in a review: the hand-back gave every elastic job exactly its fewest nodes,
    resized or not, so a ``--gpus=12`` job that never was (nodes of 8) was pinned to one
    node and never ran (BadConstraints on 22.05), and a ``-N 1-2`` job lost its range. The
    stamp's range comes back: with no most, per job the partition's nodes (Slurm packs
    it), per node its fewest (a range would give it a count on every free node). A second
    review: a range whose listed fewest is above the stamp's is set again (the listing is
    Slurm's estimate, the same for a job the service pinned), a job with an older stamp
    is not widened, and a per-node job pinned at its own count per node is found by its
    node count."""
    nodes = [SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",)) for i in (1, 2, 3)]
    fake = FakeSlurm([*nodes, SlurmNode("x", ("IDLE",), 8, 0, ("other",))])

    def add(jid: int, stamp: str, **kw: object) -> None:
        fields = {"held": True, "priority": 0, "reason": "JobHeldUser", "submit_time": 900,
                  **kw}
        fake.add(SlurmJob(jid, f"j{jid}", "alice", "shockwave", "PENDING",
                          admin_comment=ELASTIC.replace("asked_gpus=2 asked_nodes=1", stamp),
                          **fields))  # type: ignore[arg-type]

    add(1, "asked_gpus=12 asked_nodes=1-0", gpus=12, node_count=2, asks_per_job=True)
    add(2, "asked_gpus=8 asked_nodes=1-2", gpus=16, node_count=2, max_nodes=2)  # 2-2
    add(3, "asked_gpus=12 asked_nodes=1-0", gpus=6, node_count=1, max_nodes=1,
        asks_per_job=True)
    add(4, "asked_gpus=4 asked_nodes=1-2", gpus=4, node_count=1, max_nodes=1)  # pinned
    add(5, "asked_gpus=2 asked_nodes=1-0", gpus=4, node_count=2, max_nodes=2)
    add(6, "asked_gpus=2 asked_nodes=1", gpus=4, node_count=2, max_nodes=2)  # older stamp
    add(7, "asked_gpus=8 asked_nodes=2", gpus=8, node_count=2, max_nodes=2,
        asks_per_job=True)  # an older stamp's -N 2 --gpus=8, never resized
    add(8, "asked_gpus=8 asked_nodes=1-0", gpus=16, node_count=2)  # grown 2 x 8, no most
    calls: list[tuple[int, int, int | None, int | None]] = []
    real = fake.update_gpus

    def update(job_id: int, gpus: int, *, nodes: int | None = None, gpu_type: str = "",
               per_job: bool = False, max_nodes: int | None = None) -> None:
        calls.append((job_id, gpus, nodes, max_nodes))
        real(job_id, gpus, nodes=nodes, gpu_type=gpu_type, per_job=per_job,
             max_nodes=max_nodes)

    fake.update_gpus = update  # type: ignore[method-assign]
    done = hand_back(fake, "shockwave", "/nonexistent/heartbeat")
    assert not done.errors and done.restored == (2, 3, 4, 5, 6, 8)
    assert calls == [(2, 8, 1, 2), (3, 12, 1, 3), (4, 4, 1, 2), (5, 2, 1, 1), (6, 2, 1, 1),
                     (8, 8, 1, 1)]
    assert (fake.jobs[3].gpus, fake.jobs[3].max_nodes) == (12, 3)
    assert (fake.jobs[5].gpus, fake.jobs[5].node_count, fake.jobs[5].max_nodes) == (2, 1, 1)
    again = hand_back(fake, "shockwave", "/nonexistent/heartbeat")
    assert again.restored == ()  # handed back, as it asked


def test_a_requeued_elastic_job_is_given_its_request_whatever_its_listing_says() -> None:
    """Found by a review: a job run on one node, requeued, and widened by the service to
    8 GPUs on each of 2 nodes is listed by squeue with its last run's node count, 8 on 1,
    its request as stamped: read as unchanged, it was left at 16."""
    fake = FakeSlurm([SlurmNode(f"n{i}", ("IDLE",), 8, 0, ("shockwave",)) for i in (1, 2)])
    fake.add(SlurmJob(9, "j9", "alice", "shockwave", "PENDING", held=True, priority=0,
                      reason="JobHeldUser", submit_time=900, gpus=16, node_count=2,
                      restart_count=1,
                      admin_comment=ELASTIC.replace("asked_gpus=2 asked_nodes=1",
                                                    "asked_gpus=8 asked_nodes=1")))
    fake._last_nodes[9] = 1  # as the requeue of its run on one node left it
    # as squeue and scontrol list it (tests/test_slurm_contract.py): no node range
    assert [(j.gpus, j.node_count, j.max_nodes) for j in fake.list_jobs()] == [(8, 1, 0)]
    done = hand_back(fake, "shockwave", "/nonexistent/heartbeat")
    assert done.restored == (9,) and not done.errors
    assert (fake.jobs[9].gpus, fake.jobs[9].node_count) == (8, 1)
