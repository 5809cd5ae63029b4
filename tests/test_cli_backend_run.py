"""How the CLI backend runs Slurm's commands: what they print is read whatever its bytes,
and a command that cannot run is a SlurmError (one line), never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.protocol import SlurmError


def test_output_that_is_not_utf8_is_read_and_a_command_that_cannot_run_is_a_slurm_error(
        tmp_path: Path) -> None:
    tool = tmp_path / "scontrol"
    tool.write_bytes(b"#!/bin/sh\nprintf 'NodeName=n\\377x\\n'\n")
    tool.chmod(0o755)
    cli = CliBackend(env={"PATH": str(tmp_path)}, check_conf=False)
    assert cli.scontrol("show", "config") == "NodeName=n\ufffdx\n"
    tool.chmod(0o644)
    with pytest.raises(SlurmError, match=r"^scontrol: Permission denied$"):
        cli.scontrol("show", "config")


def test_slurms_commands_print_their_defaults_whatever_the_sites_environment(
        tmp_path: Path) -> None:
    """Found by a review: a profile's SLURM_TIME_FORMAT=relative (squeue(1)) made every
    time read 0, so a job in its requeue delay looked eligible at once; SQUEUE_USERS,
    SQUEUE_STATES or SLURM_CLUSTERS would list fewer jobs, or another cluster's."""
    tool = tmp_path / "squeue"
    tool.write_text('#!/bin/sh\necho "$SLURM_TIME_FORMAT|$SQUEUE_USERS|$SQUEUE_STATES|'
                    '$SINFO_FORMAT|$SLURM_CLUSTERS"\n')
    tool.chmod(0o755)
    site = {"PATH": str(tmp_path), "SLURM_TIME_FORMAT": "relative", "SQUEUE_USERS": "alice",
            "SQUEUE_STATES": "R", "SINFO_FORMAT": "%N", "SLURM_CLUSTERS": "other"}
    cli = CliBackend(env=site, check_conf=False)
    assert cli._run(["squeue"]).strip() == "standard||||"
