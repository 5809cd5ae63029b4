"""Adaptation hints that researchers give at submission: ``sbatch --comment``.

Grammar (docs/hints.md): ASCII ``key=value`` tokens separated by ASCII whitespace,
optionally prefixed by ``shockwave:`` (``shockwave:v1`` in the normalised form):

    bs=<1..1000000> epochs=<1..100000> [model=<label>] [mode=static|accordion|gns]
    [gpus=<LO>-<HI>] [signal=USR1|USR2|TERM|INT|HUP [grace=<seconds 1..3600>]]

``model`` is an optional free label; a catalogue name (case- and punctuation-insensitive,
``resnet18`` = ``ResNet-18``) is normalised to the catalogue's spelling. No ``signal``
means the job does not handle a checkpoint signal: it is preempted as Slurm does.
``gpus=LO-HI`` makes the job elastic: the planner may run it on any count in the range
(docs/elastic.md); without it the job keeps the count it asked Slurm for.
``plugin_scripts/job_submit.lua`` implements the same language, message for message;
both run the cases in ``tests/data/hints.json`` and a property test compares them.

Only explicit ASCII classes are used here (never ``str.split()``, ``strip()`` without
arguments, ``\\s`` or ``\\S``, which are Unicode-aware), so that Python and Lua agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_shockwave.model.bounds import MAX_RANGE_GPUS
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.workloads.catalog import MODELS

PREFIX = "shockwave:v1"
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP")
KEYS = ("model", "bs", "epochs", "mode", "gpus", "signal", "grace")
MAX_GPUS = MAX_RANGE_GPUS
MAX_BYTES = 1000
_WS = " \t\n\r\f\v"
_SPLIT = re.compile(r"[ \t\n\r\f\v]+")
_TOKEN = re.compile(r"([a-z_]+)=([!-~]+)")
_DIGITS = re.compile(r"[0-9]{1,7}")
_RANGE = re.compile(r"([0-9]{1,4})-([0-9]{1,4})")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+\-]{0,63}")
_SHOWN = re.compile(r"[!-~]{1,64}")
_ALIASES = {re.sub(r"[^a-z0-9]", "", name.lower()): name for name in MODELS}


@dataclass(frozen=True)
class Hint:
    bs: int
    epochs: int
    model: str = ""
    mode: AdaptationMode = AdaptationMode.STATIC
    signal: str | None = None
    """None: the job has not said it handles a checkpoint signal; preempt it as Slurm
    does (requeue: SIGTERM, KillWait, SIGKILL)."""
    grace_s: int = 60
    gpus_range: tuple[int, int] | None = None
    """(LO, HI): the GPU counts an elastic job can run on; None: a fixed count."""

    def normalised(self) -> str:
        model = f"model={self.model} " if self.model else ""
        text = f"{PREFIX} {model}bs={self.bs} epochs={self.epochs} mode={self.mode.value}"
        if self.gpus_range is not None:
            text += f" gpus={self.gpus_range[0]}-{self.gpus_range[1]}"
        if self.signal is not None:
            text += f" signal={self.signal} grace={self.grace_s}"
        return text


def _bad(field: str, problem: str) -> InputError:
    return InputError(problem, source="hint", field=field)


def _shown(value: str) -> str:
    """A value as it appears in a message: quoted when short printable ASCII."""
    if _SHOWN.fullmatch(value):
        return f"'{value}'"
    return "a value not shown (empty, too long or not printable ASCII)"


def _integer(field: str, value: str, upper: int) -> int:
    if _DIGITS.fullmatch(value) is None or not 1 <= int(value) <= upper:
        raise _bad(field, f"expected an integer from 1 to {upper}, got {_shown(value)}")
    return int(value)


def _gpu_range(value: str) -> tuple[int, int]:
    m = _RANGE.fullmatch(value)
    lo, hi = (int(m[1]), int(m[2])) if m else (0, 0)
    if not 1 <= lo <= hi <= MAX_GPUS:
        raise _bad("gpus", f"expected LO-HI with integers 1 <= LO <= HI <= {MAX_GPUS}, "
                           f"got {_shown(value)}")
    return lo, hi


SUBMITTED = re.compile(r"(.*)[ ]submitted=([0-9]{1,12})(?:[ ]asked_gpus=([0-9]{1,7}))?"
                       r"(?:[ ]asked_nodes=([0-9]{1,7})(?:-([0-9]{1,7}))?)?")
"""job_submit.lua appends ``submitted=<epoch>`` to the normalised hint it writes into the
admin comment: the job's first submission. Slurm sets a requeued job's submit time to
the requeue (job_mgr.c: batch_requeue_fini), so without the stamp every preemption
would look like a new arrival and reset the job's fair finish time. Then, where the job
asked for GPUs, ``asked_gpus=<count>``: the GPUs it was submitted with (``--gres`` per
node times its nodes, plus ``--gpus``), which the service's resizes of an elastic job
change in Slurm (its GRES) and a requeue by Slurm keeps changed, with
``asked_nodes=<fewest>-<most>``, the node range it asked for (``-N 2``: 2-2, ``-N 2-4``:
2-4; 1-0 where it asked none, 0 being no most, as Slurm lists it; an older stamp has no
most): Slurm lists a pending job's node count as its last run's (measured on
22.05: a requeued ``--gpus=8`` that ran 7 + 1 lists 2 nodes, then runs on one) or its
own estimate (``-N 1-2 --gpus=12`` lists 2-2), so the listing cannot tell a ``-N 2
--gpus=7``, which must have two nodes, from a ``--gpus=7`` that once had them. Not part
of the hint language: a user's ``--comment`` cannot carry them (unknown keys) and only
an admin can set the admin comment."""


def split_admin_comment(text: str) -> tuple[str, int | None]:
    """The admin comment's hint and its submission stamp (None where it has none)."""
    m = SUBMITTED.fullmatch(text.rstrip(_WS))
    return (m.group(1), int(m.group(2))) if m else (text, None)


def asked_gpus(text: str) -> int | None:
    """The GPU count an admin comment says the job was submitted with (None where it
    says none: a job submitted before job_submit.lua stamped it, or without GPUs)."""
    m = SUBMITTED.fullmatch(text.rstrip(_WS))
    return int(m.group(3)) if m and m.group(3) and int(m.group(3)) > 0 else None


HOLD_MARKS = ("owner", "requeue")
_MARKED = re.compile(r"(?:(.*)[ ])?held=([a-z]+)", re.DOTALL)
"""A hold the planner must not lift, recorded at the end of a managed job's comment (its
hint as submitted): `` held=owner``, which job_submit.lua appends when a user holds it
(``scontrol hold``): its owner, or another user Slurm lets (their account's coordinator,
whose hold Slurm makes a user hold, which the owner may release too); never root or
SlurmUser. Or `` held=requeue``, which the service appends to a job
requeue-held (``scontrol requeuehold``, which job_submit.lua never sees) so that
job_submit.lua lets its owner release it. Any release clears it (job_submit.lua). Not in
the admin comment: Slurm refuses an admin comment the plugin sets on a user's update
(22.05: "Attempt to change admin_comment"). ``shockwave_split_mark`` in
job_submit.lua, case for case (tests/test_hints.py)."""


def split_hold_mark(comment: str) -> tuple[str, str | None]:
    """A comment without its hold mark, and the mark (None when it has none)."""
    m = _MARKED.fullmatch(comment)
    if m is None or m.group(2) not in HOLD_MARKS:
        return comment, None
    return m.group(1) or "", m.group(2)


def with_hold_mark(text: str, mark: str) -> str:
    """``text`` (a comment without a mark) marked, as job_submit.lua writes it."""
    return f"{text} held={mark}" if text else f"held={mark}"


def parse_hint(text: str) -> Hint:
    """Parse a hint; raise InputError naming the field on anything malformed."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise _bad("hint", f"longer than {MAX_BYTES} bytes")
    body = text.strip(_WS)
    # a prefix is a token of its own (a red-team: "shockwave:v1bs=32" read as bs=32,
    # "shockwave:v10" as '0')
    for prefix in (PREFIX, "shockwave:"):
        rest = body[len(prefix):]
        if body.startswith(prefix) and (not rest or rest[0] in _WS):
            body = rest
            break
    seen: dict[str, str] = {}
    for token in _SPLIT.split(body):
        if not token:
            continue
        m = _TOKEN.fullmatch(token)
        if m is None:
            raise _bad("hint", f"expected key=value (key a-z or _, value printable ASCII), "
                               f"got {_shown(token)}")
        key, value = m.groups()
        if key not in KEYS:
            raise _bad(key, f"unknown key (known: {', '.join(KEYS)})")
        if key in seen:
            raise _bad(key, "given twice")
        seen[key] = value
    for required in ("bs", "epochs"):
        if required not in seen:
            raise _bad(required, "missing")
    model = seen.get("model", "")
    if model:
        if _LABEL.fullmatch(model) is None:
            raise _bad("model", "expected a letter or digit then up to 63 letters, digits, "
                                f"'.', '_', '+' or '-', got {_shown(model)}")
        model = _ALIASES.get(re.sub(r"[^a-z0-9]", "", model.lower()), model)
    bs = _integer("bs", seen["bs"], 1_000_000)
    epochs = _integer("epochs", seen["epochs"], 100_000)
    mode_text = seen.get("mode", "static")
    if mode_text not in ("static", "accordion", "gns"):
        raise _bad("mode", f"expected static, accordion or gns, got {_shown(mode_text)}")
    gpus_range = _gpu_range(seen["gpus"]) if "gpus" in seen else None
    signal: str | None = None
    if "signal" in seen:
        signal = seen["signal"].upper().removeprefix("SIG")
        if signal not in SIGNALS:
            raise _bad("signal", f"expected one of {', '.join(SIGNALS)}, "
                                 f"got {_shown(seen['signal'])}")
    grace = 60
    if "grace" in seen:
        if signal is None:
            raise _bad("grace", "allowed only with signal= (the time the job gets after "
                                "its checkpoint signal)")
        grace = _integer("grace", seen["grace"], 3600)
    return Hint(bs=bs, epochs=epochs, model=model, mode=AdaptationMode(mode_text),
                signal=signal, grace_s=grace, gpus_range=gpus_range)


def asked_min_nodes(text: str) -> int | None:
    """The fewest nodes an admin comment says the job was submitted with (``-N``), None
    where it says none (a job submitted before the stamp)."""
    m = SUBMITTED.fullmatch(text.rstrip(_WS))
    return int(m.group(4)) if m and m.group(4) else None


def asked_max_nodes(text: str) -> int | None:
    """The most nodes an admin comment says the job was submitted with (``-N 1-2``: 2),
    0 where it set none, None where the stamp does not say (one written before it did)."""
    m = SUBMITTED.fullmatch(text.rstrip(_WS))
    return int(m.group(5)) if m and m.group(5) else None
