"""The TaskProlog as a plain script (no cluster): how a job finds the service."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_task_prolog_falls_back_to_the_installed_url(tmp_path: Path) -> None:
    """A compute node that cannot read the service's endpoint file (another host, no
    shared file system) still finds the service from the URL installed in the script;
    the endpoint file wins where it can be read."""
    script = (ROOT / "plugin_scripts" / "task_prolog.sh").read_text()
    endpoint = tmp_path / "endpoint"
    script = script.replace('ENDPOINT_FILE="/var/lib/slurm-shockwave/endpoint"',
                            f'ENDPOINT_FILE="{endpoint}"')
    script = script.replace('SERVICE_URL=""', 'SERVICE_URL="http://ctl.example:7817"')
    path = tmp_path / "task_prolog.sh"
    path.write_text(script)
    env = {"PATH": os.environ["PATH"]}

    def run() -> str:
        return subprocess.run(["sh", str(path)], capture_output=True, text=True, env=env,
                              timeout=30, check=True).stdout

    assert "export SHOCKWAVE_URL=http://ctl.example:7817" in run()
    assert "SHOCKWAVE_SERVICE_UID" not in run()  # root's answers only
    # a service there that runs as another uid (install-scripts --service-uid): its
    # answers believed, or every report was spooled and sent again for ever (a red-team)
    path.write_text(script.replace('SERVICE_UID=""', 'SERVICE_UID="1002"'))
    assert "export SHOCKWAVE_SERVICE_UID=1002" in run()
    path.write_text(script)
    endpoint.write_text("http://127.0.0.1:7999\n")
    assert "export SHOCKWAVE_URL=http://127.0.0.1:7999" in run()
    # the answers the job believes: the endpoint file's owner's, who wrote it
    assert f"export SHOCKWAVE_SERVICE_UID={os.geteuid()}" in run()
    if os.geteuid() == 0:
        os.chown(endpoint, 1002, 1002)
        assert "export SHOCKWAVE_SERVICE_UID=1002" in run()
    # found by a review: install-scripts and the client take https (behind a proxy), and
    # the TaskProlog passed only http on
    endpoint.write_text("https://ctl.example:443/sw\n")
    assert "export SHOCKWAVE_URL=https://ctl.example:443/sw" in run()
    endpoint.write_text("ftp://ctl.example:21\n")
    assert "SHOCKWAVE_URL" not in run()
    # a red-team finding: the check read only the first character after the scheme
    endpoint.write_text('http://h:7817/ "$(id)" ;x=1\n')
    assert "SHOCKWAVE_URL" not in run()


def test_a_checkpoint_signal_as_the_job_exits_is_ignored(tmp_path: Path) -> None:
    """At exit Python gives a handled signal its default action back (SIGUSR1's kills)
    before the process is gone; a checkpoint signal sent just as a job finished turned it
    into a failed job (seen live). The client ignores the signal from the end on."""
    program = (
        "import atexit, signal, sys\n"
        "atexit.register(lambda: print('at exit:', signal.getsignal(signal.SIGUSR1)"
        " == signal.SIG_IGN, flush=True))\n"
        "from slurm_shockwave.client import reporter\n"
        "assert reporter.install()\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "SHOCKWAVE_SIGNAL": "USR1"}
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "at exit: True" in out.stdout


def _no_endpoint(tmp_path: Path) -> Path:
    """The TaskProlog in ``tmp_path``, with no endpoint file, and a folder for the
    stand-in Slurm commands it runs (returned)."""
    script = (ROOT / "plugin_scripts" / "task_prolog.sh").read_text()
    (tmp_path / "task_prolog.sh").write_text(script.replace(
        'ENDPOINT_FILE="/var/lib/slurm-shockwave/endpoint"',
        f'ENDPOINT_FILE="{tmp_path / "none"}"'))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return bin_dir


def _signals_exported(tmp_path: Path, bin_dir: Path, job_id: int, fields: str) -> list[str]:
    """The TaskProlog's SHOCKWAVE_SIGNAL lines for a job whose ``scontrol -o show job``
    line is ``JobId=<job_id> JobName=t UserId=alice(1000) <fields>`` (its spool removed)."""
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho 'JobId={job_id} JobName=t UserId=alice(1000) "
                        f"{fields}'\n")
    scontrol.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": str(job_id)}
    try:
        out = subprocess.run(["sh", str(tmp_path / "task_prolog.sh")], capture_output=True,
                             text=True, env=env, timeout=30, check=True).stdout
    finally:  # the spool it makes for the job (the signal kept in it)
        shutil.rmtree(f"/tmp/shockwave-spool-{job_id}")
    return [line for line in out.splitlines() if "SHOCKWAVE_SIGNAL" in line]


def test_the_signal_is_read_from_every_form_of_the_normalised_hint(tmp_path: Path) -> None:
    """The TaskProlog reads the signal from the hint job_submit.lua wrote (the same normal
    form as ``Hint.normalised``), an elastic job's range included: found by a review, a
    hint with ``gpus=LO-HI`` exported no signal, so the job's own checkpoint signal
    killed it (SIGUSR1's default action) when the service resized it."""
    from slurm_shockwave.slurm.hints import parse_hint

    bin_dir = _no_endpoint(tmp_path)
    for hint, signal in [("model=ResNet-18 bs=32 epochs=9 signal=USR1", "USR1"),
                         ("bs=32 epochs=9 mode=gns signal=USR2 grace=10", "USR2"),
                         ("model=ResNet-18 bs=32 epochs=9 gpus=1-4 signal=USR1", "USR1"),
                         ("bs=32 epochs=9 mode=accordion gpus=2-8 signal=TERM", "TERM"),
                         ("model=ResNet-18 bs=32 epochs=9 gpus=1-4", None)]:
        comment = parse_hint(hint).normalised() + " submitted=1796122478"
        exported = _signals_exported(tmp_path, bin_dir, 987654321,
                                     f"AdminComment={comment} Comment=x OverSubscribe=OK")
        assert exported == ([f"export SHOCKWAVE_SIGNAL={signal}"] if signal else []), hint


def test_the_signal_of_a_job_planned_from_its_raw_comment_is_exported(tmp_path: Path) -> None:
    """Found by a red-team: a job submitted while job_submit.lua was not loaded has no
    admin comment; the service plans it from its raw comment and sends it the signal
    named there, but the TaskProlog read only the admin comment, so the job got no
    handler and died of the signal. Read as the service reads it (``listing.hint_text``);
    a job whose admin comment names no signal gets none from its comment."""
    from slurm_shockwave.slurm.hints import parse_hint
    from slurm_shockwave.slurm.listing import read_hint

    bin_dir = _no_endpoint(tmp_path)
    cases = [("Comment=model=resnet18 bs=32 epochs=9 signal=usr1 grace=10 StdErr=/x", "USR1"),
             ("Comment=bs=32 epochs=9 signal=SIGusr2 held=owner StdErr=/x", "USR2"),
             ("Comment=bs=32 epochs=9 signal=KILL StdErr=/x", None),
             ("Comment=bs=32 epochs=9 StdErr=/x", None),
             ("AdminComment=shockwave:v1 bs=32 epochs=9 mode=static submitted=1 "
              "Comment=bs=32 epochs=9 signal=USR1 StdErr=/x", None)]
    for fields, signal in cases:
        exported = _signals_exported(tmp_path, bin_dir, 987654323, fields)
        assert exported == ([f"export SHOCKWAVE_SIGNAL={signal}"] if signal else []), fields
        if fields.startswith("Comment=") and signal:  # what the service reads there
            hint = read_hint(fields.removeprefix("Comment=").split(" StdErr=")[0]
                             .removesuffix(" held=owner"))
            assert not isinstance(hint, str) and hint.signal == signal
    assert parse_hint("bs=1 epochs=1 signal=SIGusr2").signal == "USR2"


def test_another_partitions_jobs_get_nothing_and_ask_slurmctld_nothing(
        tmp_path: Path) -> None:
    """Found by a red-team: the TaskProlog and the Epilog acted on every job of the
    cluster, and a 1,000-node MPI job of any partition asked slurmctld 1,000 times at
    once. Another partition's job gets no export, no spool and no call; the managed
    partition's (and one Slurm names no partition of) as before."""
    from slurm_shockwave.slurm.plugin_files import ScriptSettings, render

    bin_dir = _no_endpoint(tmp_path)
    (tmp_path / "task_prolog.sh").write_text(render(
        "task_prolog.sh", ScriptSettings(partition="gpu-a",
                                         endpoint_file=str(tmp_path / "none"))))
    calls = tmp_path / "calls"
    (bin_dir / "scontrol").write_text(
        f"#!/bin/sh\necho x >> {calls}\necho 'JobId=987654324 AdminComment=shockwave:v1 "
        "bs=32 epochs=9 mode=gns signal=USR2 grace=10 submitted=1 Comment=x'\n")
    (bin_dir / "scontrol").chmod(0o755)
    for partition, exported in (("cpu", False), ("gpu-a", True), (None, True)):
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "987654324"}
        if partition:
            env["SLURM_JOB_PARTITION"] = partition
        try:
            out = subprocess.run(["sh", str(tmp_path / "task_prolog.sh")],
                                 capture_output=True, text=True, env=env, timeout=30,
                                 check=True).stdout
        finally:
            shutil.rmtree("/tmp/shockwave-spool-987654324", ignore_errors=True)
        assert ("export SHOCKWAVE_SIGNAL=USR2" in out) == exported, partition
        assert ("SHOCKWAVE_SPOOL" in out) == exported, partition
        assert calls.exists() == exported, partition
        calls.unlink(missing_ok=True)
    epilog = tmp_path / "epilog.sh"
    epilog.write_text(render("epilog.sh", ScriptSettings(partition="gpu-a")))
    shockwave = bin_dir / "shockwave"
    shockwave.write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\n")
    shockwave.chmod(0o755)
    for partition, reported in (("cpu", False), ("gpu-a", True)):
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "987654324",
               "SLURM_JOB_PARTITION": partition, "SLURM_JOB_EXIT_CODE2": "0:0"}
        subprocess.run(["sh", str(epilog)], env=env, timeout=30, check=True)
        assert calls.exists() == reported and (not reported or "--end 0" in
                                               calls.read_text()), partition
        calls.unlink(missing_ok=True)


def test_the_signal_is_asked_of_slurmctld_once_per_job_and_node(tmp_path: Path) -> None:
    """The TaskProlog runs before every task: a 64-task step asked slurmctld 64 times (a
    red-team finding). The first asks, and keeps the answer in the job's spool."""
    bin_dir = _no_endpoint(tmp_path)
    calls = tmp_path / "calls"
    (bin_dir / "scontrol").write_text(  # the first call fails: slurmctld busy
        f"#!/bin/sh\n[ -e {calls} ] || {{ echo x > {calls}; exit 1; }}\necho x >> {calls}\n"
        "echo 'JobId=987654322 AdminComment=shockwave:v1 "
        "bs=32 epochs=9 mode=gns signal=USR2 grace=10 submitted=1 Comment=x'\n")
    (bin_dir / "scontrol").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "987654322"}
    try:
        outs = [subprocess.run(["sh", str(tmp_path / "task_prolog.sh")], capture_output=True,
                               text=True, env=env, timeout=30, check=True).stdout
                for _ in range(5)]
    finally:
        shutil.rmtree("/tmp/shockwave-spool-987654322")
    # a failure is not kept as "no signal" (a review: every later task went without its
    # handler): the next task asks again, and the answer is kept from then on
    assert ["export SHOCKWAVE_SIGNAL=USR2" in out for out in outs] == [False] + [True] * 4
    assert calls.read_text().count("x") == 2
