"""Adaptation hints that researchers give at submission: ``sbatch --comment``.

Grammar (docs/hints.md), one line of space-separated ``key=value`` pairs, optionally
prefixed by ``shockwave:`` (``shockwave:v1`` in the normalised form):

    model=<name> bs=<int> epochs=<int> [mode=static|accordion|gns]
    [signal=USR1|USR2|TERM|INT|HUP] [grace=<seconds 1..3600>]

``model`` takes the catalogue names, case-insensitively, with or without the dash
(``resnet18`` = ``ResNet-18``, ``lm`` = ``LM``). Each key at most once; unknown keys are
errors. ``plugin_scripts/job_submit.lua`` implements the same language; both run the
cases in ``tests/data/hints.json``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.workloads.catalog import MODELS

PREFIX = "shockwave:v1"
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP")
KEYS = ("model", "bs", "epochs", "mode", "signal", "grace")
_ALIASES = {re.sub(r"[^a-z0-9]", "", name.lower()): name for name in MODELS}
_TOKEN = re.compile(r"^([a-z_]+)=(\S+)$")
_INT = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class Hint:
    model: str
    bs: int
    epochs: int
    mode: AdaptationMode = AdaptationMode.STATIC
    signal: str = "USR1"
    grace_s: int = 60

    def normalised(self) -> str:
        return (f"{PREFIX} model={self.model} bs={self.bs} epochs={self.epochs} "
                f"mode={self.mode.value} signal={self.signal} grace={self.grace_s}")


def _bad(field: str, problem: str) -> InputError:
    return InputError(problem, source="hint", field=field)


def _positive(field: str, value: str, upper: int | None = None) -> int:
    if not _INT.match(value) or int(value) < 1 or (upper is not None and int(value) > upper):
        limit = f" from 1 to {upper}" if upper else ""
        raise _bad(field, f"expected a positive integer{limit}, got {value!r}")
    return int(value)


def parse_hint(text: str) -> Hint:
    """Parse a hint; raise InputError naming the field on anything malformed."""
    body = text.strip()
    for prefix in (PREFIX, "shockwave:"):
        if body.startswith(prefix):
            body = body[len(prefix):].strip()
            break
    seen: dict[str, str] = {}
    for token in body.split():
        m = _TOKEN.match(token)
        if m is None:
            raise _bad("hint", f"expected key=value, got {token!r}")
        key, value = m.groups()
        if key not in KEYS:
            raise _bad(key, f"unknown key (known: {', '.join(KEYS)})")
        if key in seen:
            raise _bad(key, "given twice")
        seen[key] = value
    for required in ("model", "bs", "epochs"):
        if required not in seen:
            raise _bad(required, "missing")
    model = _ALIASES.get(re.sub(r"[^a-z0-9]", "", seen["model"].lower()))
    if model is None:
        raise _bad("model", f"unknown model {seen['model']!r} (known: {', '.join(MODELS)})")
    mode_text = seen.get("mode", "static")
    if mode_text not in ("static", "accordion", "gns"):
        raise _bad("mode", f"expected static, accordion or gns, got {mode_text!r}")
    signal = seen.get("signal", "USR1").upper().removeprefix("SIG")
    if signal not in SIGNALS:
        raise _bad("signal", f"expected one of {', '.join(SIGNALS)}, got {seen['signal']!r}")
    return Hint(model=model, bs=_positive("bs", seen["bs"]),
                epochs=_positive("epochs", seen["epochs"]),
                mode=AdaptationMode(mode_text), signal=signal,
                grace_s=_positive("grace", seen.get("grace", "60"), upper=3600))
