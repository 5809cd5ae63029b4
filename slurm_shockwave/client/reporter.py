"""Tell the slurm-shockwave service how a training job is doing.

Standard library only and nothing else of slurm_shockwave: a training script may vendor
this one file. Nothing here raises or blocks for long (about 2 s at most per call): with no
service named or no Slurm job it does nothing; with the service unreachable, or named
but not found (an endpoint file named that is not there yet, a URL without its scheme),
it spools the report to ``$SHOCKWAVE_SPOOL`` and sends it, oldest first, with the next
call that gets through.

    from slurm_shockwave.client import reporter
    reporter.install()                        # early: the checkpoint signal's handler
    for epoch in range(start, epochs):
        train_one_epoch()
        reporter.report(epoch=epoch + 1, batch_size=bs, samples_per_s=rate)
        if reporter.should_checkpoint():
            save_checkpoint()
            reporter.checkpointed()           # then train on: do NOT exit (a job that
                                              # ends is COMPLETED, its epochs lost); the
                                              # service's requeue ends this process

Environment (the TaskProlog exports the SHOCKWAVE_* ones):

- ``SHOCKWAVE_URL`` the service, else ``SHOCKWAVE_ENDPOINT_FILE`` a file holding it;
- ``SLURM_JOB_ID``, ``SLURM_RESTART_COUNT`` (set by Slurm);
- ``SHOCKWAVE_SIGNAL`` the checkpoint signal (``USR1``); unset: never asked to checkpoint;
- ``SHOCKWAVE_SPOOL`` a directory owned by the job's user (not group/other writable);
- ``SHOCKWAVE_SERVICE_UID`` the uid the service runs as (root is always trusted; the
  owner of ``SHOCKWAVE_ENDPOINT_FILE`` too when the URL comes from it).

Each request carries a fresh MUNGE credential whose payload is the hex SHA-256 of the
body (libmunge through ctypes, else the ``munge`` command). The service answers with a
credential of its own over the answer and this request's credential
(``answer_payload``); an answer without one that decodes, made by root or the service's
uid, is no answer: whoever holds the service's port while it is down cannot swallow
reports nor ask for checkpoints.

The service's answer to a progress report says whether it has asked this run of the job to
checkpoint and waits for the acknowledgement; ``should_checkpoint()`` then turns true as if
the signal had come. A signal sent while the job was starting is lost when Slurm sends it
before the batch step runs, or while the batch script ignores it until ``install()`` (as
``trap '' USR1`` does; without that, SIGUSR1's default action kills the job, and the
service requeues it to restart from its last checkpoint): this is how the job still hears
of it, at its next report.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import hashlib
import http.client
import itertools
import json
import math
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["check", "checkpointed", "end", "flush_spool", "flush_spools", "install", "report",
           "should_checkpoint"]

TIMEOUT_S = 2.0
MIN_SEND_S = 0.5  # a spooled report is not sent with less time than this left for it
CRED_HEADER = "X-Munge-Credential"
ANSWER_HEADER = "X-Munge-Answer"  # the service's credential over its answer
# the report's own name, the same each time it is sent (its spooled file's), which the
# service keeps once: a report sent again, its answer not believed or too late, was
# stored twice, and a spool sent to a service whose answers the job cannot believe stored
# its oldest report again at every call
KEY_HEADER = "X-Shockwave-Report"
KEY_PATTERN = re.compile(r"[0-9]{1,20}-[0-9]{1,10}-[0-9]{1,12}")
MAX_BODY = 4096
MAX_SPOOLED = 10_000
MAX_ENDPOINT = 4096  # an endpoint file holds one URL

# A report's numeric fields and their bounds: the one definition, which the service
# (slurm_shockwave/service/progress_api.py) checks every body against too. The client
# drops a report with a value outside them instead of sending it to be refused (400) or,
# with the service away, spooling it to be refused later.
INT_LIMITS: dict[str, tuple[int, int]] = {
    "job_id": (1, 2**32 - 1),  # a Slurm job id: uint32, 0 is no job (model.bounds.MAX_SLURM_ID)
    "batch_size": (1, 10_000_000),
    "restart_count": (0, 1_000_000),
    "exit_code": (-255, 255),
}
FLOAT_LIMITS: dict[str, float] = {  # from 0 to this, finite; ints are numbers too
    "epoch": 1e6,
    "samples_per_s": 1e9,
    "age_s": 7 * 86400.0,  # a spooled report's age: the service dates it back
}

_state_lock = threading.Lock()
_checkpoint = threading.Event()
_installed = False
_seq = itertools.count(1)


# -- the checkpoint signal ------------------------------------------------------------------

def _signal_number(name: str | None) -> int | None:
    if not name:
        return None
    name = name.strip().upper()
    if name.isdigit():
        return int(name)
    try:
        return int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    except KeyError:
        return None


def install() -> bool:
    """Install the handler of ``$SHOCKWAVE_SIGNAL`` (once; from the main thread). Call it
    early: until then the signal's default action applies (SIGUSR1's kills). True if a
    handler is in place."""
    global _installed
    if _installed:  # every report calls this: no lock once done (a fork may hold it)
        return True
    try:
        with _state_lock:
            if _installed:
                return True
            signum = _signal_number(os.environ.get("SHOCKWAVE_SIGNAL"))
            if signum is None:
                return False
            previous = signal.getsignal(signum)

            def on_signal(num: int, frame: FrameType | None) -> None:
                _checkpoint.set()
                # a handler of the script's own goes on being called, but never Python's
                # SIGINT default: with signal=INT it raised KeyboardInterrupt in the
                # training loop, which died without its checkpoint
                if callable(previous) and previous is not signal.default_int_handler:
                    previous(num, frame)

            signal.signal(signum, on_signal)
            # at exit Python puts the default action back (SIGUSR1's kills) before the
            # process is gone: a signal sent as the job finishes would turn a finished
            # job into a failed one (seen live). Ignore it from the end of the program on.
            atexit.register(_ignore, signum)
            _installed = True
            return True
    except Exception:  # not the main thread, a signal Python cannot catch: no handler
        return False


def _new_locks() -> None:
    """In a forked child: locks of its own. One another thread of the parent held as it
    forked (a warning, a report's count, libmunge's loader) stayed held for ever in the
    child, whose reports then blocked (found by a red-team)."""
    global _state_lock, _libmunge_lock
    _state_lock = threading.Lock()
    _libmunge_lock = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks)


def _ignore(signum: int) -> None:
    with contextlib.suppress(Exception):
        signal.signal(signum, signal.SIG_IGN)


def should_checkpoint() -> bool:
    """True once the checkpoint signal arrived (until ``checkpointed()``)."""
    install()
    return _checkpoint.is_set()


# -- what a job reports ---------------------------------------------------------------------

def check(name: str, value: object) -> str | None:
    """Why the service would refuse ``value`` as the report's field ``name`` (``must be
    ...``), or None when it takes it. Only the numeric fields are checked; null is the
    caller's business (``job_id`` must not be null, the others may)."""
    if name in INT_LIMITS:
        lo, hi = INT_LIMITS[name]
        if not isinstance(value, int) or isinstance(value, bool):
            return "must be an integer"
        return None if lo <= value <= hi else f"must be from {lo} to {hi}"
    if name in FLOAT_LIMITS:
        top = FLOAT_LIMITS[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return "must be a number"
        try:
            number = float(value)
        except OverflowError:  # an int too big for a float
            number = math.inf
        ok = math.isfinite(number) and 0 <= number <= top
        return None if ok else f"must be from 0 to {top:g}, finite"
    return None


def report(epoch: float | None = None, batch_size: int | None = None,
           samples_per_s: float | None = None) -> bool:
    """Progress: epochs done over the whole job (fractions allowed), the batch size now,
    the throughput. True if the service took it. Its answer may ask for a checkpoint
    (``should_checkpoint()``), when the job handles the checkpoint signal."""
    return _send("progress", epoch=epoch, batch_size=batch_size, samples_per_s=samples_per_s)


def checkpointed() -> bool:
    """The checkpoint after the signal is saved: the service may requeue the job now."""
    _checkpoint.clear()
    return _send("checkpointed")


def end(exit_code: int) -> bool:
    """The job ended (from the epilog): its exit code."""
    return _send("end", exit_code=exit_code)


def _send(kind: str, **fields: Any) -> bool:
    try:
        install()
        return _Client(os.environ).send(kind, fields)
    except Exception:
        return False


def flush_spool(spool_dir: str | None = None, job_id: int | None = None) -> int:
    """Send the spooled reports of ``job_id`` (default ``$SLURM_JOB_ID``) found in
    ``spool_dir`` (default ``$SHOCKWAVE_SPOOL``), oldest first; how many were sent. As
    root (the epilog) the directory may belong to the job's user: only files whose body
    names ``job_id`` are sent."""
    return flush_spools([spool_dir], job_id)[0]


def flush_spools(spool_dirs: Sequence[str | None], job_id: int | None = None, *,
                 seconds: float = TIMEOUT_S) -> tuple[int, bool]:
    """``flush_spool`` of several directories (the epilog: every spool a job's tasks
    made) within ``seconds`` in all: (reports sent, service reachable). Stops at the
    first directory whose service does not answer, so that a service that hangs costs
    one send's timeout, not one per directory."""
    sent, deadline = 0, time.monotonic() + seconds
    for spool_dir in spool_dirs:
        try:
            env = dict(os.environ)
            if spool_dir is not None:
                env["SHOCKWAVE_SPOOL"] = spool_dir
            if job_id is not None:
                env["SLURM_JOB_ID"] = str(job_id)
            client = _Client(env)
            if client.job_id is None or (client.url is None and client.unfound is None):
                return sent, True  # no service to ask: nothing was refused either
            count, reachable = client.flush(deadline)
        except Exception:
            continue
        sent += count
        if not reachable:
            return sent, False
    return sent, True


class _Client:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.url = _service_url(env)
        self.unfound = None if self.url is not None else _unfound(env)
        """Why a service named is not found (None: found, or none named as one): a
        ``$SHOCKWAVE_URL`` that is no http(s) URL, or an endpoint file named that is not
        there yet. Its reports are spooled, not dropped without a word (a red-team). An
        endpoint file that is there but no short regular file is no service."""
        self.trusted = _service_uids(env)
        self.job_id = _int_env(env, "SLURM_JOB_ID")
        self.spool = env.get("SHOCKWAVE_SPOOL") or None

    def send(self, kind: str, fields: Mapping[str, Any]) -> bool:
        if self.job_id is None or (self.url is None and self.unfound is None):
            return False  # not a job of a service's: nothing to do
        body = {"job_id": self.job_id, "kind": kind,
                "restart_count": _int_env(self.env, "SLURM_RESTART_COUNT") or 0,
                **{k: v for k, v in fields.items() if v is not None}}
        for name, value in body.items():
            why = check(name, value)
            if why is not None:  # the service would refuse it: not sent, not spooled
                _warn(f"dropping the {kind} report: {name} {value!r} {why}")
                return False
        data = json.dumps(body, sort_keys=True, separators=(",", ":"),
                          allow_nan=False).encode()
        key = _new_key()
        if self.url is None:  # named but not found: kept for the next call that finds it
            _warn_once("unfound", f"no service to send to ({self.unfound}): reports are "
                       + ("spooled" if self.spool else "dropped ($SHOCKWAVE_SPOOL unset)"))
            self._spool(data, key)
            return False
        deadline = time.monotonic() + TIMEOUT_S
        try:
            _sent, reachable = self.flush(deadline)
        except Exception:  # whatever the spool holds, this report is sent or spooled
            reachable = True
        if reachable:
            outcome, answer = _post(self.url, data, deadline, self.trusted, key)
            if outcome != "unreachable":
                if answer.get("checkpoint") is True and kind == "progress" and _installed:
                    _checkpoint.set()  # the signal this run may have missed
                return outcome == "accepted"
        self._spool(data, key)
        return False

    # -- the spool ----------------------------------------------------------------------------
    def _spool_dir(self, *, create: bool = False) -> Path | None:
        """The spool directory if it is safe (``_safe_dir``)."""
        if not self.spool:
            return None
        path = Path(self.spool)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create:
                return None
            try:
                os.mkdir(path, 0o700)
                st = os.lstat(path)
            except OSError:
                return None
        except OSError:
            return None
        return path if _safe_dir(st, self.env) else None

    def _open_spool(self) -> int | None:
        """The spool directory opened (never through a symlink) and checked on what was
        opened: every later step works in that directory through the descriptor, so a
        user cannot swap the path for a symlink between root's check and its renames and
        deletions (the epilog flushes the user's spool as root)."""
        if not self.spool:
            return None
        try:
            fd = os.open(self.spool, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return None
        if not _safe_dir(os.fstat(fd), self.env):
            os.close(fd)
            return None
        return fd

    def _spool(self, data: bytes, key: str) -> None:
        path = self._spool_dir(create=True)
        if path is None:
            if self.spool:  # configured, but a file, a symlink or writable by others
                _warn_once("unsafe", f"the service is away and the spool {self.spool!r} is "
                           "no directory of this user's alone: reports are dropped")
            return
        if os.geteuid() == 0 and os.lstat(path).st_uid != 0:
            return  # root never writes into a user's directory
        with contextlib.suppress(OSError):
            with os.scandir(path) as entries:  # counts no further than the cap
                if sum(1 for _ in itertools.islice(entries, MAX_SPOOLED)) >= MAX_SPOOLED:
                    _warn_once("full", f"the service is away and the spool {self.spool!r} "
                               f"holds {MAX_SPOOLED} reports: later ones are dropped")
                    return
            name = f"{key}-{self.job_id}.json"
            fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         0o600)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
            except OSError as exc:  # a full disk: an empty file was left, counted, never sent
                with contextlib.suppress(OSError):
                    os.unlink(path / name)
                _warn_once("unwritten", f"the service is away and a report could not be "
                           f"written to the spool {self.spool!r} ({exc.strerror}): dropped")

    def flush(self, deadline: float) -> tuple[int, bool]:
        """(reports sent, service reachable): this job's spooled reports, oldest first;
        stops at the first the service cannot take now (it stays) or at the deadline.

        Threads and processes (the ranks of a job, the epilog) may flush one spool at
        once: each file is claimed before it is sent, by renaming it to a name of the
        claimant's (``_claim``); only the one whose rename succeeds sends it, and the
        others stop at a file someone is sending (the claimant goes on in order). A send
        that fails renames it back; a claim whose claimant is gone is taken over
        (``_stale``)."""
        if self.url is None:  # a service named but not found has not answered
            return 0, self.unfound is None
        spool = self._open_spool()
        if spool is None:
            return 0, True
        try:
            return self._flush(spool, self.url, deadline)
        finally:
            os.close(spool)

    def _flush(self, spool: int, url: str, deadline: float) -> tuple[int, bool]:
        """``flush`` in the spool directory open as ``spool``."""
        sent = 0
        suffix = f"-{self.job_id}.json"
        try:
            found: list[tuple[str, str, bool]] = []  # (spooled name, name now, being sent)
            for entry in os.scandir(spool):
                if entry.name.endswith(suffix):
                    found.append((entry.name, entry.name, False))
                else:
                    claim = _CLAIMED.fullmatch(entry.name)
                    if claim and claim["name"].endswith(suffix):
                        found.append((claim["name"], entry.name, not _stale(claim)))
        except OSError:
            return 0, True
        for name, now, busy in sorted(found):
            # a report the service stores but answers after the client's timeout is
            # spooled again and sent twice: none is sent with only a moment left for it
            if busy or deadline - time.monotonic() < MIN_SEND_S:
                return sent, True
            data = _read_spooled(spool, now)
            if data is None or _body_job(data) != self.job_id:
                continue  # not this job's (or not a report): left alone
            claimed = _claim(spool, now, name)
            if claimed is None:
                return sent, True  # another thread or process took it first: it goes on
            outcome = "unreachable"
            try:
                outcome, _answer = _post(url, _with_age(data, name), deadline,
                                         self.trusted, name.removesuffix(suffix))
            finally:
                with contextlib.suppress(OSError):
                    if outcome == "unreachable":  # it stays, as it was
                        os.rename(claimed, name, src_dir_fd=spool, dst_dir_fd=spool)
                    else:  # accepted, or refused for good (a 4xx)
                        os.unlink(claimed, dir_fd=spool)
            if outcome == "unreachable":
                return sent, False
            sent += outcome == "accepted"
        return sent, True


# A spooled file claimed for sending: <spooled name>.<claim time ns>.<pid>.<thread>.<host>
# .claim. A claim is taken over (sent again) once its claimant is gone: a process of this
# host that no longer runs (the epilog, after the job's processes are killed mid-send), or
# any claim older than CLAIM_STALE_S (a sender has TIMEOUT_S for its credential and its
# POST together). A claimant that dies after the service took the report but before
# it deleted the file has it sent twice; nothing else does.
CLAIM_STALE_S = 30.0
_CLAIMED = re.compile(r"(?P<name>[^/]+\.json)\.(?P<ns>[0-9]{1,20})\.(?P<pid>[0-9]{1,10})"
                      r"\.[0-9]{1,20}\.(?P<host>[A-Za-z0-9_-]{0,64})\.claim")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:64]


def _safe_dir(st: os.stat_result, env: Mapping[str, str]) -> bool:
    """A real directory (not a symlink) writable by nobody else, owned by us; for root (the
    epilog), by the job's user, ``$SLURM_JOB_UID``, when given (else by anyone). Another
    user may make a job's spool first (job ids are predictable): to read its reports, or
    to have root forward reports of its own."""
    uid = os.geteuid()
    owner = _int_env(env, "SLURM_JOB_UID") if uid == 0 else uid
    return (stat.S_ISDIR(st.st_mode) and (owner is None or st.st_uid == owner)
            and not st.st_mode & 0o022)


def _claim(spool: int, now: str, name: str) -> str | None:
    """Rename the spooled file ``now`` (its spooled name ``name``) in the directory open
    as ``spool`` to a claim of this thread's, atomically: the claim's name, or None if
    someone else got it first."""
    claimed = (f"{name}.{time.time_ns()}.{os.getpid()}.{threading.get_ident()}."
               f"{_host()}.claim")
    try:
        os.rename(now, claimed, src_dir_fd=spool, dst_dir_fd=spool)
    except OSError:
        return None
    return claimed


def _stale(claim: re.Match[str]) -> bool:
    """Whether the claimant of a claimed file is gone (see CLAIM_STALE_S)."""
    if (time.time_ns() - int(claim["ns"])) / 1e9 > CLAIM_STALE_S:
        return True
    pid = int(claim["pid"])
    if claim["host"] != _host() or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or no pid there can be
        return True
    except OSError:  # EPERM: it runs, as someone else
        return False
    return False


_warned: set[str] = set()


def _warn_once(reason: str, text: str) -> None:
    """_warn, once a process for each reason: a job reports every epoch."""
    with _state_lock:
        if reason in _warned:
            return
        _warned.add(reason)
    _warn(text)


def _warn(text: str) -> None:
    """One line on stderr (a job's stderr may be closed: then nothing)."""
    with contextlib.suppress(Exception):
        sys.stderr.write(f"shockwave reporter: {text}\n")
        sys.stderr.flush()


def _with_age(data: bytes, name: str) -> bytes:
    """The spooled body with ``age_s``, the seconds since it was spooled (the file name
    starts with that time in ns): the service dates the report back, so an epoch time is
    not measured between reports flushed together, nor a stale ack taken as fresh."""
    try:
        age = max(0.0, (time.time_ns() - int(name.split("-", 1)[0])) / 1e9)
        body = json.loads(data)
        body["age_s"] = round(min(age, FLOAT_LIMITS["age_s"]), 3)
        return json.dumps(body, sort_keys=True, separators=(",", ":"),
                          allow_nan=False).encode()
    except (ValueError, TypeError, AttributeError):
        return data


def _read_spooled(spool: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=spool)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory, a FIFO: not a report
            return None
        data = os.read(fd, MAX_BODY + 1)
    except OSError:
        return None
    finally:
        os.close(fd)  # a directory in the spool leaked one per call (a red-team)
    return data if len(data) <= MAX_BODY else None


def _body_job(data: bytes) -> int | None:
    try:
        value = json.loads(data).get("job_id")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- where, who ---------------------------------------------------------------------------

def _int_env(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    # ASCII digits only: int() and str.isdigit() take any script's digits ("\uff15" is 5)
    return int(value) if value.isascii() and value.isdigit() else None


def _service_url(env: Mapping[str, str]) -> str | None:
    url = env.get("SHOCKWAVE_URL", "").strip()
    if not url and env.get("SHOCKWAVE_ENDPOINT_FILE"):
        data = _read_endpoint(env["SHOCKWAVE_ENDPOINT_FILE"])
        try:
            url = data.decode("ascii").strip() if data is not None else ""
        except UnicodeDecodeError:
            return None
    return url.rstrip("/") if url.startswith(("http://", "https://")) else None


def _unfound(env: Mapping[str, str]) -> str | None:
    """Why the service ``env`` names is not found, or None where it names none."""
    if env.get("SHOCKWAVE_URL", "").strip():
        return "$SHOCKWAVE_URL is no http:// or https:// URL"
    path = env.get("SHOCKWAVE_ENDPOINT_FILE")
    try:
        missing = bool(path) and not os.path.lexists(path or "")
    except ValueError:  # a NUL in the path
        missing = False
    return "$SHOCKWAVE_ENDPOINT_FILE is not there yet" if missing else None


def _service_uids(env: Mapping[str, str]) -> frozenset[int]:
    """Whose credentials an answer may carry: root's, ``$SHOCKWAVE_SERVICE_UID`` (the
    TaskProlog exports the endpoint file's owner) and, when the URL is read from
    ``$SHOCKWAVE_ENDPOINT_FILE`` here (the epilog), that file's owner: the service
    writes it."""
    uids = {0}
    named = _int_env(env, "SHOCKWAVE_SERVICE_UID")
    if named is not None:
        uids.add(named)
    path = env.get("SHOCKWAVE_ENDPOINT_FILE")
    if path and not env.get("SHOCKWAVE_URL", "").strip():
        with contextlib.suppress(OSError, ValueError):
            st = os.stat(path)
            if stat.S_ISREG(st.st_mode):
                uids.add(st.st_uid)
    return frozenset(uids)


def _read_endpoint(path: str) -> bytes | None:
    """The endpoint file's bytes, if it is a regular file of at most MAX_ENDPOINT bytes;
    else None (no service), as if it were missing. Never reads a device (``/dev/zero``
    would never end) and never waits on a FIFO with no writer (its open would block)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # not opened at all: opening some devices does things
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # swapped for something else since the stat
        data = b""
        while len(data) <= MAX_ENDPOINT:
            chunk = os.read(fd, MAX_ENDPOINT + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= MAX_ENDPOINT else None


def _new_key() -> str:
    """A report's name (``KEY_HEADER``), which its spooled file keeps: the time in ns (the
    spool is sent oldest first by it, and ``_with_age`` reads it), the process and a
    count of this process's (no lock: a signal handler reporting must not wait on one)."""
    return f"{time.time_ns():020d}-{os.getpid()}-{next(_seq):06d}"


def _post(url: str, data: bytes, deadline: float,
          trusted: frozenset[int] = frozenset({0}), key: str = ""
          ) -> tuple[str, dict[str, Any]]:
    """``accepted``, ``refused`` (a 4xx: sending it again would not help) or
    ``unreachable`` (no answer by ``deadline``, a 5xx, no credential could be made by
    then, or the answer is not the service's: see ``_vouched``, with ``trusted`` the uids
    the service may run as); with the service's JSON answer when it took the report (else
    empty).

    The credential and the exchange run on a daemon thread, waited for until
    ``deadline``: a socket's timeout bounds each read, not the name lookup nor a status
    line and headers sent a byte at a time, and libmunge has no deadline of ours (a munged
    that accepts and never answers held a call 10 s); each held a training loop far past
    its 2 s. A credential made too late is not sent: the caller has spooled the report. A
    202 vouched for before the deadline counts as taken, its answer cut short or not."""
    done: list[tuple[str, dict[str, Any]]] = []
    took = threading.Event()

    def exchange() -> None:
        try:
            cred = _credential(hashlib.sha256(data).hexdigest().encode(), deadline)
            if cred is None or time.monotonic() >= deadline:
                done.append(("unreachable", {}))
                return
            done.append(_exchange(url, data, cred, deadline, took, trusted, key))
        except Exception:  # refused connection, timeout, DNS, a reset
            done.append(("unreachable", {}))
        finally:
            _CONNECTIONS.pop(threading.get_ident(), None)

    worker = threading.Thread(target=exchange, name="shockwave-report", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if done:
        return done[0]
    held = _CONNECTIONS.pop(worker.ident or 0, None)
    if held is not None:
        held.abandoned = True
        if held.sock is not None:
            with contextlib.suppress(OSError):  # its blocked read returns: the thread ends
                held.sock.shutdown(socket.SHUT_RDWR)
    return ("accepted", {}) if took.is_set() else ("unreachable", {})


class _EveryStatus(urllib.request.HTTPErrorProcessor):
    """Every status is read as an answer (its credential says whose), never raised as an
    error nor followed as a redirect."""

    def http_response(self, request: urllib.request.Request, response: Any) -> Any:
        return response

    https_response = http_response


# Never a proxy: a job's $http_proxy (set for pip or a tracker) would carry its reports
# and credentials to the site's proxy, whose 403 for an inner address read as a refusal
# and dropped them with the spool.
_CONNECTIONS: dict[int, _Tracked] = {}
"""Each report thread's open connection, by thread: ``_post`` closes one it stopped
waiting for. A socket's timeout bounds each read, so a status line sent a byte a second
held the thread and its socket for ever: one of each leaked per report (found by a
red-team: a job reporting every minute would reach its file limit in a day)."""


class _Tracked(http.client.HTTPConnection):
    abandoned = False

    def connect(self) -> None:
        _CONNECTIONS[threading.get_ident()] = self  # before: a connect may outlast the wait
        super().connect()
        if self.abandoned:  # given up on while it connected
            self.close()
            raise OSError("the report was given up on")


class _TrackedHTTP(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_Tracked, req)


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}), _TrackedHTTP(),
                                        _EveryStatus())


def _exchange(url: str, data: bytes, cred: str, deadline: float, took: threading.Event,
              trusted: frozenset[int], key: str = "") -> tuple[str, dict[str, Any]]:
    timeout = max(0.1, min(TIMEOUT_S, deadline - time.monotonic()))  # what the credential left
    headers = {"Content-Type": "application/json", CRED_HEADER: cred}
    if KEY_PATTERN.fullmatch(key):  # a spooled file of an earlier client's: no name
        headers[KEY_HEADER] = key
    request = urllib.request.Request(f"{url}/v1/report", data=data, method="POST",
                                     headers=headers)
    with _NO_PROXY.open(request, timeout=timeout) as resp:
        status = resp.status
        if status != 202 and not 400 <= status < 500:
            return "unreachable", {}  # a 5xx, or nothing the service answers
        digest = _vouched(resp.headers.get(ANSWER_HEADER), status, cred, trusted, deadline)
        if digest is None:
            _warn_once("unverified", f"an answer from {url} is not the service's (no "
                       "credential of root's or the service's uid over it): reports are "
                       "spooled until the service answers")
            return "unreachable", {}
        if status != 202:
            _warn_refused(url, status, resp, digest, deadline)
            return "refused", {}
        took.set()
        try:
            return "accepted", _vouched_answer(resp, digest, deadline)
        except Exception:  # taken: an unreadable answer must not send it twice
            return "accepted", {}


def _vouched_answer(resp: Any, digest: bytes, deadline: float) -> dict[str, Any]:
    """The answer's JSON object, read by ``deadline``, where the credential vouches for
    its body; an answer cut short, or not the one vouched for, says nothing (empty)."""
    body = _body(resp, deadline)
    return _answer(body) if hashlib.sha256(body).hexdigest().encode() == digest else {}


def _warn_refused(url: str, status: int, resp: Any, digest: bytes, deadline: float) -> None:
    """Say once a process for each status and field why the service refused a report
    (its answer's error and field, where the credential vouches for it): the report is
    dropped, and a job reporting for another user's job id, or a value out of range,
    was told nothing (a user walkthrough)."""
    why: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        why = _vouched_answer(resp, digest, deadline)
    field, error = (_printable(str(why.get(k, ""))) for k in ("field", "error"))
    said = f": {field}: {error}" if error else ""
    _warn_once(f"refused {status} {field}", f"{url} refused a report ({status}{said}); it "
               "is dropped, not sent again")


def _printable(text: str, most: int = 200) -> str:
    """At most ``most`` printable ASCII characters of ``text``: a line of the job's log."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:most])


def answer_payload(status: int, credential: str, body: bytes) -> bytes:
    """What the service's credential over an answer (``ANSWER_HEADER``) holds: the status,
    the hex SHA-256 of the request's credential (this request's answer, no other's) and
    of the answer's body, space-separated. The one definition: the service makes it with
    this function."""
    return b"%d %s %s" % (status, hashlib.sha256(credential.encode()).hexdigest().encode(),
                          hashlib.sha256(body).hexdigest().encode())


def _vouched(header: str | None, status: int, cred: str, trusted: frozenset[int],
             deadline: float) -> bytes | None:
    """The hex SHA-256 of the answer's body that the answer's credential ``header``
    vouches for, if munged decodes it (not forged, not expired, not seen before), a uid
    in ``trusted`` made it and it answers this request (``cred``) with this ``status``;
    else None."""
    if not header or len(header) > 8192:
        return None
    decoded = _decode(header.strip(), deadline)
    if decoded is None or decoded[0] not in trusted:
        return None
    head, _, digest = decoded[1].rpartition(b" ")
    expected, _, _ = answer_payload(status, cred, b"").rpartition(b" ")
    return digest if head == expected and len(digest) == 64 else None


def _body(resp: Any, deadline: float) -> bytes:
    """The answer, at most MAX_BODY bytes, read by ``deadline``: the socket's timeout is
    per read, so a server trickling a byte at a time held a report far past it."""
    parts: list[bytes] = []
    got = 0
    while got < MAX_BODY:
        if time.monotonic() >= deadline:
            raise TimeoutError("the answer came too slowly")
        chunk = resp.read1(MAX_BODY - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _answer(data: bytes) -> dict[str, Any]:
    """The answer's JSON object; an older service's or a garbled one reads as empty."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# -- MUNGE ----------------------------------------------------------------------------------

_libmunge: Any = None
_libmunge_tried = False
_libmunge_lock = threading.Lock()


def munge_library() -> Any:
    """``(libmunge, libc)`` through ctypes, their prototypes set, or None without
    libmunge. The one loader: the service's ``service/munge.py`` uses it too."""
    global _libmunge, _libmunge_tried
    with _libmunge_lock:
        if not _libmunge_tried:
            _libmunge_tried = True
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("munge") or "libmunge.so.2")
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_char_p),
                                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
                lib.munge_encode.restype = ctypes.c_int
                lib.munge_decode.argtypes = [ctypes.c_char_p, ctypes.c_void_p,
                                             ctypes.POINTER(ctypes.c_void_p),
                                             ctypes.POINTER(ctypes.c_int),
                                             ctypes.POINTER(ctypes.c_uint),
                                             ctypes.POINTER(ctypes.c_uint)]
                lib.munge_decode.restype = ctypes.c_int
                lib.munge_strerror.argtypes = [ctypes.c_int]
                lib.munge_strerror.restype = ctypes.c_char_p
                libc.free.argtypes = [ctypes.c_void_p]
                libc.free.restype = None
                _libmunge = (lib, libc)
            except (OSError, AttributeError):
                _libmunge = None
        return _libmunge


def lib_encode(lib: Any, payload: bytes) -> tuple[int, str | None]:
    """libmunge's ``munge_encode`` of ``payload``: its code, and the credential when 0."""
    munge, libc = lib
    cred = ctypes.c_char_p()
    code = munge.munge_encode(ctypes.byref(cred), None, payload or None, len(payload))
    try:
        return code, (cred.value.decode("ascii") if code == 0 and cred.value else None)
    finally:
        if cred:
            libc.free(ctypes.cast(cred, ctypes.c_void_p))


def lib_decode(lib: Any, cred: str) -> tuple[int, int, int, bytes]:
    """libmunge's ``munge_decode`` of ``cred`` (ASCII): its code, uid, gid and payload."""
    munge, libc = lib
    buf = ctypes.c_void_p()
    length = ctypes.c_int(0)
    uid = ctypes.c_uint(0)
    gid = ctypes.c_uint(0)
    code = munge.munge_decode(cred.encode("ascii"), None, ctypes.byref(buf),
                              ctypes.byref(length), ctypes.byref(uid), ctypes.byref(gid))
    try:
        payload = ctypes.string_at(buf, length.value) if buf and length.value > 0 else b""
    finally:
        if buf:
            libc.free(buf)
    return code, int(uid.value), int(gid.value), payload


def _credential(payload: bytes, deadline: float) -> str | None:
    """A fresh credential for ``payload`` as this process's uid, or None. Called on
    ``_post``'s thread, which its caller waits for until ``deadline`` only (libmunge may
    block for 10 s); the ``munge`` command (without libmunge) is killed at ``deadline``."""
    lib = munge_library()
    if lib is not None:
        _code, cred = lib_encode(lib, payload)
        if cred is not None:
            return cred
    try:
        out = subprocess.run(["munge", "-s", payload.decode()], capture_output=True,
                             timeout=max(0.1, deadline - time.monotonic()), check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.decode(errors="replace").strip()
    return text if out.returncode == 0 and text.startswith("MUNGE:") else None


def _decode(cred: str, deadline: float) -> tuple[int, bytes] | None:
    """The uid and payload munged vouches for in ``cred`` (it refuses a forged, expired or
    replayed one: None), through libmunge, else the ``unmunge`` command killed at
    ``deadline``. Like ``_credential``, on ``_post``'s thread."""
    if not cred.isascii() or "\n" in cred or "\0" in cred:
        return None
    lib = munge_library()
    if lib is not None:
        code, uid, _gid, payload = lib_decode(lib, cred)
        return (uid, payload) if code == 0 else None
    try:
        out = subprocess.run(["unmunge", "--numeric", "--keys=UID"], input=cred.encode(),
                             capture_output=True, check=False,
                             timeout=max(0.1, deadline - time.monotonic()))
    except (OSError, subprocess.SubprocessError):
        return None
    head, sep, payload = out.stdout.partition(b"\n\n")
    name, _, value = head.decode(errors="replace").partition(":")
    if out.returncode != 0 or not sep or name.strip() != "UID" or not value.strip().isdigit():
        return None
    return int(value.strip()), payload
