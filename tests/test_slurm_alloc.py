"""The real GPU allocation: which GPU indices each job holds on which node.

The fake's allocator and the CLI backend's once-per-start lookups are unit tests; the
tests marked ``slurm`` submit jobs to the ``other`` partition of the local cluster
(docker-slurm/start.sh) and compare ``gpu_alloc`` with what the jobs themselves see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.fake import FakeSlurm
from slurm_shockwave.slurm.protocol import SlurmJob, SlurmNode
from tests.live_cluster import Submitter, wait_for

# -- the fake ------------------------------------------------------------------------------


def fake(*extra: SlurmNode) -> FakeSlurm:
    return FakeSlurm([SlurmNode("n1", ("IDLE",), 4, 0, ("shockwave", "other")),
                      SlurmNode("n2", ("IDLE",), 4, 0, ("shockwave", "other")),
                      SlurmNode("n3", ("IDLE", "DRAIN"), 4, 0, ("shockwave",)), *extra])


def pending(jid: int, gpus: int, partition: str = "shockwave", **kw: object) -> SlurmJob:
    return SlurmJob(jid, f"j{jid}", "alice", partition, "PENDING", priority=100 - jid,
                    gpus=gpus, **kw)  # type: ignore[arg-type]


def test_fake_jobs_on_one_node_get_disjoint_lowest_indices() -> None:
    f = fake()
    for jid in (1, 2):
        f.add(pending(jid, 2))
    f.add(pending(3, 1, partition="other"))
    f.tick()
    alloc = {j.job_id: j.gpu_alloc for j in f.list_jobs()}
    assert alloc == {1: (("n1", (0, 1)),), 2: (("n1", (2, 3)),), 3: (("n2", (0,)),)}
    nodes = {n.name: n for n in f.list_nodes()}
    assert nodes["n1"].gpus_used_idx == (0, 1, 2, 3) and nodes["n1"].gpus_used == 4
    assert nodes["n2"].gpus_used_idx == (0,)  # another partition's job counts too
    assert nodes["n3"].gpus_used_idx == ()


def test_fake_frees_on_requeue_cancel_and_finish() -> None:
    f = fake()
    for jid in (1, 2, 3):
        f.add(pending(jid, 2))
    f.tick()
    f.requeue([1])
    assert f.jobs[1].gpu_alloc == () and f.jobs[1].state == "PENDING"
    f.cancel(2)
    f.finish(3)
    assert all(n.gpus_used_idx == () for n in f.list_nodes())
    f.add(pending(4, 3))
    f.tick()
    assert f.jobs[4].gpu_alloc == (("n1", (0, 1, 2)),)


def test_fake_big_and_multi_node_jobs_take_whole_nodes() -> None:
    f = fake()
    f.add(pending(1, 8))
    f.tick()
    assert f.jobs[1].gpu_alloc == (("n1", (0, 1, 2, 3)), ("n2", (0, 1, 2, 3)))
    assert f.jobs[1].nodes == "n1,n2"
    f.add(pending(2, 1))
    f.tick()
    assert f.jobs[2].state == "PENDING"  # n3 is drained: no room anywhere
    f.cancel(1)
    f.add(pending(3, 2, node_count=2))
    f.tick()
    assert f.jobs[2].gpu_alloc == (("n1", (0,)),)
    assert f.jobs[3].gpu_alloc == (("n1", (1,)), ("n2", (0,)))


def test_fake_running_jobs_added_get_indices_on_their_node() -> None:
    f = fake()
    f.add(SlurmJob(1, "a", "u", "shockwave", "RUNNING", gpus=3, nodes="n2"))
    f.add(SlurmJob(2, "b", "u", "other", "RUNNING", gpus=1, nodes="n2"))
    assert f.jobs[1].gpu_alloc == (("n2", (0, 1, 2)),)
    assert f.jobs[2].gpu_alloc == (("n2", (3,)),)
    with pytest.raises(ValueError, match="no room"):
        f.add(SlurmJob(3, "c", "u", "shockwave", "RUNNING", gpus=1, nodes="n2"))


def test_fake_gpus_held_outside_and_submit_options() -> None:
    f = FakeSlurm([SlurmNode("n1", ("MIXED",), 4, 2, ("other",), gpus_used_idx=(0, 2))])
    jid = f.submit("job.sh", ["-p", "other", "--gres=gpu:2", "-w", "n1"])
    assert not f.jobs[jid].held
    f.tick()
    assert f.jobs[jid].gpu_alloc == (("n1", (1, 3)),)
    assert f.list_nodes()[0].gpus_used_idx == (0, 1, 2, 3)
    assert f.jobs[f.submit("x.sh")].held  # the managed partition holds at submit


# -- the CLI backend asks scontrol once per job start ---------------------------------------

ROW = "{jid}|{state}|None|100|alice|1|{nodes}|2026-11-30T10:00:00|gres:gpu:2||{restarts}|" \
      "{start}|2026-11-30T10:00:00|1:00:00|N/A|1|1|(null)|name|model=x bs=1 epochs=1"
DETAIL = ("JobId={jid} JobName=name UserId=alice(1) JobState={state} Restarts={restarts} "
          "TimeLimit=01:00:00 SubmitTime=2026-11-30T10:00:00 StartTime={start} "
          "Partition=shockwave NodeList={nodes} CoreSpec=* JOB_GRES=gpu:2 "
          "  Nodes={nodes} CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:{idx}) MinCPUsNode=1 "
          "WorkDir=/w AdminComment=shockwave:v1 model=x Comment=model=x bs=1 epochs=1")


class Scripted(CliBackend):
    def __init__(self) -> None:
        super().__init__(check_conf=False)
        self.calls: list[list[str]] = []
        self.jobs: dict[int, dict[str, str]] = {}

    def _run(self, args: Sequence[str]) -> str:
        self.calls.append(list(args))
        if args[0] == "squeue":
            return "\n".join(ROW.format(jid=j, **v) for j, v in self.jobs.items()) + "\n"
        if args[:4] == ["scontrol", "-o", "-d", "show"]:
            ids = [int(args[5])] if len(args) > 5 else list(self.jobs)
            return "\n".join(DETAIL.format(jid=j, **self.jobs[j]) for j in ids) + "\n"
        raise AssertionError(args)

    def scontrols(self) -> int:
        return sum(1 for c in self.calls if c[0] == "scontrol")


def test_cli_reads_each_allocation_once_per_start() -> None:
    b = Scripted()
    b.jobs[1] = dict(state="PENDING", restarts="0", start="Unknown", nodes="", idx="N/A")
    (job,) = b.list_jobs("shockwave")
    assert job.admin_comment == "shockwave:v1 model=x" and job.gpu_alloc == ()
    assert job.time_limit_s == 3600 and b.scontrols() == 1
    b.list_jobs("shockwave")
    assert b.scontrols() == 1  # pending and known: no new call
    b.jobs[1] = dict(state="RUNNING", restarts="0", start="2026-11-30T10:05:00",
                     nodes="sw-node2", idx="2-3")
    (job,) = b.list_jobs("shockwave")
    assert job.gpu_alloc == (("sw-node2", (2, 3)),) and b.scontrols() == 2
    for _ in range(3):
        assert b.list_jobs("shockwave")[0].gpu_alloc == (("sw-node2", (2, 3)),)
    assert b.scontrols() == 2  # one call per start, not per round
    b.jobs[1] = dict(state="RUNNING", restarts="1", start="2026-11-30T10:09:00",
                     nodes="sw-node3", idx="0-1")  # requeued and started elsewhere
    assert b.list_jobs("shockwave")[0].gpu_alloc == (("sw-node3", (0, 1)),)
    assert b.scontrols() == 3


def test_cli_many_new_jobs_cost_one_listing() -> None:
    b = Scripted()
    for jid in range(1, 31):
        b.jobs[jid] = dict(state="RUNNING", restarts="0", start="2026-11-30T10:05:00",
                           nodes=f"n{jid}", idx="0-1")
    jobs = b.list_jobs("shockwave")
    assert len(jobs) == 30 and all(j.gpu_alloc == ((j.nodes, (0, 1)),) for j in jobs)
    assert [c for c in b.calls if c[0] == "scontrol"] == [["scontrol", "-o", "-d", "show",
                                                            "job"]]


# -- the real cluster ---------------------------------------------------------------------

WORKER = """#!/bin/sh
echo "batch node=$SLURMD_NODENAME jobgpus=${SLURM_JOB_GPUS:-none} \
cuda=${CUDA_VISIBLE_DEVICES:-none}"
srun --ntasks-per-node=1 sh -c \
  'echo "step node=$SLURMD_NODENAME cuda=${CUDA_VISIBLE_DEVICES:-none}"'
sleep 600
"""


@pytest.fixture
def jobs(submitter: Callable[..., Submitter], tmp_path: Path) -> Submitter:
    """Submit jobs to ``other`` (no hold there); only these are cancelled at the end."""
    return submitter(WORKER, "-p", "other", "-o", str(tmp_path / "%j.out"))


def _seen_by_job(out: Path) -> dict[str, tuple[int, ...]]:
    """What the job's steps saw: node -> CUDA_VISIBLE_DEVICES."""
    seen = {}
    for line in out.read_text().splitlines() if out.exists() else ():
        fields = dict(f.split("=", 1) for f in line.split()[1:])
        if line.startswith("step") and fields["cuda"] != "none":
            seen[fields["node"]] = tuple(sorted(int(i) for i in fields["cuda"].split(",")))
        if line.startswith("batch"):
            assert fields["jobgpus"] == fields["cuda"]  # SLURM_JOB_GPUS = the batch node's
    return seen


@pytest.mark.slurm
def test_real_allocations_match_what_jobs_see(backend: CliBackend, jobs, tmp_path) -> None:
    nodes = [n.name for n in backend.list_nodes()]
    if len(nodes) < 4 or any(n.gpus < 8 for n in backend.list_nodes()):
        pytest.skip("needs the 4 x 8 GPU docker-slurm cluster")
    a = jobs("-w", nodes[0], "--gres=gpu:2")
    b = jobs("-w", nodes[0], "--gres=gpu:2")
    c = jobs("-N", "2", "-x", nodes[0], "--gres=gpu:8")
    d = jobs("-N", "2", "-w", f"{nodes[0]},{nodes[3]}", "--gres=gpu:2")
    mine = {a, b, c, d}

    def listed() -> dict[int, SlurmJob]:
        return {j.job_id: j for j in backend.list_jobs("other") if j.job_id in mine}

    wait_for(lambda: all(j.state == "RUNNING" and j.gpu_alloc for j in listed().values())
             and len(listed()) == 4, 90)
    got = listed()
    assert [n for n, _ in got[a].gpu_alloc] == [nodes[0]] == [n for n, _ in got[b].gpu_alloc]
    assert len(got[a].gpu_alloc[0][1]) == 2 and len(got[b].gpu_alloc[0][1]) == 2
    assert len(got[c].gpu_alloc) == 2 and all(idx == tuple(range(8))
                                              for _, idx in got[c].gpu_alloc)
    assert [n for n, _ in got[d].gpu_alloc] == [nodes[0], nodes[3]]
    # disjoint on every node
    per_node: dict[str, list[int]] = {}
    for j in got.values():
        for node, idx in j.gpu_alloc:
            per_node.setdefault(node, []).extend(idx)
    assert all(len(v) == len(set(v)) for v in per_node.values()), per_node
    # what the jobs' steps see on each node is what gpu_alloc says
    for jid in mine:
        out = tmp_path / f"{jid}.out"
        want = dict(got[jid].gpu_alloc)
        wait_for(lambda out=out, want=want: _seen_by_job(out) == want, 30)  # type: ignore[misc]
    # the nodes report the same indices in use (other jobs may add to them)
    used = {n.name: set(n.gpus_used_idx) for n in backend.list_nodes()}
    for node, idx in per_node.items():
        assert set(idx) <= used[node]
    # the JSON path (list_jobs without a partition) agrees
    via_json = {j.job_id: j.gpu_alloc for j in backend.list_jobs() if j.job_id in mine}
    assert via_json == {jid: j.gpu_alloc for jid, j in got.items()}
