"""``shockwave doctor``: a live cluster checked against what the service needs.

Each check is a :class:`Check`: what was looked at, ok / warn / fail / skip, what was
found and, when not ok, what to change. ``fail`` means the service cannot do its job
(doctor exits 1); ``warn`` means it runs, but worse than it should (a preempted job
waits an extra round, jobs cannot find the progress API, ...). The Slurm checks read the
running controller's configuration (``scontrol show config``), never slurm.conf alone:
an edit not yet applied is not what Slurm does. Checks of the pieces on this host
(MUNGE, the store, the running service) are in ``doctor_host.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from slurm_shockwave.service.lock import heartbeat_identity
from slurm_shockwave.slurm.plugin_files import (
    ScriptSettings,
    closed_folder,
    installed_lua,
    is_glob,
    lua_path,
    script_owners,
    settings_in,
    unsafe_problem,
    unusable_problem,
    version_of,
)
from slurm_shockwave.slurm.protocol import SlurmNode
from slurm_shockwave.slurm.root_only import ROOT, root_only_problem
from slurm_shockwave.slurm.slurm_conf import DEFAULT_MIN_JOB_AGE_S, SlurmSettings, slurm_user_uid

SCRIPTS_DIR = "/opt/slurm-shockwave/plugin_scripts"
"""Where docs/admin.md and etc/slurm.conf.shockwave put the node scripts."""
INSTALL = "shockwave install-scripts --config <the service's config>"


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status.value, "detail": self.detail,
                "fix": self.fix}


@dataclass(frozen=True)
class Expected:
    """What the service is configured with, which Slurm's side must agree with."""

    partition: str
    round_s: float
    heartbeat: str
    endpoint_file: str
    store: str


def ok(name: str, detail: str) -> Check:
    return Check(name, Status.OK, detail)


def slurm_checks(conf: SlurmSettings, partitions: Mapping[str, Mapping[str, str]],
                 nodes: Sequence[SlurmNode], want: Expected) -> list[Check]:
    """The controller's settings, the managed partition and its GPU nodes."""
    out = []
    plugins = conf.plugins("JobSubmitPlugins")
    out.append(ok("JobSubmitPlugins", f"{conf.get('JobSubmitPlugins')}: new jobs are "
                  "checked and, while the service runs, held for it")
               if "lua" in plugins else
               Check("JobSubmitPlugins", Status.FAIL,
                     f"is {conf.get('JobSubmitPlugins') or 'not set'}: new jobs are neither "
                     "checked nor held for the planner",
                     "slurm.conf: JobSubmitPlugins=lua, then restart slurmctld"))
    requeue = conf.get("JobRequeue", "1")
    out.append(ok("JobRequeue", "1: batch jobs may be requeued") if requeue == "1" else
               Check("JobRequeue", Status.FAIL,
                     f"is {requeue}: jobs are not requeued by default, so preempted jobs "
                     "are lost", "slurm.conf: JobRequeue=1, then scontrol reconfigure"))
    cred = conf.cred_expire_s()
    out.append(ok("cred_expire", f"{cred} s: a requeued job may restart {cred + 1} s later, "
                  f"within a {want.round_s:g} s round") if cred + 1 < want.round_s else
               Check("cred_expire", Status.WARN,
                     f"is {cred} s (AuthInfo={conf.get('AuthInfo') or 'not set'}): a "
                     f"requeued job waits {cred + 1} s, a whole {want.round_s:g} s round "
                     "or more, before it may start again",
                     "slurm.conf: AuthInfo=cred_expire=10, then restart slurmctld"))
    age = conf.min_job_age_s()
    keep = max(DEFAULT_MIN_JOB_AGE_S, 2 * math.ceil(want.round_s))
    out.append(ok("MinJobAge", f"{age} s: a job the checkpoint signal kills is still "
                  "listed, and run again, when the service sees it within that")
               if age == 0 or age >= keep else
               Check("MinJobAge", Status.WARN,
                     f"is {age} s: a job the checkpoint signal kills is purged before "
                     f"the service may see it (a {want.round_s:g} s round, or a restart), "
                     "and is lost instead of run again",
                     f"slurm.conf: MinJobAge={keep}, then scontrol reconfigure"))
    prio = conf.get("PriorityType")
    out.append(ok("PriorityType", prio) if prio == "priority/multifactor" else
               Check("PriorityType", Status.WARN,
                     f"is {prio or 'not set'}: the planner pins priorities, and measured "
                     "here under multifactor they stay pinned",
                     "slurm.conf: PriorityType=priority/multifactor, then restart "
                     "slurmctld"))
    track = conf.get("ProctrackType") or "proctrack/cgroup"  # Slurm's default with cgroups
    out.append(ok("ProctrackType", f"{track}: a requeued job's processes end with it")
               if track in ("proctrack/cgroup", "proctrack/cray_aries") else
               Check("ProctrackType", Status.WARN,
                     f"is {track}: it loses a process whose parent exits (linuxproc) or "
                     "that leaves its process group (pgid), so a preempted job's processes "
                     "may outlive its requeue and train on beside the next run (a user "
                     "walkthrough: a script the checkpoint signal killed left its child "
                     "reporting)",
                     "slurm.conf: ProctrackType=proctrack/cgroup (cgroup.conf), then "
                     "restart slurmctld and slurmd"))
    out.append(partition_check(partitions.get(want.partition), nodes, want.partition))
    return out


def partition_check(part: Mapping[str, str] | None, nodes: Sequence[SlurmNode],
                    name: str) -> Check:
    label = f"partition {name}"
    if part is None:
        return Check(label, Status.FAIL, "Slurm has no such partition",
                     f"slurm.conf: PartitionName={name} Nodes=<your GPU nodes> "
                     "Default=NO State=UP, or set slurm.partition in the service's config")
    if part.get("state", "UP") != "UP":
        return Check(label, Status.FAIL, f"State={part.get('state')}: no job starts there",
                     f"scontrol update partition={name} state=UP")
    mine = [n for n in nodes if name in n.partitions]
    gpus = sum(n.gpus for n in mine)
    usable = [n for n in mine if n.usable and n.gpus]
    text = (f"{len(mine)} nodes, {gpus} GPUs; usable now: {len(usable)} nodes, "
            f"{sum(n.gpus for n in usable)} GPUs")
    if not gpus:
        return Check(label, Status.FAIL, f"{text}: no GPUs as Slurm GRES",
                     "slurm.conf: GresTypes=gpu and Gres=gpu:N on the partition's nodes; "
                     "gres.conf on each node")
    if len(usable) < len([n for n in mine if n.gpus]):
        down = ", ".join(n.name for n in mine if n.gpus and not n.usable)
        return Check(label, Status.WARN, f"{text} (not usable: {down})",
                     "scontrol update nodename=<node> state=resume, once fixed")
    return ok(label, text)


def wrong_settings(found: Mapping[str, str], want: ScriptSettings) -> dict[str, str]:
    """The settings lines of an installed script (``settings_in``) that are not the
    service's: key -> the service's value. One comparison for doctor and for ``serve``
    (``lua_mismatch``), so the two never disagree; a heartbeat is compared as the file
    it writes (``heartbeat_identity``: through a symlinked folder it is the same)."""
    expect = {"partition": want.partition, "heartbeat": want.heartbeat,
              "endpoint_file": want.endpoint_file}
    same = {key: (heartbeat_identity(value) == heartbeat_identity(expect[key])
                  if key == "heartbeat" else value == expect[key])
            for key, value in found.items() if key in expect}
    return {key: expect[key] for key, equal in same.items() if not equal}


def lua_mismatch(conf: SlurmSettings, want: ScriptSettings) -> tuple[str, str] | None:
    """(config field, one line) when the job_submit.lua Slurm loads is ours but set for
    another partition or heartbeat than the service (doctor's FAIL of it); None when it
    matches, or there is none to compare (not loaded, missing, unreadable, a site's
    own: doctor reports those). Slurm loads one job_submit.lua: on another partition
    the service's jobs are neither validated nor held, and on another heartbeat they
    are held on a heartbeat nobody here writes (or never)."""
    found = installed_lua(conf)
    if found is None:
        return None
    path, lua = found
    wrong = wrong_settings(lua, want)
    owner, beat = lua.get("partition"), lua.get("heartbeat")
    if "partition" in wrong:
        return "slurm.partition", (
            f"{path} manages partition {owner} (heartbeat {beat}), not {want.partition}: "
            f"Slurm loads one job_submit.lua, so {want.partition}'s new jobs would be "
            f"neither validated nor held for this service; serve {owner}, or hand it back "
            f"and move the plugin (shockwave install-scripts --force)")
    if "heartbeat" in wrong:
        return "service.heartbeat", (
            f"this service would write {want.heartbeat}, but {path} holds partition "
            f"{owner}'s new jobs on heartbeat {beat}: another service writes that one, or "
            f"the script's settings are out of date (shockwave install-scripts)")
    return None


def script_checks(conf: SlurmSettings, want: Expected) -> list[Check]:
    """The plugin scripts the running configuration names: ours, current, settings as
    the service's config, and safe for Slurm to run (root's, writable by root only)."""
    settings = ScriptSettings(partition=want.partition, heartbeat=want.heartbeat,
                              endpoint_file=want.endpoint_file)
    out = [_script("job_submit.lua", lua_path(conf), settings, required=True,
                   owners=script_owners("job_submit.lua", slurm_user_uid(conf)),
                   executable=False)]
    for setting, name in (("Prolog", "prolog.sh"), ("Epilog", "epilog.sh"),
                          ("TaskProlog", "task_prolog.sh")):
        paths = conf.paths(setting)
        if not paths:
            out.append(Check(setting, Status.WARN, f"not set: {_WHY[name]}",
                             f"slurm.conf: {setting}={SCRIPTS_DIR}/{name}, then {INSTALL} "
                             "and scontrol reconfigure"))
            continue
        path = next((p for p in paths if p.endswith("/" + name)), paths[0])
        if is_glob(path):
            out.append(Check(setting, Status.WARN, f"{setting}={conf.get(setting)}: a glob; "
                             f"doctor cannot tell whether it runs ours",
                             f"{INSTALL} --dest DIR, and call DIR/{name} from your "
                             f"{setting.lower()} (not from a glob: events.sh would run too)"))
            continue
        check = _script(name, path, settings, required=False, executable=True,
                        label=setting)
        if check.status == Status.OK and name == "task_prolog.sh":
            closed = closed_folder(path)
            if closed:  # runs as the job's user
                check = Check(setting, Status.WARN, f"{path} is ours, but {closed}: jobs, "
                              "which run it as their user, cannot", f"chmod o+x on each "
                              f"folder above {path}")
        if check.status == Status.OK and name != "task_prolog.sh":
            events = path.rsplit("/", 1)[0] + "/events.sh"
            unsafe = unsafe_problem(events)
            problem = unsafe or unusable_problem(events, executable=False)
            if problem:  # it sources events.sh as root: failed as the script itself
                check = Check(setting, Status.FAIL if unsafe else Status.WARN,
                              f"{path} is ours but events.sh beside it is not usable "
                              f"({problem})", INSTALL)
        out.append(check)
    return out


_WHY = {"prolog.sh": "job starts are not recorded for the progress view",
        "epilog.sh": "job ends and spooled reports are not forwarded to the service",
        "task_prolog.sh": "jobs are not told the progress API's URL (SHOCKWAVE_URL)"}


def _script(name: str, path: str, want: ScriptSettings, *, required: bool,
            executable: bool, label: str | None = None,
            owners: frozenset[int] = ROOT) -> Check:
    label = label or name
    bad = Status.FAIL if required else Status.WARN
    unsafe = unsafe_problem(path, owners=owners)
    problem = unsafe or unusable_problem(path, executable=executable)
    if problem:  # a script Slurm runs that another user can change is a way to root:
        # failed whether or not the script is needed (found by a review: only a warning)
        return Check(label, Status.FAIL if unsafe else bad, problem, INSTALL)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as exc:
        return Check(label, bad, f"{path}: {exc.strerror}", INSTALL)
    version = version_of(name, text)
    if version == "not ours":
        return Check(label, bad, f"{path} is not slurm-shockwave's {name}",
                     f"{INSTALL} (or chain ours from yours)")
    found = settings_in(text)
    wrong = [f"{key} {found[key]!r}, the service's is {expect!r}"
             for key, expect in wrong_settings(found, want).items()]
    if wrong:
        return Check(label, bad, f"{path}: {'; '.join(wrong)}", INSTALL)
    if version != "current":
        return Check(label, Status.WARN, f"{path} is another version of ours",
                     f"{INSTALL} (upgrades it)")
    # the shockwave the Epilog runs as root, which another user must not be able to
    # change (root on every node: slurm/root_only.py)
    program = found.get("shockwave_bin", "")
    problem = root_only_problem(program) if program else None
    if problem:
        return Check(label, Status.FAIL, f"{path} runs {program} as root, but {problem}",
                     f"reinstall slurm-shockwave where only root can write, then {INSTALL}")
    return ok(label, f"{path}: ours, current")
