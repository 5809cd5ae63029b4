"""A training job's environment for the client tests: the service and Slurm variables the
reporter reads, cleared or set, and nothing else of the test run's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV_KEYS = ("SHOCKWAVE_URL", "SHOCKWAVE_ENDPOINT_FILE", "SHOCKWAVE_SPOOL", "SHOCKWAVE_SIGNAL",
            "SHOCKWAVE_SERVICE_UID", "SLURM_JOB_ID", "SLURM_JOB_UID", "SLURM_RESTART_COUNT")


def job_env(**extra: str) -> dict[str, str]:
    """A subprocess's environment: this one without the reporter's variables, plus
    ``extra``."""
    return {**{k: v for k, v in os.environ.items() if k not in ENV_KEYS}, **extra}


def in_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, job_id: str,
           **extra: str) -> Path:
    """This process as job ``job_id`` with a spool folder (returned) and ``extra``."""
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    spool = tmp_path / "spool"
    for key, value in {"SLURM_JOB_ID": job_id, "SHOCKWAVE_SPOOL": str(spool), **extra}.items():
        monkeypatch.setenv(key, value)
    return spool
