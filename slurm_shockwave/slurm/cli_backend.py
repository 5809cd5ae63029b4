"""The Slurm backend over the command-line tools: squeue/sinfo/scontrol --json, scancel, sbatch.

Works with Slurm 22.05 and 24.x (json_shapes reads both). Every failure becomes a
SlurmError carrying Slurm's own one-line message, including a controller that is down.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from slurm_shockwave.slurm.json_shapes import is_held, job_gpus, jobs_from, nodes_from
from slurm_shockwave.slurm.protocol import SlurmError, SlurmJob, SlurmNode

# One line per job for the per-round listing; Comment last, since it may hold anything.
_FIELDS = ("JobID", "State", "Reason", "PriorityLong", "UserName", "NumNodes", "NodeList",
           "SubmitTime", "tres-per-node", "tres-per-job", "RestartCnt", "Name", "Comment")
_FORMAT = ",".join(f"{f}:|" for f in _FIELDS[:-1]) + f",{_FIELDS[-1]}:"
# scontrol -o: Key=value pairs; Slurm's keys are capitalised, the hint's are not
_ADMIN_COMMENT = re.compile(r"(?:^| )AdminComment=(.*?)(?= [A-Z][A-Za-z]*=|$)")
_JOB_ID = re.compile(r"(?:^| )JobId=(\d+)")
_FEW = 20


def _epoch(text: str) -> int:
    try:
        return int(datetime.fromisoformat(text).timestamp())
    except ValueError:
        return 0


class CliBackend:
    def __init__(self, *, slurm_conf: str | None = None, timeout_s: float = 30.0,
                 env: Mapping[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.env = dict(env if env is not None else os.environ)
        if slurm_conf:
            self.env["SLURM_CONF"] = slurm_conf
        self._admin_comments: dict[int, str] = {}

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

    def list_jobs(self, partition: str | None = None) -> list[SlurmJob]:
        if partition is None:
            return jobs_from(self._json(["squeue", "--json"]))
        # 22.05's squeue --json ignores filters and returns every record it still keeps
        # (finished ones included): on a busy cluster that is most of the round. A
        # filtered text listing asks for only what the planner needs.
        try:
            text = self._run(["squeue", "-h", "-p", partition, "-t", "PD,R,CG,S",
                              "-O", _FORMAT])
        except SlurmError:
            return [j for j in jobs_from(self._json(["squeue", "--json"]))
                    if j.partition == partition]
        rows = [line.split("|", len(_FIELDS) - 1) for line in text.splitlines() if line]
        self._load_admin_comments([int(r[0]) for r in rows if r[0].isdigit()])
        return [self._job_from_row(r, partition) for r in rows if len(r) == len(_FIELDS)
                and r[0].isdigit()]

    def _job_from_row(self, r: list[str], partition: str) -> SlurmJob:
        jid, state, reason, prio = int(r[0]), r[1].strip(), r[2].strip(), r[3].strip()
        priority = int(prio) if prio.isdigit() else 0
        nodes = int(r[5]) if r[5].strip().isdigit() else 1
        return SlurmJob(
            job_id=jid, name=r[11].strip(), user=r[4].strip(), partition=partition,
            state=state, reason=reason, priority=priority,
            held=is_held(state, priority, reason),
            comment=r[12].strip(), admin_comment=self._admin_comments.get(jid, ""),
            gpus=job_gpus(r[8], r[9], nodes), node_count=nodes,
            nodes=r[6].strip(), restart_count=int(r[10]) if r[10].strip().isdigit() else 0,
            submit_time=_epoch(r[7].strip()))

    def _load_admin_comments(self, job_ids: list[int]) -> None:
        """Admin comments (the normalised hints) do not change: fetch each once."""
        missing = [j for j in job_ids if j not in self._admin_comments]
        if not missing:
            return
        if len(missing) <= _FEW:
            lines = [self._run(["scontrol", "-o", "show", "job", str(j)]) for j in missing]
        else:
            lines = self._run(["scontrol", "-o", "show", "job"]).splitlines()
        for line in lines:
            jid = _JOB_ID.search(line)
            if jid:
                comment = _ADMIN_COMMENT.search(line)
                self._admin_comments[int(jid.group(1))] = (comment.group(1).strip()
                                                           if comment else "")

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
