"""Bad input never crashes, hangs or eats the machine (issue 9).

Hypothesis feeds malformed traces (JSON lines and the paper's TSV), throughput tables and
configs to the readers the CLI uses, in a worker process under a 1 GiB address-space cap
(tests/fuzz_worker.py): each must be read or refused with a one-line InputError naming
the file, never anything else. A small slice of the red-team kinds runs through the real
``shockwave`` command: one line on stderr and exit 2, and ``--json`` is always JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
MEMORY_CAP = 1024**3
FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz_worker", str(MEMORY_CAP)], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def read(self, kind: str, data: bytes, suffix: str) -> dict[str, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"kind": kind, "suffix": suffix,
                                          "data": data.hex()}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the reader process died on {data[:200]!r}"
        reply: dict[str, str] = json.loads(line)
        return reply


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    w = Worker()
    yield w
    w.proc.kill()
    w.proc.wait()


def verdict(worker: Worker, kind: str, data: bytes, suffix: str) -> str:
    reply = worker.read(kind, data, suffix)
    assert reply["verdict"] != "bug", reply["message"]
    if reply["verdict"] == "input":
        message = reply["message"]
        assert "\n" not in message and message.startswith("/"), message  # names the file
        assert len(message) < 600, message
    return reply["verdict"]


# -- values of every kind a hostile user might put in a field ---------------------------
NUMBERS = st.one_of(
    st.integers(-(10**30), 10**30), st.integers(-5, 300_000),
    st.floats(allow_nan=True, allow_infinity=True), st.just(10**400),
    st.sampled_from([0, 1, 10, 64, 1e20, 2**63, -1, 0.5]))
VALUES = st.one_of(NUMBERS, st.text(max_size=20), st.none(), st.booleans(),
                   st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                         st.integers(), max_size=2))
FIELDS = ["id", "model", "batch_size", "gpus", "mode", "arrival_s", "epochs", "total_steps",
          "priority_weight", "user"]
GOOD_FIELDS = {"model": st.sampled_from(["LM", "ResNet-18", "Transformer", "lm", "GPT"]),
               "mode": st.sampled_from(["static", "gns", "accordion", "x"]),
               "batch_size": st.sampled_from([5, 10, 32, 64, 0, 11])}


@st.composite
def json_line(draw: st.DrawFn) -> str:
    obj: dict[str, Any] = {}
    if draw(st.booleans()):  # a good line, then a few fields changed
        obj = {"model": "LM", "batch_size": draw(st.sampled_from([5, 10, 20])),
               "epochs": draw(st.integers(1, 50)), "arrival_s": draw(st.floats(0, 1e4))}
        if draw(st.booleans()):
            return json.dumps(obj)
    for name in draw(st.lists(st.sampled_from([*FIELDS, "bogus"]), max_size=3 if obj else 7,
                              unique=True)):
        good = GOOD_FIELDS.get(name)
        obj[name] = draw(good if good is not None and draw(st.booleans()) else VALUES)
    text = json.dumps(obj)  # NaN and Infinity as Python writes them
    return text if draw(st.integers(0, 9)) else text[: draw(st.integers(0, len(text)))]


@st.composite
def gavel_line(draw: st.DrawFn) -> str:
    cols = ["LM (batch size 10)", "python3 main.py", "language_modeling", "--steps", "1",
            "134583", "1", "gns", "1", "-1.000000", "1418", "0"]
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):
        i = draw(st.integers(0, len(cols) - 1))
        cols[i] = draw(st.one_of(st.text(max_size=12), NUMBERS.map(str)))
    if draw(st.integers(0, 9)) == 0:
        cols = cols[: draw(st.integers(0, 13))]
    return "\t".join(cols)


def encoded(draw: st.DrawFn, text: str) -> bytes:
    """UTF-8 mostly; sometimes Latin-1 bytes or raw garbage spliced in."""
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 7)) == 0:
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(max_size=6)) + data[at:]
    return data


@st.composite
def trace_file(draw: st.DrawFn) -> tuple[bytes, str]:
    line = draw(st.sampled_from([json_line(), gavel_line()]))
    junk = st.sampled_from(["", "# c", "{", "[" * 3000])
    lines = draw(st.lists(st.one_of(line, line, line, junk), min_size=0, max_size=6))
    suffix = draw(st.sampled_from([".jsonl", ".trace"]))
    return encoded(draw, "\n".join(lines)), suffix


@given(trace_file())
@FUZZ
def test_trace_reader_fuzz(worker: Worker, case: tuple[bytes, str]) -> None:
    verdict(worker, "trace", *case)


@st.composite
def table_file(draw: st.DrawFn) -> bytes:
    keys = st.one_of(st.sampled_from(["('LM (batch size 10)', 1)", "('LM (batch size 0)', 1)",
                                      "('LM (batch size 10)', 0)", "('X (batch size 1)', 99)"]),
                     st.text(max_size=20))
    entries = st.one_of(st.fixed_dictionaries({"null": VALUES}), VALUES)
    good = {f"('{m} (batch size {b})', {g})": {"null": draw(st.floats(1e-3, 1e4))}
            for m, b, g in [("LM", 10, 1), ("LM", 20, 2), ("ResNet-18", 32, 1)]}
    worker_type = draw(st.one_of(st.dictionaries(keys, entries, max_size=5), VALUES,
                                 st.dictionaries(keys, entries, max_size=2).map(
                                     lambda bad: {**good, **bad}), st.just(good)))
    top: Any = {draw(st.sampled_from(["v100", "v100", "v100", "k80"])): worker_type}
    if draw(st.integers(0, 9)) == 0:
        top = draw(VALUES)
    text = json.dumps(top)
    if draw(st.integers(0, 5)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return encoded(draw, text)


@given(table_file())
@FUZZ
def test_throughput_reader_fuzz(worker: Worker, data: bytes) -> None:
    verdict(worker, "table", data, ".json")


SECTIONS = {"simulator": ["round_s", "restore_s", "deadline_factor", "requeue_delay_s"],
            "slurm": ["partition", "round_s", "backend", "prior_epoch_s", "time_scale"],
            "service": ["policy", "retention_days", "listen", "stale_after_s"],
            "policies": ["las", "allox", "shockwave", "nope"]}


@st.composite
def config_file(draw: st.DrawFn) -> bytes:
    doc: dict[str, Any] = {}
    for section in draw(st.lists(st.sampled_from([*SECTIONS, "other"]), max_size=3,
                                 unique=True)):
        keys = SECTIONS.get(section, ["x"])
        body = {k: draw(VALUES) for k in draw(st.lists(st.sampled_from(keys), max_size=3,
                                                      unique=True))}
        doc[section] = body if draw(st.integers(0, 6)) else draw(VALUES)
    text = json.dumps(doc)  # JSON is YAML (NaN as .nan would be too; json.dumps writes NaN)
    text = text.replace("NaN", ".nan").replace("-Infinity", "-.inf").replace("Infinity", ".inf")
    if draw(st.integers(0, 6)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    if draw(st.integers(0, 6)) == 0:  # the same key twice
        text = text.replace("{", '{"simulator": {}, ', 1) if "simulator" in text else text
    return encoded(draw, text)


@given(config_file())
@FUZZ
def test_config_reader_fuzz(worker: Worker, data: bytes) -> None:
    verdict(worker, "config", data, ".yaml")


# -- a slice of the red-team corpus through the real command -----------------------------
LINE = '{"model": "LM", "batch_size": 10, "epochs": 3}\n'


def shockwave(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["prlimit", f"--as={3 * 1024**3}", "--", sys.executable, "-m", "slurm_shockwave.cli",
         *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


SLICE: list[tuple[str, bytes, list[str], list[str]]] = [
    # (file name, content, args after the file, substrings of the error line)
    ("big.jsonl", b'{"model": "LM", "batch_size": 10, "epochs": 1e21}\n', [], [":1: epochs:"]),
    ("steps.jsonl", b'{"model": "LM", "batch_size": 10, "total_steps": 100000000000000000000}\n',
     [], [":1: total_steps:"]),
    ("nan.jsonl", LINE.encode() + b'{"model": "LM", "batch_size": 10, "epochs": 3, '
     b'"arrival_s": NaN}\n', [], [":2: arrival_s: must be a finite number"]),
    ("bs0.trace", "\t".join(["LM (batch size 0)", "c", "d", "s", "1", "100", "1", "static", "1",
                             "-1", "10", "0"]).encode() + b"\n", [], [":1: job_type:"]),
    ("digits.jsonl", b'{"model": "LM", "batch_size": 10, "epochs": ' + b"9" * 400 + b"}\n", [],
     [":1: epochs:", "400 digits"]),
    ("deep.jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n", [], [":1: trace: line longer"]),
    ("dup.jsonl", b'{"model": "LM", "batch_size": 10, "epochs": 3, "epochs": 4}\n', [],
     [":1: json:", "duplicate key 'epochs'"]),
    ("latin.jsonl", LINE.encode() + b'{"user": "\xe9"}\n', [], [":2: trace: not UTF-8"]),
    ("huge.jsonl", LINE.encode() + b'{"model": "LM", "batch_size": 10, "epochs": 3, "gpus": 8}\n',
     ["--gpus", "4"], [":2: gpus:", "cannot place"]),
    ("ok.jsonl", LINE.encode(), ["--cutoff", "-1"], ["'--cutoff'"]),
    ("ok.jsonl", LINE.encode(), ["--csv", "/proc/nope/x.csv"], ["/proc/nope/x.csv: --csv:"]),
    ("outside.jsonl", b'{"model": "LM", "batch_size": 10, "epochs": 2, "gpus": 4, '
     b'"gpus_range": [1, 2]}\n', [], [":1: gpus_range: must contain the job's gpus (4)"]),
    ("range.jsonl", b'{"model": "LM", "batch_size": 10, "epochs": 2, "gpus_range": [1, '
     + b"9" * 30 + b"]}\n", [], [":1: gpus_range:", "<= 1024"]),
    ("emptykey.jsonl", b'{"model": "LM", "batch_size": 10, "epochs": 3, "": 1}\n', [],
     [":1: '': unknown field"]),
    ("cut.jsonl", b'{"model": "LM", "batch_size": "1\n', [],
     [":1: json: not valid JSON (Unterminated string starting at column 31)"]),
    ("ok.jsonl", LINE.encode(), ["--csv", "/dev/full"],
     ["/dev/full: --csv: cannot write it (No space left on device)"]),
]


@pytest.mark.parametrize(("name", "content", "args", "expected"), SLICE,
                         ids=[f"{c[0]}{' '.join(c[2])}" for c in SLICE])
def test_bad_input_through_the_command(tmp_path: Path, name: str, content: bytes,
                                       args: list[str], expected: list[str]) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    proc = shockwave("simulate", str(path), "--gpus", "16", "--json", *args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == "", proc.stderr
    for part in expected:
        assert part in lines[0], lines[0]


def test_config_duplicate_key_and_non_finite(tmp_path: Path) -> None:
    for text, expected in [("simulator: {round_s: 60}\nsimulator: {round_s: 90}\n",
                            ":2: yaml: not valid YAML (duplicate key 'simulator')"),
                           ("simulator: {round_s: .inf}\n", "simulator.round_s: must be a finite"),
                           ("simulator: 5\n", "simulator: expected a mapping"),
                           # isdigit() takes a superscript two, int() does not
                           ('service: {listen: "h:\u00b2"}\n', "service.listen: must be"),
                           ("slurm: {partition: a b}\n", "slurm.partition: must be a partition"),
                           ("policies: {stretch_edf: {seed: -1}}\n",
                            "policies.stretch_edf.seed: must be from 0"),
                           # float | str: the float's own refusal, not "expected float | str"
                           ("policies: {stretch_edf: {stretch: .nan}}\n",
                            "policies.stretch_edf.stretch: must be a finite number")]:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(text)
        proc = shockwave("simulate", "--config", str(cfg), "--json")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"error: {cfg}{'' if expected.startswith(':') else ': '}"
                                   f"{expected}"), lines[0]


def test_generate_options_are_bounded() -> None:
    for args, option in [(["--max-h", "1e30"], "--max-h"), (["--mean-gap-s", "inf"],
                                                            "--mean-gap-s"),
                         (["--jobs", "0"], "--jobs"), (["--gpu-mix", "nan,0,0,1"], "--gpu-mix"),
                         # a Pareto draw of shape 0.001 overflowed a float
                         (["--duration-dist", "pareto", "--tail-alpha", "0.001"],
                          "--tail-alpha"),
                         # found by a review: each was silently without effect
                         (["--diurnal-depth", "0.5"], "--diurnal-depth"),
                         (["--tail-alpha", "2"], "--tail-alpha"),
                         (["--duration-dist", "pareto", "--durations", "3"], "--durations")]:
        proc = shockwave("trace", "generate", *args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        # the option by its own name (an option's field once came out as ----gpu-mix)
        assert proc.stderr.startswith((f"error: {option}: ",
                                       f"error: Invalid value for '{option}'")), proc.stderr


def test_generate_names_the_table_when_its_epochs_are_too_many(tmp_path: Path) -> None:
    """A table a billion steps a second fast: too many epochs for any duration; the error
    points at the table, not only at --max-h (it blamed --max-h or --mean-gap-s)."""
    fast = tmp_path / "fast.json"
    fast.write_text('{"v100": {"(\'LM (batch size 10)\', 1)": {"null": 1000000000}}}')
    proc = shockwave("trace", "generate", "--throughputs", str(fast), "--gpu-mix", "1,0,0,0")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "--throughputs" in lines[0], lines
    assert "epochs" in lines[0], lines


def test_generate_names_the_table_that_lacks_a_gpu_count_the_mix_drew(tmp_path: Path) -> None:
    """Found by a review: a job the mix gave 2 GPUs silently got 1 where the table had no
    2-GPU entry, so the trace was not of the mix asked for."""
    table = tmp_path / "one_gpu.json"
    table.write_text('{"v100": {"(\'LM (batch size 10)\', 1)": {"null": 5.0}}}')
    proc = shockwave("trace", "generate", "--jobs", "20", "--throughputs", str(table))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert f"{table}: --throughputs: has no 2-GPU throughput for LM (batch size 10)" in lines[0]
    proc = shockwave("trace", "generate", "--jobs", "20", "--throughputs", str(table),
                     "--gpu-mix", "1,0,0,0")
    assert proc.returncode == 0 and proc.stdout.count('"gpus": 1') == 20, proc.stderr


def test_outputs_are_checked_before_the_run_and_written_whole(tmp_path: Path) -> None:
    """compare --out with one of its files taken by a directory, trace elastic into a
    missing folder or with a range past any cluster: one line, exit 2, nothing written;
    each before anything is written."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(LINE * 3)
    out = tmp_path / "out"
    (out / "jobs_fifo.csv").mkdir(parents=True)
    cases = [
        (["compare", str(trace), "--gpus", "4", "--policies", "gavel,fifo", "--out", str(out)],
         "jobs_fifo.csv: --out: is a directory"),
        (["compare", str(trace), "--gpus", "4", "--policies", "gavel,gavel"],
         "--policies: 'gavel' named twice"),
        (["trace", "elastic", str(trace), "--out", str(tmp_path / "no" / "x.jsonl")],
         "--out: its directory"),
        (["trace", "elastic", str(trace), "--range", "0.5,1e308", "--out", str(tmp_path / "x")],
         "--range: expected 0 < LO <= 1 <= HI <= 1024"),
    ]
    for args, expected in cases:
        proc = shockwave(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["jobs_fifo.csv"]
    assert not (tmp_path / "x").exists()


def test_compare_out_replaces_its_files_together(tmp_path: Path) -> None:
    """A disk that fills while compare --out writes its plots: one line, exit 2, and the
    folder's previous results.json and CSVs are all kept (they were replaced one by one,
    so a failed run left new CSVs beside old plots)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(LINE * 3)
    out = tmp_path / "out"
    out.mkdir()
    old = {name: f"old {name}\n".encode() for name in ("results.json", "jobs_fifo.csv",
                                                       "jobs_gavel.csv", "jct_cdf.png")}
    for name, data in old.items():
        (out / name).write_bytes(data)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import slurm_shockwave.report.plots as p\n"
        "_w = p._write\n"
        "def full(fig, path, dpi):\n"
        "    if path.name == 'rho_cdf.png':\n"
        "        p.plt.close(fig)\n"
        "        raise OSError(28, 'No space left on device', str(path))\n"
        "    _w(fig, path, dpi)\n"
        "p._write = full\n")
    proc = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "compare", str(trace),
                           "--gpus", "4", "--policies", "gavel,fifo", "--out", str(out)],
                          env={"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "rho_cdf.png" in lines[0], proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old


def test_a_bug_is_exit_1_not_2(tmp_path: Path) -> None:
    """A programming error is not the user's input: exit 1, one line saying where, the
    traceback in a log file (and on stderr with --debug)."""
    sitecustom = tmp_path / "sitecustomize.py"
    sitecustom.write_text(
        "import slurm_shockwave.sim.run as r\n"
        "def boom(*a, **k):\n    raise ValueError('not the user')\n"
        "r.summarize = boom\nimport slurm_shockwave.cli.run_options as o\n"
        "o.simulate.__globals__['summarize'] = boom\n")
    env_path = f"{tmp_path}:{ROOT}"
    base = [sys.executable, "-m", "slurm_shockwave.cli"]
    env = {"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([*base, "simulate", "--policy", "fifo", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "internal error" in lines[0] and "ValueError: not the user" in lines[0]
    assert "slurm_shockwave/sim/run.py" not in lines[0] or ":" in lines[0]
    log = lines[0].split("traceback in ")[1].split(" ")[0]
    assert "Traceback" in Path(log).read_text()
    Path(log).unlink()
    proc = subprocess.run([*base, "--debug", "simulate", "--policy", "fifo", "--json"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" in proc.stderr


def test_json_output_has_no_nan() -> None:
    from slurm_shockwave.cli.checks import json_text

    assert json_text({"a": float("nan"), "b": [float("inf"), 1.5]}) == \
        '{"a": null, "b": [null, 1.5]}'


def test_json_output_carries_a_file_name_that_is_not_utf8() -> None:
    """A name's byte that is not UTF-8 came out as a lone surrogate (``"x\\udcff"``),
    which strict JSON parsers reject (red-team): it reads as the byte, ``x\\xff``."""
    from slurm_shockwave.cli.checks import json_text

    name = os.fsdecode(b"x\xff.jsonl")
    text = json_text({"trace": name, name: ["ok \u00e9", "\ud800"]}, ensure_ascii=False)
    text.encode("utf-8")  # strict UTF-8: no lone surrogate left
    assert json.loads(text) == {"trace": "x\\xff.jsonl",
                                "x\\xff.jsonl": ["ok \u00e9", "\\ud800"]}


def test_hint_parsers_agree_at_the_size_limit() -> None:
    """Byte length, not characters, at the 1000-byte limit; very long digit strings."""
    from tests.test_hints import _lua_results, _python_result

    body = "bs=1 epochs=1 model="
    hints = [body + "x" * (1000 - len(body)), body + "x" * (1001 - len(body)),
             body + "x" * (998 - len(body)) + "\u00e9", body + "x" * (999 - len(body)) + "\u00e9",
             "bs=" + "9" * 5000 + " epochs=1", "bs=" + "0" * 7 + "1 epochs=1",
             "bs=12345678901234567890 epochs=1", "epochs=x bs=y"]
    assert _lua_results(hints) == [_python_result(h) for h in hints]


def test_compare_plots_a_trace_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """Found by a review: the plots' titles carry the trace's name, and matplotlib refused
    its lone surrogate: compare ended in a bug report after printing its table."""
    from slurm_shockwave.sim.inputs import demo_trace_path

    trace = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xffname.jsonl"))
    trace.write_bytes(demo_trace_path().read_bytes())
    proc = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "compare", str(trace),
                           "--gpus", "16", "--policies", "fifo", "--out", str(tmp_path / "o")],
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "o" / "jct_cdf.png").exists()
