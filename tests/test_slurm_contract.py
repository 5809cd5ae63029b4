"""One contract for every Slurm backend: the CLI one against the real cluster, pyslurm
where it imports (it needs Slurm 25.11; skipped with the reason elsewhere)."""

from __future__ import annotations

import os

import pytest

from slurm_shockwave.slurm.protocol import SlurmError
from slurm_shockwave.slurm.pyslurm_backend import make_backend, pyslurm_problem


def _backend(kind: str):
    if kind == "pyslurm":
        problem = pyslurm_problem()
        if problem:
            pytest.skip(problem)
    b = make_backend(kind)
    try:
        b.list_nodes()
    except SlurmError as exc:
        if os.environ.get("SHOCKWAVE_REQUIRE_SLURM") and kind == "cli":
            pytest.fail(f"no Slurm cluster: {exc}")
        pytest.skip(f"no Slurm cluster: {exc}")
    return b


@pytest.mark.slurm
@pytest.mark.parametrize("kind", ["cli", "pyslurm"])
def test_backend_contract(kind: str, tmp_path) -> None:
    b = _backend(kind)
    nodes = b.list_nodes()
    assert nodes and all(n.gpus > 0 for n in nodes)
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    jid = b.submit(str(script), ["-o", "/dev/null", "--gres=gpu:1",
                                 "--comment=model=lm bs=10 epochs=3"])
    try:
        job = next(j for j in b.list_jobs() if j.job_id == jid)
        assert job.held and job.gpus == 1 and job.admin_comment.startswith("shockwave:v1")
        b.update_gpus(jid, 2)
        assert next(j for j in b.list_jobs() if j.job_id == jid).gpus == 2
        with pytest.raises(SlurmError):
            b.set_priority(jid, 10)  # held jobs reject priorities
        b.hold([jid])
        assert next(j for j in b.list_jobs() if j.job_id == jid).held
    finally:
        b.cancel(jid)


def test_unknown_backend_and_missing_pyslurm_are_one_line(monkeypatch, tmp_path) -> None:
    with pytest.raises(SlurmError, match="unknown backend 'slurmrestd'"):
        make_backend("slurmrestd")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "absent.conf"))
    problem = pyslurm_problem()
    assert problem is not None and "slurm.conf" in problem and "\n" not in problem
