"""The Slurm backend over the command-line tools: squeue/sinfo/scontrol --json, scancel, sbatch.

Works with Slurm 22.05 and 24.x (json_shapes reads both). Every failure becomes a
SlurmError carrying Slurm's own one-line message, including a controller that is down.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from slurm_shockwave.slurm.hostlist import expand_hostlist
from slurm_shockwave.slurm.json_shapes import (
    asked_per_job,
    gpu_gres,
    gpu_type_in,
    gres_gpu_indices,
    holds_alloc,
    is_count,
    is_held,
    job_gpus,
    job_state,
    jobs_from,
    nodes_from,
)
from slurm_shockwave.slurm.protocol import (
    LISTED_STATES,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnanswered,
    slurm_failure,
)
from slurm_shockwave.slurm.slurm_conf import (
    SlurmSettings,
    parse_show_config,
    parse_show_partitions,
)

# One line per job for the per-round listing; Comment last, since it may hold anything.
_FIELDS = ("JobID", "State", "Reason", "PriorityLong", "UserName", "NumNodes", "NodeList",
           "SubmitTime", "tres-per-node", "tres-per-job", "RestartCnt", "StartTime",
           "EligibleTime", "TimeLimit", "tres-per-task", "NumTasks", "Requeue", "Dependency",
           "Name", "Comment")
_FORMAT = ",".join(f"{f}:|" for f in _FIELDS[:-1]) + f",{_FIELDS[-1]}:"
_COL = {name: i for i, name in enumerate(_FIELDS)}
# the states of a partition's listing (protocol.LISTED_STATES, SPECIAL_EXIT and
# CONFIGURING too: squeue's -t compares the whole state, flags and all), asked of squeue
# by the listing and by the per-job GPUs that must cover the same jobs
_LISTED = "PD,R,CG,S,SE,CF"
# jobs of every partition holding nodes, for the GPU indices a node listing lacks
_ALLOC_FIELDS = ("JobID", "State", "RestartCnt", "StartTime", "SubmitTime", "Partition",
                 "NodeList")
_ALLOC_FORMAT = ",".join(f"{f}:|" for f in _ALLOC_FIELDS[:-1]) + f",{_ALLOC_FIELDS[-1]}:"
# scontrol -o: Key=value pairs; Slurm's keys are capitalised, the hint's are not
_ADMIN_COMMENT = re.compile(r"(?:^| )AdminComment=(.*?)(?= [A-Z][A-Za-z]*=|$)")
log = logging.getLogger(__name__)
_JOB_ID = re.compile(r"(?:^| )JobId=(\d+)")
_KEY = {k: re.compile(rf"(?:^| ){k}=(\S*)") for k in ("JobState", "Restarts", "StartTime",
                                                       "SubmitTime", "Partition")}
# scontrol -o -d: one "Nodes=<hostlist> CPU_IDs=.. Mem=.. GRES=<per-node gres>" group per
# set of nodes with the same layout, between CoreSpec= and MinCPUsNode=
_NODE_GROUP = re.compile(r"(?<![A-Za-z_])Nodes=(\S+)(.*?)(?= Nodes=| MinCPUsNode=|$)")
_GROUP_GRES = re.compile(r"(?<![A-Za-z_])GRES=(\S*)")
_FEW = 20
_DEFAULT_CONF = "/etc/slurm/slurm.conf"


def slurm_conf_problem(slurm_conf: str | None = None,
                       env: Mapping[str, str] | None = None) -> str | None:
    """Why the Slurm tools cannot find their configuration, in one line; None if they can.
    Without it they fail with a DNS lookup error, or wait a minute and time out."""
    environ = os.environ if env is None else env
    conf = slurm_conf or environ.get("SLURM_CONF") or _DEFAULT_CONF
    if Path(conf).is_file():
        return None
    what = "is not a file" if Path(conf).exists() else "does not exist"
    return f"no Slurm configuration: {conf} {what} (set SLURM_CONF or --slurm-conf)"


def time_limit_text_s(text: str) -> int:
    """Slurm's [days-]hours:minutes:seconds (or minutes:seconds) -> seconds; UNLIMITED,
    Partition_Limit, N/A and anything unreadable -> 0."""
    text = text.strip()
    days = 0
    has_days = "-" in text
    if has_days:
        head, _, text = text.partition("-")
        if not is_count(head):
            return 0
        days = int(head)
    parts = text.split(":")
    if not parts or not all(is_count(p) for p in parts) or len(parts) > 3:
        return 0
    nums = [int(p) for p in parts]
    if has_days:  # days-hours[:minutes[:seconds]]
        nums += [0] * (3 - len(nums))
    elif len(nums) == 1:  # minutes
        return nums[0] * 60
    else:  # [hours:]minutes:seconds
        nums = [0] * (3 - len(nums)) + nums
    return days * 86400 + nums[0] * 3600 + nums[1] * 60 + nums[2]


@dataclass(frozen=True)
class JobDetail:
    """What one ``scontrol -o -d show job`` line tells beyond the per-round listing."""
    job_id: int
    admin_comment: str
    state: str
    restarts: int
    start: int
    """StartTime (epoch seconds; 0 unknown): with ``restarts``, which start this
    allocation is."""
    gpu_alloc: tuple[tuple[str, tuple[int, ...]], ...]
    time_limit_s: int
    submit: int = 0
    """SubmitTime (epoch seconds) and Partition: a listing that shows others is of
    another job under the same id (Slurm gives ids out again), or of the job requeued or
    moved into another partition since, whose admin comment job_submit.lua rewrote."""
    partition: str = ""
    max_nodes: int = 0
    """The most nodes the job may have (``NumNodes=1-1`` for ``-N 1``); 0: no limit (squeue's
    MaxNodes prints 1 for that too, measured on 22.05)."""


def _unset(text: str) -> str:
    """A text field squeue prints as "(null)" when it has none: empty then."""
    text = text.strip()
    return "" if text in ("(null)", "N/A") else text


class _Listed(NamedTuple):
    """What a listing row says of a job, to tell whether its cached detail is current."""

    job_id: int
    state: str
    restarts: str
    start: int
    submit: int
    partition: str


_ONCE = ("JobId", "JobState", "Restarts", "SubmitTime", "StartTime", "TimeLimit", "Partition",
         "CoreSpec", "MinCPUsNode")
"""Keys every ``scontrol -o -d show job`` line has once; with AdminComment (at most once),
the ones read from it."""


def unambiguous(line: str) -> bool:
    """Whether the keys read from a line occur there as often as Slurm prints them. A
    job's name, command, work directory and paths are printed on the same line and may
    hold anything: a red-team named a job ``x AdminComment=shockwave:v1 ...`` and the
    parser took it for the admin comment job_submit.lua wrote (the hint, its submission
    stamp, its GPUs). A line where one of them occurs again is read from JSON instead.
    Slurm prints no AdminComment for a job without one (submitted before job_submit.lua
    was loaded), so one planted there occurs once: the real one follows the work
    directory at once (scontrol's info_job.c), where the name, command and submit line
    come before it and the comment and paths after (a review). What this cannot tell
    apart: a job without one whose work directory itself ends in `` AdminComment=...``
    (the line is the same as a real one's); job_submit.lua writes an admin comment for
    every job it admits, so only a job submitted while it was not loaded is open to
    that, and only for itself. A work directory holding a space where a real admin
    comment follows is read from JSON."""
    counts = {key: len(re.findall(rf"(?:^| ){re.escape(key)}=", line))
              for key in (*_ONCE, "AdminComment", "WorkDir")}
    if not all(counts[k] == 1 for k in _ONCE) or counts["AdminComment"] > 1:
        return False
    return counts["AdminComment"] == 0 or (
        counts["WorkDir"] == 1 and re.search(r"(?:^| )WorkDir=\S* AdminComment=", line) is not None)


def detail_of(job: SlurmJob) -> JobDetail:
    """The detail of a job read from Slurm's JSON (``squeue --json``), exact whatever its
    strings hold."""
    return JobDetail(job_id=job.job_id, admin_comment=job.admin_comment, state=job.state,
                     restarts=job.restart_count, start=job.start_time,
                     gpu_alloc=job.gpu_alloc, time_limit_s=job.time_limit_s,
                     submit=job.submit_time, partition=job.partition,
                     max_nodes=job.max_nodes)


def detail_from_line(line: str) -> JobDetail | None:
    """Parse one ``scontrol -o -d show job`` line (None if it is not a job, or not one to
    read from text: ``unambiguous``)."""
    jid = _JOB_ID.search(line)
    if not jid or not unambiguous(line):
        return None
    values = {k: (m.group(1) if (m := rx.search(line)) else "") for k, rx in _KEY.items()}
    comment = _ADMIN_COMMENT.search(line)
    state = job_state(values["JobState"])[0]
    alloc: list[tuple[str, tuple[int, ...]]] = []
    if holds_alloc(state):
        # the groups come after CoreSpec= (the job name, before it, may hold anything)
        start = line.find(" CoreSpec=")
        end = line.find(" MinCPUsNode=", max(start, 0))
        body = line[max(start, 0): end if end >= 0 else len(line)]
        try:
            for group in _NODE_GROUP.finditer(body):
                gres = _GROUP_GRES.search(group.group(2))
                idx = gres_gpu_indices(gres.group(1)) if gres else None
                if idx:
                    alloc.extend((name, idx) for name in expand_hostlist(group.group(1)))
        except ValueError:
            alloc = []
    limit = re.search(r"(?:^| )TimeLimit=(\S*)", line)
    nodes = re.search(r"(?:^| )NumNodes=[0-9]+-([0-9]+)(?= |$)", line)
    return JobDetail(
        job_id=int(jid.group(1)), admin_comment=comment.group(1).strip() if comment else "",
        state=state, restarts=_count(values["Restarts"]),
        start=_epoch(values["StartTime"]), gpu_alloc=tuple(alloc),
        time_limit_s=time_limit_text_s(limit.group(1)) if limit else 0,
        submit=_epoch(values["SubmitTime"]), partition=values["Partition"],
        max_nodes=int(nodes.group(1)) if nodes else 0)


def _own_lines(out: str, job_id: int) -> list[str]:
    """A job's line of ``scontrol -o show job N`` and the lines a newline in its strings
    cut from it; not the lines of the other components or tasks it prints for a
    heterogeneous job's leader or an array's id (a review: each read as a job listed
    twice, from JSON)."""
    mine: list[str] = []
    current = -1
    for line in out.rstrip("\n").split("\n"):
        found = _JOB_ID.match(line)
        if found is not None:
            current = int(found.group(1))
        if current == job_id:
            mine.append(line)
    return mine


def _rows(text: str, width: int) -> tuple[list[list[str]], bool]:
    """The rows of an ``squeue -O`` listing of ``width`` columns (``|`` between them, the
    job id first), and whether every line was one, each job once. A line that is no row:
    a newline in a job's name or comment, the last columns, cuts its row there and the
    rest reads as another (squeue prints every job id as a number). Split on ``\\n``
    alone: ``str.splitlines`` also splits on ``\\v``, ``\\f`` and others Slurm prints inside
    a field (a red-team)."""
    rows: list[list[str]] = []
    whole, seen = True, set()
    for line in text.split("\n"):
        if not line:
            continue
        row = line.split("|", width - 1)
        if len(row) != width or not is_count(row[0]) or row[0] in seen:
            whole = False
            continue
        seen.add(row[0])
        rows.append(row)
    return rows, whole


def _listing_rows(text: str) -> list[list[str]] | None:
    """The rows of a partition's listing, one job a line; None when a line is no row or a
    job is listed twice (``_rows``): the round reads the partition from JSON then."""
    rows, whole = _rows(text, len(_FIELDS))
    return rows if whole else None


def _count(text: str, default: int = 0) -> int:
    """A listed count; ``default`` where squeue prints none (N/A, empty)."""
    text = text.strip()
    return int(text) if is_count(text) else default


def _epoch(text: str) -> int:
    try:
        return int(datetime.fromisoformat(text).timestamp())
    except ValueError:
        return 0


def _within(alloc: tuple[tuple[str, tuple[int, ...]], ...], nodelist: str
            ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Only the entries on the job's own nodes (as the listing names them)."""
    try:
        names = set(expand_hostlist(nodelist))
    except ValueError:
        return ()
    return tuple(e for e in alloc if e[0] in names)


class CliBackend:
    def __init__(self, *, slurm_conf: str | None = None, timeout_s: float = 30.0,
                 env: Mapping[str, str] | None = None, check_conf: bool = True) -> None:
        self.timeout_s = timeout_s
        self.env = dict(env if env is not None else os.environ)
        # what makes Slurm's commands print other times or list fewer jobs (squeue(1),
        # sinfo(1): a site profile's SLURM_TIME_FORMAT=relative read every time as 0, so
        # a requeued job looked eligible at once; SQUEUE_USERS hides others' jobs)
        for name in list(self.env):
            if name.startswith(("SQUEUE_", "SINFO_")) or name in ("SLURM_CLUSTERS",
                                                                   "SLURM_BITSTR_LEN"):
                del self.env[name]
        self.env["SLURM_TIME_FORMAT"] = "standard"
        if slurm_conf:
            self.env["SLURM_CONF"] = slurm_conf
        if check_conf and (problem := slurm_conf_problem(env=self.env)):
            raise SlurmError(problem)
        # per job: its admin comment (the normalised hint, read once) and, for a job
        # holding nodes, its GPU indices (read once per start: key restarts + StartTime)
        self._details: dict[int, JobDetail] = {}
        self._holding: set[int] = set()
        """Jobs of every partition holding nodes at the last look (``_alloc_of_all_jobs``):
        their details are kept for the GPU indices a node listing lacks."""

    def _run(self, args: Sequence[str]) -> str:
        try:
            # a byte that is not UTF-8 (a node's or a job's name) must not fail the read
            proc = subprocess.run(list(args), capture_output=True, encoding="utf-8",
                                  errors="replace", env=self.env, timeout=self.timeout_s,
                                  check=False)
        except FileNotFoundError:
            raise SlurmError(f"{args[0]}: not found (install slurm-client)") from None
        except subprocess.TimeoutExpired:
            raise SlurmUnanswered(f"{args[0]}: no answer within {self.timeout_s:g} s") \
                from None
        except OSError as exc:  # not executable, and the like
            raise SlurmError(f"{args[0]}: {exc.strerror or exc}") from None
        if proc.returncode != 0:  # scontrol says some refusals on stdout ("not found")
            lines = [ln for ln in (proc.stderr.strip() or proc.stdout.strip()).splitlines()
                     if ln.strip()]
            message = lines[0] if lines else f"exit code {proc.returncode}"
            raise slurm_failure(f"{' '.join(args[:2])}: {message}")
        return proc.stdout

    def _json(self, args: Sequence[str]) -> Any:
        out = self._run(args)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmError(f"{args[0]}: output is not JSON ({exc.msg})") from None
        # 22.05 exits 0 when the controller is down and reports it here instead
        errors = doc.get("errors") if isinstance(doc, dict) else None
        if errors:  # a list of objects; of another shape, still Slurm's one line
            first = errors[0] if isinstance(errors, list) else errors
            if not isinstance(first, dict):
                first = {"description": str(first)}
            text = str(first.get("description") or first.get("error") or first)
            if first.get("source"):
                text += f" ({first['source']}: {first.get('error', '')}; is slurmctld running?)"
            raise SlurmError(f"{' '.join(args[:2])}: {text}".replace("\n", " "))
        return doc

    def list_jobs(self, partition: str | None = None) -> list[SlurmJob]:
        if partition is None:
            # every job Slurm keeps, ended ones too (22.05 lists them whatever it is asked;
            # 23.02+ honours filters, and leaves them out unless asked)
            return jobs_from(self._json(["squeue", "--json", "--all", "--states=all"]))
        # 22.05's squeue --json ignores filters and returns every record it still keeps
        # (finished ones included): on a busy cluster that is most of the round. A
        # filtered text listing asks for only what the planner needs.
        try:
            text = self._run(["squeue", "-h", "-p", partition, "-t", _LISTED, "-O", _FORMAT])
        except SlurmUnanswered:
            raise  # the JSON listing would wait as long again: no answer is the round's
        except SlurmError:
            return self._json_listing(partition)
        rows = _listing_rows(text)
        if rows is None:
            log.info("partition %s: a job's name or comment breaks squeue's lines: listed "
                     "from JSON", partition)
            return self._json_listing(partition)
        c = _COL
        self._load_details(_Listed(int(r[0]), r[c["State"]].strip(), r[c["RestartCnt"]].strip(),
                                   _epoch(r[c["StartTime"]].strip()),
                                   _epoch(r[c["SubmitTime"]].strip()), partition)
                           for r in rows)
        # a row Slurm does not have in this partition (a line a newline in another job's
        # comment made, naming any job; or a job purged since the listing): the listing
        # is not to be trusted this round
        if any(partition not in (d.partition.split(",") if (d := self._details.get(int(r[0])))
                                 else ()) for r in rows):
            log.info("partition %s: a listed job is not the partition's in scontrol: "
                     "listed from JSON", partition)
            return self._json_listing(partition)
        jobs = [self._job_from_row(r, partition) for r in rows]
        # a long-running service forgets the jobs gone: neither in this listing nor holding
        # nodes at the last look (every job that ever ran stayed, found by a red-team)
        listed = {j.job_id for j in jobs} | self._holding
        self._details = {jid: d for jid, d in self._details.items() if jid in listed}
        return jobs

    def _json_listing(self, partition: str) -> list[SlurmJob]:
        """The partition's jobs from ``squeue --json``: exact whatever a job's strings
        hold, and slower on 22.05 (every record Slurm keeps)."""
        # --all: a hidden partition's jobs too (25.11 lists them only so)
        return [j for j in jobs_from(self._json(["squeue", "--json", "--all"]))
                if j.partition == partition and j.state in LISTED_STATES]

    def _job_from_row(self, r: list[str], partition: str) -> SlurmJob:
        c = _COL
        jid, (state, *flags) = int(r[0]), job_state(r[c["State"]])
        reason = r[c["Reason"]].strip()
        priority, nodes = _count(r[c["PriorityLong"]]), _count(r[c["NumNodes"]], 1)
        detail = self._details.get(jid)
        nodelist = r[c["NodeList"]].strip()
        alloc: tuple[tuple[str, tuple[int, ...]], ...] = ()
        if detail and holds_alloc(state) and self._current(
                detail, r[c["RestartCnt"]], _epoch(r[c["StartTime"]].strip())):
            alloc = _within(detail.gpu_alloc, nodelist)
        max_nodes = detail.max_nodes if detail else 0
        return SlurmJob(
            job_id=jid, name=r[c["Name"]].strip(), user=r[c["UserName"]].strip(),
            partition=partition, state=state, state_flags=tuple(flags), reason=reason,
            priority=priority, held=is_held(state, priority, reason),
            comment=_unset(r[c["Comment"]]),  # "(null)": none, as JSON and pyslurm say
            admin_comment=detail.admin_comment if detail else "",
            gpus=job_gpus(r[c["tres-per-node"]], r[c["tres-per-job"]], nodes,
                          r[c["tres-per-task"]], _count(r[c["NumTasks"]])),
            node_count=nodes, nodes=nodelist,
            restart_count=_count(r[c["RestartCnt"]]),
            submit_time=_epoch(r[c["SubmitTime"]].strip()),
            start_time=_epoch(r[c["StartTime"]].strip()) if holds_alloc(state) else 0,
            eligible_time=_epoch(r[c["EligibleTime"]].strip()),  # N/A: 0, eligible
            gpu_alloc=alloc, time_limit_s=time_limit_text_s(r[c["TimeLimit"]]),
            gpu_type=gpu_type_in(*(r[c[k]].strip() for k in
                                   ("tres-per-node", "tres-per-job", "tres-per-task"))),
            requeue=r[c["Requeue"]].strip() != "0",
            dependency=_unset(r[c["Dependency"]]),
            max_nodes=max_nodes,
            per_job=asked_per_job(r[c["tres-per-node"]].strip(), r[c["tres-per-job"]].strip(),
                                  r[c["tres-per-task"]].strip(), max_nodes),
            asks_per_job=asked_per_job(r[c["tres-per-node"]].strip(),
                                       r[c["tres-per-job"]].strip()))

    @staticmethod
    def _current(detail: JobDetail, restarts: str, start: int) -> bool:
        """Whether a cached detail describes the job's current start."""
        return (holds_alloc(detail.state) and str(detail.restarts) == restarts.strip()
                and detail.start == start)

    def _load_details(self, rows: Iterable[_Listed]) -> None:
        """One ``scontrol -o -d show job`` per job when it is first seen (its admin
        comment), again when its submit time or partition is not the cached one (another
        job under its id, or the job requeued or moved in, its admin comment rewritten),
        and once per start of a job holding nodes (its GPU indices); one listing of all
        jobs when many are needed at once (22.05's scontrol takes one job id per call)."""
        missing = []
        for row in rows:
            detail = self._details.get(row.job_id)
            if (detail is None or (detail.submit, detail.partition) != (row.submit,
                                                                          row.partition)
                    or (holds_alloc(job_state(row.state)[0])
                        and not self._current(detail, row.restarts, row.start))):
                missing.append(row.job_id)
        if not missing:
            return
        lines: list[str] = []
        if len(missing) <= _FEW:
            for jid in missing:
                try:
                    # the job's own line only: a name holding a newline prints a second
                    # line that may start as another job's
                    out = self._run(["scontrol", "-o", "-d", "show", "job", str(jid)])
                    lines += _own_lines(out, jid)
                except SlurmUnanswered:
                    raise  # each job after would wait as long
                except SlurmError:  # ended and purged since the listing: nothing to add
                    continue
        else:
            lines = self._run(["scontrol", "-o", "-d", "show", "job"]).rstrip("\n").split("\n")
        wanted = set(missing)  # the full listing has every job's line: a set to look up
        read: dict[int, JobDetail | None] = {}
        last = -1
        for line in lines:
            found = _JOB_ID.match(line)
            if found is None:
                # a newline in the previous job's strings (its submit line, command,
                # comment...): its line is cut, and the rest of it (its admin comment among
                # them, printed after the work folder) is here: read from JSON
                if last in wanted:
                    read[last] = None
                continue
            last = int(found.group(1))
            if last in wanted:
                # a job on two lines (one forged by another job's name) is read from JSON
                read[last] = None if last in read else detail_from_line(line)
        self._details.update((jid, d) for jid, d in read.items() if d is not None)
        unread = [jid for jid in missing if jid in read and read[jid] is None]
        if unread:
            log.info("jobs %s: their scontrol lines are not to be read as text (a name or "
                     "path holding a key): read from JSON", unread[:5])
            # --all: a hidden partition's jobs too (25.11 lists them only so)
            by_id = {j.job_id: j for j in jobs_from(self._json(["squeue", "--json", "--all"]))}
            self._details.update((jid, detail_of(by_id[jid])) for jid in unread
                                 if jid in by_id)

    def _alloc_of_all_jobs(self) -> dict[str, set[int]]:
        """GPU indices in use per node, from every partition's jobs holding nodes."""
        text = self._run(["squeue", "-h", "-t", "R,CG,S,CF", "-O", _ALLOC_FORMAT])
        rows = _rows(text, len(_ALLOC_FIELDS))[0]  # no free text: every line is a row
        self._load_details(_Listed(int(r[0]), r[1].strip(), r[2].strip(), _epoch(r[3].strip()),
                                   _epoch(r[4].strip()), r[5].strip()) for r in rows)
        self._holding = {int(r[0]) for r in rows}
        used: dict[str, set[int]] = {}
        for r in rows:
            detail = self._details.get(int(r[0]))
            if detail and self._current(detail, r[2], _epoch(r[3].strip())):
                for node, idx in _within(detail.gpu_alloc, r[6].strip()):
                    used.setdefault(node, set()).update(idx)
        return used

    def gpus_per_job(self, job_ids: Sequence[int]) -> dict[int, tuple[int, str, bool]]:
        """GPUs, the GPU type they name, and whether any were asked for the job, that
        each listed job of ``job_ids`` (pending, running, suspended or completing) asked
        for with ``--gpus`` (its TresPerJob) or ``--gpus-per-task``, for the pyslurm
        backend, which reads neither. One listing of those states: ``squeue -j`` fails
        whole when one of the ids has gone."""
        text = self._run(["squeue", "-h", "-t", _LISTED, "-O",
                          "JobID:|,NumNodes:|,tres-per-job:|,tres-per-task:|,NumTasks:"])
        wanted = set(job_ids)
        return {int(r[0]): (job_gpus("", r[2], _count(r[1], 1), r[3], _count(r[4])),
                            gpu_type_in(r[2].strip(), r[3].strip()),
                            asked_per_job("", r[2].strip()))
                for r in _rows(text, 5)[0] if int(r[0]) in wanted}

    def list_nodes(self) -> list[SlurmNode]:
        nodes = nodes_from(self._json(["sinfo", "--json"]))
        if nodes is None:  # 24.x groups sinfo rows; scontrol has one object per node
            nodes = nodes_from(self._json(["scontrol", "show", "nodes", "--json"])) or []
        if any(n.gpus_used > len(n.gpus_used_idx) for n in nodes):
            # untyped GRES: 22.05 reports gres_used as a bare count (gpu:7); the indices
            # come from the jobs holding the node, whatever their partition
            used = self._alloc_of_all_jobs()
            nodes = [replace(n, gpus_used_idx=tuple(sorted(used.get(n.name, ()))))
                     if n.gpus_used > len(n.gpus_used_idx) else n for n in nodes]
        return nodes

    def partition_state(self, partition: str) -> str:
        try:
            text = self._run(["scontrol", "-o", "show", "partition", partition])
        except SlurmError as exc:
            if "not found" in str(exc).lower():
                return ""
            raise
        return parse_show_partitions(text).get(partition, {}).get("state", "").upper()

    def scontrol(self, *args: str) -> str:
        """``scontrol ARGS``' output."""
        return self._run(["scontrol", *args])

    def running_config(self) -> SlurmSettings:
        """slurmctld's running configuration (``scontrol show config``): what doctor
        checks, where the service finds job_submit.lua, which Slurm version runs."""
        return parse_show_config(self.scontrol("show", "config"))

    def set_priority(self, job_id: int, priority: int) -> None:
        self._run(["scontrol", "update", f"jobid={job_id}", f"priority={priority}"])

    # hold, release and requeue take many jobs in one call: one scontrol per round, not
    # one per job (2,000 jobs would otherwise cost seconds)
    def hold(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            self._run(["scontrol", "uhold", ",".join(map(str, job_ids))])

    def release(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            self._run(["scontrol", "release", ",".join(map(str, job_ids))])

    def set_comment(self, job_id: int, comment: str) -> None:
        self._run(["scontrol", "update", f"jobid={job_id}", f"comment={comment}"])

    def signal(self, job_id: int, signal: str) -> None:
        # --full: the batch shell and every step, so a training script that runs
        # without srun gets the checkpoint signal too. --state=RUNNING: a job that stopped
        # running since the listing (requeued, held) is left alone at once, where scancel
        # retried "Job can not be altered now" past our timeout and stalled the round (a
        # red-team: over 60 s for a pending job)
        self._run(["scancel", "--state=RUNNING", f"--signal={signal}", "--full", str(job_id)])

    def requeue(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            self._run(["scontrol", "requeue", "Incomplete", ",".join(map(str, job_ids))])

    def requeue_ended(self, job_id: int) -> None:
        self._run(["scontrol", "requeue", str(job_id)])

    def update_gpus(self, job_id: int, gpus: int, *, nodes: int | None = None,
                    gpu_type: str = "", per_job: bool = False,
                    max_nodes: int | None = None) -> None:
        count = [] if nodes is None else [f"numnodes={nodes}-{max_nodes or nodes}"]
        gres = (f"TresPerJob=gres:{gpu_gres(gpus, gpu_type)}" if per_job
                else f"gres={gpu_gres(gpus, gpu_type)}")
        self._run(["scontrol", "update", f"jobid={job_id}", *count, gres])

    def cancel(self, job_id: int) -> None:
        self._run(["scancel", str(job_id)])

    def submit(self, script: str, args: Sequence[str] = ()) -> int:
        out = self._run(["sbatch", "--parsable", *args, script]).strip()
        try:
            return int(out.split(";")[0])
        except ValueError:
            raise SlurmError(f"sbatch: unexpected answer {out!r}") from None
