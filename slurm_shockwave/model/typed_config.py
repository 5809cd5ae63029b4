"""Build frozen config dataclasses from plain mappings, naming the field path on error."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from slurm_shockwave.model.bounds import bounded, key_name, numeric_text, shown, text_field
from slurm_shockwave.model.errors import InputError

MAX_CONFIG_NUMBER = 1e15
"""Any number in a config file is finite and at most this large in magnitude."""
MAX_CONFIG_ITEMS = 1_000

T = TypeVar("T")


def _coerce(value: Any, hint: Any, path: str, source: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is float and isinstance(value, str) and numeric_text(value):
        value = float(value)  # YAML 1.1 reads 1e3 (no dot) as a string
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return bounded(value, field=path, source=source, lo=-MAX_CONFIG_NUMBER,
                       hi=MAX_CONFIG_NUMBER)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return bounded(value, field=path, source=source, integer=True, lo=-MAX_CONFIG_NUMBER,
                       hi=MAX_CONFIG_NUMBER)
    if hint is bool and isinstance(value, bool):
        return value
    if hint is str and isinstance(value, str):
        return text_field(value, field=path, source=source, limit=4096)
    if origin is tuple and isinstance(value, (list, tuple)):
        (inner, *rest) = typing.get_args(hint)
        if len(value) > MAX_CONFIG_ITEMS or (rest and rest != [...] and
                                             len(value) != len(rest) + 1):
            want = f"at most {MAX_CONFIG_ITEMS}" if not rest or rest == [...] else \
                str(len(rest) + 1)
            raise InputError(f"expected {want} items, got {len(value)}", source=source,
                             field=path)
        return tuple(_coerce(v, inner, f"{path}[{i}]", source) for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(hint)
        if value is None and type(None) in arms:
            return None
        real = [arm for arm in arms if arm is not type(None)]
        if len(real) == 1:  # Optional[X]: X's own message
            return _coerce(value, real[0], path, source)
        refusals: list[tuple[Any, InputError]] = []
        for arm in real:
            try:
                return _coerce(value, arm, path, source)
            except InputError as exc:
                refusals.append((arm, exc))
        for arm, refusal in refusals:  # the arm of the value's own kind says what is wrong
            if isinstance(value, arm) and not isinstance(value, bool):
                raise refusal
    raise InputError(f"expected {_kind(hint)}, got {shown(value)}", source=source, field=path)


_KINDS = {float: "a number", int: "an integer", bool: "true or false", str: "a string",
          type(None): "null"}


def _kind(hint: Any) -> str:
    """A type as the YAML's author knows it (a red-team: ``expected float | str``)."""
    if typing.get_origin(hint) is tuple:
        return "a list"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_kind(arm) for arm in typing.get_args(hint))
    return _KINDS.get(hint, getattr(hint, "__name__", str(hint)))


def build_config(cls: type[T], data: Mapping[str, Any] | None, *, path: str = "",
                 source: str = "") -> T:
    """Validate ``data`` against the dataclass ``cls``; unknown keys are errors."""
    if data is not None and not isinstance(data, Mapping):
        raise InputError(f"expected a mapping of settings, got {shown(data)}", source=source,
                         field=path or "config")
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted((str(k) for k in set(data) - set(fields)), key=str)
    if unknown:
        name = key_name(unknown[0])
        where = f"{path}.{name}" if path else name
        raise InputError(f"unknown setting (known: {', '.join(sorted(fields)) or 'none'})",
                         source=source, field=where)
    kwargs = {name: _coerce(value, hints[name], f"{path}.{name}" if path else name, source)
              for name, value in data.items()}
    config = cls(**kwargs)
    check = getattr(config, "validate", None)
    if callable(check):
        problem = check()
        if problem:
            field_name, message = problem
            raise InputError(message, source=source,
                             field=f"{path}.{field_name}" if path else field_name)
    return config


def describe_fields(cls: type) -> list[tuple[str, str, Any]]:
    """(name, type, default) of every config field, for ``shockwave policies``."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        out.append((f.name, getattr(hints[f.name], "__name__", str(hints[f.name])), default))
    return out
