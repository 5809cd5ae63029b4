"""Options shared by the commands that talk to a live cluster, and the world they build."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from slurm_shockwave.clock import WallClock
from slurm_shockwave.slurm.pyslurm_backend import make_backend
from slurm_shockwave.slurm.world import SlurmCluster


def live_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed((
        click.option("--partition", default="shockwave", show_default=True,
                     help="The managed partition."),
        click.option("--slurm-conf", default=None, help="slurm.conf (default: $SLURM_CONF)."),
        click.option("--backend", "kind", type=click.Choice(["cli", "pyslurm"]), default="cli",
                     show_default=True),
    )):
        fn = opt(fn)
    return fn


def live_world(partition: str, slurm_conf: str | None, kind: str,
               round_s: float = 120.0) -> SlurmCluster:
    return SlurmCluster(make_backend(kind, slurm_conf=slurm_conf), WallClock(),
                        partition=partition, round_s=round_s)
