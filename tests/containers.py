"""Helpers for the tests marked ``container``: whether podman can build and run images
here (else a one-line skip, or a failure under SHOCKWAVE_REQUIRE_CONTAINER), and podman
itself with the runtime that works on these machines."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BASE = "docker.io/library/debian:12"
CA = "/etc/ssl/certs/ca-certificates.crt"
"""The machine's CA bundle: pip in a container behind a TLS-intercepting proxy needs it."""


def podman_problem() -> str | None:
    """Why images cannot be built and run here, in one line; None if they can."""
    if not os.environ.get("SHOCKWAVE_CONTAINER_TESTS"):
        return "container tests run with SHOCKWAVE_CONTAINER_TESTS=1 (they build images)"
    if shutil.which("podman") is None:
        return "podman not installed (bash ../shared/tools/podman-setup.sh)"
    if subprocess.run(["podman", "image", "exists", BASE], check=False).returncode != 0:
        return f"no {BASE} base image (bash ../shared/tools/podman-setup.sh builds one)"
    return None


def need_podman() -> None:
    problem = podman_problem()
    if problem and os.environ.get("SHOCKWAVE_REQUIRE_CONTAINER"):
        pytest.fail(problem)
    if problem:
        pytest.skip(problem)


def podman(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "--runtime", "runc", *args], capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def ca_secret() -> list[str]:
    """The build option that hands the CA bundle to the Dockerfile's pip (if there is one)."""
    return [f"--secret=id=ca,src={CA}"] if Path(CA).is_file() else []
