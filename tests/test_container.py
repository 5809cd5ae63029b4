"""The container image (docker-slurm/Dockerfile) builds, and `shockwave demo` runs inside
it: a local Slurm cluster started as root in the container, the service, emulated jobs.

Marker ``container``; runs only with SHOCKWAVE_CONTAINER_TESTS=1 (it builds an image:
minutes of CPU on a shared machine) and where podman works (../shared/tools/
podman-setup.sh makes it work on Debian 12 without an image registry); skipped with one
line otherwise, failed instead under SHOCKWAVE_REQUIRE_CONTAINER.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IMAGE = os.environ.get("SHOCKWAVE_TEST_IMAGE", "localhost/slurm-shockwave:test")
BASE = "docker.io/library/debian:12"
CA = "/etc/ssl/certs/ca-certificates.crt"

pytestmark = pytest.mark.container


def _podman_problem() -> str | None:
    """Why the image cannot be built and run here, in one line; None if it can."""
    if not os.environ.get("SHOCKWAVE_CONTAINER_TESTS"):
        return "container tests run with SHOCKWAVE_CONTAINER_TESTS=1 (they build an image)"
    if shutil.which("podman") is None:
        return "podman not installed (bash ../shared/tools/podman-setup.sh)"
    if subprocess.run(["podman", "image", "exists", BASE], check=False).returncode != 0:
        return f"no {BASE} base image (bash ../shared/tools/podman-setup.sh builds one)"
    return None


def _podman(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "--runtime", "runc", *args], capture_output=True,
                          text=True, timeout=timeout_s, check=False)


@pytest.fixture(scope="module")
def image() -> str:
    problem = _podman_problem()
    if problem and os.environ.get("SHOCKWAVE_REQUIRE_CONTAINER"):
        pytest.fail(problem)
    if problem:
        pytest.skip(problem)
    # the machine's CA bundle, for pip behind a TLS-intercepting proxy (see the Dockerfile)
    ca = [f"--secret=id=ca,src={CA}"] if Path(CA).is_file() else []
    built = _podman("build", "--network=host", *ca, "-t", IMAGE, "-f",
                    str(REPO / "docker-slurm" / "Dockerfile"), str(REPO), timeout_s=1800)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return IMAGE


def test_the_demo_runs_inside_the_image(image: str) -> None:
    """The whole system in a container on its own network namespace (podman's default
    bridge: Slurm's daemons cannot bind with loopback alone), with CAP_MKNOD for the fake
    GPU devices: eight jobs of the demo's trace through the service on 8 GPUs, all
    completed, no traceback."""
    trace = "\n".join(REPO.joinpath("slurm_shockwave/data/demo_live.jsonl")
                      .read_text().splitlines()[:8])
    run = _podman("run", "--rm", "--cap-add=MKNOD", image, "sh", "-c",
                  f"printf '%s\\n' '{trace}' > /tmp/trace.jsonl && shockwave demo "
                  "--trace /tmp/trace.jsonl --gpus 8 --time-scale 120 --no-slurm-alone "
                  "--json --work-dir /tmp/demo", timeout_s=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])["results"][0]
    assert result["completed"] == result["jobs"] == 8, result
    assert "Traceback" not in run.stderr
