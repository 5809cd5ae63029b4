"""Both JSON shapes, against real Slurm output of 22.05 and 24.11."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_shockwave.slurm.json_shapes import gpus_in, jobs_from, nodes_from, number, version_of

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


def test_versions_and_number_shapes() -> None:
    assert version_of(load("22.05", "squeue.json")) == (22, 5)
    assert version_of(load("24.11", "squeue.json")) == (24, 11)
    assert number({"set": True, "infinite": False, "number": 7}) == 7
    assert number({"set": False, "infinite": False, "number": 7}, default=-1) == -1
    assert number({"set": True, "infinite": True, "number": 0}, default=-1) == -1
    assert number(None, default=3) == 3 and number(12) == 12
    assert gpus_in("gres:gpu:a100:4") == 4 and gpus_in("gres/gpu:2") == 2 and gpus_in("") == 0
