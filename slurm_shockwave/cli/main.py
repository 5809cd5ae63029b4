"""Entry point of the ``shockwave`` command."""

from __future__ import annotations

import click

from slurm_shockwave import __version__
from slurm_shockwave.cli.demo import demo
from slurm_shockwave.cli.doctor import doctor
from slurm_shockwave.cli.errors import OneLineGroup, debug_option
from slurm_shockwave.cli.install_scripts import install_scripts
from slurm_shockwave.cli.plan import plan
from slurm_shockwave.cli.policies import policies
from slurm_shockwave.cli.queue import explain, queue
from slurm_shockwave.cli.report import report
from slurm_shockwave.cli.serve import handback, serve
from slurm_shockwave.cli.simulate import compare, simulate
from slurm_shockwave.cli.trace import trace


@click.group(cls=OneLineGroup)
@click.version_option(__version__, prog_name="shockwave")
@debug_option
def cli() -> None:
    """slurm-shockwave: fair, efficient GPU scheduling for adaptive ML jobs on Slurm."""


cli.add_command(simulate)
cli.add_command(compare)
cli.add_command(trace)
cli.add_command(policies)
cli.add_command(queue)
cli.add_command(plan)
cli.add_command(explain)
cli.add_command(serve)
cli.add_command(handback)
cli.add_command(install_scripts)
cli.add_command(doctor)
cli.add_command(demo)
cli.add_command(report)
