"""The registry of policies by command-line name. A duplicate name fails at import."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.allox import Allox
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.policies.elastic_greedy import ElasticGreedy
from slurm_shockwave.policies.fifo import Fifo
from slurm_shockwave.policies.gandiva_fair import GandivaFair
from slurm_shockwave.policies.gavel import Gavel
from slurm_shockwave.policies.las import Las
from slurm_shockwave.policies.mst import Mst
from slurm_shockwave.policies.ossp import Ossp
from slurm_shockwave.policies.shockwave.policy import Shockwave
from slurm_shockwave.policies.srtf import Srtf
from slurm_shockwave.policies.stretch_edf import StretchEdf
from slurm_shockwave.policies.themis import Themis

_CLASSES: tuple[type[Policy[Any]], ...] = (
    Fifo, Srtf, Las, Gavel, Themis, Allox, Ossp, Mst, GandivaFair, Shockwave, ElasticGreedy,
    StretchEdf,
)


def _build() -> dict[str, type[Policy[Any]]]:
    out: dict[str, type[Policy[Any]]] = {}
    for cls in _CLASSES:
        if cls.name in out:
            raise RuntimeError(f"policy name {cls.name!r} registered twice")
        out[cls.name] = cls
    return out


POLICIES: Mapping[str, type[Policy[Any]]] = _build()

BASELINES: tuple[str, ...] = tuple(cls.name for cls in (
    Fifo, Srtf, Las, Gavel, Themis, Allox, Ossp, Mst, GandivaFair))
"""The nine published baselines every comparison includes. Not ours (``OURS``) and not
elastic_greedy, the elastic comparison, which on fixed-count jobs runs exactly as FIFO."""
OURS: tuple[str, ...] = (Shockwave.name, StretchEdf.name)
"""Ours: the market, and the max-stretch rule the targets were also measured with."""


def make_policy(name: str, config: Mapping[str, Any] | None = None, *,
                source: str = "", path: str | None = None) -> Policy[Any]:
    cls = POLICIES.get(name)
    if cls is None:
        raise InputError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})",
                         source=source, field="policy")
    return cls.from_mapping(config, source=source, path=path)
