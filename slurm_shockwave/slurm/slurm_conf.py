"""Slurm's settings as the installer and ``shockwave doctor`` need them.

Two sources, one shape (a case-insensitive ``{key: value}`` mapping): the slurm.conf file
on disk, which the installer reads to know where the plugin scripts go (slurmctld need
not run), and ``scontrol show config``, the running controller's own view, which doctor
reads (a slurm.conf edited but not yet applied is not what Slurm does).
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurm_shockwave.workloads.input_files import read_text

DEFAULT_CONF = "/etc/slurm/slurm.conf"
DEFAULT_CRED_EXPIRE_S = 120
DEFAULT_MIN_JOB_AGE_S = 300
"""Slurm's default ``AuthInfo=cred_expire``: a requeued job waits this long + 1 s."""

_SHOW_LINE = re.compile(r"^(\S+)\s+=\s?(.*)$")
SLURM_USER = re.compile(r"^(\S+?)(?:\((\d+)\))?$")
"""SlurmUser as slurm.conf (``slurm``) or ``scontrol show config`` (``slurm(64030)``)
gives it: its name, and its uid where shown."""
_NULL = {"(null)", "(null type)", ""}


@dataclass(frozen=True)
class SlurmSettings:
    """Global settings (keys lower case) and each partition's own ``Key=Value`` pairs."""

    values: Mapping[str, str]
    partitions: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    source: str = ""

    def get(self, key: str, default: str = "") -> str:
        value = self.values.get(key.lower(), default)
        return default if value in _NULL else value

    def paths(self, key: str) -> list[str]:
        """A program setting (Prolog=, Epilog=, TaskProlog=): its comma-separated paths."""
        return [p.strip() for p in self.get(key).split(",") if p.strip()]

    def plugins(self, key: str) -> list[str]:
        """``JobSubmitPlugins=lua`` or ``job_submit/lua,...`` -> ["lua", ...]."""
        return [p.strip().rsplit("/", 1)[-1] for p in self.get(key).split(",") if p.strip()]

    def cred_expire_s(self) -> int:
        """``AuthInfo=cred_expire=N`` (Slurm's default 120 when not set)."""
        found = re.search(r"(?:^|,)cred_expire=(\d+)", self.get("AuthInfo"))
        return int(found.group(1)) if found else DEFAULT_CRED_EXPIRE_S

    def min_job_age_s(self) -> int:
        """``MinJobAge`` (``300 sec`` in scontrol's config; Slurm's default 300 when not
        set; 0: records never purged)."""
        found = re.match(r"\s*(\d+)", self.get("MinJobAge"))
        return int(found.group(1)) if found else DEFAULT_MIN_JOB_AGE_S

    @property
    def conf_path(self) -> str:
        return self.get("SLURM_CONF", self.source)


# Slurm's own (src/common/parse_config.c keyvalue_pattern): a value is a word, or
# double-quoted and then the quotes are not part of it
_PAIR = re.compile(r'(\S+?)=("[^"]*"|\S*)')


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def _pairs(line: str) -> dict[str, str]:
    return {key.lower(): _unquote(value) for key, value in _PAIR.findall(line)}


def _logical_lines(text: str) -> list[str]:
    """Lines as Slurm reads them: one ending in an odd number of backslashes goes on on
    the next (parse_config.c ``_get_next_line``)."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        tail = len(line) - len(line.rstrip("\\"))
        if tail % 2:
            pending += line[:-1]
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def read_slurm_conf(path: str | Path) -> SlurmSettings:
    """slurm.conf (and the files it ``Include``s, each once: ten self-includes nested
    eight deep were 10^8 reads); bad input names the file. A FIFO with no writer reads
    as empty rather than hanging."""
    values: dict[str, str] = {}
    partitions: dict[str, dict[str, str]] = {}
    seen: set[str] = set()
    # a relative Include is relative to slurm.conf's folder, in an included file too
    # (slurm.conf(5)); %c in its path is the ClusterName (INCLUDE MODIFIERS)
    home = Path(path).parent

    def read(file: Path, depth: int) -> None:
        if os.path.realpath(file) in seen:
            return
        seen.add(os.path.realpath(file))
        text = read_text(file, field="slurm.conf", lenient=True)
        for raw in _logical_lines(text):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            head = line.split(None, 1)
            if head[0].lower() == "include" and len(head) == 2 and depth < 8:
                name = _unquote(head[1].strip()).replace(
                    "%c", values.get("clustername", "").lower())
                target = Path(name)
                read(target if target.is_absolute() else home / target, depth + 1)
                continue
            key, sep, rest = line.partition("=")
            if not sep:
                continue
            if key.strip().lower() == "partitionname":
                pairs = _pairs(line)
                partitions.setdefault(pairs.get("partitionname", ""), {}).update(pairs)
            elif key.strip().lower() not in ("nodename", "nodeset", "downnodes",
                                             "frontendname", "switchname"):
                values[key.strip().lower()] = _unquote(rest.strip())

    read(Path(path), 0)
    values.setdefault("slurm_conf", str(path))
    return SlurmSettings(values, partitions, source=str(path))


def parse_show_config(text: str) -> SlurmSettings:
    """The output of ``scontrol show config`` (``Key = value`` lines)."""
    values = {}
    for line in text.splitlines():
        found = _SHOW_LINE.match(line)
        if found:
            values[found.group(1).lower()] = found.group(2).strip()
    return SlurmSettings(values, source="scontrol show config")


def parse_show_partitions(text: str) -> dict[str, dict[str, str]]:
    """``scontrol -o show partition`` -> {name: {key (lower case): value}}."""
    out = {}
    for line in text.splitlines():
        pairs = _pairs(line)
        if "partitionname" in pairs:
            out[pairs["partitionname"]] = pairs
    return out


def slurm_user_uid(conf: SlurmSettings) -> int | None:
    """The uid of the user slurmctld runs as (``SlurmUser``; Slurm's default root), None
    when the name is unknown here."""
    found = SLURM_USER.match(conf.get("SlurmUser") or "root")
    if found is None:
        return None
    if found[2]:
        return int(found[2])
    try:
        return pwd.getpwnam(found[1]).pw_uid
    except KeyError:
        return None
