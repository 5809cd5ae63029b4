"""The TaskProlog as a plain script (no cluster): how a job finds the service."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_task_prolog_falls_back_to_the_installed_url(tmp_path: Path) -> None:
    """A compute node that cannot read the service's endpoint file (another host, no
    shared file system) still finds the service from the URL installed in the script;
    the endpoint file wins where it can be read."""
    script = (ROOT / "plugin_scripts" / "task_prolog.sh").read_text()
    endpoint = tmp_path / "endpoint"
    script = script.replace('ENDPOINT_FILE="/var/lib/slurm-shockwave/endpoint"',
                            f'ENDPOINT_FILE="{endpoint}"')
    script = script.replace('SERVICE_URL=""', 'SERVICE_URL="http://ctl.example:7817"')
    path = tmp_path / "task_prolog.sh"
    path.write_text(script)
    env = {"PATH": os.environ["PATH"]}

    def run() -> str:
        return subprocess.run(["sh", str(path)], capture_output=True, text=True, env=env,
                              timeout=30, check=True).stdout

    assert "export SHOCKWAVE_URL=http://ctl.example:7817" in run()
    endpoint.write_text("http://127.0.0.1:7999\n")
    assert "export SHOCKWAVE_URL=http://127.0.0.1:7999" in run()


def test_a_checkpoint_signal_as_the_job_exits_is_ignored(tmp_path: Path) -> None:
    """At exit Python gives a handled signal its default action back (SIGUSR1's kills)
    before the process is gone; a checkpoint signal sent just as a job finished turned it
    into a failed job (seen live). The client ignores the signal from the end on."""
    program = (
        "import atexit, signal, sys\n"
        "atexit.register(lambda: print('at exit:', signal.getsignal(signal.SIGUSR1)"
        " == signal.SIG_IGN, flush=True))\n"
        "from slurm_shockwave.client import reporter\n"
        "assert reporter.install()\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "SHOCKWAVE_SIGNAL": "USR1"}
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "at exit: True" in out.stdout
