"""The plugin scripts the package ships, and where slurm.conf says they go.

The files are ``plugin_scripts/`` of the checkout, shipped as package data
(``slurm_shockwave/plugin_scripts`` is a link to it, so a checkout and an installed wheel
read the same files). Each script has a few settings lines at its top (the managed
partition, the heartbeat and endpoint files); the installer writes them from the
service's config, and doctor compares everything else with the shipped text, so an
installed script reads "current", "another version" or "not ours".
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from slurm_shockwave.model.bounds import PARTITION_PROBLEM, is_partition_name
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.slurm.root_only import ROOT, changeable_by_others
from slurm_shockwave.slurm.slurm_conf import SlurmSettings

SCRIPT_NAMES = ("job_submit.lua", "prolog.sh", "epilog.sh", "task_prolog.sh", "events.sh")
MARK = "slurm-shockwave"
"""Every shipped script names the project in its first lines."""

_PATH = re.compile(r"/[A-Za-z0-9._/+-]+")
"""Matched whole (``fullmatch``): ``$`` passes a final newline, and a path ending in one
made a job_submit.lua that Lua cannot load, which stops slurmctld (found by a red-team)."""
_URL = re.compile(
    r"https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})(/[A-Za-z0-9._~/-]*)?")


def check_service_url(url: str) -> None:
    """The URL goes into the prolog, epilog and TaskProlog as a quoted shell string:
    nothing that could end the quote, and a port the client can reach (a red-team
    finding: port 99999 was written into the scripts). One rule for the option and the
    scripts' settings: a second, stricter one refused what the first and the docs allow."""
    if not url:
        return
    m = _URL.fullmatch(url)
    if m is None or not 1 <= int(m[2]) <= 65535:
        raise InputError("must be http(s)://HOST:PORT[/PATH] with a port of 1-65535 (letters, "
                         "digits, '.', '-' in the host, or [IPv6])", source=url,
                         field="--service-url")


@dataclass(frozen=True)
class ScriptSettings:
    """What the settings lines hold: from the service's config when installing."""

    partition: str = "shockwave"
    heartbeat: str = "/var/lib/slurm-shockwave/heartbeat"
    endpoint_file: str = "/var/lib/slurm-shockwave/endpoint"
    is_default: bool = False
    service_url: str = ""
    """The service's URL for nodes that cannot read the endpoint file ("" : none)."""
    service_uid: str = ""
    """The uid the service at ``service_url`` runs as, whose answers the jobs believe as
    well as root's ("": root only; the endpoint file's owner where it is read)."""
    shockwave_bin: str = ""
    """The ``shockwave`` command for the Epilog ("": its PATH), which Slurm runs with an
    environment of its own: a pip install under pyenv or a venv is not on that PATH."""
    events_dir: str = "/var/lib/slurm-shockwave/events"
    """The Prolog's and Epilog's audit trail on each node (events.sh): one folder per
    host, so two clusters on one host (test clusters) each need their own."""

    def validate(self) -> None:
        if not is_partition_name(self.partition):
            raise InputError(PARTITION_PROBLEM, field="slurm.partition")
        for name in ("heartbeat", "endpoint_file"):
            if not _PATH.fullmatch(getattr(self, name)):
                raise InputError("must be an absolute path of [A-Za-z0-9._/+-] (it is "
                                 "written into the plugin scripts)", field=f"service.{name}")
        if not (_PATH.fullmatch(self.events_dir)
                and os.path.normpath(self.events_dir) == self.events_dir
                and self.events_dir.count("/") >= 2):
            raise InputError("must be an absolute path of [A-Za-z0-9._/+-] below a folder "
                             "(events.sh makes it in the folder above as root), with no "
                             "'..' or trailing '/'", field="--events-dir")
        if self.shockwave_bin and not _PATH.fullmatch(self.shockwave_bin):
            raise InputError("must be an absolute path of [A-Za-z0-9._/+-] (it is written "
                             "into the Epilog)", field="shockwave_bin")
        check_service_url(self.service_url)
        if self.service_uid and not self.service_uid.isdigit():
            raise InputError("must be a number", field="--service-uid")


def _lua_lines(s: ScriptSettings) -> dict[str, str]:
    return {r"^SHOCKWAVE_PARTITION = .*$": f'SHOCKWAVE_PARTITION = "{s.partition}"',
            r"^(if SHOCKWAVE_IS_DEFAULT == nil then|SHOCKWAVE_IS_DEFAULT =) .*$":
                f"SHOCKWAVE_IS_DEFAULT = {'true' if s.is_default else 'false'}",
            r"^SHOCKWAVE_HEARTBEAT = .*$": f'SHOCKWAVE_HEARTBEAT = "{s.heartbeat}"'}


def _sh_lines(s: ScriptSettings) -> dict[str, str]:
    return {r"^ENDPOINT_FILE=.*$": f'ENDPOINT_FILE="{s.endpoint_file}"',
            r"^SERVICE_URL=.*$": f'SERVICE_URL="{s.service_url}"',
            r"^SERVICE_UID=.*$": f'SERVICE_UID="{s.service_uid}"',
            r"^PARTITION=\S*": f'PARTITION="{s.partition}"'}


def _settings_lines(name: str, s: ScriptSettings) -> dict[str, str]:
    if name == "job_submit.lua":
        return _lua_lines(s)
    if name == "epilog.sh":
        return {**_sh_lines(s), r"^SHOCKWAVE_BIN=.*$": f'SHOCKWAVE_BIN="{s.shockwave_bin}"'}
    if name == "events.sh":
        return {r"^DIR=.*$": f'DIR="{s.events_dir}"'}
    return _sh_lines(s) if name == "task_prolog.sh" else {}


def shockwave_bin() -> str:
    """The ``shockwave`` command of this Python (beside its interpreter: a venv's or
    pyenv's bin, whose shims need an environment an Epilog lacks), else the one on PATH,
    else ""."""
    beside = Path(sys.executable).parent / "shockwave"
    found = str(beside) if os.access(beside, os.X_OK) else shutil.which("shockwave") or ""
    return found if _PATH.fullmatch(found) else ""


def packaged(name: str) -> str:
    return (files("slurm_shockwave") / "plugin_scripts" / name).read_text(encoding="utf-8")


def render(name: str, settings: ScriptSettings) -> str:
    """The shipped script with ``settings`` in its settings lines."""
    settings.validate()
    text = packaged(name)
    for pattern, line in _settings_lines(name, settings).items():
        text, count = re.subn(pattern, line.replace("\\", r"\\"), text, count=1,
                              flags=re.MULTILINE)
        if count != 1:
            raise RuntimeError(f"{name}: settings line {pattern!r} not found")
    return text


def _body(name: str, text: str) -> str:
    """The script without its settings lines: what must equal the shipped one."""
    for pattern in _settings_lines(name, ScriptSettings()):
        text = re.sub(pattern, "", text, count=1, flags=re.MULTILINE)
    return text


def version_of(name: str, text: str) -> str:
    """``current`` (the shipped script, settings aside), ``other version`` or ``not ours``."""
    if MARK not in "\n".join(text.splitlines()[:4]):
        return "not ours"
    return "current" if _body(name, text) == _body(name, packaged(name)) else "other version"


def settings_in(text: str) -> dict[str, str]:
    """The values of the settings lines of an installed script (quoted strings only)."""
    out = {}
    for key, pattern in (("partition", r'^SHOCKWAVE_PARTITION = .*"([^"]*)"\s*$'),
                         ("partition", r'^PARTITION="([^"]*)"(?:\s|$)'),
                         ("heartbeat", r'^SHOCKWAVE_HEARTBEAT = .*"([^"]*)"\s*$'),
                         ("endpoint_file", r'^ENDPOINT_FILE="([^"]*)"\s*$'),
                         ("shockwave_bin", r'^SHOCKWAVE_BIN="([^"]*)"\s*$'),
                         ("events_dir", r'^DIR="([^"]*)"\s*$')):
        found = re.search(pattern, text, flags=re.MULTILINE)
        if found:
            out[key] = found.group(1)
    return out


@dataclass(frozen=True)
class Target:
    name: str
    """The shipped script."""
    path: str
    mode: int
    setting: str
    """The slurm.conf setting that names the place (job_submit.lua: its directory)."""


def is_glob(path: str) -> bool:
    """Slurm 22.05 takes a glob for Prolog= and Epilog= (``/etc/slurm/prolog.d/*``)."""
    return any(c in path for c in "*?[")


def _program_path(conf: SlurmSettings, setting: str, name: str) -> str | None:
    """Where ``setting`` runs our ``name``: its path, unless that is a glob (every file
    there would run, events.sh too: a site with a prolog.d calls ours from its own)."""
    paths = conf.paths(setting)
    if len(paths) == 1 and not is_glob(paths[0]):
        return paths[0]
    return next((p for p in paths if Path(p).name == name), None)


PROGRAMS = (("Prolog", "prolog.sh"), ("Epilog", "epilog.sh"), ("TaskProlog", "task_prolog.sh"))


def lua_path(conf: SlurmSettings) -> str:
    """job_submit.lua's place: beside slurm.conf, the only place Slurm's lua plugin reads."""
    return os.path.join(str(Path(conf.conf_path).parent), "job_submit.lua")


def installed_lua(conf: SlurmSettings) -> tuple[str, dict[str, str]] | None:
    """(path, settings) of the installed job_submit.lua when Slurm loads it
    (``JobSubmitPlugins`` has lua) and it is ours; None when it is not loaded, missing,
    unreadable or not ours (doctor's checks say which)."""
    if "lua" not in conf.plugins("JobSubmitPlugins"):
        return None
    path = lua_path(conf)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    if version_of("job_submit.lua", text) == "not ours":
        return None
    return path, settings_in(text)


def targets(conf: SlurmSettings, dest: str | None = None) -> tuple[list[Target], list[str]]:
    """Where each script goes, and a line for each program slurm.conf does not place.

    job_submit.lua sits beside slurm.conf (the only place Slurm's lua plugin reads).
    Prolog, Epilog and TaskProlog go where slurm.conf names them, or into ``dest``;
    events.sh goes beside prolog.sh and epilog.sh, which source it. Modes as Slurm
    runs them: owned by root, writable by root only; programs executable by all
    (the TaskProlog runs as the job's user).
    """
    out = [Target("job_submit.lua", lua_path(conf), 0o644, "JobSubmitPlugins")]
    missing = []
    for setting, name in PROGRAMS:
        path = os.path.join(dest, name) if dest else _program_path(conf, setting, name)
        if path is None:
            missing.append(f"{setting} is not set in {conf.conf_path}: add "
                           f"{setting}=<dir>/{name} there, or pass --dest DIR"
                           if not conf.paths(setting) else
                           f"{setting}={conf.get(setting)} is not one file: pass --dest DIR "
                           f"and call DIR/{name} from your own {setting.lower()}")
            continue
        if not os.path.isabs(path):
            raise InputError(f"{path}: Slurm needs an absolute path", source=conf.conf_path,
                             field=setting)
        out.append(Target(name, path, 0o755, setting))
    beside = {str(Path(t.path).parent) for t in out if t.name in ("prolog.sh", "epilog.sh")}
    out += [Target("events.sh", os.path.join(d, "events.sh"), 0o644, "Prolog/Epilog")
            for d in sorted(beside)]
    taken: dict[str, Target] = {}
    for t in out:
        first = taken.setdefault(os.path.abspath(t.path), t)
        if first is not t:  # one file cannot be two scripts: the second would replace the first
            raise InputError(f"{t.path} is where {first.name} goes too ({first.setting}); "
                             f"give {t.setting} a file of its own", source=conf.conf_path,
                             field=t.setting)
    return out, missing


def check(target: Target, *, force: bool = False, writing: bool = True,
          slurm_uid: int | None = None) -> str | None:
    """What would keep ``install`` from writing ``target``, found before any script is
    written (InputError naming the file and setting): an existing file that is not ours
    (unless ``force``), a directory there, a parent that is not a directory, or a path
    the system refuses (too long, a read-only or virtual file system); with ``writing``
    off (a dry run, perhaps not as root) not whether it is writable. Returns the file's
    text for ``install`` to compare with, so it is read once (None: no file, or a forced
    dry run, which needs none). ``slurm_uid``: SlurmUser's, who may own job_submit.lua's
    folders (``script_owners``)."""
    path = Path(target.path)

    def refuse(why: str) -> InputError:
        return InputError(why, source=str(path), field=target.setting)

    try:
        if path.is_dir():
            raise refuse("is a directory")
        parent = next((p for p in path.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise refuse(f"{parent} is not a directory")
        needed = path.exists() and (writing or not force)  # a forced dry run reads nothing
        old = path.read_text(encoding="utf-8", errors="replace") if needed else None
        if old is not None and not force and version_of(target.name, old) == "not ours":
            raise refuse("exists and is not slurm-shockwave's (keep it and point "
                         f"{target.setting} elsewhere, or --force to replace it)")
        if writing and parent is not None and not os.access(parent, os.W_OK):
            raise refuse(f"{parent} is not writable")
        problem = (changeable_by_others(parent, script_owners(target.name, slurm_uid))
                   if parent is not None else None)
        if problem and target.name == "job_submit.lua":
            raise refuse(f"{problem}: slurmctld runs this script as SlurmUser, so whoever "
                         "can change its folder runs code as SlurmUser; pick a folder only "
                         "root or SlurmUser can write")
        if problem:  # found by a red-team: a folder a user owns took root's scripts
            raise refuse(f"{problem}: slurmd runs this script as root, so whoever can "
                         "change its folder gets root; pick a folder only root can write")
    except OSError as exc:
        raise refuse(f"cannot write here ({exc.strerror or exc})") from None
    return old


def make_dirs(folder: Path, mode: int = 0o755) -> None:
    """``folder`` and any missing folder above it, each made ``mode`` whatever the umask:
    a root umask of 027 made them 0750, and a TaskProlog there, which runs as the job's
    user, could not be reached (nor a heartbeat by slurmctld's SlurmUser). Folders that
    exist are left as they are."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir(exist_ok=True)
        os.chmod(made, mode)


def install(target: Target, text: str, old: str | None) -> tuple[bool, str]:
    """Write one script atomically with its mode and root as owner: whether it wrote it
    (``install-scripts`` asks for a reconfigure only then), and what was done. ``old`` is
    what ``check`` returned for it, called for every script before any is written (so an
    existing file that is not ours is left alone unless forced)."""
    path = Path(target.path)
    if old == text and _owned_as(path, target.mode):
        return False, f"unchanged {path}"
    try:
        make_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise InputError(f"cannot write here ({exc.strerror or exc})", source=str(path),
                         field=target.setting) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, target.mode)
        os.chown(tmp, 0, 0)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True, f"installed {path} ({oct(target.mode)[2:]}, root:root)"


def _owned_as(path: Path, mode: int) -> bool:
    st = path.stat()
    return st.st_uid == 0 and stat.S_IMODE(st.st_mode) == mode


def closed_folder(path: str) -> str | None:
    """The first folder above ``path`` that other users cannot search (no o+x), named with
    its mode; None when every one is open. A TaskProlog runs as the job's user: behind a
    0750 folder (a root umask of 027) it cannot run, and jobs get no SHOCKWAVE_URL."""
    for folder in Path(path).absolute().parents:
        try:
            mode = stat.S_IMODE(os.stat(folder).st_mode)
        except OSError:
            continue  # unusable_problem names a path that cannot be read
        if not mode & stat.S_IXOTH:
            return f"{folder} is not searchable by other users (mode {oct(mode)[2:]})"
    return None


def script_owners(name: str, slurm_uid: int | None) -> frozenset[int]:
    """Who may own the folders above a plugin script: root; for job_submit.lua, which
    goes beside slurm.conf, also SlurmUser, who runs it (a site may give it that folder:
    a review). No folder may be writable by another user or group (a later review:
    job_submit.lua's folders were not checked at all, so a folder anyone could write took
    it, and slurmctld ran whatever Lua was put in its place)."""
    if name == "job_submit.lua" and slurm_uid is not None:
        return frozenset({0, slurm_uid})
    return ROOT


def unusable_problem(path: str, *, executable: bool) -> str | None:
    """What keeps Slurm from running the file at all: missing, or not executable; None
    when it can (``unsafe_problem`` says whether it is safe to)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if executable and not st.st_mode & stat.S_IXOTH:
        return f"{path}: not executable by all (mode {oct(stat.S_IMODE(st.st_mode))[2:]})"
    return None


def unsafe_problem(path: str, *, owners: frozenset[int] = ROOT) -> str | None:
    """Why someone other than root could change the file Slurm runs (not root's,
    writable by group or others, or a folder above it another user may write, who could
    put their own file in its place: found by a red-team; ``owners``: who may own those
    folders); None when only root can, or when there is no file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid != 0:
        return f"{path}: owned by uid {st.st_uid}, not root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path}: writable by group or others (mode {oct(stat.S_IMODE(st.st_mode))[2:]})"
    problem = changeable_by_others(path, owners)
    return f"{path}: {problem}" if problem else None
