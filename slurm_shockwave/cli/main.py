"""Entry point of the ``shockwave`` command.

Subcommands are imported when they are called, not all at start: the Epilog runs
``shockwave report --end`` after every job, requeues included, and the node's GPUs stay
with the finished job until it returns; importing every command (the simulator, the
solver, numpy) takes 0.75-0.84 s on the 2 idle cores here, ``report`` alone 0.19-0.23 s
(docs/admin.md).
"""

from __future__ import annotations

import importlib

import click

from slurm_shockwave import __version__
from slurm_shockwave.cli.errors import OneLineGroup, debug_option

COMMANDS = {  # name: (module, attribute), in the order --help lists them
    "simulate": ("simulate", "simulate"), "compare": ("simulate", "compare"),
    "trace": ("trace", "trace"), "policies": ("policies", "policies"),
    "queue": ("queue", "queue"), "plan": ("plan", "plan"), "explain": ("queue", "explain"),
    "serve": ("serve", "serve"), "handback": ("serve", "handback"),
    "install-scripts": ("install_scripts", "install_scripts"),
    "doctor": ("doctor", "doctor"), "demo": ("demo", "demo"), "report": ("report", "report"),
}


class LazyGroup(OneLineGroup):
    """OneLineGroup whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        command = getattr(importlib.import_module(f"slurm_shockwave.cli.{where[0]}"), where[1])
        assert isinstance(command, click.Command) and command.name == cmd_name, cmd_name
        return command


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="shockwave")
@debug_option
def cli() -> None:
    """slurm-shockwave: fair, efficient GPU scheduling for adaptive ML jobs on Slurm."""
