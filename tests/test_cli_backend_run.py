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
