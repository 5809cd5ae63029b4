"""Which Slurm backend the live commands use, and why (config ``slurm.backend``).

``auto`` (the default) takes pyslurm where it imports *and* was built for the Slurm
release the running slurmctld is (pyslurm's X.Y is the Slurm release it wraps; a
libslurm of another release cannot talk to the controller, or mis-reads it), and the CLI
backend otherwise. ``import pyslurm`` ends the whole process when it finds no
slurm.conf and loads a C library that may be missing, so the question is asked in a
child process, after checking that a slurm.conf exists. ``shockwave doctor`` and the
service's first log line print the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from typing import NamedTuple, Protocol

from slurm_shockwave.slurm.cli_backend import CliBackend, slurm_conf_problem
from slurm_shockwave.slurm.protocol import SlurmError

BACKENDS = ("auto", "cli", "pyslurm")

# Run in a child: pyslurm's version and the version the running slurmctld reports
# (its configuration's SLURM_VERSION is the controller's, read over RPC).
_PROBE = """
import json, pyslurm
out = {"pyslurm": pyslurm.__version__}
try:
    out["slurmctld"] = pyslurm.slurmctld.Config.load().version
except Exception as exc:
    out["error"] = (str(exc) or type(exc).__name__).splitlines()[0]
print(json.dumps(out))
"""


class SlurmTarget(Protocol):
    """What resolving needs from the ``slurm:`` config section."""

    @property
    def backend(self) -> str: ...

    @property
    def slurm_conf(self) -> str | None: ...


class BackendChoice(NamedTuple):
    """``backend, reason = resolve_backend(config)``: ``cli`` or ``pyslurm``, and why."""

    backend: str
    reason: str


@dataclass(frozen=True)
class PyslurmProbe:
    """What a child process found: pyslurm's version (None: it does not import), the
    running slurmctld's version (None: it did not answer) and the first error line."""

    pyslurm: str | None
    slurmctld: str | None
    error: str

    def problem(self) -> str | None:
        """Why pyslurm cannot drive this cluster, in one line; None if it can. A
        controller that does not answer is no reason here (the CLI would not reach it
        either); a version mismatch is."""
        if self.pyslurm is None:
            return ("pyslurm does not import (pip install 'slurm-shockwave[pyslurm]'; it "
                    f"needs Slurm 25.11's libslurm): {self.error}")
        if self.slurmctld is not None and release(self.slurmctld) != release(self.pyslurm):
            return (f"pyslurm {self.pyslurm} is for Slurm {release(self.pyslurm)}, the "
                    f"running slurmctld is {self.slurmctld}")
        return None


def release(version: str) -> str:
    """Slurm's release, the X.Y of X.Y.Z (pyslurm's X.Y is the Slurm release it wraps)."""
    return ".".join(version.split(".")[:2])


def probe_pyslurm(slurm_conf: str | None = None, *, timeout_s: float = 60.0) -> PyslurmProbe:
    """Import pyslurm in a child process and ask the controller its version."""
    env = dict(os.environ)
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                              timeout=timeout_s, check=False, env=env)
    except subprocess.TimeoutExpired:
        return PyslurmProbe(None, None, f"importing it took over {timeout_s:g} s")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return PyslurmProbe(None, None, last)
    found = json.loads(lines[-1])
    return PyslurmProbe(str(found["pyslurm"]), found.get("slurmctld"), found.get("error", ""))


def running_version(slurm_conf: str | None = None) -> str | None:
    """The running slurmctld's version as the CLI tools read it (``scontrol show
    config``'s SLURM_VERSION), or None if they cannot."""
    try:
        conf = CliBackend(slurm_conf=slurm_conf).running_config()
    except SlurmError:
        return None
    return conf.values.get("slurm_version") or None


def resolve_backend(config: SlurmTarget) -> BackendChoice:
    """The backend ``config.backend`` means here, and why, in one line. A named backend
    is taken as named (making it reports what is wrong with it); ``auto`` probes."""
    kind = config.backend
    if kind != "auto":
        return BackendChoice(kind, f"slurm.backend is {kind}")
    conf = slurm_conf_problem(config.slurm_conf)
    if conf:
        return BackendChoice("cli", f"auto: {conf}")
    probe = probe_pyslurm(config.slurm_conf)
    if probe.pyslurm is not None and probe.slurmctld is None:
        # a libslurm of another release may not even read the controller's answer
        # ("Zero Bytes were transmitted or received" from 25.11 to 22.05, measured)
        probe = replace(probe, slurmctld=running_version(config.slurm_conf))
    problem = probe.problem()
    if problem:
        return BackendChoice("cli", f"auto: {problem}")
    if probe.slurmctld is None:
        return BackendChoice("cli", f"auto: pyslurm {probe.pyslurm} imports but slurmctld "
                                    f"did not say its version ({probe.error})")
    return BackendChoice("pyslurm", f"auto: pyslurm {probe.pyslurm} imports and matches "
                                    f"the running slurmctld {probe.slurmctld}")
