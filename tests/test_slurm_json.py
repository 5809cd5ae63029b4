"""Both JSON shapes, against real Slurm output of 22.05 and 24.11."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_shockwave.slurm.cli_backend import _epoch, detail_from_line, time_limit_text_s
from slurm_shockwave.slurm.hostlist import expand_hostlist, expand_indices
from slurm_shockwave.slurm.json_shapes import (
    alloc_from,
    exit_signal,
    gpus_in,
    gres_gpu_count,
    gres_gpu_indices,
    job_state,
    jobs_from,
    nodes_from,
    number,
    version_of,
)
from slurm_shockwave.slurm.protocol import SlurmError
from slurm_shockwave.slurm.pyslurm_backend import (
    alloc_from_layout,
    dependency_text,
    gres_gpus,
)

DATA = Path(__file__).resolve().parent / "data" / "slurm-json"


def load(version: str, name: str) -> dict:
    return json.loads((DATA / version / name).read_text())


@pytest.mark.parametrize(("version", "squeue"), [("22.05", "squeue.json"),
                                                 ("24.11", "squeue-all.json")])
def test_jobs_read_the_same_in_both_shapes(version: str, squeue: str) -> None:
    jobs = {j.job_id: j for j in jobs_from(load(version, squeue))}
    assert set(jobs) == set(range(101, 111))
    assert jobs[103].state == "RUNNING" and jobs[103].gpus == 8 and jobs[103].node_count == 2
    assert len(jobs[103].gres_detail) == 2
    assert jobs[104].comment == "model=resnet18 bs=32 mode=gns epochs=90"
    assert jobs[104].gpus == 1 and jobs[104].nodes == "gpu3"
    assert jobs[105].state == "PENDING" and jobs[105].reason == "BeginTime"
    assert jobs[105].restart_count == 1 and jobs[105].gpus == 2  # --gpus=2: tres_per_job
    assert jobs[106].admin_comment == "ticket=4711 waiting on gpu4 repair"
    assert jobs[108].held and jobs[108].priority == 0 and jobs[108].reason == "JobHeldAdmin"
    assert not jobs[107].held
    assert jobs[109].priority == 1000
    assert jobs[101].state == "COMPLETED" and jobs[102].state == "FAILED"
    assert jobs[110].state == "CANCELLED"
    assert jobs[103].partition == "gpu" and jobs[103].user == "root"


@pytest.mark.parametrize(("version", "squeue", "per_task", "tasks"), [
    ("22.05", "squeue.json", "gres:gpu:2", 3),
    ("24.11", "squeue-all.json", "cpu=2,gres/gpu=2", {"set": True, "infinite": False,
                                                      "number": 3})])
def test_gpus_per_task_count_for_each_task(version: str, squeue: str, per_task: str,
                                           tasks: object) -> None:
    """``-n 3 --gpus-per-task=2`` is 6 GPUs (22.05 as measured on the local cluster; from
    23.x the field reads ``name=count`` and lists ``--cpus-per-task`` too, and the tasks
    are a number object: measured on 25.11)."""
    doc = load(version, squeue)
    obj = next(j for j in doc["jobs"] if j["job_id"] == 105)
    obj.update(tres_per_job="", tres_per_node="", tres_per_task=per_task, tasks=tasks)
    assert {j.job_id: j for j in jobs_from(doc)}[105].gpus == 6


def test_the_signal_that_ended_a_job_in_both_shapes() -> None:
    """22.05 gives the wait status (a job killed by SIGUSR1 read 10 there, measured;
    exit 3 is 768 in the sample), 24.11 an object."""
    for version, squeue in (("22.05", "squeue.json"), ("24.11", "squeue-all.json")):
        jobs = {j.job_id: j for j in jobs_from(load(version, squeue))}
        assert jobs[102].state == "FAILED" and jobs[102].exit_signal == 0  # exit 3
        assert all(j.exit_signal == 0 for j in jobs.values())
    assert exit_signal(10) == 10 and exit_signal(768) == 0 and exit_signal(9) == 9
    assert exit_signal(None) == 0 and exit_signal(0x7F) == 0
    killed = {"status": ["SIGNALED"], "return_code": {"set": True, "number": 0},
              "signal": {"id": {"set": True, "infinite": False, "number": 10}, "name": "USR1"}}
    assert exit_signal(killed) == 10
    assert exit_signal({"status": ["ERROR"], "signal": {"id": {"set": False, "number": 0}}}) == 0


def test_nodes_22_05_from_sinfo() -> None:
    nodes = {n.name: n for n in nodes_from(load("22.05", "sinfo.json")) or []}
    assert set(nodes) == {"gpu1", "gpu2", "gpu3", "gpu4"}
    assert nodes["gpu1"].gpus == 4 and nodes["gpu1"].gpus_used == 4
    assert nodes["gpu4"].state == ("IDLE", "DRAIN") and not nodes["gpu4"].usable
    assert nodes["gpu3"].usable and nodes["gpu3"].gpus_used == 1


def test_nodes_24_11_from_scontrol_and_grouped_sinfo_refused() -> None:
    nodes = {n.name: n for n in nodes_from(load("24.11", "scontrol-node.json")) or []}
    assert nodes["gpu4"].state == ("IDLE", "DRAIN") and not nodes["gpu4"].usable
    assert nodes["gpu1"].gpus == 4 and nodes["gpu1"].gpus_used == 4
    assert nodes_from(load("24.11", "sinfo.json")) is None  # grouped rows: ask scontrol


@pytest.mark.parametrize("doc", [None, 5, {"nodes": None}, {"nodes": 5}, {"nodes": [5]},
                                 {"jobs": None}, {"jobs": [[1]]}])
def test_json_of_another_shape_is_slurms_fault_in_one_line(doc: object) -> None:
    """Not a traceback (a bug of ours) but a SlurmError, which the commands print as one
    line and the service retries."""
    read = jobs_from if isinstance(doc, dict) and "jobs" in doc else nodes_from
    with pytest.raises(SlurmError, match="unexpected JSON from Slurm"):
        read(doc)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "key", "field", "value", "says"), [
    # found by a red-team: each was a traceback, and in the service a failed round
    ("sinfo.json", "nodes", "partitions", 5, "nodes[0]"),
    ("sinfo.json", "nodes", "state", 5, "nodes[0]"),
    ("squeue.json", "jobs", "tres_per_node", 5, "jobs[0]"),
    ("squeue.json", "jobs", "gres_detail", 5, "jobs[0]"),
    ("squeue.json", "jobs", "job_id", float("inf"), "jobs[0]"),
    # more GPUs than any node or job has: 10^20 ran the host out of memory
    ("sinfo.json", "nodes", "gres", "gpu:99999999999999999999", "at most 1024"),
    ("squeue.json", "jobs", "tres_per_job", "gres:gpu:9999999", "at most 1000000"),
    ("squeue.json", "jobs", "tasks", 999999, "at most 1000000"),
])
def test_a_field_of_another_shape_is_slurms_fault_in_one_line(
        name: str, key: str, field: str, value: object, says: str) -> None:
    doc = load("22.05", name)
    doc[key][0][field] = value
    if field == "tasks":
        doc[key][0]["tres_per_task"] = "gres:gpu:8"
    read = nodes_from if key == "nodes" else jobs_from
    with pytest.raises(SlurmError, match=re.escape(says)) as err:
        read(doc)
    assert "\n" not in str(err.value)


def test_gpu_indices_past_what_a_node_has_are_not_expanded() -> None:
    """Found by a review: each range was capped, not their sum: ten ranges of a million
    in 163 bytes of a node's gres_used took 1.3 GB. Past MAX_NODE_GPUS the indices are
    not read (the count still is)."""
    doc = load("22.05", "sinfo.json")
    ranges = ",".join(f"{i * 10**6}-{i * 10**6 + 999_999}" for i in range(10))
    doc["nodes"][0]["gres_used"] = f"gpu:8(IDX:{ranges})"
    node = nodes_from(doc)[0]  # type: ignore[index]
    assert node.gpus_used == 8 and node.gpus_used_idx == ()
    with pytest.raises(ValueError, match="more than 1024"):
        expand_indices("0-511,1000-1600", most=1024)
    assert len(expand_indices("0-511,1000-1511", most=1024)) == 1024
    # two types' lists whose union passes it: dropped the same way, the node kept
    doc["nodes"][0]["gres_used"] = "gpu:a:1(IDX:0-999),gpu:b:1(IDX:1000-1999)"
    node = nodes_from(doc)[0]  # type: ignore[index]
    assert node.gpus_used == 2 and node.gpus_used_idx == ()
    # host lists: one budget for the whole list, products included (10^9 names in 22
    # bytes, two million in 23: found by a review)
    for text in ("n[0-999][0-999][0-999]", "n[0-999999],m[0-999999]"):
        with pytest.raises(ValueError, match="more than"):
            expand_hostlist(text)
    assert len(expand_hostlist("n[0-999][0-99],m[1-5]")) == 100_005


def test_versions_and_number_shapes() -> None:
    assert version_of(load("22.05", "squeue.json")) == (22, 5)
    assert version_of(load("24.11", "squeue.json")) == (24, 11)
    assert number({"set": True, "infinite": False, "number": 7}) == 7
    assert number({"set": False, "infinite": False, "number": 7}, default=-1) == -1
    assert number({"set": True, "infinite": True, "number": 0}, default=-1) == -1
    assert number(None, default=3) == 3 and number(12) == 12
    assert gpus_in("gres:gpu:a100:4") == 4 and gpus_in("gres/gpu:2") == 2 and gpus_in("") == 0
    assert job_state("CONFIGURING") == ("RUNNING", "CONFIGURING")  # flag printed first
    assert job_state("pending") == ("PENDING",)
    # a MIG profile's type (doc/html/gres.shtml): read as 0, the planner rewrote the GRES
    assert gpus_in("gres/gpu:a100_3g.20gb:2") == 2 and gpus_in("gres:gpu:a100_3g.20gb:2") == 2


# -- the real GPU allocation -------------------------------------------------------------

def test_samples_give_each_running_job_its_gpu_indices_per_node() -> None:
    for version, squeue in (("22.05", "squeue.json"), ("24.11", "squeue-all.json")):
        jobs = {j.job_id: j for j in jobs_from(load(version, squeue))}
        assert jobs[103].gpu_alloc == (("gpu1", (0, 1, 2, 3)), ("gpu2", (0, 1, 2, 3)))
        assert jobs[104].gpu_alloc == (("gpu3", (0,)),)
        assert all(not j.gpu_alloc for j in jobs.values() if j.state != "RUNNING")
        assert jobs[103].time_limit_s == 720 * 60 and jobs[108].time_limit_s == 3600


def test_live_22_05_squeue_json_with_untyped_gres() -> None:
    """Captured on the docker-slurm cluster: -w sw-node1 2+2(+3 --gpus) and -N 2 gpu:8."""
    jobs = {j.job_id: j for j in jobs_from(load("22.05", "squeue-alloc.json"))}
    assert jobs[1].gpu_alloc == (("sw-node1", (0, 1)),)
    assert jobs[2].gpu_alloc == (("sw-node1", (2, 3)),)
    assert jobs[3].gpu_alloc == (("sw-node2", tuple(range(8))), ("sw-node3", tuple(range(8))))
    assert jobs[4].gpu_alloc == (("sw-node1", (4, 5, 6)),) and jobs[4].gpus == 3
    assert jobs[1].time_limit_s == 0  # UNLIMITED
    assert jobs[5].state == "CANCELLED" and jobs[5].gpu_alloc == ()


def test_node_gpu_indices_in_use() -> None:
    nodes = {n.name: n for n in nodes_from(load("22.05", "sinfo.json")) or []}
    assert nodes["gpu1"].gpus_used_idx == (0, 1, 2, 3)
    assert nodes["gpu3"].gpus_used_idx == (0,) and nodes["gpu4"].gpus_used_idx == ()
    nodes = {n.name: n for n in nodes_from(load("24.11", "scontrol-node.json")) or []}
    assert nodes["gpu3"].gpus_used_idx == (0,) and nodes["gpu1"].gpus_used_idx == (0, 1, 2, 3)
    # untyped GRES in 22.05: a bare count, no indices (the CLI backend asks the jobs)
    nodes = {n.name: n for n in nodes_from(load("22.05", "sinfo-untyped.json")) or []}
    assert nodes["sw-node1"].gpus_used == 7 and nodes["sw-node1"].gpus_used_idx == ()
    assert nodes["sw-node1"].gpus == 8


@pytest.mark.parametrize(("text", "count", "idx"), [
    ("gpu:(null):3(IDX:0-2)", 3, (0, 1, 2)),
    ("gpu:3(IDX:0,2,5)", 3, (0, 2, 5)),
    ("gpu:tesla:2(IDX:0-1)", 2, (0, 1)),
    ("gpu:2(IDX:0-1)", 2, (0, 1)),
    ("gpu:v100:0(IDX:N/A)", 0, ()),
    ("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:3)", 3, (0, 1, 3)),
    ("gpu:7", 7, None),
    ("gpu:4(S:0-1)", 4, None),
    ("", 0, ()),
])
def test_gres_strings(text: str, count: int, idx: tuple[int, ...] | None) -> None:
    assert gres_gpu_count(text) == count
    assert gres_gpu_indices(text) == idx


def test_alloc_from_needs_lists_that_line_up() -> None:
    assert alloc_from(["a", "b"], ["gpu:1(IDX:3)", "gpu:0(IDX:N/A)"]) == (("a", (3,)),)
    assert alloc_from(["a"], ["gpu:1(IDX:3)", "gpu:1(IDX:3)"]) == ()
    assert alloc_from(["a"], ["gpu:1(IDX:x)"]) == ()


# -- host lists and index lists ----------------------------------------------------------

def test_expand_hostlist() -> None:
    assert expand_hostlist("sw-node[1-3,5],gpu[01-02]") == [
        "sw-node1", "sw-node2", "sw-node3", "sw-node5", "gpu01", "gpu02"]
    assert expand_hostlist("gpu1") == ["gpu1"] and expand_hostlist("") == []
    assert expand_hostlist("a,b[9-11]") == ["a", "b9", "b10", "b11"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("n[008-010]") == ["n008", "n009", "n010"]
    for bad in ("n[1-", "n1]", "n[a-b]", "n[3-1]", "n[[1]]", "a,,b", "n[]"):
        with pytest.raises(ValueError):
            expand_hostlist(bad)


def test_expand_indices() -> None:
    assert expand_indices("0-2,5") == (0, 1, 2, 5)
    assert expand_indices("5,0-1") == (0, 1, 5) and expand_indices("N/A") == ()
    with pytest.raises(ValueError):
        expand_indices("0-x")


def _compress(names: list[str]) -> str:
    """A Slurm-like compressor: runs of prefix + same-width numbers become prefix[a-b,c]."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int]] = []
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)", name)
        assert m
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(int(m.group(2)))
    parts = []
    for prefix, width in order:
        nums, ranges = groups[(prefix, width)], []
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{start:0{width}d}" if start == prev
                          else f"{start:0{width}d}-{prev:0{width}d}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


@given(st.lists(st.tuples(st.sampled_from(["sw-node", "gpu", "a-b"]), st.integers(1, 3),
                          st.integers(0, 999)), min_size=1, max_size=30))
def test_hostlist_round_trip(raw: list[tuple[str, int, int]]) -> None:
    names = []
    for prefix, width, num in raw:
        name = f"{prefix}{num % 10 ** width:0{width}d}"
        if name not in names:
            names.append(name)
    # the compressor groups by (prefix, width) in first-seen order, numbers sorted
    key: dict[tuple[str, int], list[str]] = {}
    for n in names:
        m = re.fullmatch(r"(.*?)(\d+)", n)
        assert m
        key.setdefault((m.group(1), len(m.group(2))), []).append(n)
    ordered = [n for group in key.values() for n in sorted(group)]
    assert expand_hostlist(_compress(ordered)) == ordered


# -- scontrol -o -d show job lines (real, from the docker-slurm 22.05 cluster) ------------

def test_scontrol_detail_lines() -> None:
    lines = (DATA / "22.05" / "scontrol-d-job.txt").read_text().splitlines()
    details = {d.job_id: d for d in map(detail_from_line, lines) if d}
    assert details[1].gpu_alloc == (("sw-node1", (0, 1)),)
    assert details[2].gpu_alloc == (("sw-node1", (2, 3)),)
    assert details[3].gpu_alloc == (("sw-node2", tuple(range(8))),
                                    ("sw-node3", tuple(range(8))))
    assert details[4].gpu_alloc == (("sw-node1", (4, 5, 6)),)
    assert details[1].state == "RUNNING" and details[1].restarts == 0
    assert details[1].start == _epoch("2026-11-30T10:30:23") and details[1].time_limit_s == 0


def test_scontrol_detail_groups_typed_and_spoofed() -> None:
    line = ("JobId=7 JobName=x Nodes=evil CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7) UserId=root(0) "
            "JobState=RUNNING Reason=None Restarts=2 TimeLimit=1-02:03:04 "
            "SubmitTime=2026-11-30T09:00:00 StartTime=2026-11-30T10:00:00 Partition=p "
            "NodeList=n[1-3] NumNodes=3 CoreSpec=* "
            "JOB_GRES=gpu:tesla:5   Nodes=n[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:(null):2(IDX:0-1)"
            "   Nodes=n3 CPU_IDs=0 Mem=0 GRES=gpu:tesla:1(IDX:5) MinCPUsNode=1 "
            "WorkDir=/w AdminComment=shockwave:v1 model=x "
            "Comment=Nodes=n9 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:7)")
    d = detail_from_line(line)
    assert d is not None and d.restarts == 2 and d.time_limit_s == 93784
    assert d.gpu_alloc == (("n1", (0, 1)), ("n2", (0, 1)), ("n3", (5,)))
    assert d.admin_comment == "shockwave:v1 model=x"
    pending = line.replace("JobState=RUNNING", "JobState=PENDING")
    assert detail_from_line(pending).gpu_alloc == ()  # type: ignore[union-attr]
    assert detail_from_line("no job here") is None


_FORGED = "AdminComment=shockwave:v1 bs=1 epochs=1 mode=static submitted=1"


@pytest.mark.parametrize(("field", "planted"), [
    ("JobName=x", f"JobName=x {_FORGED}"), ("WorkDir=/w", f"WorkDir=/home/u/x {_FORGED}"),
    ("JobName=x", "JobName=x Partition=other"),
    ("JobName=x", "JobName=x CoreSpec=* Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7)"),
    ("Command=/x", "Command=/x JobState=RUNNING"),
    ("JobName=x", "JobName=x SubmitTime=2020-01-01T00:00:00")])
def test_a_line_with_a_key_planted_in_a_users_string_is_not_read_as_text(
        field: str, planted: str) -> None:
    """Found by a review: ``scontrol -o`` prints the job's name, command, work directory
    and paths on the same line, and the parser took the first key it found: a job named
    ``x AdminComment=shockwave:v1 ...`` had its hint, submission stamp and GPUs read from
    its name. A line where a key read from it occurs again is not read as text (the
    backend reads such a job from JSON); the real line reads."""
    real = ("JobId=7 JobName=x UserId=u(1) JobState=PENDING Restarts=0 TimeLimit=10 "
            "SubmitTime=2026-11-30T09:00:00 StartTime=Unknown Partition=shockwave "
            "NodeList=(null) CoreSpec=* MinCPUsNode=1 Command=/x WorkDir=/w "
            "AdminComment=shockwave:v1 bs=32 epochs=9 mode=static submitted=1796000000 "
            "Comment=bs=32 epochs=9")
    got = detail_from_line(real)
    assert got is not None and got.admin_comment.endswith("submitted=1796000000")
    assert detail_from_line(real.replace(field, planted, 1)) is None


@pytest.mark.parametrize(("field", "planted"), [
    ("JobName=x", f"JobName=x {_FORGED}"), ("Command=/x", f"Command=/x {_FORGED}"),
    ("Comment=bs", f"Comment=x {_FORGED} bs"), ("WorkDir=/w", "WorkDir=/w StdOut=/o "
                                                            f"{_FORGED}")])
def test_a_job_without_an_admin_comment_has_none_planted(field: str, planted: str) -> None:
    """Slurm prints no AdminComment for a job without one (submitted before
    job_submit.lua was loaded), so one planted in its name, command, comment or paths
    occurred once and was read as the plugin's: a hint, GPUs and a submission time of
    the user's choosing (a review). Only one right after the work directory is Slurm's."""
    real = ("JobId=7 JobName=x UserId=u(1) JobState=PENDING Restarts=0 TimeLimit=10 "
            "SubmitTime=2026-11-30T09:00:00 StartTime=Unknown Partition=shockwave "
            "NodeList=(null) CoreSpec=* MinCPUsNode=1 Command=/x WorkDir=/w "
            "Comment=bs=32 epochs=9")
    got = detail_from_line(real)
    assert got is not None and got.admin_comment == ""
    forged = detail_from_line(real.replace(field, planted, 1))
    assert forged is None or forged.admin_comment == "", forged


@pytest.mark.parametrize(("text", "seconds"), [
    ("UNLIMITED", 0), ("Partition_Limit", 0), ("01:30:00", 5400), ("30:00", 1800),
    ("1-00:00:00", 86400), ("2-1", 2 * 86400 + 3600), ("x-1", 0), ("45", 2700), ("", 0)])
def test_time_limits(text: str, seconds: int) -> None:
    assert time_limit_text_s(text) == seconds


# -- pyslurm's shapes, without pyslurm --------------------------------------------------

@pytest.mark.parametrize(("value", "gpus"), [
    ({"gres/gpu": 2}, 2), ({"gpu": 2}, 2), ({"gpu:a100": 4}, 4),
    ({"gpu": {"count": 3, "indexes": "0-2"}}, 3), ({"gres/gpu": 1, "gres/shard": 4}, 1),
    ("gpu:2", 2), ("gres/gpu:a100:4", 4), ("gres:gpu:1", 1), ("", 0), (None, 0), ({}, 0)])
def test_pyslurm_gres_per_node(value: object, gpus: int) -> None:
    assert gres_gpus(value) == gpus


def test_pyslurm_resource_layout() -> None:
    layout = {"n1": {"cpu_ids": "0-1", "gres": {"gpu": {"count": 2, "indexes": "0-1"}},
                     "memory": 0},
              "n2": {"cpu_ids": "0", "gres": {"gpu:tesla": {"count": 2, "indexes": "3,5"}}},
              "n3": {"cpu_ids": "0", "gres": {}}}
    assert alloc_from_layout(layout) == (("n1", (0, 1)), ("n2", (3, 5)))
    assert alloc_from_layout(None) == () and alloc_from_layout({"n1": {"gres": {"gpu": 2}}}) == ()


@pytest.mark.parametrize(("node", "job", "task", "max_nodes", "per_job"), [
    ("gres:gpu:8", "", "", 0, False), ("", "gres:gpu:8", "", 0, True),
    ("", "gres/gpu=8", "", 0, True), ("", "", "gres:gpu:2", 0, True),
    ("", "gres:gpu:8", "", 1, False), ("", "gres:gpu:8", "", 2, True),
    ("gres:gpu:4", "gres:gpu:4", "", 0, False), ("", "", "", 0, False)])
def test_whether_slurm_may_spread_a_jobs_gpus(node: str, job: str, task: str,
                                             max_nodes: int, per_job: bool) -> None:
    """Asked per job (``--gpus``, ``--gpus-per-task``) and not held to one node (found by
    a review: ``-N 1 --gpus=8`` was planned 7 + 1): Slurm's to spread; per node never."""
    from slurm_shockwave.slurm.json_shapes import asked_per_job

    assert asked_per_job(node, job, task, max_nodes) is per_job
    obj = {"job_id": 1, "job_state": "PENDING", "tres_per_node": node, "tres_per_job": job,
           "tres_per_task": task, "max_nodes": max_nodes}
    assert jobs_from({"jobs": [obj]})[0].per_job is per_job


def test_pyslurm_reads_the_type_of_a_per_job_gpu_request_from_squeue() -> None:
    """pyslurm reads no TresPerJob: a pending ``--gpus=a100:4`` job read as untyped was
    planned on any node's GPUs. Its count and type come from the CLI's one listing, and a
    running, suspended or completing one's type (its count is what it was given), and
    for each whether it asked GPUs for the job, as the CLI backend says (a red-team: a
    suspended or completing one's type and a running one's ``asks_per_job`` were left
    out); a ``--gres`` job keeps what pyslurm read."""
    from types import SimpleNamespace

    from slurm_shockwave.slurm.cli_backend import CliBackend
    from slurm_shockwave.slurm.pyslurm_backend import PyslurmBackend

    jobs = {i: SimpleNamespace(id=i, state=state, partition="shockwave", num_nodes=1,
                               gres_per_node=gres, priority=5)
            for i, state, gres in ((1, "PENDING", None), (2, "PENDING", {"gpu:v100": 2}),
                                   (3, "RUNNING", None), (4, "SUSPENDED", None),
                                   (5, "COMPLETING", None))}
    cli = object.__new__(CliBackend)
    asked: list[list[str]] = []

    def run(args: list[str]) -> str:
        asked.append(args)
        return ("1|1|gres:gpu:a100:4|N/A|1\n2|1|N/A|N/A|1\n3|1|gres:gpu:v100:2|N/A|1\n"
                "4|1|gres:gpu:v100:3|N/A|1\n5|1|N/A|gres:gpu:a100:1|2\n")

    cli._run = run  # type: ignore[method-assign]
    backend = object.__new__(PyslurmBackend)
    backend._ps = SimpleNamespace(Jobs=SimpleNamespace(load=lambda: jobs))
    backend._cli = cli
    listed = {j.job_id: (j.gpus, j.gpu_type, j.asks_per_job)
              for j in backend.list_jobs("shockwave")}
    assert listed == {1: (4, "a100", True), 2: (2, "v100", False), 3: (0, "v100", True),
                      4: (0, "v100", True), 5: (0, "a100", False)}
    assert len(asked) == 1 and asked[0][2:4] == ["-t", "PD,R,CG,S,SE,CF"]


@pytest.mark.parametrize(("state", "reason", "held"), [
    ("PENDING", "JobHeldUser", True), ("SUSPENDED", "None", False),
    ("RUNNING", "JobHeldUser", False)])
def test_jsons_hold_is_a_pending_jobs(state: str, reason: str, held: bool) -> None:
    """JSON's ``hold`` is priority 0, which a suspended job and a running one its owner
    held have too; squeue's text and pyslurm read neither as held (a red-team of the
    backends: the full listing said held of a suspended job)."""
    obj = {"job_id": 1, "job_state": state, "hold": True, "priority": 0,
           "state_reason": reason}
    assert jobs_from({"jobs": [obj]})[0].held is held


def test_a_requeue_held_job_is_held() -> None:
    """scontrol requeuehold leaves priority 0 and this reason (measured on 22.05)."""
    from slurm_shockwave.slurm.json_shapes import is_held

    assert is_held("PENDING", 0, "job requeued in held state")
    assert is_held("PENDING", 0, "job_requeued_in_held_state")
    assert is_held("PENDING", 0, "JobHeldAdmin")
    assert is_held("PENDING", 0, "launch failed requeued held")
    # found by a review (job_mgr.c's other held requeues): read as not held, a start was
    # planned without a release and its priority refused every round
    assert is_held("PENDING", 0, "job requeued in special exit state")
    assert is_held("PENDING", 0, "user env retrieval failed requeued held")
    assert not is_held("PENDING", 5, "Priority") and not is_held("RUNNING", 0, "JobHeldUser")


@pytest.mark.parametrize(("specs", "kind"), [
    (("gres:gpu:v100:4",), "v100"), (("gres/gpu:a100=1",), "a100"), (("gres:gpu:4",), ""),
    (("gres/gpu:a100:4,gres/gpumem:16G",), "a100"), (("gres:gpu:a100:2,gres:gpu:v100:2",), ""),
    (("gres:gpu:a100_3g.20gb:2",), "a100_3g.20gb"), (("", "gres/gpu:h100:8", "N/A"), "h100")])
def test_the_gpu_type_a_job_asks(specs: tuple[str, ...], kind: str) -> None:
    """One type named across a job's requests; none, or two (a review: ``gpumem`` beside
    the type read as untyped)."""
    from slurm_shockwave.slurm.json_shapes import gpu_type_in
    assert gpu_type_in(*specs) == kind


def test_the_gpu_type_of_a_node() -> None:
    from slurm_shockwave.model.cluster import SEVERAL_TYPES
    from slurm_shockwave.slurm.json_shapes import gres_gpu_type
    assert gres_gpu_type("gpu:a100:8(S:0-1)") == "a100"
    assert gres_gpu_type("gpu:8") == gres_gpu_type("gpu:(null):8") == gres_gpu_type("") == ""
    assert gres_gpu_type("gpu:a100:4,gpu:1g.10gb:7") == SEVERAL_TYPES


def _parsed(**kinds: object) -> dict[str, object]:
    """pyslurm 25.11's dict of a dependency string (``dependency_str_to_dict``)."""
    out: dict[str, object] = {k: [] for k in ("after", "afterany", "afterburstbuffer",
                                               "aftercorr", "afternotok", "afterok")}
    return {**out, "singleton": False, "satisfy": "all", **kinds}


@pytest.mark.parametrize(("deps", "text"), [
    (None, ""),
    (_parsed(afterok=["5(unfulfilled)"]), "afterok:5(unfulfilled)"),
    (_parsed(afterok=["5(unfulfilled)"], afterany=["6(unfulfilled)"], satisfy="any"),
     "afterany:6(unfulfilled)?afterok:5(unfulfilled)"),
    # "singleton(unfulfilled)": pyslurm reads singleton only without its mark
    (_parsed(), "singleton(unfulfilled)"),
    (_parsed(singleton=True), "singleton"),
])
def test_pyslurm_dependencies_read_as_slurm_lists_them(deps: object, text: str) -> None:
    assert dependency_text(deps) == text


def _row(jid: int, comment: str = "model=lm bs=1 epochs=1", state: str = "PENDING") -> str:
    """One line of the partition's ``squeue -O`` listing (cli_backend._FIELDS)."""
    return (f"{jid}|{state}|JobHeldUser|0|alice|1|(null)|2026-12-07T04:00:00|gres:gpu:1|N/A|0|"
            f"N/A|N/A|1:00:00|N/A|1|1|(null)|j{jid}|{comment}")


def _line(jid: int, partition: str = "shockwave") -> str:
    """One ``scontrol -o -d show job`` line (each key once, the admin comment last)."""
    return (f"JobId={jid} JobName=j{jid} Priority=0 JobState=PENDING Reason=JobHeldUser "
            f"Requeue=1 Restarts=0 SubmitTime=2026-12-07T04:00:00 StartTime=Unknown "
            f"TimeLimit=01:00:00 Partition={partition} NumNodes=1-1 CoreSpec=* "
            f"MinCPUsNode=1 WorkDir=/tmp AdminComment=shockwave:v1 bs=1 epochs=1 "
            f"mode=static submitted=1796122478")


@pytest.mark.parametrize(("listing", "lines", "from_json"), [
    ([_row(5), _row(6)], {5: _line(5), 6: _line(6)}, False),
    # a newline in job 5's comment: the rest of its row is a line of its own
    ([_row(5, "model=lm bs=1"), "epochs=1", _row(6)], {5: _line(5), 6: _line(6)}, True),
    # ... that reads as a row naming job 77, which is another partition's
    ([_row(5, "x"), _row(77, state="RUNNING"), _row(6)],
     {5: _line(5), 6: _line(6), 77: _line(77, "other")}, True),
    # ... or one that Slurm does not have (scontrol refuses it)
    ([_row(5, "x"), _row(78), _row(6)], {5: _line(5), 6: _line(6)}, True),
    ([_row(5), _row(5)], {5: _line(5)}, True),  # a job listed twice
    # a newline in job 6's submit line: its scontrol line ends before its admin comment
    ([_row(5), _row(6)], {5: _line(5), 6: _line(6).replace(" WorkDir", "\nx WorkDir")},
     False),
    # a vertical tab in a comment is no line break (str.splitlines took it for one)
    ([_row(5, "model=lm\vbs=1 epochs=1"), _row(6)], {5: _line(5), 6: _line(6)}, False),
    # squeue prints every job id as a number: a row with another is a broken line
    ([_row(5), _row(6).replace("6|", "6_1|", 1)], {5: _line(5), 6: _line(6)}, True),
    # a heterogeneous leader's scontrol prints its components too: not lines of its own
    ([_row(5), _row(6)], {5: _line(5) + "\n" + _line(7), 6: _line(6)}, False),
])
def test_a_partitions_listing_a_newline_breaks_is_read_from_json(
        listing: list[str], lines: dict[int, str], from_json: bool) -> None:
    """Found by a red-team: squeue's and scontrol's one-line listings, split wherever a
    job's strings hold a newline, read a job's comment or admin comment cut short (an
    owner's hold mark lost; a job read as one without a hint), and a line made by a
    newline could name any job. A listing that is not one row a job, each the
    partition's in scontrol, is read from JSON this round; a job whose scontrol line is
    cut, from JSON too."""
    from slurm_shockwave.slurm.cli_backend import CliBackend

    cli = CliBackend(check_conf=False)
    asked: list[list[str]] = []
    json_jobs = [{"job_id": j, "job_state": state, "partition": "shockwave",
                  "user_name": "alice", "comment": "model=lm bs=1 epochs=1",
                  "admin_comment": "from json", "priority": 0, "state_reason": "JobHeldUser"}
                 for j, state in ((5, "PENDING"), (6, "PENDING"), (8, "COMPLETED"))]

    def run(args: list[str]) -> str:
        asked.append(args)
        if args[:2] == ["squeue", "-h"]:
            return "\n".join(listing) + "\n"
        if args[:2] == ["squeue", "--json"]:  # 22.05: every record, ended ones too
            return json.dumps({"jobs": json_jobs})
        jid = int(args[-1])
        if jid not in lines:
            raise SlurmError("scontrol show: Invalid job id specified")
        return lines[jid] + "\n"

    cli._run = run  # type: ignore[method-assign]
    got = {j.job_id: j.admin_comment for j in cli.list_jobs("shockwave")}
    assert (["squeue", "--json", "--all"] in asked) is (from_json or "\n" in lines[6]), asked
    if from_json:
        assert got == {5: "from json", 6: "from json"}
    else:
        expected = {5: "shockwave:v1 bs=1 epochs=1 mode=static submitted=1796122478"}
        assert got[5] == expected[5]
        cut = "\n" in lines[6]
        assert got[6] == ("from json" if cut else expected[5]), got


def test_what_the_cli_backend_asks_slurm_for_a_partition_and_a_signal() -> None:
    """The partition's listing asks for SPECIAL_EXIT (a requeue-hold of its own state)
    and CONFIGURING (squeue -t R leaves a job out while its nodes boot: a review) beside
    the rest; its JSON fallback keeps those and drops the ended records 22.05 lists; a
    checkpoint signal goes to a running job only (scancel --state=RUNNING)."""
    from slurm_shockwave.slurm.cli_backend import CliBackend

    cli = CliBackend(check_conf=False)
    asked: list[list[str]] = []
    states = ("PENDING", "SPECIAL_EXIT", "CONFIGURING", "COMPLETED", "CANCELLED", "RUNNING")

    def run(args: list[str]) -> str:
        asked.append(args)
        if args[:2] == ["squeue", "-h"]:
            raise SlurmError("squeue: refused")  # the JSON path, as on a text failure
        return json.dumps({"jobs": [{"job_id": i, "job_state": s, "partition": "shockwave"}
                                    for i, s in enumerate(states, 1)]})

    cli._run = run  # type: ignore[method-assign]
    listed = {j.job_id: (j.state, j.state_flags) for j in cli.list_jobs("shockwave")}
    assert listed == {1: ("PENDING", ()), 2: ("PENDING", ("SPECIAL_EXIT",)),
                      3: ("RUNNING", ("CONFIGURING",)), 6: ("RUNNING", ())}
    assert asked[0][asked[0].index("-t") + 1] == "PD,R,CG,S,SE,CF"
    asked.clear()

    def quiet(args: list[str]) -> str:
        asked.append(args)
        return ""

    cli._run = quiet  # type: ignore[method-assign]
    cli.signal(7, "USR1")
    assert asked == [["scancel", "--state=RUNNING", "--signal=USR1", "--full", "7"]]
