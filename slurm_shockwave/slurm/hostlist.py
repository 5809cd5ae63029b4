"""Slurm's compressed host lists and GRES index lists, expanded (pure functions).

``expand_hostlist("sw-node[1-3,5],gpu[01-02]")`` gives the six names in order, zero
padding kept; several bracket groups in one name expand as their product, like Slurm.
``expand_indices("0-2,5")`` gives ``(0, 1, 2, 5)``. Bad input raises ValueError.
"""

from __future__ import annotations

import itertools
import math
import re

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_MAX_EXPAND = 1_000_000


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested brackets in host list {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    parts.append(text[start:])
    return parts


def _ranges(body: str, *, keep_width: bool, most: int = _MAX_EXPAND) -> list[str]:
    """Every name or index the ranges give, at most ``most`` in all: each range was capped,
    not their sum, and ten of a million each in 163 bytes of Slurm's output took 1.3 GB
    (found by a review)."""
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.fullmatch(item.strip())
        if not m:
            raise ValueError(f"bad range {item!r}")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise ValueError(f"bad range {item!r}: {hi} < {lo}")
        if hi - lo >= _MAX_EXPAND:
            raise ValueError(f"range {item!r} too large")
        if len(out) + hi - lo >= most:
            raise ValueError(f"more than {most} in {body[:40]!r}")
        width = len(lo_s) if keep_width else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_one(name: str, most: int) -> list[str]:
    pieces = re.split(r"(\[[^\]]*\])", name)
    choices: list[list[str]] = []
    for piece in pieces:
        if piece.startswith("[") and piece.endswith("]"):
            choices.append(_ranges(piece[1:-1], keep_width=True, most=most))
        elif "[" in piece or "]" in piece:
            raise ValueError(f"bad host name {name!r}")
        else:
            choices.append([piece])
    if math.prod(len(c) for c in choices) > most:  # n[0-999][0-999][0-999]: 10^9 names
        raise ValueError(f"more than {most} names in {name[:40]!r}")
    return ["".join(p) for p in itertools.product(*choices)]


def expand_hostlist(text: str) -> list[str]:
    """``"n[1-3,5],gpu[01-02]"`` -> ``["n1", "n2", "n3", "n5", "gpu01", "gpu02"]``."""
    text = (text or "").strip()
    if not text or text in ("(null)", "None"):
        return []
    out: list[str] = []
    for part in _split_top(text):  # one budget for the whole list (found by a review)
        part = part.strip()
        if not part:
            raise ValueError(f"empty name in host list {text!r}")
        out.extend(_expand_one(part, _MAX_EXPAND - len(out)))
    return out


def expand_indices(text: str, *, most: int = _MAX_EXPAND) -> tuple[int, ...]:
    """``"0-2,5"`` -> ``(0, 1, 2, 5)``, sorted and unique; ``""`` and ``"N/A"`` -> ();
    more than ``most`` indices: ValueError."""
    text = (text or "").strip()
    if not text or text.upper() == "N/A":
        return ()
    return tuple(sorted({int(i) for i in _ranges(text, keep_width=False, most=most)}))
