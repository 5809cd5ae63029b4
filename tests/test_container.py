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

import pytest

from tests.containers import REPO, ca_secret, need_podman, podman

IMAGE = os.environ.get("SHOCKWAVE_TEST_IMAGE", "localhost/slurm-shockwave:test")

pytestmark = pytest.mark.container


@pytest.fixture(scope="module")
def image() -> str:
    need_podman()
    built = podman("build", "--network=host", *ca_secret(), "-t", IMAGE, "-f",
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
    run = podman("run", "--rm", "--cap-add=MKNOD", image, "sh", "-c",
                  f"printf '%s\\n' '{trace}' > /tmp/trace.jsonl && shockwave demo "
                  "--trace /tmp/trace.jsonl --gpus 8 --time-scale 120 --no-slurm-alone "
                  "--json --work-dir /tmp/demo", timeout_s=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # with --json the live view goes to stderr: stdout is the JSON object alone
    result = json.loads(run.stdout)["results"][0]
    assert result["completed"] == result["jobs"] == 8, result
    assert "Traceback" not in run.stderr
