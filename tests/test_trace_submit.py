"""``shockwave trace submit``: what it hands sbatch, bad traces, and a real run on the cluster.

The cluster test submits to partition ``other`` (no hold) and skips with the reason when
no cluster answers (SHOCKWAVE_REQUIRE_SLURM=1 makes that a failure). If it fails because
the shared test cluster was full, rerun it alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli
from slurm_shockwave.emulate.submit import (
    EmulatorSettings,
    gpu_args,
    hint_comment,
    job_script,
    sbatch_args,
)
from slurm_shockwave.model.job import AdaptationMode, JobSpec
from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.hints import parse_hint
from slurm_shockwave.slurm.protocol import SlurmError

TRACE = """\
{"id": 10, "model": "ResNet-18", "batch_size": 32, "gpus": 2, "mode": "gns", "arrival_s": 0, "epochs": 14}
{"id": 11, "model": "LM", "batch_size": 10, "gpus": 1, "mode": "accordion", "arrival_s": 60, "epochs": 12}
{"id": 12, "model": "ResNet-50", "batch_size": 32, "gpus": 1, "mode": "static", "arrival_s": 120, "epochs": 2}
"""  # noqa: E501


def settings(tmp_path: Path) -> EmulatorSettings:
    return EmulatorSettings(time_scale=100.0, checkpoint_dir=tmp_path / "ck",
                            output_dir=tmp_path / "out", partition="other", python="/py",
                            pythonpath="/src dir")


def test_the_hint_is_one_the_parser_accepts() -> None:
    spec = JobSpec(3, "ResNet-18", 32, 2, AdaptationMode.GNS, 0.0, 90)
    hint = parse_hint(hint_comment(spec))
    assert hint.normalised() == ("shockwave:v1 model=ResNet-18 bs=32 epochs=90 mode=gns "
                                 "signal=USR1 grace=30")


def test_sbatch_options_and_script(tmp_path: Path) -> None:
    spec = JobSpec(7, "LM", 10, 2, AdaptationMode.ACCORDION, 5.0, 12)
    s = settings(tmp_path)
    args = sbatch_args(spec, s)
    assert args[:3] == ["-p", "other", "--gres=gpu:2"]
    assert "--requeue" in args and args[args.index("-J") + 1] == "trace-7"
    assert args[args.index("-o") + 1] == str(tmp_path / "out" / "%j.out")
    assert gpu_args(8) == ["--gres=gpu:8"]
    assert gpu_args(12) == ["-N", "2", "--gres=gpu:8"]
    assert gpu_args(32) == ["-N", "4", "--gres=gpu:8"]
    script = job_script(spec, s)
    assert script.startswith("#!/usr/bin/env -S --ignore-signal=USR1 /bin/bash\n")
    assert "trap '' USR1\n" in script and "export SHOCKWAVE_SIGNAL=USR1\n" in script
    assert "export PYTHONPATH='/src dir'${PYTHONPATH:+:$PYTHONPATH}\n" in script
    assert script.splitlines()[-1] == (
        f"exec /py -m slurm_shockwave.emulate --model LM --bs 10 --epochs 12 --mode accordion "
        f"--gpus 2 --time-scale 100.0 --checkpoint {tmp_path / 'ck'} --trace-job-id 7")
    # trace submit names each job's run by when it submitted it: a checkpoint left under
    # the same Slurm job id by an earlier submission (ids restart) is not this run's
    timed = job_script(spec, s, 1800000000.125).splitlines()[-1]
    assert timed.endswith("--trace-job-id 7 --submitted-at 1800000000.125")


@pytest.mark.parametrize(("line", "field"), [
    ('{"model": "LM", "batch_size": 10}', "epochs"),
    ('{"model": "LM", "batch_size": 10, "epochs": 3, "mode": "fast"}', "mode"),
    ('{"model": "ResNet-50", "batch_size": 32, "gpus": 3, "epochs": 3}', "throughput"),
])
def test_a_bad_trace_is_one_line_and_exit_2(tmp_path: Path, line: str, field: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(TRACE.splitlines()[0] + "\n" + line + "\n")
    result = CliRunner().invoke(cli, ["trace", "submit", str(path), "--time-scale", "10",
                                      "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}:2: {field}: "), lines
    assert not (tmp_path / "out").exists()


def test_a_slurm_that_does_not_answer_is_one_line_before_anything(tmp_path: Path) -> None:
    """Checked once before the first arrival: not a refusal per job after sleeping
    through the trace's arrivals, and no output folders left behind."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=nowhere\nSlurmctldHost=localhost\nSlurmctldPort=1\n"
                    "MessageTimeout=1\nAuthType=auth/munge\n")
    path = tmp_path / "t.jsonl"
    path.write_text(TRACE.splitlines()[0] + "\n")
    result = CliRunner().invoke(cli, ["trace", "submit", str(path), "--time-scale", "10",
                                      "--output-dir", str(tmp_path / "out"),
                                      "--slurm-conf", str(conf)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1
    assert lines[0].startswith("error: scontrol ") and "Unable to contact" in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "kind"), [
    ("--output-dir", "file"), ("--checkpoint-dir", "file"), ("--output-dir", "read-only"),
    # sbatch -o reads % as a pattern: the job failed to launch, reported as submitted
    ("--output-dir", "pattern")])
def test_a_folder_that_cannot_be_made_is_one_line_before_slurm(tmp_path: Path, option: str,
                                                              kind: str) -> None:
    """A folder option that names a file, or a folder that cannot be written, is refused
    naming the option before Slurm is asked anything (the slurm.conf here names no
    controller: a refusal from scontrol would mean Slurm was asked first)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=nowhere\nSlurmctldHost=localhost\nSlurmctldPort=1\n"
                    "MessageTimeout=1\nAuthType=auth/munge\n")
    path = tmp_path / "t.jsonl"
    path.write_text(TRACE.splitlines()[0] + "\n")
    target = path if kind == "file" else tmp_path / "ro" / "out"
    if kind == "pattern":
        target = tmp_path / "out%x"
    if kind == "read-only":
        (tmp_path / "ro").mkdir(mode=0o500)
        if os.access(tmp_path / "ro", os.W_OK):  # root: permissions do not stop it
            target = Path("/proc/self/nope")
    result = CliRunner().invoke(cli, ["trace", "submit", str(path), "--time-scale", "10",
                                      option, str(target), "--slurm-conf", str(conf)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f": {option}: " in lines[0] and "scontrol" not in lines[0], lines
    assert path.read_text() == TRACE.splitlines()[0] + "\n"  # nothing lost


def test_a_partition_slurm_would_read_as_two_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(TRACE.splitlines()[0] + "\n")
    for bad in ("a,b", "a;b", ""):
        result = CliRunner().invoke(cli, ["trace", "submit", str(path), "--time-scale", "10",
                                          "--partition", bad])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert "'--partition': must be a partition name" in lines[0], lines


def test_sigterm_removes_the_scripts_folder(tmp_path: Path) -> None:
    """Found by a review: a live run stops trace submit with SIGTERM, which killed it
    before it removed its scripts' folder (/tmp/shockwave-submit-*, one per run). Here
    sbatch and scontrol are stand-ins on PATH; the second job arrives much later."""
    bin_dir, tmp = tmp_path / "bin", tmp_path / "tmp"
    bin_dir.mkdir()
    tmp.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 'PartitionName=shockwave State=UP'\n")
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 101\n")
    for tool in ("scontrol", "sbatch"):
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "slurm.conf").write_text("ClusterName=nowhere\nSlurmctldHost=localhost\n")
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE.splitlines()[0] + "\n" + TRACE.splitlines()[1] + "\n")
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp),
           "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurm_shockwave.cli", "trace", "submit", str(trace),
         "--time-scale", "1", "--json", "--output-dir", str(tmp_path / "out"),
         "--slurm-conf", str(tmp_path / "slurm.conf")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # job 10 submitted; job 11 in 60 s
        assert first["slurm_job_id"] == 101
        assert [p.name[:17] for p in tmp.iterdir()] == ["shockwave-submit-"]
        proc.terminate()
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert list(tmp.iterdir()) == []


# --- on the real cluster -------------------------------------------------------------


@pytest.fixture(scope="module")
def backend() -> CliBackend:
    try:
        b = CliBackend()
        nodes = b.list_nodes()
    except SlurmError as exc:
        if os.environ.get("SHOCKWAVE_REQUIRE_SLURM"):
            pytest.fail(f"no Slurm cluster: {exc}")
        pytest.skip(f"no Slurm cluster (start docker-slurm/start.sh): {exc}")
    assert nodes, "the cluster has no nodes"
    return b


@pytest.fixture
def submitted(backend: CliBackend) -> Iterator[list[int]]:
    """Slurm job ids the test submitted; those still queued are cancelled at the end."""
    mine: list[int] = []
    yield mine
    for job_id in mine:
        with contextlib.suppress(SlurmError):
            backend.cancel(job_id)


@pytest.mark.slurm
def test_an_unknown_partition_is_one_line_before_anything(backend: CliBackend,
                                                          tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(TRACE)
    result = CliRunner().invoke(cli, ["trace", "submit", str(path), "--time-scale", "10",
                                      "--partition", "nosuchpartition",
                                      "--output-dir", str(tmp_path / "out")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0] == "error: --partition: Slurm has no partition 'nosuchpartition'"
    assert not (tmp_path / "out").exists()


@pytest.mark.slurm
def test_a_trace_runs_to_completion_on_the_cluster(backend: CliBackend, tmp_path: Path,
                                                   submitted: list[int]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    out = tmp_path / "out"
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["trace", "submit", str(trace), "--time-scale", "100",
                                      "--partition", "other", "--output-dir", str(out),
                                      "--json"])
    records = [json.loads(ln) for ln in result.output.splitlines() if ln.startswith("{")]
    submitted.extend(r["slurm_job_id"] for r in records if "slurm_job_id" in r)
    assert result.exit_code == 0, result.output
    assert [r["trace_job_id"] for r in records] == [10, 11, 12]
    assert [r["offset_s"] for r in records] == pytest.approx([0, 0.6, 1.2], abs=0.5)
    assert all(isinstance(r["slurm_job_id"], int) and r["submitted_at"] > 0 for r in records)
    ids = {r["trace_job_id"]: r["slurm_job_id"] for r in records}

    def queued() -> set[int]:
        """Our jobs squeue still lists (it lists no finished job by default)."""
        text = subprocess.run(["squeue", "-h", "-o", "%A"], capture_output=True, text=True,
                              check=True).stdout
        return {int(t) for t in text.split()} & set(ids.values())

    deadline = started + 60
    while queued() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not queued(), f"still queued after 60 s (cluster full? rerun alone): {queued()}"
    epochs = {10: 14, 11: 12, 12: 2}
    for trace_id, slurm_id in ids.items():
        text = (out / f"{slurm_id}.out").read_text()
        assert text.splitlines()[0].startswith(f"start job {slurm_id} (trace job {trace_id}):")
        assert text.splitlines()[-1] == f"done {epochs[trace_id]}/{epochs[trace_id]} epochs"
        ckpt = json.loads((out / "checkpoints" / f"{slurm_id}.json").read_text())
        assert ckpt["epochs_done"] == epochs[trace_id]
    # the gns job doubles its batch size after epoch 11 (ResNet-18, bs 32, 2 GPUs)
    gns = (out / f"{ids[10]}.out").read_text()
    sizes = [int(m) for m in re.findall(r"^epoch \d+/14 bs=(\d+) ", gns, re.M)]
    assert sizes == [32] * 11 + [64] * 3
    assert "gpus=2 (asked 2)" in gns
