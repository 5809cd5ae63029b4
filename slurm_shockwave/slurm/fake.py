"""An in-memory Slurm for unit tests of the actuation logic only (never proof that an
integration works: tests/test_slurm_cluster.py runs the real daemons).

It follows the rules measured on Slurm 22.05: a held job rejects a priority update; a
set priority is pinned; suspend is not offered (it keeps GPUs); requeue returns a job to
PENDING with a begin time cred_expire + 1 s away, moves its submit time to the requeue
and counts the restart; GRES changes only
while pending; a job runs when released and the GPUs it asks for are free, in priority
order.

GPUs are concrete, as in Slurm: each node has indices 0..gpus-1; a started job gets the
lowest free indices on the first usable node of its partition with room (a job asking
for more than one node's GPUs, or for several nodes, is spread evenly over the fewest
nodes that have its share free: whole nodes when it asks for a multiple of a node) and
frees them when it is requeued, cancelled or finished. A job asking its GPUs per job
(``--gpus=N``, ``SlurmJob.per_job``) that no one node has room for, or that asked for
several (``-N 2 --gpus=7``), takes one GPU on each of its fewest nodes and the rest node
after node, as Slurm spreads it (7 + 1; 6 + 1). ``list_jobs`` reports each
job's ``gpu_alloc`` and ``list_nodes`` each node's ``gpus_used_idx``, whatever the
partition of the jobs holding them, so two jobs on one node never share an index.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from slurm_shockwave.model.cluster import SEVERAL_TYPES
from slurm_shockwave.slurm.hostlist import expand_hostlist
from slurm_shockwave.slurm.json_shapes import holds_alloc
from slurm_shockwave.slurm.protocol import LISTED_STATES, SlurmError, SlurmJob, SlurmNode

Alloc = tuple[tuple[str, tuple[int, ...]], ...]


def _each(job_ids: Sequence[int], one: Callable[[int], None]) -> None:
    """As scontrol does with a list of jobs: each in turn, on past one it refuses, and
    the first refusal raised at the end (src/scontrol/update_job.c)."""
    first: SlurmError | None = None
    for jid in job_ids:
        try:
            one(jid)
        except SlurmError as exc:
            first = first or exc
    if first is not None:
        raise first


class FakeSlurm:
    def __init__(self, nodes: Sequence[SlurmNode], *, cred_expire_s: int = 10) -> None:
        self.nodes = list(nodes)
        self.jobs: dict[int, SlurmJob] = {}
        self.signals: list[tuple[int, str]] = []
        self.now = 0
        self.cred_expire_s = cred_expire_s
        self._next_id = 1
        self.partition_states: dict[str, str] = {}
        """A partition's state (UP when not named here)."""
        self._last_nodes: dict[int, int] = {}
        """A requeued job's last run's node count, which squeue lists until it runs again
        (tests/test_slurm_contract.py, measured on 22.05 and 25.11)."""

    # -- helpers for tests -------------------------------------------------------------
    def add(self, job: SlurmJob) -> SlurmJob:
        """Put a job in the queue as it is; a running job without ``gpu_alloc`` is given
        concrete GPUs (on its ``nodes`` if named; ValueError when they have no room)."""
        if holds_alloc(job.state) and not job.gpu_alloc and job.gpus:
            alloc = self._place(job, self._used(), named_only=bool(job.nodes))
            if alloc is None:
                raise ValueError(f"fake: no room for running job {job.job_id} "
                                 f"({job.gpus} GPUs on {job.nodes or 'any node'})")
            job = replace(job, gpu_alloc=alloc, nodes=",".join(n for n, _ in alloc))
        self.jobs[job.job_id] = job
        self._next_id = max(self._next_id, job.job_id + 1)
        return job

    def tick(self, seconds: int = 1) -> None:
        """Time passes; the scheduler starts eligible jobs (every partition) in priority
        order, each where its GPUs are free; one that does not fit waits."""
        self.now += seconds
        self._test_dependencies()
        pending = sorted((j for j in self.jobs.values() if j.state == "PENDING"
                          and not j.held and j.eligible_time <= self.now
                          and not j.dependency), key=lambda j: (-j.priority, j.job_id))
        for j in pending:
            alloc = self._place(j, self._used(), named_only=bool(j.nodes))
            if alloc is None:
                self.jobs[j.job_id] = replace(j, reason="Resources")
                continue
            names = [n for n, _ in alloc] or [self._candidates(j, bool(j.nodes))[0].name]
            self._last_nodes.pop(j.job_id, None)
            self.jobs[j.job_id] = replace(j, state="RUNNING", reason="None",
                                          start_time=self.now, gpu_alloc=alloc,
                                          nodes=",".join(names))

    def _test_dependencies(self) -> None:
        """``afterok:N[:M...]`` and ``afterany:N...`` of jobs not held, as Slurm tests them
        (a held job's are not tested, measured on 22.05): cleared once every job named
        ended (COMPLETED, for afterok); one that failed leaves it never satisfied."""
        for j in list(self.jobs.values()):
            if j.state != "PENDING" or j.held or not j.dependency:
                continue
            kind, _, text = j.dependency.split("(")[0].partition(":")
            ids = [int(i) for i in text.split(":")]
            ended = [self.jobs[i].state for i in ids
                     if i in self.jobs and self.jobs[i].state not in LISTED_STATES]
            if len(ended) < len(ids):
                self.jobs[j.job_id] = replace(j, reason="Dependency")
            elif kind == "afterok" and any(state != "COMPLETED" for state in ended):
                self.jobs[j.job_id] = replace(j, reason="DependencyNeverSatisfied")
            else:
                self.jobs[j.job_id] = replace(j, dependency="", reason="Priority")

    def finish(self, job_id: int, state: str = "COMPLETED", *, signal: int = 0) -> None:
        """The job ends by itself (COMPLETED, FAILED, TIMEOUT; killed by ``signal``): its
        GPUs are freed."""
        j = self._get(job_id)
        if j.gpu_alloc:  # its run's node count, listed if it is run again
            self._last_nodes[job_id] = len(j.gpu_alloc)
        self.jobs[job_id] = replace(j, state=state, gpu_alloc=(), exit_signal=signal)

    # -- GPU bookkeeping -----------------------------------------------------------------
    def _used(self) -> dict[str, set[int]]:
        """Indices in use per node: a node's own gpus_used_idx (held outside the fake) and
        every job holding an allocation."""
        used = {n.name: set(n.gpus_used_idx) for n in self.nodes}
        for j in self.jobs.values():
            if holds_alloc(j.state):
                for node, idx in j.gpu_alloc:
                    used.setdefault(node, set()).update(idx)
        return used

    def _candidates(self, job: SlurmJob, named_only: bool) -> list[SlurmNode]:
        """Nodes the job may use: those it names (-w; a running job's own nodes even if
        drained since), else the usable nodes of its partition (of its GPU type, when
        it names one)."""
        if named_only:
            names = set(expand_hostlist(job.nodes))
            return [n for n in self.nodes if n.name in names
                    and (n.usable or holds_alloc(job.state))]
        return [n for n in self.nodes if n.usable
                and (not n.partitions or job.partition in n.partitions)
                and (not job.gpu_type or n.gpu_type in (job.gpu_type, SEVERAL_TYPES))]

    def _place(self, job: SlurmJob, used: dict[str, set[int]], *,
               named_only: bool) -> Alloc | None:
        """Concrete GPUs for ``job`` given ``used``, or None if it does not fit now."""
        nodes = self._candidates(job, named_only)
        if not nodes:
            return None
        if job.gpus <= 0:
            return ()

        def free(n: SlurmNode) -> list[int]:
            return [i for i in range(n.gpus) if i not in used.get(n.name, set())]

        biggest = max(n.gpus for n in nodes)
        if biggest <= 0:
            return None
        if job.per_job:  # --gpus=N: one node with room, else any free, in order
            fewest = max(job.node_count, 1)
            room = [n for n in nodes if len(free(n)) >= job.gpus]
            if room and fewest == 1:
                return ((room[0].name, tuple(free(room[0])[:job.gpus])),)
            if job.max_nodes > 1:  # -N 1-2: on at most 2, those with the most free
                nodes = sorted(nodes, key=lambda n: -len(free(n)))[:job.max_nodes]
            usable = [n for n in nodes if free(n)]
            if len(usable) < fewest or fewest > job.gpus:
                return None
            # -N 2 --gpus=7: one on each of its fewest nodes, the rest on the first with
            # room (measured on 22.05: 6 + 1 on two idle nodes of 8)
            counts = [1 if k < fewest else 0 for k in range(len(usable))]
            left = job.gpus - fewest
            for k, n in enumerate(usable):
                more = min(len(free(n)) - counts[k], left)
                counts[k] += more
                left -= more
            return None if left else tuple((n.name, tuple(free(n)[:c]))
                                           for n, c in zip(usable, counts, strict=True) if c)
        count = max(job.node_count, math.ceil(job.gpus / biggest), 1)
        shares = [job.gpus // count + (1 if k < job.gpus % count else 0)
                  for k in range(count)]
        out: list[tuple[str, tuple[int, ...]]] = []
        for n in nodes:
            if len(out) == count:
                break
            idle = free(n)
            share = shares[len(out)]
            if len(idle) >= share:
                out.append((n.name, tuple(idle[:share])))
        return tuple(out) if len(out) == count else None

    def _get(self, job_id: int) -> SlurmJob:
        if job_id not in self.jobs:
            raise SlurmError(f"Invalid job id specified ({job_id})")
        return self.jobs[job_id]

    # -- SlurmBackend ------------------------------------------------------------------
    def list_jobs(self, partition: str | None = None) -> list[SlurmJob]:
        return [self._as_listed(j) for j in self.jobs.values() if partition is None or (
            j.partition == partition
            and j.state in LISTED_STATES)]

    def _as_listed(self, job: SlurmJob) -> SlurmJob:
        """As squeue lists it: a requeued job, pending, with its last run's node count
        (its GPUs per node times that, for a request per node) and no node range."""
        last = self._last_nodes.get(job.job_id)
        if last is None or job.state != "PENDING" or last == max(job.node_count, 1):
            return job
        return replace(job, node_count=last, max_nodes=0, gpus=job.gpus if job.asks_per_job
                       else job.gpus // max(job.node_count, 1) * last)

    def partition_state(self, partition: str) -> str:
        return self.partition_states.get(partition, "UP")

    def list_nodes(self) -> list[SlurmNode]:
        used = self._used()
        return [replace(n, gpus_used=len(used.get(n.name, ())),
                        gpus_used_idx=tuple(sorted(used.get(n.name, ()))))
                for n in self.nodes]

    def set_priority(self, job_id: int, priority: int) -> None:
        j = self._get(job_id)
        if j.held:
            raise SlurmError(f"Job is in held state, pending scheduler release for job {job_id}")
        self.jobs[job_id] = replace(j, priority=priority)

    def hold(self, job_ids: Sequence[int]) -> None:
        """As ``scontrol uhold``: a running job is held too, priority 0 and JobHeldUser,
        running on; a requeued one still COMPLETING is held once pending; an ended one is
        refused (measured on 22.05)."""
        def one(jid: int) -> None:
            j = self._get(jid)
            if j.state not in LISTED_STATES:
                raise SlurmError(f"Job has already finished for job {jid}")
            self.jobs[jid] = replace(j, held=j.state in ("PENDING", "COMPLETING"),
                                     priority=0, reason="JobHeldUser")
        _each(job_ids, one)

    def release(self, job_ids: Sequence[int]) -> None:
        """As root's ``scontrol release``: a held job is released; any job's priority is
        computed afresh, an admin-set one unpinned, running jobs' too (measured on 22.05;
        job_mgr.c sets no priority directly for a privileged release)."""
        for jid in job_ids:
            j = self._get(jid)
            if j.held:
                self.jobs[jid] = replace(j, held=False, priority=100_000 - jid,
                                         reason="Priority")
            else:
                self.jobs[jid] = replace(j, priority=100_000 - jid)

    def set_comment(self, job_id: int, comment: str) -> None:
        """As root's ``scontrol update comment=`` (job_submit.lua's checks are not here)."""
        self.jobs[job_id] = replace(self._get(job_id), comment=comment)

    def signal(self, job_id: int, signal: str) -> None:
        j = self._get(job_id)
        if j.state != "RUNNING":
            raise SlurmError(f"Job {job_id} is not running")
        self.signals.append((job_id, signal))

    def requeue(self, job_ids: Sequence[int]) -> None:
        """As ``scontrol requeue Incomplete``: running jobs only; any other is left as it
        is, without an error (measured on 22.05), an unknown id refused, and a running
        ``--no-requeue`` one (``requeue=False``) refused as Slurm does."""
        def one(jid: int) -> None:
            if self._get(jid).state == "RUNNING":
                if not self.jobs[jid].requeue:
                    raise SlurmError("Requested operation is presently disabled for "
                                     f"job {jid}")
                self._requeue(jid)
        _each(job_ids, one)

    def requeue_ended(self, job_id: int) -> None:
        j = self._get(job_id)
        if j.state in LISTED_STATES:
            raise SlurmError(f"Job {job_id} has not ended")
        self._requeue(job_id)

    def _requeue(self, jid: int) -> None:
        """A hold of the running job (priority 0, JobHeldAdmin or JobHeldUser) stays through
        the requeue (measured on 22.05)."""
        j = self._get(jid)
        kept = j.priority == 0 and j.reason.startswith("JobHeld")
        if j.gpu_alloc:  # an ended job's (requeue_ended) was recorded at its end
            self._last_nodes[jid] = len(j.gpu_alloc)
        self.jobs[jid] = replace(
            j, state="PENDING", held=kept, reason=j.reason if kept else "BeginTime",
            restart_count=j.restart_count + 1, gpu_alloc=(), nodes="",
            eligible_time=self.now + self.cred_expire_s + 1,
            submit_time=max(self.now, j.submit_time + 1))

    def update_gpus(self, job_id: int, gpus: int, *, nodes: int | None = None,
                    gpu_type: str = "", per_job: bool = False,
                    max_nodes: int | None = None) -> None:
        """As ``scontrol update gres=gpu[:TYPE]:N`` (``TresPerJob=gres:gpu[:TYPE]:N`` for
        ``per_job``): the job's GRES is what it is given, its type too (none: untyped).
        A job that asked per job is refused a GRES per node, and one that asked per node
        a count per job (both measured on 22.05). With ``nodes``, the range
        ``nodes``-``max_nodes`` (exactly ``nodes`` without it) as ``numnodes=``."""
        j = self._get(job_id)
        if j.state != "PENDING":
            raise SlurmError(f"Job {job_id} is not pending: GRES can change only before it runs")
        if per_job != j.asks_per_job:
            raise SlurmError(f"Invalid generic resource (gres) specification for job {job_id}")
        count = nodes if nodes is not None else max(j.node_count, 1)
        most = j.max_nodes if nodes is None else (max_nodes or nodes)
        self.jobs[job_id] = replace(j, gpus=gpus if per_job else gpus * count,
                                    node_count=count, gpu_type=gpu_type, max_nodes=most)

    def submit(self, script: str, args: Sequence[str] = ()) -> int:
        """sbatch's -p/--partition, --gres=gpu:N, -N/--nodes and -w/--nodelist are read;
        jobs of the managed partition ``shockwave`` are held at submit, as by
        job_submit.lua, others are not."""
        opts: dict[str, str] = {}
        items = list(args)
        aliases = {"-p": "partition", "-N": "nodes", "-w": "nodelist"}
        for k, arg in enumerate(items):
            if arg.startswith("--") and "=" in arg:
                key, _, value = arg[2:].partition("=")
                opts[key] = value
            elif arg in aliases and k + 1 < len(items):
                opts[aliases[arg]] = items[k + 1]
        partition = opts.get("partition", "shockwave")
        gres = opts.get("gres", "")
        gpus = int(gres.rsplit(":", 1)[-1]) if gres.startswith("gpu") else 0
        node_count = int(opts.get("nodes", "1").split("-")[0] or 1)
        jid = self._next_id
        self.add(SlurmJob(jid, script, "user", partition, "PENDING",
                          held=partition == "shockwave", gpus=gpus * node_count,
                          node_count=node_count, nodes=opts.get("nodelist", "")))
        return jid

    def cancel(self, job_id: int) -> None:
        j = self._get(job_id)
        self.jobs[job_id] = replace(j, state="CANCELLED", gpu_alloc=())
