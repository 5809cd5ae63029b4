"""One hint language in the Python parser and the Lua validator (real lua5.1, the Lua
that Slurm's job_submit/lua plugin links on Debian): the case file, random strings, and
the Lua plugin's partition, modify and heartbeat logic with fake Slurm records."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.slurm.hints import (
    Hint,
    asked_gpus,
    asked_max_nodes,
    asked_min_nodes,
    parse_hint,
    split_admin_comment,
)
from slurm_shockwave.slurm.json_shapes import job_gpus

ROOT = Path(__file__).resolve().parents[1]
CASES = json.loads((ROOT / "tests" / "data" / "hints.json").read_text())
SCRIPT = ROOT / "plugin_scripts" / "job_submit.lua"


def _lua() -> str:
    lua = shutil.which("lua5.1")
    if lua is None:
        pytest.skip("lua5.1 not installed (apt-get install lua5.1)")
    return lua


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


def test_hint_interface() -> None:
    hint = parse_hint("bs=4 epochs=2")
    assert hint == Hint(bs=4, epochs=2) and hint.model == "" and hint.signal is None
    assert hint.grace_s == 60
    assert parse_hint("bs=4 epochs=2 signal=SIGusr2 grace=9").signal == "USR2"
    assert parse_hint("model=gpt-neo bs=4 epochs=2").model == "gpt-neo"


def _lua_results(hints: list[str]) -> list[str]:
    """Each hint through the Lua parser, all in one lua5.1 process (hex lines)."""
    payload = "".join(h.encode("utf-8", "surrogatepass").hex() + "\n" for h in hints)
    proc = subprocess.run([_lua(), str(ROOT / "tests" / "hint_check.lua"), str(SCRIPT),
                           "hex"], input=payload, capture_output=True, text=True,
                          timeout=60, check=True)
    out = proc.stdout.splitlines()
    assert len(out) == len(hints), proc.stderr
    return out


def _python_result(text: str) -> str:
    try:
        return f"OK {parse_hint(text).normalised()}"
    except InputError as err:
        return f"ERR {err.field} {err.problem}"


def test_lua_accepts_exactly_the_same_language() -> None:
    good = [c["hint"] for c in CASES["good"]]
    bad = [c["hint"] for c in CASES["bad"]]
    out = _lua_results(good + bad)
    assert out[: len(good)] == [f"OK {c['normalised']}" for c in CASES["good"]]
    for line, case in zip(out[len(good):], CASES["bad"], strict=True):
        kind, field, *_ = line.split(" ", 2)
        assert (kind, field) == ("ERR", case["field"]), (line, case)
        assert line == _python_result(case["hint"])  # the same words, not just the field


# -- random strings through both parsers -------------------------------------------------
_VALUES = ["resnet18", "ResNet-50", "lm", "my.model+x", "-x", "32", "0", "007", "+5",
           "1000000", "1000001", "100000", "3600", "3601", "gns", "static", "GNS",
           "usr1", "SIGTERM", "sig", "kill", "=", "9.5", "1e3", "\u0669", "\u017f", "",
           "1-4", "2-2", "4-2", "0-1", "1-1024", "1-1025", "01-0008", "12345-1", "1-", "-4",
           "1--4", "1-4-8", "\u0661-2"]
_KEYS = ["model", "bs", "epochs", "mode", "gpus", "signal", "grace", "colour", "Bs", ""]
_SEPS = [" ", "  ", "\t", "\n", "\r\n", "\f", "\v", "\u00a0", "\u2003", "\x00", "", "\u0085"]
_token = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(_KEYS),
              st.one_of(st.sampled_from(_VALUES), st.text("0123456789", min_size=1,
                                                           max_size=30))),
    st.text(min_size=0, max_size=12),
    st.sampled_from(["shockwave:", "shockwave:v1", "shockwave:v2", "bs=32", "epochs=9"]),
)
_valid = st.lists(st.sampled_from(
    ["model=resnet18", "model=Res.Net-50", "model=x1", "bs=32", "epochs=9", "mode=gns",
     "mode=accordion", "signal=usr1", "signal=SIGHUP", "grace=120", "bs=7", "epochs=1",
     "gpus=1-8", "gpus=2-2", "gpus=8-2"]),
    max_size=7, unique=True).map(" ".join)
_hint_text = st.one_of(
    _valid,
    _valid.map(lambda t: f"shockwave:v1 {t}"),
    st.builds(lambda toks, seps: "".join(t + s for t, s in zip(toks, seps, strict=False)),
              st.lists(_token, max_size=8), st.lists(st.sampled_from(_SEPS), min_size=8,
                                                     max_size=8)),
    st.text(max_size=60),
    st.builds(lambda n, d: f"bs={d * n} epochs=1", st.integers(1, 30),
              st.sampled_from(["1", "9", "0"])),
)


class _LuaParser:
    """One lua5.1 process for all the random strings: one hex line in, one line out."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [_lua(), str(ROOT / "tests" / "hint_check.lua"), str(SCRIPT), "hex"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def __call__(self, text: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(text.encode("utf-8", "surrogatepass").hex() + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().rstrip("\n")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def lua_parser() -> Iterator[_LuaParser]:
    parser = _LuaParser()
    yield parser
    parser.close()


@settings(max_examples=3000, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_hint_text)
def test_random_strings_get_the_same_verdict_in_python_and_lua(lua_parser: _LuaParser,
                                                               text: str) -> None:
    """Same verdict, same field, same words and the same normal form, for anything."""
    assert lua_parser(text) == _python_result(text)


# -- the plugin's partition, modify and heartbeat logic, with fake Slurm records ----------
_HARNESS = r"""
logs = {}
slurm = { SUCCESS = 0, ERROR = -1,
  log_user = function(fmt, ...) table.insert(logs, string.format(fmt, ...)) end,
  log_info = function() end }
SHOCKWAVE_HEARTBEAT = arg[2]
dofile(arg[1])
-- sbatch's jobs have a batch script, salloc's and srun's none: a record is a batch job
-- unless a case marks it interactive
local submit_job, modify_job = slurm_job_submit, slurm_job_modify
local function batch(t) if t.script == nil and not t.interactive then t.script = "#!/bin/sh" end end
function slurm_job_submit(d, parts, uid) batch(d) return submit_job(d, parts, uid) end
function slurm_job_modify(d, rec, parts, uid) batch(rec) return modify_job(d, rec, parts, uid) end
local function part(default) return { flag_default = default } end
local function show(rc, desc)
  -- the submission stamp is checked here and left out of the printed comment
  local comment = tostring(desc.admin_comment)
  local hint, at = string.match(comment, "^(.*) submitted=(%d+)$")
  if hint then
    assert(math.abs(tonumber(at) - os.time()) <= 5, "stamp " .. at)
    comment = hint
  end
  print(rc, comment, tostring(desc.priority), logs[#logs] or "")
  logs = {}
end
"""


def _run(body: str, heartbeat: Path) -> list[str]:
    code = _HARNESS + body
    script = heartbeat.parent / "case.lua"
    script.write_text(code)
    proc = subprocess.run([_lua(), str(script), str(SCRIPT), str(heartbeat)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


GOOD = "shockwave:v1 model=LM bs=10 epochs=3 mode=static"


def test_lua_stamps_the_first_submission_for_python_to_read(tmp_path: Path) -> None:
    """A requeue moves Slurm's submit time; the admin comment keeps the first one, in the
    form the world reads back (split_admin_comment), and only the plugin writes it."""
    import time
    before = int(time.time())
    out = _run("""
local d = { partition = "shockwave", comment = "model=lm bs=10 epochs=3" }
slurm_job_submit(d, { shockwave = part(1) }, 0)
print(d.admin_comment)
local u = { partition = "shockwave", comment = "model=lm bs=10 epochs=3 submitted=1" }
show(slurm_job_submit(u, { shockwave = part(1) }, 0), u)
""", tmp_path / "heartbeat")
    hint, stamp = split_admin_comment(out[0])
    assert hint == GOOD and stamp is not None and before <= stamp <= int(time.time()) + 1
    assert parse_hint(hint).normalised() == GOOD
    assert out[1].startswith("-1\tnil\tnil\t") and "field 'submitted'" in out[1]
    assert split_admin_comment(GOOD) == (GOOD, None)
    assert split_admin_comment(f"{GOOD} submitted=x") == (f"{GOOD} submitted=x", None)


# sbatch's GPU spellings as job_desc carries them (22.05: gres:, 23.x on: gres/), and
# the node count (min_nodes; NO_VAL when -N is not given) -> the count squeue lists
_SPELLINGS = [
    ("gres:gpu:2", None, None, 2),                # --gres=gpu:2
    ("gres:gpu:a100:4", None, None, 4),           # --gres=gpu:a100:4
    ("gres/gpu:4", None, 4294967294, 4),          # 23.x on; -N not given
    ("gres:gpu:4", None, 2, 8),                   # -N 2 --gres=gpu:4
    ("gres:gpu:4", None, 2.5, 4),                 # not a node count: 1
    (None, "gres:gpu:8", None, 8),                # --gpus=8 (tres_per_job)
    (None, "gres/gpu:v100:3", 2, 3),              # --gpus=v100:3 -N 2: per job
    ("gres:gpu:1", "gres:gpu:2", 3, 5),           # both
    ("gres:gpu:a100:2,gres:gpu:v100:2", None, None, 4),
    ("gres:gpu:a100_3g.20gb:2,gres:shard:4", None, None, 2),  # MIG type; not a GPU
    ("gres:gpu", None, None, 1), ("gres/gpu:a100", None, 2, 2),  # no count: one
    ("gres:gpu:0", None, None, 0), ("gres:mps:100", None, None, 0), ("", "", None, 0),
    ("gres:gpu:4(S:0-1)", None, None, 0), ("gres:gpus:4", None, None, 0),
    ("gres:gpu:a:b:4", None, None, 0), ("gres:gpu:12345678", None, None, 0),
    ("gres:gpu:0000004", None, None, 4), ("xgres:gpu:4", None, None, 0),
    ("gres:gpu:a100:", None, None, 0), ("gres:gpu::4", None, None, 0),
    ("gres:gpu:4,,gres:gpu:1", None, None, 5), ("gres:gpu:\u00b2", None, None, 0),
]
# --gpus-per-task (tres_per_task) and the tasks: (per node, per job, nodes, per task,
# tasks, GPUs); sbatch refuses it without -n, -N or --gpus, and lists a task per node for
# -N only; with --gpus or --gres too, Slurm makes the counts agree (measured on 22.05)
_PER_TASK = [
    (None, None, None, "gres:gpu:2", 3, 6),       # -n 3 --gpus-per-task=2
    (None, None, 2, "gres/gpu:a100:1", None, 2),  # -N 2 --gpus-per-task=a100:1
    (None, None, 2, "gres:gpu:3", 4, 12),         # -N 2 -n 4 --gpus-per-task=3
    (None, "gres:gpu:8", None, "gres:gpu:1", 8, 8),  # --gpus=8 --gpus-per-task=1
    (None, "gres:gpu:8", None, "gres:gpu:1", None, 8),  # its tasks derived: 8 / 1
    ("gres:gpu:4", None, None, "gres:gpu:2", 2, 4),  # -n 2 --gres=gpu:4 --gpus-per-task=2
    ("gres:gpu:2", None, 2, "gres:gpu:1", 4, 4),     # -N 2 --gres=gpu:2 --gpus-per-task=1
    ("gres:gpu:2", None, 2, "gres:gpu:1", None, 4),
    (None, None, None, "cpu=4", 2, 0),            # 24.x lists --cpus-per-task here
    (None, None, None, "gres/gpu=2", 2, 4),       # 25.11: name=count
    (None, None, None, "cpu=2,gres/gpu:a100=1", 3, 3),
    (None, None, None, "gres:gpu:2", 4294967294, 2),  # NO_VAL: a task per node
]


def _random_spellings(n: int) -> list[tuple[str | None, str | None, int | None,
                                             str | None, int | None]]:
    """Strings made of the pieces GPU requests are made of, in any order."""
    import random
    rng = random.Random(11)
    pieces = ["gres", ":", "/", "gpu", "gpus", "a100", "a100_3g.20gb", "0", "4", "12",
              "0000001", "99999999", ",", "mps", "(S:0)", "-", "", "\u0661", " ", "=", "cpu"]

    def spec() -> str | None:
        return None if rng.random() < 0.2 else "".join(
            rng.choice(pieces) for _ in range(rng.randint(0, 9)))
    def count() -> int | None:
        return rng.choice([None, 1, 2, 3, 0, 4294967294])
    return [(spec(), spec(), count(), spec(), count()) for _ in range(n)]


def test_lua_counts_requested_gpus_as_python_reads_them(tmp_path: Path) -> None:
    """The stamp job_submit.lua writes (asked_gpus) is the count the service reads from
    Slurm for the same job before any resize (json_shapes.job_gpus): one grammar in both,
    on sbatch's spellings and on random strings of the same pieces."""
    cases = ([(*c[:3], None, None) for c in _SPELLINGS] + [c[:5] for c in _PER_TASK]
             + _random_spellings(3000))
    script = tmp_path / "count.lua"
    script.write_text("""
slurm = { SUCCESS = 0, ERROR = -1, log_user = function() end, log_info = function() end }
dofile(arg[1])
local function text(h)
  if h == "-" then return nil end
  return (string.gsub(h, "%x%x", function(x) return string.char(tonumber(x, 16)) end))
end
for line in io.lines() do
  local a, b, n, t, k = string.match(line, "^(%S+) (%S+) (%S+) (%S+) (%S+)$")
  print(shockwave_job_gpus(text(a), text(b), tonumber(n), text(t), tonumber(k)))
end
""")

    def hexed(v: str | None) -> str:
        return "-" if v is None else v.encode().hex() or "-"
    def given(v: int | None, default: int) -> int:
        return v if isinstance(v, int) and 1 <= v < 4294967294 else default
    lines = [" ".join((hexed(a), hexed(b), str(n), hexed(t), str(k)))
             for a, b, n, t, k in cases]
    proc = subprocess.run([_lua(), str(script), str(SCRIPT)], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=60, check=True)
    lua = [int(float(x)) for x in proc.stdout.split()]
    # squeue lists the node count Slurm took from -N (1 when not given); the tasks as
    # they are, NO_VAL included
    python = [job_gpus(a or "", b or "", given(n, 1), t or "", k or 0)
              for a, b, n, t, k in cases]
    assert lua == python
    assert lua[:len(_SPELLINGS) + len(_PER_TASK)] == \
        [c[3] for c in _SPELLINGS] + [c[5] for c in _PER_TASK]


def test_lua_stamps_the_gpus_a_job_asked_for(tmp_path: Path) -> None:
    """Submitted with sbatch's spellings, the admin comment says the GPUs asked for
    (read back by asked_gpus; none where it asked none) and the node range
    (asked_min_nodes, asked_max_nodes). A job moved into the partition
    is stamped from its record where the update does not name GPUs."""
    out = _run("""
local parts = { shockwave = part(1) }
for _, d in ipairs({
    { tres_per_node = "gres:gpu:2" },
    { tres_per_node = "gres:gpu:a100:4", min_nodes = 2, max_nodes = 3 },
    { tres_per_job = "gres:gpu:8", min_nodes = 4294967294 }, { tres_per_node = "gres/gpu:3" },
    {}, { tres_per_node = "gres:mps:100", comment = "model=lm bs=10 epochs=3" } }) do
  d.partition = "shockwave"; d.comment = d.comment or "model=lm bs=10 epochs=3 gpus=1-16"
  slurm_job_submit(d, parts, 0)
  print(d.admin_comment)
end
local u = { partition = "shockwave", min_nodes = 4294967294 }
slurm_job_modify(u, { partition = "other", comment = "bs=1 epochs=1",
                      tres_per_node = "gres:gpu:4", min_nodes = 2 }, parts, 0)
print(u.admin_comment)
""", tmp_path / "heartbeat")
    assert [asked_gpus(line) for line in out] == [2, 8, 8, 3, None, None, 8]
    # with the fewest nodes (-N 2; 1 where none; the record's for a job moved in)
    assert [asked_min_nodes(line) for line in out] == [1, 2, 1, 1, None, None, 2]
    # and the most (-N 2-3; 0 where none)
    assert [asked_max_nodes(line) for line in out] == [0, 3, 0, 0, None, None, 0]
    assert asked_min_nodes("x submitted=9 asked_gpus=2") is None  # an older stamp
    assert asked_max_nodes("x submitted=9 asked_gpus=2 asked_nodes=2") is None
    assert all(split_admin_comment(line)[1] for line in out)
    assert split_admin_comment(out[0])[0] == \
        "shockwave:v1 model=LM bs=10 epochs=3 mode=static gpus=1-16"


@pytest.mark.parametrize(("content", "held"), [
    (None, False), ("", False), ("garbage\n", False), ("{now} 30\n", True),
    ("{now} 30", True), ("{old} 30\n", False), ("-5 30\n", False),
    ("{now} 30 extra\n", False), ("9" * 40 + " 30\n", False), ("{now}\n", False),
    ("\x00\xff\n", False), ("{now} 30\r\nmore lines\n", True),
])
def test_lua_holds_only_with_a_fresh_heartbeat(tmp_path: Path, content: str | None,
                                               held: bool) -> None:
    import time
    beat = tmp_path / "heartbeat"
    if content is not None:
        now = int(time.time())
        beat.write_bytes(content.format(now=now, old=now - 100).encode("latin-1"))
    out = _run("""
local d = { partition = "shockwave", comment = "model=lm bs=10 epochs=3" }
show(slurm_job_submit(d, { shockwave = part(1) }, 0), d)
""", beat)
    assert out == [f"0\t{GOOD}\t{0 if held else 'nil'}\t"]


def test_lua_heartbeat_that_is_a_directory_is_not_alive(tmp_path: Path) -> None:
    beat = tmp_path / "dir"
    beat.mkdir()
    out = _run('print(shockwave_service_alive())', beat)
    assert out == ["false"]


def test_lua_default_partition_and_lists(tmp_path: Path) -> None:
    beat = tmp_path / "heartbeat"
    out = _run("""
local function submit(partition, parts, comment)
  local d = { partition = partition, comment = comment or "model=lm bs=10 epochs=3" }
  show(slurm_job_submit(d, parts, 0), d)
end
submit(nil, { shockwave = part(1), other = part(0) })       -- default is ours: managed
submit(nil, { shockwave = part(0), other = part(1) })       -- not: untouched
submit(nil, { shockwave = part(0), other = part(1) }, "x")  -- untouched, no hint needed
submit(nil, { other = part(1) })                            -- ours not visible, other default
SHOCKWAVE_IS_DEFAULT = true
submit(nil, {})                                             -- no records: the setting
SHOCKWAVE_IS_DEFAULT = false
submit(nil, {})
submit("other,shockwave", { shockwave = part(1) })
submit("shockwave", { shockwave = part(0) }, "bs=x epochs=1")
""", beat)
    assert out == [
        f"0\t{GOOD}\tnil\t", "0\tnil\tnil\t", "0\tnil\tnil\t", "0\tnil\tnil\t",
        f"0\t{GOOD}\tnil\t", "0\tnil\tnil\t",
        "-1\tnil\tnil\tshockwave: the shockwave partition cannot be combined with other "
        "partitions; submit to it alone",
        "-1\tnil\tnil\tshockwave: bad hint in --comment: field 'bs': expected an integer "
        "from 1 to 1000000, got 'x'",
    ]


def test_lua_modify(tmp_path: Path) -> None:
    import time
    beat = tmp_path / "heartbeat"
    beat.write_text(f"{int(time.time())} 60\n")
    out = _run("""
local parts = { shockwave = part(1), other = part(0) }
local function modify(desc, rec) show(slurm_job_modify(desc, rec, parts, 0), desc) end
modify({ partition = "shockwave" }, { partition = "other", comment = "model=lm bs=10 epochs=3" })
modify({ partition = "shockwave" }, { partition = "other", comment = "bs=1 epochs=0" })
modify({ partition = "shockwave", comment = "model=lm bs=10 epochs=3" },
       { partition = "other", comment = "junk" })
modify({ partition = "shockwave,other" }, { partition = "other", comment = "" })
modify({ comment = "bs=2 epochs=2" }, { partition = "shockwave", comment = "bs=1 epochs=1" })
modify({ comment = "bs=1 epochs=1" }, { partition = "shockwave", comment = "bs=1 epochs=1" })
modify({ admin_comment = "x", priority = 5 }, { partition = "shockwave", comment = "a" })
modify({ comment = "anything" }, { partition = "other", comment = "" })
modify({ partition = "other" }, { partition = "shockwave", comment = "a" })
modify({ partition = "shockwave" }, { partition = "shockwave", comment = "bad" })
""", beat)
    # moved in: validated and stamped, not held (Slurm would record a hold set in an
    # admin's update as the admin's; the service holds it at its next round)
    assert out == [
        f"0\t{GOOD}\tnil\t",
        "-1\tnil\tnil\tshockwave: bad hint in --comment: field 'epochs': expected an "
        "integer from 1 to 100000, got '0'",
        f"0\t{GOOD}\tnil\t",
        "-1\tnil\tnil\tshockwave: the shockwave partition cannot be combined with other "
        "partitions; submit to it alone",
        "-1\tnil\tnil\tshockwave: the hint (comment) of a job in the shockwave partition "
        "is fixed at submit; cancel and resubmit the job to change it",
        "0\tnil\tnil\t", "0\tx\t5\t", "0\tnil\tnil\t", "0\tnil\tnil\t", "0\tnil\tnil\t",
    ]


def test_lua_refuses_the_owners_release_of_a_held_job_while_the_service_lives(
        tmp_path: Path) -> None:
    """The planner's hold is a user hold (so an admin's `scontrol hold` is told apart):
    its owner's `scontrol release` (priority INFINITE, from the owner's uid) is refused
    while the heartbeat is fresh; root, an operator, a hold, another partition's job, a
    job not held, and any release once the heartbeat is stale pass."""
    import time
    beat = tmp_path / "heartbeat"
    cases = """
local parts = { shockwave = part(1), other = part(0) }
local RELEASE = 4294967295
local function modify(desc, rec, uid)
  print(slurm_job_modify(desc, rec, parts, uid) .. "\\t" .. (logs[#logs] or "")); logs = {}
end
local held = { partition = "shockwave", comment = "c", priority = 0, user_id = 1001, job_id = 7 }
modify({ priority = RELEASE }, held, 1001)                              -- the owner: refused
modify({ priority = RELEASE }, held, 0)                                 -- root
modify({ priority = RELEASE }, held, 1002)                              -- an operator
modify({ priority = 0 }, held, 1001)                                    -- a hold
modify({ priority = RELEASE }, { partition = "other", comment = "", priority = 0,
                                 user_id = 1001, job_id = 8 }, 1001)    -- not ours
modify({ priority = RELEASE }, { partition = "shockwave", comment = "c", priority = 5,
                                 user_id = 1001, job_id = 9 }, 1001)    -- not held
"""
    beat.write_text(f"{int(time.time())} 60\n")
    out = _run(cases, beat)
    assert out[0] == ("-1\tshockwave: job 7 is held for the shockwave partition's planner, "
                      "which releases it when it plans its GPUs, or by an admin; its owner "
                      "cannot release it (`shockwave explain 7` says why it waits)")
    assert out[1:] == ["0\t"] * 5
    beat.write_text(f"{int(time.time()) - 600} 60\n")  # stale: fail-open
    assert _run(cases, beat) == ["0\t"] * 6


def test_lua_refuses_job_arrays_in_the_managed_partition(tmp_path: Path) -> None:
    """An array's hold and priority act on every pending task at once, so the planner
    cannot give its tasks their own shares: an array (``sbatch --array``) is refused at
    submit, and moved in by ``scontrol update``, with a message saying what to do; other
    partitions' arrays are untouched."""
    beat = tmp_path / "heartbeat"
    out = _run("""
local parts = { shockwave = part(1), other = part(0) }
local d = { partition = "shockwave", comment = "model=lm bs=10 epochs=3", array_inx = "0-9" }
show(slurm_job_submit(d, parts, 0), d)
local e = { partition = "shockwave", comment = "model=lm bs=10 epochs=3", array_inx = "" }
show(slurm_job_submit(e, parts, 0), e)
local o = { partition = "other", comment = "", array_inx = "1-3" }
show(slurm_job_submit(o, parts, 0), o)
local m = { partition = "shockwave" }
show(slurm_job_modify(m, { partition = "other", comment = "model=lm bs=10 epochs=3",
                           array_job_id = 7, job_id = 8 }, parts, 0), m)
local n = { partition = "shockwave" }
show(slurm_job_modify(n, { partition = "other", comment = "model=lm bs=10 epochs=3",
                           array_job_id = 0, job_id = 9 }, parts, 0), n)
""", beat)
    array = ("shockwave: job arrays are not planned in the shockwave partition (one hold "
             "and one priority would act on every task at once); submit each task as its "
             "own job, e.g. a loop of sbatch")
    assert out == [f"-1\tnil\tnil\t{array}", f"0\t{GOOD}\tnil\t", "0\tnil\tnil\t",
                   f"-1\tnil\tnil\t{array}", f"0\t{GOOD}\tnil\t"]


def test_lua_refuses_an_elastic_job_that_asks_gpus_per_task(tmp_path: Path) -> None:
    """Slurm refuses a GRES update of a ``--gpus-per-task`` job (measured on 22.05), so an
    elastic one could never be resized: refused at submit and when moved in, saying how to
    ask instead. A fixed one is stamped with its whole count, or, moved in, not at all."""
    out = _run("""
local parts = { shockwave = part(1), other = part(0) }
local d = { partition = "shockwave", comment = "model=lm bs=10 epochs=3 gpus=1-4",
            tres_per_task = "gres:gpu:1", num_tasks = 2 }
show(slurm_job_submit(d, parts, 0), d)
local f = { partition = "shockwave", comment = "model=lm bs=10 epochs=3",
            tres_per_task = "gres:gpu:2", num_tasks = 3 }
slurm_job_submit(f, parts, 0)
print(f.admin_comment)
local m = { partition = "shockwave" }
show(slurm_job_modify(m, { partition = "other", comment = "bs=1 epochs=1 gpus=2-8",
                           tres_per_task = "gres/gpu:2", job_id = 9 }, parts, 0), m)
local n = { partition = "shockwave" }
slurm_job_modify(n, { partition = "other", comment = "bs=1 epochs=1",
                      tres_per_task = "gres/gpu:2", job_id = 10 }, parts, 0)
print(n.admin_comment)
""", tmp_path / "heartbeat")
    assert out[0].startswith("-1\tnil\tnil\tshockwave: an elastic job (gpus=LO-HI")
    assert "not --gpus-per-task" in out[0] and out[2] == out[0]
    assert asked_gpus(out[1]) == 6
    # moved in: Slurm passes no task count of a job record, so no stamp, not a wrong one
    assert asked_gpus(out[3]) is None and split_admin_comment(out[3])[1]


def test_lua_refuses_an_elastic_job_that_asks_other_gres(tmp_path: Path) -> None:
    """Found by a red-team: an elastic job submitted ``--gres=gpu:2,nvme:100`` lost its
    disk at its first resize (``scontrol update gres=gpu:8``: Slurm replaces a job's GRES
    with what it is given). Refused at submit, when moved in and as an update of an
    elastic job's GRES (a review), naming the GRES; a fixed job with other GRES, never
    resized, is admitted."""
    out = _run("""
local parts = { shockwave = part(1), other = part(0) }
for _, d in ipairs({
    { tres_per_node = "gres:gpu:2,gres:nvme:100", comment = "model=lm bs=10 epochs=3 gpus=1-4" },
    { tres_per_node = "gres/mps:50", tres_per_job = "gres/gpu:2",
      comment = "model=lm bs=10 epochs=3 gpus=1-4" },
    { tres_per_node = "gres:gpu:2,gres:nvme:100", comment = "model=lm bs=10 epochs=3" },
    { tres_per_node = "gres:gpu:a100:2", comment = "model=lm bs=10 epochs=3 gpus=1-4" } }) do
  d.partition = "shockwave"
  show(slurm_job_submit(d, parts, 0), d)
end
local m = { partition = "shockwave" }
show(slurm_job_modify(m, { partition = "other", comment = "bs=1 epochs=1 gpus=2-8",
                           tres_per_node = "gres:gpu:2,gres:nvme:1", job_id = 9 }, parts, 0), m)
-- an update of a managed job's GRES: refused for an elastic one, the service's own
-- resize (GPUs alone) and a fixed job's other GRES pass
local elastic = { partition = "shockwave", job_id = 11, comment = "x",
                  admin_comment = "shockwave:v1 bs=1 epochs=1 mode=static gpus=2-8 submitted=1" }
local fixed = { partition = "shockwave", job_id = 12, comment = "bs=1 epochs=1" }
for _, u in ipairs({ { elastic, "gres:gpu:2,gres:nvme:1" }, { elastic, "gres:gpu:4" },
                     { fixed, "gres:gpu:2,gres:nvme:1" } }) do
  local d = { tres_per_node = u[2] }
  print(slurm_job_modify(d, u[1], parts, 0))
end
""", tmp_path / "heartbeat")
    refused = "\tnil\tnil\tshockwave: an elastic job (gpus=LO-HI in --comment) asks for no GRES"
    assert out[0].startswith("-1" + refused) and out[0].endswith("drop gres:nvme:100")
    assert out[1].startswith("-1" + refused) and out[1].endswith("drop gres/mps:50")
    assert out[2].startswith("0\tshockwave:v1") and out[3].startswith("0\tshockwave:v1")
    assert out[4].startswith("-1" + refused) and out[4].endswith("drop gres:nvme:1")
    assert out[5:] == ["-1", "0", "0"], out[5:]


@pytest.mark.parametrize(("per_node", "per_job", "per_task", "refused"), [
    ("gres:gpu:1,gres:gpu:2", None, None, True),     # --gres=gpu:1 --gpus-per-node=2
    ("gres/gpu:2,gres/gpu:1", None, None, True),     # the same, as 25.11 lists it
    ("gres:gpu:1", "gres:gpu:2", None, True),        # --gres=gpu:1 --gpus=2
    ("gres/gpu:a100:1", "gres/gpu:a100:2", None, True),
    ("gres:gpu:a100:1,gres:gpu:v100:1", None, None, True),  # two types
    ("gres:gpu:a100:1", None, "gres:gpu:v100:1", True),
    (None, "gres/gpu:h100:8", "cpu=2,gres/gpu:a100=1", True),
    ("gres:gpu:4", None, "gres:gpu:2", False),       # -n 2 --gres=gpu:4 --gpus-per-task=2
    (None, "gres:gpu:8", "gres:gpu:1", False),       # --gpus=8 --gpus-per-task=1
    ("gres:gpu:a100:2", None, "gres:gpu:a100:1", False),
    ("gres:gpu:a100:2", None, "gres:gpu:1", False),  # untyped per task: the node's type
    ("gres/gpu:2,gres/nvme:100", None, None, False),  # other GRES beside (a fixed job)
    (None, None, "cpu=2,gres/gpu:a100=1", False),
    (None, "gres:gpu:2", None, False), ("gres:gpu", None, None, False),
])
def test_lua_refuses_gpus_asked_two_ways_or_of_two_types(
        tmp_path: Path, per_node: str | None, per_job: str | None, per_task: str | None,
        refused: bool) -> None:
    """Found by a red-team: ``--gres=gpu:1 --gpus-per-node=2`` is given 1 GPU a node by
    Slurm and ``--gres=gpu:1 --gpus=2`` 2 over two nodes, where the sum of the requests
    (job_submit.lua's stamp, the CLI backend's count) read 3 and 4, so the planner kept
    GPUs the job never used; and a job asking two GPU types was planned as untyped and
    released, where no node has both. Refused at submit and when moved in, in one line."""
    def lua(value: str | None) -> str:
        return "nil" if value is None else json.dumps(value)
    out = _run(f"""
local parts = {{ shockwave = part(1), other = part(0) }}
local d = {{ partition = "shockwave", comment = "model=lm bs=10 epochs=3",
            tres_per_node = {lua(per_node)}, tres_per_job = {lua(per_job)},
            tres_per_task = {lua(per_task)}, num_tasks = 2 }}
show(slurm_job_submit(d, parts, 0), d)
local m = {{ partition = "shockwave" }}
show(slurm_job_modify(m, {{ partition = "other", comment = "bs=1 epochs=1", job_id = 9,
                           tres_per_node = {lua(per_node)}, tres_per_job = {lua(per_job)},
                           tres_per_task = {lua(per_task)} }}, parts, 0), m)
""", tmp_path / "heartbeat")
    if refused:
        for line in out:
            assert line.startswith("-1\tnil\tnil\tshockwave: a job in the shockwave "
                                   "partition asks for its GPUs one way"), line
    else:
        assert out[0].startswith("0\tshockwave:v1 ") and out[1].startswith("0\t"), out


def test_lua_keeps_a_hints_line_breaks_out_of_the_comment(tmp_path: Path) -> None:
    """Found by a review: the grammar reads a tab or a line break in a hint as a space,
    but Slurm's one-line listings break at a line break, so a comment holding one sent
    every round's partition listing down its slow JSON path. The comment keeps a space in
    its place, at submit and when moved in; the hint reads the same."""
    out = _run("""
local parts = { shockwave = part(1), other = part(0) }
local d = { partition = "shockwave", comment = "model=lm bs=10\\nepochs=3\\r\\tmode=gns" }
show(slurm_job_submit(d, parts, 0), d)
print(d.comment)
local m = { partition = "shockwave" }
show(slurm_job_modify(m, { partition = "other", comment = "bs=1\\nepochs=1", job_id = 9 },
                      parts, 0), m)
print(m.comment)
""", tmp_path / "heartbeat")
    assert out[0].startswith("0\tshockwave:v1 model=LM bs=10 epochs=3 mode=gns"), out
    assert out[1] == "model=lm bs=10 epochs=3  mode=gns"
    assert out[2].startswith("0\tshockwave:v1 bs=1 epochs=1") and out[3] == "bs=1 epochs=1"


def test_lua_refuses_an_update_that_asks_gpus_a_second_way(tmp_path: Path) -> None:
    """Found by a review: ``scontrol update jobid=N gres=gpu:1`` of an admitted
    ``--gpus=2`` job made the mix refused at submit. The service's own resizes set the
    field the job asked in (``gres=`` per node, ``TresPerJob=`` per job) and pass."""
    out = _run("""
local parts = { shockwave = part(1), other = part(0) }
local per_job = { partition = "shockwave", job_id = 11, comment = "bs=1 epochs=1",
                  tres_per_job = "gres:gpu:2",
                  admin_comment = "shockwave:v1 bs=1 epochs=1 mode=static gpus=1-4 submitted=1" }
local per_node = { partition = "shockwave", job_id = 12, comment = "bs=1 epochs=1",
                   tres_per_node = "gres:gpu:2" }
for _, u in ipairs({ { per_job, { tres_per_node = "gres:gpu:1" } },
                     { per_job, { tres_per_job = "gres:gpu:4" } },
                     { per_node, { tres_per_node = "gres:gpu:4" } },
                     { per_node, { tres_per_job = "gres:gpu:4" } },
                     { per_node, { tres_per_node = "gres:gpu:a100:1,gres:gpu:v100:1" } } }) do
  print(slurm_job_modify(u[2], u[1], parts, 0))
end
""", tmp_path / "heartbeat")
    assert out == ["-1", "0", "0", "-1", "-1"], out


def test_lua_refuses_a_job_that_cannot_be_requeued(tmp_path: Path) -> None:
    """The planner stops a job by requeueing it, which Slurm refuses for a
    ``--no-requeue`` job ("Requested operation is presently disabled", measured on
    22.05): refused at submit, when moved in, and as an update of a managed job; another
    partition's and a requeueable job (1, or unset: 65534) are untouched."""
    out = _run("""
local parts = { shockwave = part(1), other = part(0) }
for _, r in ipairs({ 0, 1, 65534 }) do
  local d = { partition = "shockwave", comment = "model=lm bs=10 epochs=3", requeue = r }
  show(slurm_job_submit(d, parts, 0), d)
end
local o = { partition = "other", comment = "", requeue = 0 }
show(slurm_job_submit(o, parts, 0), o)
local m = { partition = "shockwave", requeue = 0 }
show(slurm_job_modify(m, { partition = "other", comment = "bs=1 epochs=1", job_id = 8 },
                      parts, 0), m)
local u = { requeue = 0 }
show(slurm_job_modify(u, { partition = "shockwave", comment = "bs=1 epochs=1", job_id = 9,
                           user_id = 1000 }, parts, 1000), u)
""", tmp_path / "heartbeat")
    refused = ("shockwave: a job in the shockwave partition must be requeueable: the "
               "planner stops a job by requeueing it (after its checkpoint signal); submit "
               "it without --no-requeue")
    assert out[0] == out[4] == out[5] == f"-1\tnil\tnil\t{refused}"
    assert out[1].startswith(f"0\t{GOOD}") and out[2].startswith(f"0\t{GOOD}")
    assert out[3] == "0\tnil\tnil\t"


# -- an owner's hold, recorded in the comment (hints.split_hold_mark) ---------------------
_MARK_PIECES = ["held=", "owner", "requeue", "admin", " ", "  ", "\t", "\n", "x", "bs=1",
                "=", "held", "HELD=", "ownerx", "\u00a0", ""]


def _mark_cases(n: int) -> list[str]:
    import random
    rng = random.Random(5)
    fixed = ["", "held=owner", " held=owner", "held=requeue", "bs=1 epochs=1 held=owner",
             "bs=1 epochs=1  held=requeue", "bs=1 held=owner held=owner", "x held=admin",
             "x held=Owner", "x\theld=owner", "x held=owner ", "a\nb held=owner",
             "held=owner\n", "xheld=owner"]
    return fixed + ["".join(rng.choice(_MARK_PIECES) for _ in range(rng.randint(0, 7)))
                    for _ in range(n)]


def test_lua_and_python_read_the_hold_mark_alike() -> None:
    """The mark job_submit.lua writes into the comment and the service reads back: one
    grammar (the comment without the mark, and the mark), case for case, and marking
    then reading gives back what was marked."""
    from slurm_shockwave.slurm.hints import split_hold_mark, with_hold_mark

    cases = _mark_cases(3000)
    script = ROOT / "tests" / "mark_check.lua"
    payload = "".join(c.encode().hex() + "\n" for c in cases)
    proc = subprocess.run([_lua(), str(script), str(SCRIPT)], input=payload,
                          capture_output=True, text=True, timeout=60, check=True)
    lua = [bytes.fromhex(line).decode() for line in proc.stdout.splitlines()]
    python = [f"{text}\x00{mark or '-'}\x00{with_hold_mark(text, 'owner')}"
              for text, mark in map(split_hold_mark, cases)]
    assert lua == python
    assert split_hold_mark("bs=1 epochs=1 held=owner") == ("bs=1 epochs=1", "owner")
    assert split_hold_mark("held=requeue") == ("", "requeue")
    assert split_hold_mark("x held=admin") == ("x held=admin", None)
    for text in ("", "bs=1 epochs=1", "a held=owner"):
        assert split_hold_mark(with_hold_mark(text, "requeue")) == (text, "requeue")


_HOLD_HELPERS = r"""
local parts = { shockwave = part(1), other = part(0) }
local RELEASE, NO_VAL = 4294967295, 4294967294
local function rec(comment, extra)
  local r = { partition = "shockwave", comment = comment, priority = 0, user_id = 1001,
              job_id = 7, job_state = 0 }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end
local function modify(desc, r, uid)
  local rc = slurm_job_modify(desc, r, parts, uid)
  local prio = desc.priority == NO_VAL and "NO_VAL" or desc.priority == RELEASE and "RELEASE"
               or tostring(desc.priority)
  print(rc .. "\t" .. tostring(desc.comment) .. "\t" .. prio .. "\t" .. (logs[#logs] or ""))
  logs = {}
end
local C = "bs=10 epochs=3"
"""
_HOLDS = _HOLD_HELPERS + r"""
modify({ priority = 0 }, rec(C), 1001)                                 -- 1 owner's hold
modify({ priority = 0 }, rec(C, { priority = 5 }), 1001)               -- 2 of a released job
modify({ priority = 0 }, rec(C, { priority = 5, job_state = 1 }), 1001) -- 3 running
modify({ priority = 0 }, rec(C .. " held=owner"), 1001)                -- 4 marked already
modify({ priority = 0 }, rec(C .. " held=requeue"), 1001)              -- 5 requeue-held
modify({ priority = 0 }, rec(C), 0)                                    -- 6 root (the service)
modify({ priority = 0 }, rec(C), 1002)                                 -- 7 a coordinator
modify({ priority = 0 }, rec(nil), 1001)                               -- 8 no comment
modify({ priority = RELEASE }, rec(C .. " held=owner"), 1001)          -- 9 owner's release
modify({ priority = RELEASE }, rec(C .. " held=owner", { job_state = 1, priority = 5 }), 1001)
modify({ priority = RELEASE }, rec(C .. " held=requeue"), 1001)        -- 11 requeue-held
modify({ priority = RELEASE }, rec(C .. " held=owner"), 0)             -- 12 root's release
modify({ priority = RELEASE }, rec(C), 1001)                           -- 13 the planner's
modify({ priority = RELEASE }, rec(C), 0)                              -- 14 root, unmarked
modify({ comment = C .. " held=requeue" }, rec(C), 0)                  -- 15 the service marks
modify({ comment = C .. " held=requeue" }, rec(C), 1001)               -- 16 the owner may not
modify({ comment = "bs=11 epochs=3 held=requeue" }, rec(C), 0)         -- 17 nor root the hint
modify({ comment = C }, rec(C .. " held=owner"), 1002)                 -- 18 an operator clears
modify({ priority = 0 }, { partition = "other", comment = C, priority = 5, user_id = 1001,
                           job_id = 8, job_state = 0 }, 1001)          -- 19 not ours
local moved = { partition = "shockwave" }                              -- 20 moved in, marked
print(slurm_job_modify(moved, { partition = "other", comment = C .. " held=owner",
                                job_id = 9 }, parts, 0) .. "\t" .. tostring(moved.admin_comment))
"""


def test_lua_marks_the_owners_hold_and_their_release_leaves_the_planners(
        tmp_path: Path) -> None:
    """An owner's hold (`scontrol hold`/`uhold`: priority 0 from the owner's uid) of a
    managed job, pending or running, is marked `held=owner` in its comment, whatever the
    heartbeat, and so is another user's (a coordinator's: below); root's (the service's)
    is not. Any release of a
    marked job clears the mark; the owner's release of their own hold on a pending job,
    while the service lives, leaves the planner's hold (priority NO_VAL: unchanged). A
    requeue-held job's mark (the service's, `held=requeue`) lets its owner's release
    through. Only a mark may change in a managed job's comment, and never by its owner."""
    import time
    beat = tmp_path / "heartbeat"
    beat.write_text(f"{int(time.time())} 60\n")
    c = "bs=10 epochs=3"
    fixed = ("\tnil\tshockwave: the hint (comment) of a job in the shockwave partition is "
             "fixed at submit; cancel and resubmit the job to change it")
    planner = ("-1\tnil\tRELEASE\tshockwave: job 7 is held for the shockwave partition's "
               "planner, which releases it when it plans its GPUs, or by an admin; its owner "
               "cannot release it (`shockwave explain 7` says why it waits)")
    alive = [
        f"0\t{c} held=owner\t0\t", f"0\t{c} held=owner\t0\t", f"0\t{c} held=owner\t0\t",
        "0\tnil\t0\t", "0\tnil\t0\t", "0\tnil\t0\t", f"0\t{c} held=owner\t0\t",
        "0\theld=owner\t0\t",
        f"0\t{c}\tNO_VAL\t", f"0\t{c}\tRELEASE\t", f"0\t{c}\tRELEASE\t", f"0\t{c}\tRELEASE\t",
        planner, "0\tnil\tRELEASE\t",
        f"0\t{c} held=requeue\tnil\t", f"-1\t{c} held=requeue{fixed}",
        f"-1\tbs=11 epochs=3 held=requeue{fixed}", f"0\t{c}\tnil\t",
        "0\tnil\t0\t", "0\tshockwave:v1 bs=10 epochs=3 mode=static",
    ]
    out = _run(_HOLDS, beat)
    assert out[:19] == alive[:19]
    assert out[19].startswith(alive[19] + " submitted=")
    beat.write_text(f"{int(time.time()) - 600} 60\n")  # stale: fail-open
    stale = _run(_HOLDS, beat)
    # the owner's hold is still marked (the service honours it when back); their release
    # of it, and of the planner's hold, goes through
    assert stale[:8] == alive[:8]
    assert stale[8] == f"0\t{c}\tRELEASE\t" and stale[12] == "0\tnil\tRELEASE\t"
    assert stale[9:12] + stale[13:19] == alive[9:12] + alive[13:19]


_COORDINATOR = _HOLD_HELPERS + r"""
SHOCKWAVE_SLURM_UID = 64030
modify({ priority = 0 }, rec(C), 1002)                                 -- 1 a coordinator's hold
modify({ priority = 0 }, rec(C, { priority = 5, job_state = 1 }), 1002) -- 2 of a running job
modify({ priority = RELEASE }, rec(C .. " held=owner"), 1002)          -- 3 their release
modify({ priority = RELEASE }, rec(C .. " held=owner"), 1001)          -- 4 the owner's
modify({ priority = RELEASE }, rec(C), 1002)                           -- 5 of the planner's hold
modify({ priority = 0 }, rec(C), 64030)                                -- 6 SlurmUser's hold
modify({ priority = 0 }, rec(C, { user_id = 64030 }), 64030)           -- 7 of its own job
"""


def test_lua_marks_a_coordinators_hold_and_any_release_clears_it(tmp_path: Path) -> None:
    """An account coordinator's `scontrol hold` of another user's job is a user hold in
    Slurm (job_mgr.c gives coordinators no privilege): unmarked, the planner took it for
    its own and released it. It is marked `held=owner` (a user's hold
    the planner keeps), pending or running, whatever the heartbeat. As in Slurm, the
    coordinator or the owner may release it, and either release clears the mark: the
    coordinator's releases the job, as their release of the planner's hold does; the
    owner's, while the service lives, leaves the planner's hold. SlurmUser is privileged,
    as root is: its holds are never marked, of its own job neither."""
    import time
    beat = tmp_path / "heartbeat"
    beat.write_text(f"{int(time.time())} 60\n")
    c = "bs=10 epochs=3"
    alive = [f"0\t{c} held=owner\t0\t", f"0\t{c} held=owner\t0\t", f"0\t{c}\tRELEASE\t",
             f"0\t{c}\tNO_VAL\t", "0\tnil\tRELEASE\t", "0\tnil\t0\t", "0\tnil\t0\t"]
    assert _run(_COORDINATOR, beat) == alive
    beat.write_text(f"{int(time.time()) - 600} 60\n")  # stale: the owner's release passes
    assert _run(_COORDINATOR, beat) == [*alive[:3], f"0\t{c}\tRELEASE\t", *alive[4:]]


def test_lua_takes_the_service_uid_from_its_heartbeat_as_the_planners(tmp_path: Path) -> None:
    """Found by a review: a service run as an operator's account (neither root nor
    SlurmUser) had each of its own holds marked `held=owner`, and kept those jobs held
    for good. The heartbeat the service writes names its uid on a second line (which an
    older job_submit.lua, reading the first line, ignores); that uid's holds are the
    planner's. Another user's hold is still marked."""
    import os
    import time

    from slurm_shockwave.service.heartbeat import read_heartbeat, write_heartbeat
    beat = tmp_path / "heartbeat"
    write_heartbeat(beat, time.time(), 60)
    assert read_heartbeat(beat) is not None
    assert _run("print(shockwave_service_uid(), shockwave_service_alive())", beat) == [
        f"{os.geteuid()}\ttrue"]
    beat.write_text(f"{int(time.time())} 60\nuid 990\n")
    c = "bs=10 epochs=3"
    out = _run(_HOLD_HELPERS + r"""
SHOCKWAVE_SLURM_UID = 64030
modify({ priority = 0 }, rec(C), 990)                                  -- the service's hold
modify({ priority = 0 }, rec(C), 1002)                                 -- a coordinator's
""", beat)
    assert out == ["0\tnil\t0\t", f"0\t{c} held=owner\t0\t"]
    beat.write_text(f"{int(time.time())} 60\n")  # an older service's: no uid line
    assert _run("print(shockwave_service_uid(), shockwave_service_alive())", beat) == [
        "nil\ttrue"]


def test_lua_marks_sbatch_hold_as_the_owners_hold(tmp_path: Path) -> None:
    """Found by a review: `sbatch --hold` asks for priority 0, which Slurm records as a
    user hold, as it does the planner's: unmarked, the planner took it for its own and
    started the job. It is marked `held=owner`, with the service alive or not."""
    import time
    beat = tmp_path / "heartbeat"
    body = """
local d = { partition = "shockwave", comment = "model=lm bs=10 epochs=3", priority = 0 }
show(slurm_job_submit(d, { shockwave = part(1) }, 0), d)
print(d.comment)
local e = { partition = "shockwave", comment = "model=lm bs=10 epochs=3 held=owner",
            priority = 0 }
show(slurm_job_submit(e, { shockwave = part(1) }, 0), e)
print(e.comment)
"""
    for content in (f"{int(time.time())} 60\n", "0 60\n"):
        beat.write_text(content)
        out = _run(body, beat)
        assert out == [f"0\t{GOOD}\t0\t", "model=lm bs=10 epochs=3 held=owner"] * 2, out


def test_lua_marks_the_hold_of_a_job_moved_in_held(tmp_path: Path) -> None:
    """Found by a review: a job its owner held in another partition, then moved into the
    managed one (by root or an operator), kept an unmarked user hold that the planner
    took for its own and released. It is marked as `sbatch --hold` is; a move that
    releases it too is not."""
    import time
    beat = tmp_path / "heartbeat"
    beat.write_text(f"{int(time.time())} 60\n")
    out = _run(_HOLD_HELPERS + r"""
modify({ partition = "shockwave" }, rec(C, { partition = "other" }), 0)
modify({ partition = "shockwave", priority = RELEASE }, rec(C, { partition = "other" }), 0)
modify({ partition = "shockwave" }, rec(C, { partition = "other", priority = 5 }), 0)
""", beat)
    # released and moved in: not held, as any job moved in (the service holds it)
    assert out == ["0\tbs=10 epochs=3 held=owner\tnil\t", "0\tnil\tRELEASE\t",
                   "0\tnil\tnil\t"]


def test_lua_drops_a_hold_mark_the_user_wrote_into_the_comment(tmp_path: Path) -> None:
    """Found by a red-team: ``--comment "... held=requeue"`` passed and was kept, so the
    owner's release of the planner's hold went through as if of a requeue-hold, and the
    job could start ahead of the plan. The mark is the plugin's and the service's to
    write: dropped at submit and when moved in; ``sbatch --hold`` is still marked."""
    import time
    beat = tmp_path / "heartbeat"
    beat.write_text(f"{int(time.time())} 60\n")
    out = _run("""
local parts = { shockwave = part(1), other = part(0) }
for _, mark in ipairs({ "requeue", "owner" }) do
  local d = { partition = "shockwave", comment = "model=lm bs=10 epochs=3 held=" .. mark }
  show(slurm_job_submit(d, parts, 1000), d)
  print(d.comment)
  local r = { priority = RELEASE }
  show(slurm_job_modify(r, { partition = "shockwave", comment = d.comment, job_id = 7,
                             user_id = 1000, priority = 0 }, parts, 1000), r)
end
local m = { partition = "shockwave" }
show(slurm_job_modify(m, { partition = "other", comment = "bs=1 epochs=1 held=requeue",
                           job_id = 8, priority = 5 }, parts, 0), m)
print(m.comment)
""".replace("RELEASE", "4294967295"), beat)
    refused = ("-1\tnil\t4294967295\tshockwave: job 7 is held for the shockwave "
               "partition's planner")
    for i in (0, 3):
        assert out[i] == f"0\t{GOOD}\t0\t" and out[i + 1] == "model=lm bs=10 epochs=3"
        assert out[i + 2].startswith(refused)
    assert out[6:] == ["0\tshockwave:v1 bs=1 epochs=1 mode=static\tnil\t", "bs=1 epochs=1"]


def test_lua_refuses_interactive_and_heterogeneous_jobs(tmp_path: Path) -> None:
    """Found by a red-team: Slurm requeues only batch jobs and refuses the requeue of a
    het job's component that is not its leader, and a hold or release of the leader acts
    on every component: an interactive job (salloc, srun: no batch script) and a het job
    could never be stopped. Refused at submit and when moved in; another partition's
    are untouched."""
    out = _run("""
local parts = { shockwave = part(1), other = part(0) }
local hint = "model=lm bs=10 epochs=3"
local cases = {
  { partition = "shockwave", comment = hint, interactive = true },
  { partition = "shockwave", comment = hint, het_job_offset = 0 },
  { partition = "shockwave", comment = hint, het_job_offset = 1 },
  { partition = "shockwave", comment = hint, het_job_offset = 4294967294 },
  { partition = "other", comment = "", interactive = true, het_job_offset = 0 },
}
for _, d in ipairs(cases) do show(slurm_job_submit(d, parts, 0), d) end
local recs = { { interactive = true }, { het_job_id = 12 }, { het_job_id = 0 } }
-- an update's het_job_offset is 0 whatever the job (measured on 22.05)
for i, rec in ipairs(recs) do
  rec.partition, rec.comment, rec.job_id = "other", hint, 20 + i
  local m = { partition = "shockwave", het_job_offset = 0 }
  show(slurm_job_modify(m, rec, parts, 0), m)
end
""", tmp_path / "heartbeat")
    interactive = ("-1\tnil\tnil\tshockwave: interactive jobs (salloc, srun) are not planned "
                   "in the shockwave partition: Slurm requeues only batch jobs, so the "
                   "planner could never stop one; submit it with sbatch")
    het = ("-1\tnil\tnil\tshockwave: heterogeneous jobs are not planned in the shockwave "
           "partition (a hold, a release or a requeue acts on every component at once); "
           "submit each component as its own job")
    assert out == [interactive, het, het, f"0\t{GOOD}\tnil\t", "0\tnil\tnil\t",
                   interactive, het, f"0\t{GOOD}\tnil\t"]


def test_lua_refuses_a_job_name_the_listings_cannot_read(tmp_path: Path) -> None:
    """Found by a review: a name holding a newline breaks Slurm's one-line listings (the
    job was not listed at all, and its second line could pass for another job's), and
    one holding '|' the squeue columns. Refused in the managed partition at submit, when
    moved in and on a rename; another partition's names are untouched."""
    out = _run(r"""
local parts = { shockwave = part(1), other = part(0) }
for _, name in ipairs({ "a\nb", "a|b", "a\tb", "plain name", "" }) do
  local d = { partition = "shockwave", comment = "model=lm bs=10 epochs=3", name = name }
  print(slurm_job_submit(d, parts, 0))
end
print(slurm_job_submit({ partition = "other", comment = "", name = "a\nb" }, parts, 0))
print(slurm_job_modify({ partition = "shockwave" }, { partition = "other", job_id = 8,
                       comment = "bs=1 epochs=1", name = "x|y" }, parts, 0))
print(slurm_job_modify({ name = "x\ny" }, { partition = "shockwave", job_id = 9,
                       comment = "bs=1 epochs=1", user_id = 1000 }, parts, 1000))
print(slurm_job_modify({ name = "fine" }, { partition = "shockwave", job_id = 9,
                       comment = "bs=1 epochs=1", user_id = 1000 }, parts, 1000))
""", tmp_path / "heartbeat")
    assert out == ["-1", "-1", "-1", "0", "0", "0", "-1", "-1", "0"]
