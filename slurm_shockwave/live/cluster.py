"""A local Slurm cluster of our own for one run: docker-slurm/start.sh with its own state
directory and ports, stopped (jobs, daemons, step daemons) whatever happens."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import TracebackType

from slurm_shockwave.model.errors import InputError

SCRIPTS = Path(__file__).resolve().parents[2] / "docker-slurm"
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "lua5.1", "procps")
ALREADY_RUNNING = 3
"""start.sh's exit code when a cluster from the state directory runs: not ours to stop."""


def missing_for_cluster() -> str | None:
    """One line saying what a local cluster needs and is not here, or None."""
    if not (SCRIPTS / "start.sh").exists():
        return f"{SCRIPTS}/start.sh not found (run from a checkout of slurm-shockwave)"
    if os.geteuid() != 0:
        return "starting the local Slurm cluster needs root (it runs slurmd, makes devices)"
    lacking = [b for b in ("slurmctld", "slurmd", "sinfo", "munged", "lua5.1", "pgrep")
               if shutil.which(b) is None]
    if lacking:
        return (f"not installed: {', '.join(lacking)} "
                f"(apt-get install {' '.join(PACKAGES)})")
    return None


def can_install_packages() -> bool:
    """Root on Debian: ``install_slurm_packages`` can apt-get what is missing."""
    return os.geteuid() == 0 and Path("/etc/debian_version").exists()


def install_slurm_packages() -> str | None:
    """apt-get install Debian's Slurm packages when root on Debian; None when done."""
    if not can_install_packages():
        return missing_for_cluster()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["failed"])[-1]
            return f"{' '.join(cmd[:2])}: {last}"
    return missing_for_cluster()


class LocalCluster:
    """``with LocalCluster(state, nodes=2) as env:`` env holds SLURM_CONF and
    SHOCKWAVE_HEARTBEAT for the commands that talk to it."""

    def __init__(self, state_dir: Path, *, nodes: int, gpus_per_node: int = 8,
                 ctld_port: int = 21817, node_port_base: int = 21900,
                 cred_expire_s: int = 5, gpu_types: tuple[str, ...] = ()) -> None:
        self.state_dir = state_dir
        self.args = ["--state-dir", str(state_dir), "--nodes", str(nodes),
                     "--gpus-per-node", str(gpus_per_node), "--ctld-port", str(ctld_port),
                     "--node-port-base", str(node_port_base),
                     "--cred-expire", str(cred_expire_s)]
        if gpu_types:  # one a node (Gres=gpu:TYPE:N)
            self.args += ["--gpu-types", ",".join(gpu_types)]
        self.env: dict[str, str] = {}

    def __enter__(self) -> dict[str, str]:
        problem = missing_for_cluster()
        if problem:
            raise InputError(problem, field="cluster")
        try:
            done = subprocess.run(["bash", str(SCRIPTS / "start.sh"), *self.args],
                                  capture_output=True, text=True, check=False)
        except BaseException:  # SIGTERM or ^C while it starts: the daemons it started
            self.stop()
            raise
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["failed"])[-1]
            if done.returncode != ALREADY_RUNNING:  # another run's cluster: left alone
                self.stop()
            raise InputError(last, field="cluster")
        for line in done.stdout.splitlines():
            if line.startswith("export ") and "=" in line:
                name, value = line[len("export "):].split("=", 1)
                self.env[name] = value
        return {**os.environ, **self.env}

    def stop(self) -> None:
        """stop.sh to its end, in a session of its own: a second ^C while it ran (it
        takes seconds, and said nothing) killed it with the terminal's SIGINT and left
        the daemons on their ports (a red-team). An interrupt meanwhile is raised once
        the cluster is down (a review: swallowed, the demo went on to its next run)."""
        proc = subprocess.Popen(["bash", str(SCRIPTS / "stop.sh"), "--state-dir",
                                 str(self.state_dir)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        interrupted: KeyboardInterrupt | None = None
        while True:
            try:
                proc.wait()
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
                print(f"stopping the local cluster in {self.state_dir} first (its daemons "
                      "may take up to a minute to exit)", file=sys.stderr)
        if interrupted is not None:
            raise interrupted

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
