"""The actuation waits read from slurmctld's log (lines as Slurm 22.05 writes them)."""

from __future__ import annotations

from pathlib import Path

from slurm_shockwave.live.ctld_log import actuation_waits, log_summaries, summary

LOG = """\
[2026-12-02T01:03:00.238] _slurm_rpc_submit_batch_job: JobId=5 InitPrio=0 usec=220
[2026-12-02T01:03:00.284] sched: _release_job_rec: release hold on JobId=5 by uid 0
[2026-12-02T01:03:00.289] sched: _update_job: set priority to 1000000 for JobId=5
[2026-12-02T01:03:00.492] sched/backfill: _start_job: Started JobId=5 in shockwave on sw-node1
[2026-12-02T01:03:01.238] _slurm_rpc_submit_batch_job: JobId=6 InitPrio=0 usec=265
[2026-12-02T01:03:02.000] sched: _update_job: set priority to 999999 for JobId=5
[2026-12-02T01:03:08.354] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=5 uid 0
[2026-12-02T01:03:09.021] Requeuing JobId=5
[2026-12-02T01:03:20.000] sched: _update_job: set priority to 949999 for JobId=6
[2026-12-02T01:03:21.000] sched: _hold_job_rec: hold on JobId=6 by uid 0
[2026-12-02T01:03:32.583] sched: _release_job_rec: release hold on JobId=5 by uid 0
[2026-12-02T01:03:32.596] sched: _update_job: set priority to 949999 for JobId=5
[2026-12-02T01:03:33.046] sched: Allocate JobId=5 NodeList=sw-node1 #CPUs=1 Partition=shockwave
[2026-12-02T01:03:40.590] sched: _release_job_rec: release hold on JobId=6 by uid 0
[2026-12-02T01:03:41.361] sched: Allocate JobId=6 NodeList=sw-node2 #CPUs=1 Partition=shockwave
[2026-12-02T01:03:50.000] _job_complete: JobId=6 WEXITSTATUS 0
[2026-12-02T01:03:50.001] _job_complete: JobId=6 done
[2026-12-02T01:03:51.000] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=6 uid 0
[2026-12-02T01:03:52.000] _slurm_rpc_submit_batch_job: JobId=7 InitPrio=1 usec=200
[2026-12-02T01:03:52.500] sched: Allocate JobId=7 NodeList=sw-node2 #CPUs=1 Partition=shockwave
not a log line
"""


def test_start_and_requeue_waits_from_the_controller_log() -> None:
    waits = actuation_waits(LOG.splitlines())
    # job 5: released at :00.284, started :00.492; requeued, released :32.583, allocated
    # :33.046 (its priority re-pinned while running is no release); job 6: the release at
    # :20 is cancelled by the hold at :21, released again :40.590, allocated :41.361; job 7
    # starts with no release (Slurm alone)
    assert waits.start == [0.208, 0.463, 0.771]
    # job 5 signalled while running and requeued; job 6 signalled after it ended is not ours
    assert waits.requeue == [0.667]


def test_summary_and_a_missing_log(tmp_path: Path) -> None:
    assert summary([3.0, 1.0, 2.0]) == {"n": 3, "mean_s": 2.0, "p50_s": 2.0, "p90_s": 3.0,
                                        "max_s": 3.0}
    assert log_summaries(tmp_path / "none.log")["start"]["n"] == 0
    path = tmp_path / "slurmctld.log"
    path.write_text(LOG)
    assert log_summaries(path)["requeue"]["n"] == 1


def test_the_demo_names_both_waits_next_to_the_model() -> None:
    from slurm_shockwave.cli.demo import _actuation_line

    line = _actuation_line({"start_wait": {**summary([0.5, 1.5]), "modelled_mean_s": 1.0},
                            "requeue_wait": {**summary([]), "modelled_mean_s": 0.0}})
    assert "release to start: 1.00 s mean, p90 1.50 s over 2 (simulator 1 s)" in line
    assert "checkpoint signal to requeue: none" in line


def test_a_requeued_job_released_before_its_delay_waits_from_its_eligible_time() -> None:
    """Found by a review: a job the service released 0.8 s after its requeue waited 5.3 s
    for its allocation, 5.2 s of which was Slurm's requeue delay (cred_expire + 1 = 6 s
    here), which the simulator charges as requeue_delay_s: counted twice."""
    lines = ["[2026-12-02T01:00:55.000] sched: Allocate JobId=9 NodeList=n1 #CPUs=1",
             "[2026-12-02T01:01:00.200] Requeuing JobId=9",
             "[2026-12-02T01:01:01.000] sched: _release_job_rec: release hold on JobId=9 by uid 0",
             "[2026-12-02T01:01:06.300] sched: Allocate JobId=9 NodeList=n1 #CPUs=1"]
    assert actuation_waits(lines, requeue_delay_s=6.0).start == [0.1]
    assert actuation_waits(lines).start == [5.3]  # as it read before
