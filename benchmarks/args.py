"""Command-line parsing shared by the benchmarks: bad arguments are one line and exit 2,
as for the ``shockwave`` command (argparse's own error prints the usage first), and
are read by the same rules (``model/bounds.py``)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NoReturn

from slurm_shockwave.live.run import TIME_SCALES
from slurm_shockwave.model.bounds import name_list, number_list
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.sim.run import RoundLimit
from slurm_shockwave.workloads.input_files import strict_json


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {' '.join(message.split())}\n")
        raise SystemExit(2)


def names(ap: argparse.ArgumentParser, option: str, text: str,
          known: Iterable[str]) -> list[str]:
    """A comma-separated list of names, each one of ``known``, none twice."""
    try:
        return name_list(text, known, field=option)
    except InputError as exc:
        ap.error(str(exc))


def floats(ap: argparse.ArgumentParser, option: str, text: str, count: int | None = None,
           lo: float = -math.inf, hi: float = math.inf, integer: bool = False) -> list[float]:
    """Comma-separated finite numbers in [lo, hi] (``count`` of them if given; whole
    numbers, as ints, with ``integer``)."""
    try:
        return number_list(text, field=option, count=count, lo=lo, hi=hi, integer=integer)
    except InputError as exc:
        ap.error(str(exc))


def policy_config(ap: argparse.ArgumentParser, option: str, text: str, policy: str | None,
                  base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A JSON object of settings for ``policy`` (None: no policy to check them against),
    checked now on top of ``base``, not after minutes of simulation."""
    try:  # strict: a key given twice, deep nesting and huge numbers are refused
        value = strict_json(text, source="", field=option)
    except InputError as exc:
        ap.error(f"{option}: {exc.problem}")
    if not isinstance(value, dict):
        ap.error(f"{option}: expected a JSON object")
    if policy is not None:
        try:
            make_policy(policy, {**(base or {}), **value}, source=option)
        except InputError as exc:
            ap.error(str(exc))
    return value


def time_scale_arg(ap: argparse.ArgumentParser, time_scale: str) -> float:
    """``--time-scale`` of a live run, or of a model of one: 1 to 1000."""
    low, high = TIME_SCALES
    return floats(ap, "--time-scale", time_scale, count=1, lo=low, hi=high)[0]


def live_costs_args(ap: argparse.ArgumentParser, time_scale: str, cred_expire_s: int
                    ) -> float:
    """``--time-scale`` (1 to 1000) read, and ``--cred-expire-s`` (0 to 3600) checked: the
    settings the benchmarks that model live runs' costs share (jitter, live_screen)."""
    if not 0 <= cred_expire_s <= 3600:
        ap.error("--cred-expire-s: must be from 0 to 3600")
    return time_scale_arg(ap, time_scale)


@contextmanager
def round_limit(ap: argparse.ArgumentParser, option: str, why: str) -> Iterator[None]:
    """Simulations whose stop at the simulator's round limit the input explains
    (``RoundLimit.from_input``: restores and requeue delays that eat the rounds) are bad
    input: one line naming ``option``, then ``why`` (what made them that long: "on trace
    T: ..."), exit 2, as the ``shockwave`` command says it. A stop the input cannot
    explain is a bug: its traceback stands."""
    try:
        yield
    except RoundLimit as exc:
        if not exc.from_input:
            raise
        ap.error(f"{option}: {exc.said} {why}")
