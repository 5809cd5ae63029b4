"""The ``shockwave`` command as a user runs it: a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest

from tests.conftest import reference_file


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", *args],
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_simulate_demo_json() -> None:
    out = json.loads(run("simulate", "--policy", "las", "--json").stdout)
    for key in ("policy", "jobs", "gpus", "makespan_s", "avg_jct_s", "worst_rho",
                "unfair_fraction", "utilization", "rounds", "wall_s"):
        assert key in out
    assert out["policy"] == "las" and out["jobs"] == 64 and out["gpus"] == 16
    assert 0 <= out["unfair_fraction"] <= 1 and out["makespan_s"] > 0


def test_simulate_table_and_csv(tmp_path: Path) -> None:
    csv = tmp_path / "jobs.csv"
    proc = run("simulate", "--policy", "gavel", "--gpus-per-node", "4", "--csv", str(csv))
    assert "makespan" in proc.stdout and "worst rho" in proc.stdout
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("job_id,gpus,arrival_s") and len(lines) == 65


def test_compare_writes_table_and_plots(tmp_path: Path) -> None:
    proc = run("compare", "--policies", "gavel,fifo,srtf", "--out", str(tmp_path))
    assert "gavel" in proc.stdout and "srtf" in proc.stdout
    for name in ("jct_cdf.png", "rho_cdf.png", "gpus_busy.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    records = json.loads((tmp_path / "results.json").read_text())
    assert [r["policy"] for r in records] == ["gavel", "fifo", "srtf"]


def test_compare_by_default_runs_shockwave_against_every_baseline(tmp_path: Path) -> None:
    """Compare against every baseline, not the convenient ones: the default left out
    FIFO, SRTF (the lowest average JCT), LAS and MST, and stretch_edf. A policy added to
    the registry is a published baseline or named here as not one."""
    from slurm_shockwave.policies.registry import BASELINES, OURS, POLICIES

    assert set(POLICIES) - set(BASELINES) == {*OURS, "elastic_greedy"}
    run("compare", "--json", "--out", str(tmp_path))
    records = json.loads((tmp_path / "results.json").read_text())
    assert [r["policy"] for r in records] == ["shockwave", *BASELINES, "stretch_edf"]
    assert len(BASELINES) == 9


def test_an_output_the_system_refuses_is_bad_input(tmp_path: Path) -> None:
    """Found by a red-team: a name over 255 bytes was exit 1 with a traceback, and a FIFO
    no one reads hung before the run. Both are one line, exit 2; a FIFO with a reader
    gets the results."""
    import os

    long = str(tmp_path / ("x" * 300))
    for args in (["trace", "generate", "--jobs", "3", "--out", long],
                 ["simulate", "--csv", long], ["compare", "--policies", "fifo", "--out", long]):
        proc = run(*args, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "File name too long" in proc.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = run("simulate", "--csv", str(fifo), check=False)
    assert proc.returncode == 2 and "--csv: cannot write it (a FIFO no one reads)" in proc.stderr
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, before the run
    try:
        run("simulate", "--csv", str(fifo), "--no-progress")  # 65 lines: within the pipe
        got = os.read(reader, 1 << 16).decode()
    finally:
        os.close(reader)
    assert got.startswith("job_id,") and len(got.splitlines()) == 65


def test_a_trace_named_like_markup_is_shown_by_its_name(tmp_path: Path) -> None:
    """Found by a red-team: a valid trace under ``a[/b]`` crashed the tables (rich read
    the name as markup, exit 1) and one named ``m$\\foo$`` the plots (mathtext)."""
    trace = tmp_path / "a[" / "b]$\\foo$.jsonl"
    trace.parent.mkdir()
    trace.write_text('{"id": 0, "model": "ResNet-18", "batch_size": 32, "gpus": 1, '
                     '"mode": "static", "arrival_s": 0, "total_steps": 100}\n')
    assert "b]$\\foo$.jsonl: 1 jobs" in run("trace", "show", str(trace)).stdout
    proc = run("compare", str(trace), "--gpus", "2", "--policies", "fifo", "--no-progress",
               "--out", str(tmp_path / "out"))
    assert "fifo" in proc.stdout and (tmp_path / "out" / "jct_cdf.png").exists()


@pytest.mark.parametrize(("args", "expected"), [
    # a value of an option names the option, not the setting (red-team)
    (["simulate", "--policy", "nope"], "'--policy': 'nope' is not one of"),
    (["simulate", "missing.trace", "--gpus", "4"], "missing.trace: trace: cannot read"),
    (["simulate", "--throughputs", "builtin:a100"], "--throughputs: no bundled table 'a100'"),
    (["trace", "show", "--throughputs", "missing.json"], "missing.json: --throughputs: cannot"),
    # refused as the option is read, before a store, a lock or Slurm is touched
    (["serve", "--round-s", "nan", "--dry-run"], "'--round-s': must be a finite number"),
    (["serve", "--listen", "127.0.0.1:99999", "--dry-run"], "'--listen': must be HOST:PORT"),
    (["serve", "--listen", "::1", "--dry-run"], "'--listen': must be HOST:PORT"),  # [::1]:P
    # an empty path was taken as the option left out: the default slurm.conf read
    (["install-scripts", "--slurm-conf", "", "--dry-run"], "'--slurm-conf': must be a path"),
    (["queue", "--slurm-conf", ""], "'--slurm-conf': must be a path"),
    (["simulate", "", "--gpus", "4"], "error: trace: must be a path, not empty"),  # named "."
    (["simulate", "--throughputs", ""], "error: --throughputs: must be a path, not empty"),
    (["serve", "--admin-uid", "4294967296", "--dry-run"], "'--admin-uid'"),
    (["serve", "--partition", "a,b", "--dry-run"], "'--partition': must be a partition name"),
    (["queue", "--partition", ""], "'--partition': must be a partition name"),
    (["plan", "--policy", "nope"], "'--policy': 'nope' is not one of"),
    (["serve", "--policy", "nope", "--dry-run"], "'--policy': 'nope' is not one of"),
    (["explain", "9223372036854775808"], "'JOB_ID'"),
    # int() reads "1_2" as 12: Slurm's array syntax explained another job (red-team)
    (["explain", "1_2"], "'JOB_ID': expected an integer, got '1_2'"),
    (["serve", "--admin-uid", "1_0", "--dry-run"], "'--admin-uid': expected an integer"),
    (["serve", "--endpoint-file", "", "--dry-run"], "'--endpoint-file': must be a path"),
    (["serve", "--endpoint-file", "e\n", "--dry-run"], "'--endpoint-file': must be a path"),
    # written into the prolog, epilog and TaskProlog as a quoted shell string (red-team)
    (["install-scripts", "--service-url", "http://127.0.0.1:99999", "--dry-run"],
     "--service-url: must be http(s)://HOST:PORT"),
    (["install-scripts", "--service-url", 'http://a:80"; id', "--dry-run"],
     "--service-url: must be http(s)://HOST:PORT"),
    (["install-scripts", "--service-uid", "1002", "--dry-run"],
     "--service-uid: goes with --service-url"),
    # a leading "-" reached scontrol as an option (red-team)
    (["queue", "--partition=-x"], "'--partition': must be a partition name"),
    # an empty path was taken as the option left out (the default store, or stdout)
    (["explain", "1", "--store", ""], "'--store': must be a path, not empty"),
    # SQLite said "disk I/O error", under the config's key (red-team)
    (["explain", "1", "--store", "/"], "/: --store: a directory, not a store"),
    (["simulate", "--csv", ""], "--csv: must be a path, not empty"),
    (["trace", "generate", "--jobs", "2", "--out", ""], "--out: must be a path, not empty"),
    (["compare", "--out", ""], "--out: must be a path, not empty"),
    # found by a review: "elastic" jobs whose range was their request alone
    (["trace", "elastic", "demo", "--range", "1,1", "--out", "/no/such/dir/x.jsonl"],
     "--range: 1,1 gives each job its request alone"),
    # found by a review: the current directory, and the default checkpoint folder
    (["trace", "submit", "demo", "--time-scale", "1", "--output-dir", ""],
     "'--output-dir': must be a path, not empty"),
    (["trace", "submit", "demo", "--time-scale", "1", "--checkpoint-dir", " "],
     "'--checkpoint-dir': must be a path, not empty"),
    # found by a red-team: NaN passed click's range and started a cluster; a bad trace
    # was found after the packages were installed (these never get that far)
    (["demo", "--time-scale", "nan"], "time-scale: must be a number from 1 to 1000"),
    (["demo", "--work-dir", ""], "work-dir: an empty path"),
    (["demo", "--trace", "/nonexistent.jsonl"], "trace: cannot read"),
])
def test_bad_input_is_one_line_exit_2(args: list[str], expected: str) -> None:
    proc = run(*args, check=False)
    assert proc.returncode == 2
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_serve_refuses_a_command_line_path_that_is_another_of_its_files(
        tmp_path: Path) -> None:
    """Found by a red-team: ``--endpoint-file`` naming the store wrote the service's URL
    over it (every round, intent and report lost); the config's own check never saw the
    command line's paths. Refused before anything is opened, the store intact."""
    store = tmp_path / "state.db"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"service: {{store: {store}, heartbeat: {tmp_path / 'hb'}}}\n")
    store.write_bytes(b"SQLite format 3\x00kept")
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")  # never asked: refused first
    base = ["serve", "--config", str(cfg), "--slurm-conf", str(tmp_path / "slurm.conf")]
    for extra, expected in ((["--endpoint-file", str(store)],
                             "--endpoint-file: is the file service.store names"),
                            (["--store", str(tmp_path / "hb")],
                             "--store: is the file service.heartbeat names")):
        proc = run(*base, *extra, check=False)
        assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
    # a dry run on its own store, beside the live service (found by a review), and a
    # one-shot round of `plan --apply`
    proc = run(*base, "--dry-run", "--store", str(tmp_path / "dry.db"), "--endpoint-file",
               str(store), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "--endpoint-file: is the file service.store names" in proc.stderr
    live_endpoint = tmp_path / "ep"  # the live service's: its URL, which the jobs read
    cfg.write_text(f"service: {{store: {store}, heartbeat: {tmp_path / 'hb'}, "
                   f"endpoint_file: {live_endpoint}}}\n")
    proc = run(*base, "--dry-run", "--store", str(tmp_path / "dry.db"), "--endpoint-file",
               str(live_endpoint), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "--endpoint-file: is the file service.endpoint_file names" in proc.stderr
    proc = run("plan", "--apply", "--config", str(cfg), "--slurm-conf",
               str(tmp_path / "slurm.conf"), "--store", str(tmp_path / "hb"), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "--store: is the file service.heartbeat names" in proc.stderr
    assert store.read_bytes() == b"SQLite format 3\x00kept"
    assert not (tmp_path / "hb").exists() and not (tmp_path / "dry.db").exists()


def test_a_local_file_named_like_a_bundled_trace_is_noted(tmp_path: Path) -> None:
    """``demo`` is the bundled trace even with a ./demo here, which was read silently
    instead (red-team): one note says so and that ./demo names the local one."""
    (tmp_path / "demo").write_text("not a trace\n")
    (tmp_path / "demo-live").mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    def here(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)

    for args in (("trace", "show", "demo"), ("simulate", "demo", "--policy", "fifo"),
                 ("trace", "show", "demo-live")):
        proc = here(*args)
        name = args[2] if args[0] == "trace" else "demo"
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.strip() == (f"note: {name}: the bundled trace of that name is "
                                       f"used; ./{name} names the one in this directory")
    assert "./demo names" in here("simulate", "--policy", "fifo").stderr  # the default too
    assert here("trace", "show", "./demo").returncode == 2


def test_demo_refuses_an_unknown_policy_as_it_reads_the_option() -> None:
    """Checked as the option is read (parsed only here: the command would start Slurm),
    not after a live run, and named by the option."""
    from slurm_shockwave.cli.demo import demo

    with pytest.raises(click.BadParameter) as refused:
        demo.make_context("demo", ["--policy", "nope"])
    assert "'--policy': 'nope' is not one of" in refused.value.format_message()
    demo.make_context("demo", ["--policy", "slurm"])  # Slurm alone


def test_trace_elastic_says_which_ranges_of_the_trace_it_replaced(tmp_path: Path) -> None:
    """A range the trace already gave is replaced by --range's: said, not silent (a
    red-team finding); a range it gives again unchanged is not counted."""
    trace = tmp_path / "t.jsonl"
    job = '{"id": %d, "model": "ResNet-18", "batch_size": 64, "gpus": %d, "epochs": 3%s}\n'
    trace.write_text(job % (0, 2, ', "gpus_range": [1, 8]') + job % (1, 2, "")
                     + job % (2, 1, ', "gpus_range": [1, 2]'))
    out = tmp_path / "e.jsonl"
    proc = run("trace", "elastic", str(trace), "--out", str(out))
    assert proc.stderr.strip() == (f"wrote 3 elastic jobs to {out} "
                                   "(1 range(s) the trace gave replaced)")
    assert [json.loads(line)["gpus_range"] for line in out.read_text().splitlines()] == \
        [[1, 4], [1, 4], [1, 2]]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_stdout_is_one_line_not_a_bug() -> None:
    """stdout on a full disk (/dev/full): the machine, not our code, so one line and exit
    2, not "internal error (a bug)" and a traceback log (red-team finding)."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "trace",
                               "generate", "--jobs", "5"], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: output: cannot write it (No space left on device)"


def test_a_reader_that_closes_the_pipe_stops_the_command_quietly(tmp_path: Path) -> None:
    """``shockwave ... | head -1``: a reader gone is exit 141 (a shell's status for a tool
    killed by SIGPIPE) and not a word on stderr. Found by a review: click and rich each
    exit 1 on it, a bug's code here, and Python's flush at exit printed "Exception
    ignored ... BrokenPipeError"."""
    cli = [sys.executable, "-m", "slurm_shockwave.cli"]
    small = tmp_path / "small.jsonl"
    small.write_text('{"model": "LM", "batch_size": 10, "epochs": 2}\n')
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the first write
    try:
        for args in (["policies"], ["--help"], ["trace", "generate", "--jobs", "3"],
                     ["simulate", str(small), "--gpus", "2", "--no-progress"]):
            proc = subprocess.run([*cli, *args], stdout=write_end, stderr=subprocess.PIPE,
                                  text=True, timeout=120)
            assert (proc.returncode, proc.stderr) == (141, ""), args
        # stderr there too (``2>&1 | head``): the progress bar's writes fail as well
        proc = subprocess.run([*cli, "simulate", str(small), "--gpus", "2", "--progress"],
                              stdout=write_end, stderr=write_end, timeout=120)
        assert proc.returncode == 141
    finally:
        os.close(write_end)
    # the reader takes one line, then goes, while the table (over 100 KiB, more than the
    # pipe holds) is being written
    trace = tmp_path / "big.jsonl"
    run("trace", "generate", "--jobs", "700", "--out", str(trace))
    # unbuffered too (a docs audit): a write the pipe took part of lost the rest without
    # an error, and the command exited 0
    for unbuffered in ("", "1"):
        env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
        for args in (["trace", "show", str(trace)], ["trace", "generate", "--jobs", "2000"]):
            with subprocess.Popen([*cli, *args], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env) as reading:
                assert reading.stdout is not None and reading.stderr is not None
                assert reading.stdout.readline()
                reading.stdout.close()
                assert reading.stderr.read() == b""
                assert reading.wait(timeout=120) == 141, (unbuffered, args)


def test_a_trace_whose_longest_job_needs_too_many_rounds_is_refused(tmp_path: Path) -> None:
    """The work over the GPUs fits (one job on 1,000 GPUs), the job alone does not: it
    would run for minutes and stop at the simulator's round limit."""
    trace = tmp_path / "long.jsonl"
    trace.write_text('{"model": "LM", "batch_size": 10, "epochs": 17000}\n')
    config = tmp_path / "c.yaml"
    config.write_text("simulator: {restore_s: 0}\n")
    proc = run("simulate", str(trace), "--gpus", "1000", "--round-s", "1", "--config",
               str(config), "--policy", "fifo", check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--round-s: its longest job alone needs more than 100000 rounds" in proc.stderr


def test_a_trace_of_jobs_one_after_another_past_the_rounds_is_refused(tmp_path: Path) -> None:
    """Found by a review: jobs that each arrive as the last ends fit the work and the
    longest-job bounds, and a run past the simulator's round limit died after minutes as
    a bug (exit 1)."""
    trace = tmp_path / "serial.jsonl"
    trace.write_text("".join(json.dumps({"model": "ResNet-18", "batch_size": 256,
                                         "epochs": 1500, "arrival_s": i * 46_400.0}) + "\n"
                             for i in range(3)))
    config = tmp_path / "c.yaml"
    config.write_text("simulator: {restore_s: 0}\n")
    proc = run("simulate", str(trace), "--gpus", "3", "--round-s", "1", "--config",
               str(config), "--policy", "fifo", check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"{trace}: --round-s: its jobs, each from its arrival" in proc.stderr
    assert "more than 100000 rounds of 1 s" in proc.stderr


def test_a_run_stopped_at_the_round_limit_by_its_restores_is_bad_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Restores that eat most of every round make a run need far more rounds than its
    work: stopped at the simulator's limit, it is one line naming --round-s, not a bug."""
    from functools import partial

    from slurm_shockwave.cli import run_options
    from slurm_shockwave.model.errors import InputError
    from slurm_shockwave.sim.run import simulate

    config = tmp_path / "c.yaml"
    config.write_text("simulator: {round_s: 30, restore_s: 29}\n")
    inputs = run_options.prepare("demo", 16, None, None, str(config), None, None, False)
    monkeypatch.setattr(run_options, "simulate", partial(simulate, max_rounds=50))
    with pytest.raises(InputError) as exc:
        run_options.run_policy(inputs, "gandiva_fair")
    assert exc.value.field == "--round-s" and "not done after the simulator's 50" in str(exc.value)


def test_malformed_trace_line_names_file_line_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"model": "LM", "batch_size": 10, "epochs": 3}\n'
                   '{"model": "GPT", "batch_size": 10, "epochs": 3}\n')
    proc = run("simulate", str(bad), "--gpus", "4", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: {bad}:2: model: unknown model 'GPT' (known: LM, "
                                   "Recommendation, ResNet-18, ResNet-50, Transformer)")


def test_broken_config_names_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("policies:\n  allox: {alpha: 7}\n")
    proc = run("simulate", "--policy", "allox", "--config", str(cfg), check=False)
    assert proc.returncode == 2 and f"{cfg}: policies.allox.alpha: must be in (0, 1]" in proc.stderr
    cfg.write_text("simulator: {round_s: -1}\n")
    proc = run("simulate", "--config", str(cfg), check=False)
    assert proc.returncode == 2 and "simulator.round_s: must be from 1 to" in proc.stderr


def test_config_changes_the_run(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("simulator: {round_s: 300}\n")
    short = json.loads(run("simulate", "--json").stdout)
    long = json.loads(run("simulate", "--json", "--config", str(cfg)).stdout)
    assert long["rounds"] < short["rounds"]


def test_trace_generate_and_show(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    run("trace", "generate", "--jobs", "10", "--seed", "4", "--format", "gavel", "--out",
        str(path))
    assert len(path.read_text().splitlines()) == 10
    assert len(path.read_text().splitlines()[0].split("\t")) == 12
    shown = run("trace", "show", str(path)).stdout
    assert "10 jobs" in shown and "lower bound on makespan" in shown
    again = tmp_path / "u.trace"
    run("trace", "generate", "--jobs", "10", "--seed", "4", "--format", "gavel", "--out",
        str(again))
    assert again.read_text() == path.read_text()


def test_policies_lists_every_policy_and_fields() -> None:
    out = run("policies").stdout
    for name in ("fifo", "srtf", "las", "gavel", "themis", "allox", "ossp", "mst",
                 "gandiva_fair"):
        assert name in out
    assert "alpha" in out and "queue_thresholds_gpu_s" in out


@pytest.mark.reference
def test_simulate_reference_trace_with_gavel_throughputs() -> None:
    trace = reference_file("traces/120_*.trace")
    table = reference_file("throughputs/tacc_throughputs.json")
    out = json.loads(run("simulate", str(trace), "--gpus", "32", "--policy", "gavel",
                         "--throughputs", str(table), "--json").stdout)
    assert out["jobs"] == 120 and out["makespan_s"] >= 20_518


def test_shockwave_json_output_is_clean() -> None:
    # HiGHS prints a banner from C++ on its first use; it must not reach stdout
    proc = run("simulate", "--policy", "shockwave", "--json")
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["policy"] == "shockwave"
    assert "HiGHS" not in proc.stdout


def test_seed_reaches_the_policy(tmp_path: Path) -> None:
    cfg = tmp_path / "noise.yaml"
    cfg.write_text("policies:\n  shockwave: {prediction_noise: 0.8}\n")

    def jct(seed: str) -> float:
        args = ("simulate", "--policy", "shockwave", "--config", str(cfg), "--json", "--seed")
        return float(json.loads(run(*args, seed).stdout)["avg_jct_s"])

    assert jct("1") == jct("1")
    assert jct("1") != jct("2")


def test_every_command_resolves_and_lists_in_help() -> None:
    from slurm_shockwave.cli.main import COMMANDS

    listed = run("--help").stdout
    for name in COMMANDS:
        assert f"  {name} " in listed or f"  {name}\n" in listed, name
        assert "Usage:" in run(name, "--help").stdout, name
    assert run("no-such-command", check=False).returncode == 2


def test_report_leaves_the_planner_and_numpy_unimported() -> None:
    """The Epilog runs `shockwave report --end` after every job while the job's GPUs wait:
    it must not pay for the simulator, the solvers or numpy."""
    code = ("import sys\nfrom slurm_shockwave.cli.main import cli\n"
            "try:\n    cli(['report', '--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = ('numpy', 'highspy', 'gurobipy', 'yaml', 'slurm_shockwave.sim',"
            " 'slurm_shockwave.policies', 'slurm_shockwave.solver', 'slurm_shockwave.engine')\n"
            "print(sorted(m for m in sys.modules"
            " if any(m == h or m.startswith(h + '.') for h in heavy)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout


def test_the_command_alone_prints_its_help() -> None:
    """``shockwave`` or ``shockwave trace`` with no command asks for the help: the help
    as click prints it, exit 0 (it was the whole help folded into one error line)."""
    for args in ([], ["trace"]):
        proc = run(*args)
        assert proc.stdout.startswith("Usage: ") and "Commands:" in proc.stdout
        assert proc.stderr == ""


def test_explain_shows_a_job_unchanged_for_longer_than_the_retention(tmp_path: Path) -> None:
    """A history row is written when a job changes, and rows past the retention go: a
    job kept running unchanged for longer had none left, and explain said it was not in
    the store while queue showed it (found by a review)."""
    from slurm_shockwave.service.store import JobRow, RoundRecord, Store

    store = Store(tmp_path / "s.db", retention_s=86400.0)
    row = JobRow(job_id=7, user="alice", phase="running", gpus=1,
                 reason="kept_running(lease of 3 rounds)", action="keep", outcome="applied")
    for i in range(30):  # a round an hour for 30 hours
        store.save_round(RoundRecord(i, 1.7e9 + 3600 * i, "fifo", False, 1, {}, None, None,
                                     0, 0, 0), [row], [], {}, read_round_id=store.last_round_id())
    assert store.history(7) == [] and 7 in store.jobs_now()
    store.close()
    shown = run("explain", "7", "--store", str(tmp_path / "s.db"))
    assert "now: running, kept_running(lease of 3 rounds)" in shown.stdout
    assert "no history kept" in shown.stdout
    story = json.loads(run("explain", "7", "--store", str(tmp_path / "s.db"), "--json").stdout)
    assert story["now"]["phase"] == "running" and story["history"] == []


def test_explain_reads_a_store_on_a_read_only_disk(
        tmp_path: Path, read_only_mount: Callable[[Path], Path]) -> None:
    """Found by a review: with the service stopped and its store on a read-only disk,
    ``shockwave explain`` said "unable to open database file"; it reads it read-only
    (queue, a dry-run plan and handback open the store the same way)."""
    from slurm_shockwave.service.store import JobRow, RoundRecord, Store

    (tmp_path / "lib").mkdir()
    store = Store(tmp_path / "lib" / "s.db")
    store.save_round(RoundRecord(0, 1.7e9, "fifo", False, 1, {}, None, None, 0, 0, 0),
                     [JobRow(job_id=7, user="alice", phase="running", gpus=1,
                             reason="kept_running")], [], {}, read_round_id=0)
    store.close()
    view = read_only_mount(tmp_path / "lib")
    shown = run("explain", "7", "--store", str(view / "s.db"), "--json", check=False)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["now"]["reason"] == "kept_running"


def test_trace_shows_a_lower_bound_an_elastic_run_cannot_beat(tmp_path: Path) -> None:
    """Found by a review: the bound took every job at its request, and an elastic job
    runs faster on more GPUs, so a simulation of the trace beat its 'lower bound'."""
    fixed, elastic = tmp_path / "t.jsonl", tmp_path / "e.jsonl"
    run("trace", "generate", "--jobs", "30", "--seed", "5", "--out", str(fixed))
    run("trace", "elastic", str(fixed), "--out", str(elastic))
    shown = run("trace", "show", str(elastic)).stdout.splitlines()[-1]
    bound = float(shown.split(" s (a lower bound")[0].split()[-1].replace(",", ""))
    sim = json.loads(run("simulate", str(elastic), "--gpus", "16", "--policy", "fifo",
                         "--json").stdout)
    assert "at its fastest count" in shown and bound <= sim["makespan_s"]


def test_a_seed_given_on_the_command_line_wins_over_the_config_files(tmp_path: Path) -> None:
    """Found by a review: with a seed in the config file, --seed was silently ignored and
    runs over several seeds were one run."""
    config = tmp_path / "c.yaml"
    config.write_text("policies:\n  shockwave: {prediction_noise: 0.3, seed: 1}\n")

    def avg_jct(*extra: str) -> float:
        out = run("simulate", "--policy", "shockwave", "--config", str(config), "--json",
                  *extra).stdout
        return float(json.loads(out)["avg_jct_s"])

    assert avg_jct("--seed", "5") != avg_jct()


def test_explain_prints_a_users_comment_as_it_is(tmp_path: Path) -> None:
    """Found by a review: a bad hint's reason quotes the job's comment, and rich read it
    as markup: `--comment "bs=[/x] epochs=3"` made `explain` (and `queue`) end in a
    MarkupError for the admin, and `[bold]` lost its brackets."""
    from slurm_shockwave.service.store import JobRow, RoundRecord, Store

    store = Store(tmp_path / "s.db")
    reason = "bad_hint(bs=[/x] epochs=3 [bold red]m[/])"
    store.save_round(RoundRecord(0, 1.7e9, "fifo", False, 1, {}, None, None, 0, 0, 0),
                     [JobRow(job_id=9, user="bob", phase="pending", gpus=1, reason=reason,
                             action="none", outcome="Submitted [x]")],
                     [], {}, read_round_id=0)
    store.close()
    shown = run("explain", "9", "--store", str(tmp_path / "s.db"))
    assert shown.returncode == 0, shown.stderr
    assert reason in shown.stdout


def test_simulate_refuses_to_write_its_csv_over_its_trace(tmp_path: Path) -> None:
    """Found by a review: `simulate T --csv T` exited 0 with the trace replaced by the
    per-job CSV, and the next run could not read it."""
    trace = tmp_path / "t.jsonl"
    run("trace", "generate", "--jobs", "3", "--out", str(trace))
    before = trace.read_bytes()
    shown = run("simulate", str(trace), "--gpus", "4", "--csv", str(tmp_path / "." / "t.jsonl"),
                check=False)
    assert shown.returncode == 2 and "--csv" in shown.stderr and "input" in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1
    assert trace.read_bytes() == before


def test_no_output_overwrites_an_input_of_its_run(tmp_path: Path) -> None:
    """Found by a review: generate's --out over its --throughputs, elastic's --out over
    its trace and compare's results.json over its trace each exited 0 with the input
    replaced; compare also deleted a trace named like an earlier run's per-job CSV."""
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"v100": {"('LM (batch size 10)', 1)": {"null": 5.0}}}))
    trace = tmp_path / "res" / "results.json"
    trace.parent.mkdir()
    run("trace", "generate", "--jobs", "3", "--out", str(trace))
    gavel = tmp_path / "jobs_srtf.csv"
    run("trace", "generate", "--jobs", "3", "--format", "gavel", "--out", str(gavel))
    before = {p: p.read_bytes() for p in (table, trace, gavel)}
    for args in (["trace", "generate", "--jobs", "3", "--throughputs", str(table), "--out",
                  str(table)],
                 ["trace", "elastic", str(trace), "--out", str(trace)],
                 ["compare", str(trace), "--gpus", "8", "--policies", "fifo", "--out",
                  str(trace.parent)]):
        shown = run(*args, check=False)
        assert shown.returncode == 2 and "--out: is an input of this run" in shown.stderr
        assert len(shown.stderr.strip().splitlines()) == 1, shown.stderr
    run("compare", str(gavel), "--gpus", "8", "--policies", "fifo", "--out", str(gavel.parent))
    assert {p: p.read_bytes() for p in (table, trace, gavel)} == before


def test_generate_refuses_the_gavel_format_under_a_json_name(tmp_path: Path) -> None:
    """Found by a review: `--format gavel --out g.jsonl` wrote a file every reader then
    refused (a .jsonl name is read as JSON lines)."""
    shown = run("trace", "generate", "--jobs", "3", "--format", "gavel", "--out",
                str(tmp_path / "g.jsonl"), check=False)
    assert shown.returncode == 2 and "--out" in shown.stderr
    assert not (tmp_path / "g.jsonl").exists()
    run("trace", "generate", "--jobs", "3", "--format", "gavel", "--out",
        str(tmp_path / "g.trace"))
    assert "3 jobs" in run("trace", "show", str(tmp_path / "g.trace")).stdout


def test_compare_leaves_no_earlier_runs_csv_beside_its_results(tmp_path: Path) -> None:
    """Found by a review: a second compare into the same folder left the first run's
    jobs_fifo.csv beside a results.json that no longer listed fifo."""
    out = str(tmp_path / "o")
    run("compare", "--gpus", "16", "--policies", "fifo,srtf", "--out", out)
    (tmp_path / "o" / "jobs_mine.csv").write_text("a user's file\n")
    run("compare", "--gpus", "16", "--policies", "srtf", "--out", out)
    assert sorted(p.name for p in (tmp_path / "o").glob("jobs_*.csv")) == [
        "jobs_mine.csv", "jobs_srtf.csv"]


def test_compare_removes_only_the_csvs_its_earlier_results_listed(tmp_path: Path) -> None:
    """Found by a red-team: compare --out removed every jobs_<policy>.csv of a policy it
    did not run, a user's own ``simulate --csv`` output too, with no earlier
    results.json there."""
    out = tmp_path / "o"
    out.mkdir()
    for name in ("fifo", "gavel"):
        run("simulate", "--gpus", "16", "--policy", name, "--csv", str(out / f"jobs_{name}.csv"))
    run("compare", "--gpus", "16", "--policies", "srtf", "--out", str(out))
    assert sorted(p.name for p in out.glob("jobs_*.csv")) == [
        "jobs_fifo.csv", "jobs_gavel.csv", "jobs_srtf.csv"]


def test_both_bundled_traces_simulate_on_their_16_gpus_by_default() -> None:
    """Found by a review: `simulate demo-live` (16 jobs made for 16 GPUs) asked for --gpus
    while `simulate demo` did not."""
    for trace in ("demo", "demo-live"):
        assert json.loads(run("simulate", trace, "--policy", "fifo", "--json").stdout
                          )["gpus"] == 16


@pytest.mark.parametrize("where", ["a folder", "no folder", "--round-s"])
def test_serve_refuses_a_heartbeat_it_could_not_keep(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Found by a review: a heartbeat path naming a folder (or in one that is not there)
    failed every round after its plan was applied, with a traceback, the partition
    failing open; a --round-s longer than the configured stale_after_s left it stale
    between rounds. One line naming service.heartbeat / service.stale_after_s, exit 2,
    before anything is planned."""
    from click.testing import CliRunner

    from slurm_shockwave.cli import serve as serve_cli
    from slurm_shockwave.cli.live_options import Live
    from slurm_shockwave.config import parse_settings
    from slurm_shockwave.slurm.fake import FakeSlurm
    from slurm_shockwave.slurm.protocol import SlurmNode

    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    beat = {"a folder": tmp_path, "no folder": tmp_path / "gone" / "heartbeat",
            "--round-s": tmp_path / "heartbeat"}[where]
    service = {"heartbeat": str(beat), "stale_after_s": 200.0,
               "endpoint_file": str(tmp_path / "endpoint")}
    monkeypatch.setattr(serve_cli, "live", lambda *a: Live(parse_settings(
        {"service": service}, source="c.yaml", round_s=a[4]), fake))  # --round-s is a[4]
    args = ["--policy", "fifo", "--store", str(tmp_path / "s.db"), "--rounds", "1",
            "--listen", "127.0.0.1:0"]
    if where == "--round-s":
        args += ["--round-s", "300"]
    result = CliRunner().invoke(serve_cli.serve, args)
    field = "service.stale_after_s" if where == "--round-s" else "service.heartbeat"
    assert result.exit_code == 2 and f"{field}: " in result.output, result.output
    assert not (tmp_path / "s.db").exists() and fake.jobs == {}


@pytest.mark.parametrize("closed", [">&-", "2>&- >&-", "<&-"])
def test_a_command_started_with_a_standard_stream_closed_runs(closed: str,
                                                                tmp_path: Path) -> None:
    """Found by a red-team: with stdout closed (``shockwave report >&-``) every command
    ended in an AttributeError and exit 1; ``report`` must never fail the job. /dev/null
    takes the closed stream's place, so no file opened later takes its number."""
    for args in (["report", "--epoch", "1"], ["policies"]):
        proc = subprocess.run(
            ["bash", "-c", f'"{sys.executable}" -m slurm_shockwave.cli "$@" {closed}', "x",
             *args], capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "SLURM_JOB_ID": "5", "SHOCKWAVE_URL": "http://127.0.0.1:1"})
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_plan_apply_refuses_a_heartbeat_it_could_not_keep_before_planning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a docs review: `plan --apply`, one round of the service, skipped serve's
    start checks: with the heartbeat a folder it released and pinned jobs, then failed
    writing it ("internal error", exit 1)."""
    from click.testing import CliRunner

    from slurm_shockwave.cli import plan as plan_cli
    from slurm_shockwave.cli.live_options import Live
    from slurm_shockwave.config import parse_settings
    from slurm_shockwave.slurm.fake import FakeSlurm
    from slurm_shockwave.slurm.protocol import SlurmJob, SlurmNode

    fake = FakeSlurm([SlurmNode("n1", ("IDLE",), 8, 0, ("shockwave",))])
    fake.add(SlurmJob(1, "j1", "alice", "shockwave", "PENDING", held=True, gpus=1,
                      reason="JobHeldUser", submit_time=900,
                      admin_comment="shockwave:v1 bs=32 epochs=9 mode=static submitted=900"))
    service = {"heartbeat": str(tmp_path), "endpoint_file": str(tmp_path / "endpoint")}
    monkeypatch.setattr(plan_cli, "live", lambda *a: Live(parse_settings(
        {"service": service}, source="c.yaml"), fake))
    result = CliRunner().invoke(plan_cli.plan, ["--policy", "fifo", "--apply", "--store",
                                                str(tmp_path / "s.db")])
    assert result.exit_code == 2 and "service.heartbeat: " in result.output, result.output
    assert fake.jobs[1].held and not (tmp_path / "s.db").exists()


def test_a_record_says_how_it_was_made_and_how_many_jobs_were_cut_off() -> None:
    """Found by a red-team: a --json record or results.json could not say which seed,
    cut-off or rounds made it, and with --cutoff 1.02 gavel's average JCT counted 59 of
    64 jobs at their cut, said only in the per-job CSV."""
    rec = json.loads(run("simulate", "--policy", "shockwave", "--cutoff", "1.02", "--seed",
                         "3", "--json").stdout)
    assert rec["cut_off"] > 0
    assert rec["settings"]["deadline_factor"] == 1.02
    assert rec["settings"]["policy"]["seed"] == 3
    # every setting, the defaults too (a docs audit: only the config file's were
    # recorded), and they read back as the settings the run had
    from slurm_shockwave.policies.registry import make_policy
    assert rec["settings"]["policy"]["window_rounds"] == 20
    assert make_policy("shockwave", rec["settings"]["policy"]).config == \
        make_policy("shockwave", {"seed": 3}).config
    assert rec["settings"]["round_s"] == 120.0 and rec["settings"]["gpus"] == 16
    plain = json.loads(run("simulate", "--policy", "gavel", "--json").stdout)
    assert plain["cut_off"] == 0 and plain["settings"]["deadline_factor"] is None
    shown = run("compare", "--policies", "fifo,gavel", "--cutoff", "1.02").stdout
    assert "jobs cut off (--cutoff" in " ".join(shown.split())


def test_compare_out_over_a_results_json_that_is_not_ours(tmp_path: Path) -> None:
    """Found by a review: a deeply nested results.json in --out crashed compare (a
    RecursionError, after its table) and it wrote nothing; it is read bounded and
    strict, and taken for none of ours."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "results.json").write_text("[" * 200_000)
    run("compare", "--gpus", "16", "--policies", "fifo", "--out", str(out))
    assert json.loads((out / "results.json").read_text())[0]["policy"] == "fifo"
