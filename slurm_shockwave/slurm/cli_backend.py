"""The Slurm backend over the command-line tools: squeue/sinfo/scontrol --json, scancel, sbatch.

Works with Slurm 22.05 and 24.x (json_shapes reads both). Every failure becomes a
SlurmError carrying Slurm's own one-line message, including a controller that is down.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_shockwave.slurm.json_shapes import jobs_from, nodes_from
from slurm_shockwave.slurm.protocol import SlurmError, SlurmJob, SlurmNode


class CliBackend:
    def __init__(self, *, slurm_conf: str | None = None, timeout_s: float = 30.0,
                 env: Mapping[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.env = dict(env if env is not None else os.environ)
        if slurm_conf:
            self.env["SLURM_CONF"] = slurm_conf

    def _run(self, args: Sequence[str]) -> str:
        try:
            proc = subprocess.run(list(args), capture_output=True, text=True, env=self.env,
                                  timeout=self.timeout_s, check=False)
        except FileNotFoundError:
            raise SlurmError(f"{args[0]}: not found (install slurm-client)") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{args[0]}: no answer within {self.timeout_s:g} s") from None
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            message = lines[0] if lines else f"exit code {proc.returncode}"
            raise SlurmError(f"{' '.join(args[:2])}: {message}")
        return proc.stdout

    def _json(self, args: Sequence[str]) -> Any:
        out = self._run(args)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmError(f"{args[0]}: output is not JSON ({exc.msg})") from None
        # 22.05 exits 0 when the controller is down and reports it here instead
        errors = doc.get("errors") if isinstance(doc, dict) else None
        if errors:
            first = errors[0] if isinstance(errors[0], dict) else {"description": errors[0]}
            text = first.get("description") or first.get("error") or str(first)
            if first.get("source"):
                text += f" ({first['source']}: {first.get('error', '')}; is slurmctld running?)"
            raise SlurmError(f"{' '.join(args[:2])}: {text}".replace("\n", " "))
        return doc

    def list_jobs(self) -> list[SlurmJob]:
        return jobs_from(self._json(["squeue", "--json"]))

    def list_nodes(self) -> list[SlurmNode]:
        nodes = nodes_from(self._json(["sinfo", "--json"]))
        if nodes is None:  # 24.x groups sinfo rows; scontrol has one object per node
            nodes = nodes_from(self._json(["scontrol", "show", "nodes", "--json"])) or []
        return nodes

    def set_priority(self, job_id: int, priority: int) -> None:
        self._run(["scontrol", "update", f"jobid={job_id}", f"priority={priority}"])

    # hold, release and requeue take many jobs in one call: one scontrol per round, not
    # one per job (2,000 jobs would otherwise cost seconds)
    def hold(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            self._run(["scontrol", "hold", ",".join(map(str, job_ids))])

    def release(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            self._run(["scontrol", "release", ",".join(map(str, job_ids))])

    def signal(self, job_id: int, signal: str) -> None:
        # --full: the batch shell and every step, so a training script that runs
        # without srun gets the checkpoint signal too
        self._run(["scancel", f"--signal={signal}", "--full", str(job_id)])

    def requeue(self, job_ids: Sequence[int], *, hold: bool = False) -> None:
        if job_ids:
            self._run(["scontrol", "requeuehold" if hold else "requeue",
                       ",".join(map(str, job_ids))])

    def update_gpus(self, job_id: int, gpus: int) -> None:
        self._run(["scontrol", "update", f"jobid={job_id}", f"gres=gpu:{gpus}"])

    def cancel(self, job_id: int) -> None:
        self._run(["scancel", str(job_id)])

    def submit(self, script: str, args: Sequence[str] = ()) -> int:
        out = self._run(["sbatch", "--parsable", *args, script]).strip()
        try:
            return int(out.split(";")[0])
        except ValueError:
            raise SlurmError(f"sbatch: unexpected answer {out!r}") from None
