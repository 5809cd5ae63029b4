"""The benchmarks refuse bad arguments in one line, exit 2, before any simulation runs
(they were tracebacks, or found after minutes of work)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("module", "args", "expected"), [
    ("scale", ["--traces", "small,bogus"], "--traces: unknown 'bogus'"),
    ("scale", ["--traces", "small", "--policies", "fifo,bogus"], "--policies: unknown 'bogus'"),
    ("scale", ["--config", "[1]"], "--config: expected a JSON object"),
    ("scale", ["--config", '{"k": "abc"}'], "--config: shockwave.k:"),
    ("elastic", ["--range", "nan,2"], "--range: must be a finite number"),
    ("elastic", ["--range", "2,1"], "--range: expected 0 < LO <= 1 <= HI"),
    ("elastic", ["--sizes", "bogus"], "--sizes: unknown 'bogus'"),
    ("noise", ["--errors", "0,2"], "--errors: must be from 0 to 1, got '2'"),
    ("noise", ["--size", "120,220"], "--size: invalid choice"),
    ("noise", ["--seed", "-1"], "--seed: shockwave.seed: must be from 0"),
    ("live_screen", ["--policies", "fifo,bogus"], "--policies: unknown 'bogus'"),
    ("live_screen", ["--config", '{"k": "x"}'], "--config: shockwave.k:"),
    ("tradeoff", ["--traces", "small,bogus"], "--traces: unknown 'bogus'"),
    ("grid", ["--traces", "small,small"], "--traces:"),
    ("grid", ["--trace", "no/such.jsonl", "--gpus", "8"], "--trace: no/such.jsonl"),
    ("grid", ["--trace", "demo-live"], "--gpus: a count from 1, with --trace"),
    ("grid", ["--trace", "demo-live", "--gpus", "1"], "--gpus: job 1 needs 2 GPUs"),
    ("grid", ["--gpus", "8"], "--gpus: only with --trace"),
    ("grid", ["--trace", "demo-live", "--gpus", "16", "--traces", "small"],
     "--traces: not with --trace"),
    ("grid", ["--time-scale", "0"], "--time-scale: must be above 0"),
    ("jitter", ["--shape", "40x17"], "--shape: unknown shape '40x17'"),
    ("jitter", ["--jitter-s", "nan"], "--jitter-s: must be a finite number"),
    ("jitter", ["--copies", "0"], "--copies: must be from 1"),
    ("jitter", ["--policies", "fifo,fifo"], "--policies: 'fifo' named twice"),
    ("live", ["--config", "[1]"], "--config: expected a JSON object"),
    # found by a review: a run on 2 nodes of 8 that ended in the simulator's refusal
    ("live", ["--gpus", "12"], "--gpus: 12 GPUs are no whole number of nodes of 8"),
    ("live", ["--trace", "no/such.jsonl"], "no/such.jsonl: trace: cannot read"),
    ("live", ["--policy", "stretch_edf", "--config", '{"stretch": 0}'],
     "--config: stretch_edf.stretch:"),
])
def test_a_bad_argument_is_one_line_and_exit_2(module: str, args: list[str],
                                               expected: str) -> None:
    proc = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == "", proc.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
