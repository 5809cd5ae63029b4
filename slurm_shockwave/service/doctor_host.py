"""Doctor's checks of this host: MUNGE, the store, and the service if it runs (its lock,
progress API, metrics and heartbeat). Nothing here takes the service's lock or writes."""

from __future__ import annotations

import os
import pwd
import sqlite3
import stat
import time
import urllib.request
from pathlib import Path

from slurm_shockwave.service import munge
from slurm_shockwave.service.doctor import Check, Expected, Status, ok
from slurm_shockwave.service.heartbeat import read_heartbeat
from slurm_shockwave.service.lock import lock_holder
from slurm_shockwave.service.progress_api import HEALTH_PATH, METRICS_PATH, parse_listen
from slurm_shockwave.service.store import MIGRATED, SCHEMA_VERSION
from slurm_shockwave.slurm.slurm_conf import SLURM_USER


def listen_check(listen: str) -> Check | None:
    """A warning for ``service.listen`` on port 0 (any free port): each start of the
    service takes another, and a running job keeps the URL its TaskProlog gave it, so
    after a restart its reports, checkpoint acknowledgements among them, go nowhere (a
    red-team: a job trained on past its checkpoint until its grace ran out, 5 epochs
    lost). None when the port is fixed, or the setting cannot be read (serve says so)."""
    try:
        host, port = parse_listen(listen)
    except ValueError:
        return None
    if port != 0:
        return None
    return Check("service.listen", Status.WARN,
                 f"{listen}: port 0, another at each start of the service, while running "
                 "jobs keep the URL they were given: after a restart their reports "
                 "(checkpoint acknowledgements among them) go nowhere",
                 f"service.listen: {f'[{host}]' if ':' in host else host}:7817, a port "
                 "of its own")


def munge_check() -> Check:
    """A credential made and read back by the local munged (jobs' reports need it)."""
    try:
        decoded = munge.decode(munge.encode(b"shockwave-doctor"))
    except munge.MungeError as exc:
        return Check("MUNGE", Status.FAIL, f"munge/unmunge round trip failed: {exc}",
                     "start munged (systemctl enable --now munge) with the cluster's "
                     "/etc/munge/munge.key")
    if decoded.payload != b"shockwave-doctor":
        return Check("MUNGE", Status.FAIL, "munged returned another payload",
                     "check munged and its key")
    return ok("MUNGE", f"round trip as uid {decoded.uid} ({munge.backend()})")


def store_check(path: str) -> Check:
    """The store can be written and has this release's schema (read without creating)."""
    store = Path(path)
    if not store.exists():
        parent = next((p for p in store.parents if p.exists()), Path("/"))
        if not parent.is_dir():  # serve refuses it: its lock cannot be made there
            return Check("store", Status.FAIL, f"{path}: {parent} is not a directory",
                         "service.store must be a path whose folders are folders")
        if not os.access(parent, os.W_OK):
            return Check("store", Status.FAIL, f"{path} does not exist and {parent} is not "
                         "writable", f"install -d -m 0755 {store.parent}")
        return ok("store", f"{path}: not created yet (the service makes it at first start)")
    if not os.access(store, os.R_OK | os.W_OK) or not os.access(store.parent, os.W_OK):
        return Check("store", Status.FAIL, f"{path} or its directory is not writable",
                     "run the service as root (or chown the directory to its user)")
    try:
        db = sqlite3.connect(f"{store.absolute().as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            rounds = db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error as exc:
        return Check("store", Status.FAIL, f"{path}: not a usable store ({exc})",
                     "move it away; the service starts a new one")
    if row is not None and row[0] in MIGRATED:
        return ok("store", f"{path}: schema {row[0]}, {rounds} rounds kept (the service "
                  f"brings it to schema {SCHEMA_VERSION} in place when it next starts)")
    if row is None or row[0] != str(SCHEMA_VERSION):
        return Check("store", Status.FAIL, f"{path}: schema version "
                     f"{row[0] if row else 'missing'}, this release reads {SCHEMA_VERSION}",
                     "use the release that wrote it, or move the store away")
    return ok("store", f"{path}: schema {SCHEMA_VERSION}, {rounds} rounds kept")


def service_checks(want: Expected, *, now_s: float | None = None,
                   slurm_user: str | None = None) -> list[Check]:
    """Is the service running (its lock), does its progress API answer, is the fail-open
    heartbeat fresh, and can slurmctld read it. ``slurm_user``: SlurmUser as
    ``scontrol show config`` prints it (``slurm(64030)``); None: unknown, so the
    heartbeat must be readable by every user."""
    out = _running_checks(want, time.time() if now_s is None else now_s)
    closed = heartbeat_closed(want.heartbeat, slurm_user)
    if closed is None:
        written = heartbeat_open(want.heartbeat)
        if written is None or out[-1].status != Status.OK:
            return out
        return [*out[:-1], Check("heartbeat", Status.WARN, f"{want.heartbeat}: {written[0]}: "
                                 "whoever can write it can name their uid as the "
                                 "service's (job_submit.lua then lets them release the "
                                 "planner's hold) or fail the partition open", written[1])]
    return [*out[:-1], Check("heartbeat", Status.FAIL, f"{want.heartbeat}: {closed[0]}: "
                             "job_submit.lua reads it inside slurmctld, so every new job "
                             "runs under Slurm alone (fail-open)", closed[1])]


def _running_checks(want: Expected, now: float) -> list[Check]:
    """The service's lock, progress API and heartbeat (the last check), read as root."""
    pid = lock_holder(want.store)
    beat = read_heartbeat(want.heartbeat)
    age = None if beat is None else now - beat[0]
    fresh = beat is not None and age is not None and age <= beat[1]
    if pid is None:
        return [Check("service", Status.WARN, f"not running (nobody holds {want.store}.lock)",
                      "systemctl enable --now slurm-shockwave"),
                Check("progress API", Status.SKIP, "the service is not running"),
                Check("heartbeat", Status.WARN,
                      f"{want.heartbeat}: " + ("missing: new jobs run under Slurm alone "
                                               "(fail-open)" if beat is None else
                                               f"{age:.0f} s old" + (", still fresh though "
                                               "the service is down" if fresh else
                                               ": stale, new jobs run under Slurm alone")),
                      "start the service; or, to give the partition back: shockwave "
                      "handback")]
    out = [ok("service", f"running (pid {pid})"), _api_check(want.endpoint_file)]
    if not fresh:
        out.append(Check("heartbeat", Status.FAIL, f"{want.heartbeat}: " +
                         ("missing" if beat is None else f"{age:.0f} s old, stale after "
                          f"{beat[1]} s") + ": the service runs but has not written it "
                         "(no round reached Slurm, or the file cannot be written): new jobs "
                         "run under Slurm alone",
                         "journalctl -u slurm-shockwave (Slurm unreachable? the heartbeat "
                         "not written? a dry run?)"))
    else:
        out.append(ok("heartbeat", f"{want.heartbeat}: {age:.0f} s old (stale after "
                      f"{beat[1] if beat else 0} s)"))
    return out


def _reader(slurm_user: str | None) -> tuple[str, int, set[int]] | None:
    """(name, uid, groups) of SlurmUser (``slurm(64030)``), None when unknown."""
    found = SLURM_USER.match(slurm_user or "")
    if found is None:
        return None
    name, uid = found[1], found[2]
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return (name, int(uid), set()) if uid else None
    return name, int(uid) if uid else entry.pw_uid, set(os.getgrouplist(name, entry.pw_gid))


def _allowed(st: os.stat_result, reader: tuple[str, int, set[int]] | None,
             bits: tuple[int, int, int]) -> bool:
    """Whether ``reader`` (None: any other user) has the permission ``bits`` (for the
    owner, the group, others) gives, as the kernel decides it (ACLs aside)."""
    if reader is None:
        return bool(st.st_mode & bits[2])
    if reader[1] == 0:
        return True
    if st.st_uid == reader[1]:
        return bool(st.st_mode & bits[0])
    return bool(st.st_mode & (bits[1] if st.st_gid in reader[2] else bits[2]))


def heartbeat_closed(heartbeat: str, slurm_user: str | None) -> tuple[str, str] | None:
    """(what, fix) when slurmctld's SlurmUser (None: unknown, so any user) cannot read
    the heartbeat: a folder above it that it cannot search (a 0700 one made by hand, or under
    root's umask 077) or the file itself; None when it can, or nothing is there yet.
    Doctor reads it as root, so a fresh heartbeat said ok while every new job failed
    open."""
    reader = _reader(slurm_user)
    who = f"SlurmUser {reader[0]}" if reader else "other users (SlurmUser unknown)"
    path = Path(heartbeat).absolute()
    for folder in reversed(path.parents):
        try:
            st = os.stat(folder)
        except OSError:
            break  # not made yet: the service makes it 0755
        if not _allowed(st, reader, (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)):
            return (f"{folder} is not searchable by {who} (mode "
                    f"{oct(stat.S_IMODE(st.st_mode))[2:]})", f"chmod o+x {folder}")
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not _allowed(st, reader, (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)):
        return (f"not readable by {who} (mode {oct(stat.S_IMODE(st.st_mode))[2:]})",
                f"chmod o+r {path}")
    return None


def heartbeat_open(heartbeat: str) -> tuple[str, str] | None:
    """(what, fix) when others than its owner may write the heartbeat (the file, or the
    folder the service renames it into), None when nobody may (ACLs aside), as
    ``heartbeat_closed``: its second line names the uid job_submit.lua takes for the
    service's (found by a review)."""
    path = Path(heartbeat).absolute()
    for what in (path.parent, path):
        try:
            mode = stat.S_IMODE(os.stat(what).st_mode)
        except OSError:
            continue
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (f"{what} is writable by others than its owner (mode {oct(mode)[2:]})",
                    f"chmod go-w {what}")
    return None


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Never $http_proxy, as the jobs' client (client/reporter.py): through an admin's
site proxy the check failed for a service that answers the nodes."""


def _api_check(endpoint_file: str) -> Check:
    try:
        url = Path(endpoint_file).read_text(encoding="ascii").split("\n", 1)[0].strip()
    except (OSError, UnicodeDecodeError) as exc:
        return Check("progress API", Status.FAIL, f"endpoint file {endpoint_file}: {exc}",
                     "service.endpoint_file must be where the service writes its URL")
    for path in (HEALTH_PATH, METRICS_PATH):
        try:
            with _NO_PROXY.open(url + path, timeout=5) as answer:
                answer.read()
        except OSError as exc:
            return Check("progress API", Status.FAIL, f"{url}{path}: {exc}",
                         "service.listen must be reachable from the nodes (firewall?)")
    return ok("progress API", f"{url} answers ({HEALTH_PATH}, {METRICS_PATH})")
