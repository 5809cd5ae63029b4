"""An in-memory Slurm for unit tests of the actuation logic only (never proof that an
integration works: tests/test_slurm_cluster.py runs the real daemons).

It follows the rules measured on Slurm 22.05: a held job rejects a priority update; a
set priority is pinned; suspend is not offered (it keeps GPUs); requeue returns a job to
PENDING with a begin time cred_expire + 1 s away and counts the restart; GRES changes only
while pending; a job runs when released and the GPUs it asks for are free, in priority
order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from slurm_shockwave.slurm.protocol import SlurmError, SlurmJob, SlurmNode


class FakeSlurm:
    def __init__(self, nodes: Sequence[SlurmNode], *, cred_expire_s: int = 10) -> None:
        self.nodes = list(nodes)
        self.jobs: dict[int, SlurmJob] = {}
        self.signals: list[tuple[int, str]] = []
        self.now = 0
        self.cred_expire_s = cred_expire_s
        self._next_id = 1

    # -- helpers for tests -------------------------------------------------------------
    def add(self, job: SlurmJob) -> SlurmJob:
        self.jobs[job.job_id] = job
        self._next_id = max(self._next_id, job.job_id + 1)
        return job

    def tick(self, seconds: int = 1) -> None:
        """Time passes; the scheduler starts eligible jobs in priority order."""
        self.now += seconds
        free = sum(n.gpus for n in self.nodes) - sum(
            j.gpus for j in self.jobs.values() if j.state == "RUNNING")
        pending = sorted((j for j in self.jobs.values() if j.state == "PENDING"
                          and not j.held and j.eligible_time <= self.now),
                         key=lambda j: (-j.priority, j.job_id))
        for j in pending:
            if j.gpus <= free:
                free -= j.gpus
                self.jobs[j.job_id] = replace(j, state="RUNNING", reason="None",
                                              start_time=self.now)

    def _get(self, job_id: int) -> SlurmJob:
        if job_id not in self.jobs:
            raise SlurmError(f"Invalid job id specified ({job_id})")
        return self.jobs[job_id]

    # -- SlurmBackend ------------------------------------------------------------------
    def list_jobs(self, partition: str | None = None) -> list[SlurmJob]:
        return [j for j in self.jobs.values() if partition is None or (
            j.partition == partition and j.state in ("PENDING", "RUNNING"))]

    def list_nodes(self) -> list[SlurmNode]:
        return list(self.nodes)

    def set_priority(self, job_id: int, priority: int) -> None:
        j = self._get(job_id)
        if j.held:
            raise SlurmError(f"Job is in held state, pending scheduler release for job {job_id}")
        self.jobs[job_id] = replace(j, priority=priority)

    def hold(self, job_ids: Sequence[int]) -> None:
        for jid in job_ids:
            j = self._get(jid)
            if j.state != "PENDING":
                raise SlurmError(f"Job has already started for job {jid}")
            self.jobs[jid] = replace(j, held=True, priority=0, reason="JobHeldAdmin")

    def release(self, job_ids: Sequence[int]) -> None:
        for jid in job_ids:
            j = self._get(jid)
            if j.held:
                self.jobs[jid] = replace(j, held=False, priority=1_000_000 - jid,
                                         reason="Priority")

    def signal(self, job_id: int, signal: str) -> None:
        j = self._get(job_id)
        if j.state != "RUNNING":
            raise SlurmError(f"Job {job_id} is not running")
        self.signals.append((job_id, signal))

    def requeue(self, job_ids: Sequence[int], *, hold: bool = False) -> None:
        for jid in job_ids:
            j = self._get(jid)
            if j.state != "RUNNING":
                raise SlurmError(f"Job {jid} is not running")
            self.jobs[jid] = replace(
                j, state="PENDING", held=hold, priority=0 if hold else j.priority,
                reason="JobHeldAdmin" if hold else "BeginTime",
                restart_count=j.restart_count + 1,
                eligible_time=self.now + self.cred_expire_s + 1)

    def update_gpus(self, job_id: int, gpus: int) -> None:
        j = self._get(job_id)
        if j.state != "PENDING":
            raise SlurmError(f"Job {job_id} is not pending: GRES can change only before it runs")
        self.jobs[job_id] = replace(j, gpus=gpus)

    def submit(self, script: str, args: Sequence[str] = ()) -> int:
        jid = self._next_id
        self.add(SlurmJob(jid, script, "user", "shockwave", "PENDING", held=True))
        return jid

    def cancel(self, job_id: int) -> None:
        j = self._get(job_id)
        self.jobs[job_id] = replace(j, state="CANCELLED")
