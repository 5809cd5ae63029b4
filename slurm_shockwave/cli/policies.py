"""``shockwave policies``: what is registered and what can be configured."""

from __future__ import annotations

import click

from slurm_shockwave.model.typed_config import describe_fields
from slurm_shockwave.policies.registry import POLICIES
from slurm_shockwave.report.tables import console, rows_table


@click.command()
def policies() -> None:
    """List the scheduling policies and their config fields."""
    rows = []
    for name, cls in POLICIES.items():
        fields = ", ".join(f"{n}: {t} = {d}" for n, t, d in describe_fields(cls.Config)) or "-"
        rows.append((name, cls.summary, fields))
    console().print(rows_table("policies", ("name", "what it does", "config fields"), rows))
