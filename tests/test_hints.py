"""One set of hint cases against the Python parser and the Lua validator (real lua5.1,
the Lua that Slurm's job_submit/lua plugin links on Debian)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.slurm.hints import parse_hint

ROOT = Path(__file__).resolve().parents[1]
CASES = json.loads((ROOT / "tests" / "data" / "hints.json").read_text())


@pytest.mark.parametrize("case", CASES["good"], ids=lambda c: c["hint"][:40])
def test_python_accepts_and_normalises(case: dict) -> None:
    hint = parse_hint(case["hint"])
    assert hint.normalised() == case["normalised"]
    assert parse_hint(hint.normalised()) == hint  # the normal form parses to itself


@pytest.mark.parametrize("case", CASES["bad"], ids=lambda c: c["hint"][:40] or "empty")
def test_python_rejects_naming_the_field(case: dict) -> None:
    with pytest.raises(InputError) as err:
        parse_hint(case["hint"])
    assert err.value.field == case["field"]
    assert str(err.value).startswith(f"hint: {case['field']}: ")


def _lua_results(hints: list[str]) -> list[str]:
    lua = shutil.which("lua5.1")
    if lua is None:
        pytest.skip("lua5.1 not installed (apt-get install lua5.1)")
    proc = subprocess.run([lua, str(ROOT / "tests" / "hint_check.lua"),
                           str(ROOT / "plugin_scripts" / "job_submit.lua")],
                          input="\n".join(hints) + "\n", capture_output=True, text=True,
                          timeout=30, check=True)
    return proc.stdout.splitlines()


def test_lua_accepts_exactly_the_same_language() -> None:
    good = [c["hint"] for c in CASES["good"]]
    bad = [c["hint"] for c in CASES["bad"]]
    out = _lua_results(good + bad)
    assert out[: len(good)] == [f"OK {c['normalised']}" for c in CASES["good"]]
    for line, case in zip(out[len(good):], CASES["bad"], strict=True):
        kind, field, *problem = line.split(" ", 2)
        assert (kind, field) == ("ERR", case["field"]), (line, case)
        with pytest.raises(InputError) as err:
            parse_hint(case["hint"])
        assert problem == [err.value.problem]  # the same words, not just the same field
