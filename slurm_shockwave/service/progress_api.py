"""The progress API: training jobs tell the service how they are doing, over HTTP.

``POST /v1/report`` with a JSON body and ``X-Munge-Credential``: a MUNGE credential whose
payload is the hex SHA-256 of the exact body, so it vouches for this body only and munged
refuses it a second time. The server runs on its own threads beside the round loop: it
never blocks a round and never calls Slurm. It reads the job's owner from the store's
``job_now`` (the jobs the last round saw) and writes accepted reports through its own
SQLite connection (WAL), held by one database thread. Every refusal is a 4xx JSON
``{"error": ..., "field": ...}`` that changed nothing. ``GET /v1/health`` says it is up.

Checks, in order: body size (413), credential (401: missing, refused by munged - bad,
expired, replayed - or for another body), JSON and its fields (400), the job is managed
(404), the sender owns it or is an admin uid (403). munged unreachable is 503 (the job
spools and sends again). A job keeps at most ``MAX_REPORTS_PER_JOB`` reports.

Every answer to a report carries ``X-Munge-Answer``, a credential of the service's uid
over the status, the request's credential and the answer's bytes
(``reporter.answer_payload``): the job believes no answer without it, so whoever takes the
port while the service is down can neither swallow reports nor ask for checkpoints.

An accepted progress report is answered ``{"accepted": id, "checkpoint": bool}``:
``checkpoint`` is true while a checkpoint signal sent to this run of the job waits for its
acknowledgement. A signal Slurm sends before the job's program has its handler in place
(the batch step not yet started, the batch script ignoring it until Python takes over) is
lost; the answer delivers it at the job's next report, with no second signal.

``GET /metrics`` serves the service's Prometheus metrics on the same server (one port
to open, one bounded pool of threads), through the ``metrics`` callable the service
passes in; this module does not know Prometheus.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pwd
import socket
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_shockwave.client import reporter
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.prediction.observed import acknowledged
from slurm_shockwave.service import munge
from slurm_shockwave.service.progress_server import (
    RequestServer,
    WholeRequestHandler,
    body_length,
    client_key,
)
from slurm_shockwave.service.report_budget import MAX_REPORTS_PER_JOB
from slurm_shockwave.service.shared_file import write_shared
from slurm_shockwave.service.store import Store

log = logging.getLogger("shockwave.progress")

MAX_BODY = 4096
CRED_HEADER = "X-Munge-Credential"
ANSWER_HEADER = reporter.ANSWER_HEADER
KEY_HEADER = reporter.KEY_HEADER
REPORT_PATH = "/v1/report"
HEALTH_PATH = "/v1/health"
METRICS_PATH = "/metrics"

_FIELDS = ("job_id", "kind", "epoch", "batch_size", "samples_per_s", "restart_count",
           "exit_code", "age_s")
_REQUIRED = ("job_id", "kind")


class Refused(Exception):
    """A request refused with an HTTP status, a message and the field at fault."""

    def __init__(self, status: int, error: str, field: str | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.field = field


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:7817`` for IPv6; port 0: any free port)."""
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {listen!r}: expected HOST:PORT")
    return host, int(port)


def _reject_constant(name: str) -> float:
    raise Refused(400, f"{name} is not a number JSON allows", "body")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Refused(400, "duplicate key", key)
        out[key] = value
    return out


def _int(data: Mapping[str, Any], name: str, *, nullable: bool) -> int | None:
    """An integer field within its bounds: ``reporter.INT_LIMITS``, the one definition,
    which the client checks before it sends."""
    value = data.get(name)
    if value is None and nullable:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise Refused(400, "must be an integer" + (" or null" if nullable else ""), name)
    why = reporter.check(name, value)
    if why is not None:
        raise Refused(400, why, name)
    return value


def _float(data: Mapping[str, Any], name: str) -> float | None:
    """A number field within its bounds (``reporter.FLOAT_LIMITS``), or null. An integer
    too big for a float is out of bounds, not an error of the server's."""
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise Refused(400, "must be a number or null", name)
    why = reporter.check(name, value)
    if why is not None:
        raise Refused(400, why, name)
    return float(value)


def parse_report(body: bytes, *, uid: int, at_s: float, key: str | None = None
                 ) -> ProgressReport:
    """The report a body describes, or Refused(400) naming the field at fault; ``key``:
    the client's name for it (``reporter.KEY_HEADER``), if sent in the form this release
    knows."""
    if key is not None and not reporter.KEY_PATTERN.fullmatch(key.strip()):
        key = None  # a name of another form (a later client's): kept as unnamed, not
        # refused, since a 4xx is final and the job would drop the report
    try:
        data = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates,
                          parse_constant=_reject_constant)
    except Refused:
        raise
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"not JSON ({exc})", "body") from None
    except RecursionError:  # [[[[...]]]] within the size limit: no answer and a traceback
        raise Refused(400, "not JSON (nested too deeply)", "body") from None
    if not isinstance(data, dict):
        raise Refused(400, "expected a JSON object", "body")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise Refused(400, f"unknown key (known: {', '.join(_FIELDS)})", unknown[0])
    for name in _REQUIRED:
        if name not in data:
            raise Refused(400, "missing", name)
    job_id = _int(data, "job_id", nullable=False)
    kind = data["kind"]
    if not isinstance(kind, str) or kind not in {k.value for k in ReportKind}:
        raise Refused(400, "must be progress, checkpointed or end", "kind")
    age = _float(data, "age_s") or 0.0  # a spooled report, sent late
    return ProgressReport(
        job_id=int(job_id or 0), kind=ReportKind(kind), at_s=at_s - age,
        epoch=_float(data, "epoch"),
        batch_size=_int(data, "batch_size", nullable=True),
        samples_per_s=_float(data, "samples_per_s"),
        restart_count=int(_int(data, "restart_count", nullable=True) or 0),
        exit_code=_int(data, "exit_code", nullable=True), uid=uid,
        key=(key or "").strip())


def body_digest(body: bytes) -> str:
    """What the credential's payload must be: the hex SHA-256 of the exact body."""
    return hashlib.sha256(body).hexdigest()


def answer_body(answer: Mapping[str, Any]) -> bytes:
    """An answer's bytes on the wire: what its credential (``ProgressAPI.vouch``) is over."""
    return json.dumps(answer).encode()


def uid_of(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except (KeyError, UnicodeEncodeError):
        return None


@dataclass
class Counts:
    accepted: int = 0
    rejected: int = 0
    busy: int = 0
    """Requests answered 503, to be sent again (their jobs do): no worker free in time,
    munged or the store away, a job the service has not listed yet."""

    def as_dict(self) -> dict[str, int]:
        return {"accepted": self.accepted, "rejected": self.rejected, "busy": self.busy}


UNVOUCHED = frozenset({401, 413})
"""Answers sent without the service's credential: to no credential, one munged refused
or one for another body, and to a body over the limit (not read)."""


CLOSE_WAIT_S = 15.0
"""How long ``stop`` waits for the reports queued before it to be written."""


class ProgressAPI:
    """The HTTP server and its threads. ``start()`` returns the URL (and writes it to the
    endpoint file); ``stop()`` shuts it down. Safe to run beside the loop's own Store on
    the same file."""

    def __init__(self, store_path: str, *, listen: str = "127.0.0.1:7817",
                 endpoint_file: str | None = None,
                 admin_uids: Collection[int] = frozenset({0}),
                 clock: Callable[[], float] = time.time,
                 decode: Callable[[str], munge.Decoded] = munge.decode,
                 encode: Callable[[bytes], str] = munge.encode,
                 uid_of: Callable[[str], int | None] = uid_of,
                 metrics: Callable[[], tuple[bytes, str]] | None = None,
                 on_checkpointed: Callable[[ProgressReport], None] | None = None,
                 on_ended: Callable[[ProgressReport], None] | None = None,
                 listed_by: int | None = None,
                 peer_key: Callable[[str], str] = client_key) -> None:
        self.store_path = store_path
        self.peer_key = peer_key
        self.listed_by = listed_by
        """The store's last round when the service started (None: not known). Until a
        later round is saved, its jobs are an earlier listing: a job that is not there may
        be one that started while the service was down, so its reports are answered 503
        (spooled, sent again), not 404, which the client drops with its spool (found by a
        red-team). A job whose owner's name does not resolve (or Slurm gave none) is 503
        at any time: a directory service away for a moment, not a stranger."""
        self.on_checkpointed = on_checkpointed
        """Told each accepted `checkpointed` report that answers a checkpoint signal sent
        to its run (the loop requeues its job at once; the round reads the rest)."""
        self.on_ended = on_ended
        """Told each accepted `end` report (the loop gives the job's GPUs out at once)."""
        self.metrics = metrics
        """``() -> (body, content type)`` for GET /metrics; None: 404."""
        self.host, self.port = parse_listen(listen)
        self.endpoint_file = endpoint_file
        self.admin_uids = frozenset(admin_uids)
        self.clock = clock
        self.decode = decode
        self.encode = encode
        self.uid_of = uid_of
        self.counts = Counts()
        self._counts_lock = threading.Lock()
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="progress-db")
        self._stored: dict[int, int] = {}
        """Job -> its reports in the store as this API counts them (the database thread's
        only): counted afresh when first needed and whenever it reaches the cap, since the
        round's connection deletes reports (retention, an id given out again)."""
        self._local = threading.local()
        self._server: RequestServer | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.url = ""

    # -- the database thread: one connection, every read and write ------------------------
    def _store(self) -> Store:
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.store_path)
        return store

    def _on_db(self, fn: Callable[[Store], Any]) -> Any:
        return self._db.submit(lambda: fn(self._store())).result(timeout=30)

    # -- one request ------------------------------------------------------------------------
    def handle_report(self, body: bytes, credential: str | None, key: str | None = None,
                      ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status, JSON answer, headers to send with it) for one POST (``key``: its
        ``KEY_HEADER``); counts it."""
        status, answer = self._handle(body, credential, key)
        if status in UNVOUCHED:  # no credential munged took: nobody to vouch to, and
            return status, answer, {}  # an encode each would let anyone load munged
        return status, answer, self.vouch(status, credential, answer_body(answer))

    def vouch(self, status: int, credential: str | None, data: bytes) -> dict[str, str]:
        """The answer's header: a credential of this process's uid over
        ``reporter.answer_payload`` (this status, this request's credential, these bytes),
        which the job checks before it believes the answer. None could be made (munged
        away): no header; the job takes that for no answer and sends the report again."""
        try:
            payload = reporter.answer_payload(status, (credential or "").strip(), data)
            return {ANSWER_HEADER: self.encode(payload)}
        except munge.MungeError as exc:
            log.log(logging.WARNING if status == 202 else logging.DEBUG,
                    "progress API: no credential for an answer (%s): its job will send "
                    "the report again", exc)
            return {}

    def _handle(self, body: bytes, credential: str | None, key: str | None
                ) -> tuple[int, dict[str, Any]]:
        try:
            report_id, checkpoint = self._accept(body, credential, key)
        except Refused as exc:
            # 503: "send it again" (munged or the store away, a job not listed yet after
            # a restart), not a client to fix (a review: counted rejected, an alert on
            # rejections fired after every restart)
            self._count_refused(exc.status)
            log.debug("report refused (%d): %s [%s]", exc.status, exc.error, exc.field)
            return exc.status, {"error": exc.error, "field": exc.field}
        with self._counts_lock:
            self.counts.accepted += 1
        answer: dict[str, Any] = {"accepted": report_id}
        if checkpoint is not None:
            answer["checkpoint"] = checkpoint
        return 202, answer

    def _accept(self, body: bytes, credential: str | None, key: str | None
                ) -> tuple[int, bool | None]:
        """The stored report's id, and for a progress report whether its run is asked to
        checkpoint (None for other kinds)."""
        if len(body) > MAX_BODY:
            raise Refused(413, f"body over {MAX_BODY} bytes", "body")
        if not credential:
            raise Refused(401, "missing MUNGE credential", CRED_HEADER)
        try:
            uid, _gid, payload = self.decode(credential.strip())
        except munge.MungeError as exc:
            if exc.unavailable:  # not the job's fault: it spools and sends it again
                log.error("progress API: munged could not be asked: %s", exc)
                raise Refused(503, f"munged unavailable: {exc}", None) from None
            raise Refused(401, f"credential refused: {exc}", CRED_HEADER) from None
        if payload.strip() != body_digest(body).encode():
            raise Refused(401, "credential is for another body (payload must be the hex "
                          "sha256 of the body)", CRED_HEADER)
        report = parse_report(body, uid=uid, at_s=self.clock(), key=key)
        try:
            user = self._on_db(lambda s: s.job_user(report.job_id))
        except Exception as exc:
            log.error("progress API: store unreadable: %s", exc)
            raise Refused(503, "store unavailable", None) from None
        if user is None and self._not_listed_yet():
            raise Refused(503, "the service has not listed its jobs since it started: "
                          "send it again", None)
        if user is None:
            raise Refused(404, "not a job the service manages", "job_id")
        owner = self.uid_of(user) if user else None
        if uid not in self.admin_uids and owner != uid:
            if owner is None:  # a directory service away for a moment (Slurm's, or ours)
                raise Refused(503, f"the owner of job {report.job_id} cannot be told now: "
                              "send it again", None)
            raise Refused(403, f"uid {uid} is not the owner of job {report.job_id}",
                          "job_id")
        # an acknowledgement asks the round loop for a requeue (Slurm calls) only when it
        # answers a checkpoint signal sent to this run, and the loop tries each job once a
        # round: each ack of a flood was two Slurm calls on the loop's thread, and no round
        # ran while they came (found by a red-team)
        answers = report.kind == ReportKind.CHECKPOINTED and self._signalled(report)
        try:
            report_id = int(self._on_db(lambda s: self._add_within_cap(s, report)))
        except Exception as exc:
            log.error("progress API: could not write a report: %s", exc)
            raise Refused(503, "store unavailable", None) from None
        # the report is kept: a failure to read must not make the job send it again
        checkpoint = self._wanted(report) if report.kind == ReportKind.PROGRESS else None
        if answers and self.on_checkpointed is not None:
            self.on_checkpointed(report)
        if report.kind == ReportKind.END and self.on_ended is not None:
            self.on_ended(report)
        return report_id, checkpoint

    def _not_listed_yet(self) -> bool:
        """No round saved since the service started (``listed_by``)."""
        if self.listed_by is None:
            return False
        try:
            return bool(self._on_db(lambda s: s.last_round_id() <= (self.listed_by or 0)))
        except Exception:  # the store's own 503 comes with the next read
            return True

    def _signalled(self, report: ProgressReport) -> bool:
        """A checkpoint signal went to the report's run, no earlier than it (an ack older
        than the signal answers an earlier one); the store unread: as if it had, the loop
        checks again."""
        try:
            sent = self._on_db(lambda s: s.signalled_s(report.job_id, report.restart_count))
        except Exception as exc:
            log.error("progress API: could not read the checkpoint intents: %s", exc)
            return True
        return sent is not None and acknowledged((report,), sent, report.restart_count)

    def _wanted(self, report: ProgressReport) -> bool | None:
        """Whether a checkpoint of the report's run is asked for and not yet acknowledged
        (``Store.checkpoint_wanted``); None when the store cannot say."""
        try:
            return bool(self._on_db(
                lambda s: s.checkpoint_wanted(report.job_id, report.restart_count)))
        except Exception as exc:
            log.error("progress API: could not read the checkpoint intents: %s", exc)
            return None

    def _add_within_cap(self, store: Store, report: ProgressReport) -> int:
        """Store ``report``, the job's oldest going first at the cap; its id. On the
        database thread."""
        job = report.job_id
        stored = self._stored.get(job)
        if stored is None or stored >= MAX_REPORTS_PER_JOB:
            stored = store.report_count(job)
        if len(self._stored) >= 100_000:  # ids of jobs long gone: counted afresh if back
            self._stored.clear()
        report_id = store.add_report(report, keep=MAX_REPORTS_PER_JOB, stored=stored)
        self._stored[job] = min(stored + 1, MAX_REPORTS_PER_JOB)
        return report_id

    def count_rejected(self) -> None:
        with self._counts_lock:
            self.counts.rejected += 1

    def _count_refused(self, status: int) -> None:
        """A refusal: 503 busy (sent again), any other rejected; the server's own answers
        too (503 busy, or a request it could not read)."""
        with self._counts_lock:
            if status == 503:
                self.counts.busy += 1
            else:
                self.counts.rejected += 1

    def health(self) -> dict[str, Any]:
        with self._counts_lock:
            return {"ok": True, **self.counts.as_dict()}

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> str:
        api = self

        class Handler(_Handler):
            pass

        Handler.api = api
        self._server = RequestServer((self.host, self.port), Handler, max_body=MAX_BODY,
                                     on_refused=self._count_refused, peer_key=self.peer_key)
        host, port = str(self._server.server_address[0]), self._server.server_address[1]
        if host in ("0.0.0.0", "::", ""):  # listening everywhere: jobs on other nodes need a name
            host = socket.getfqdn()
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name="progress-api", daemon=True)
        self._thread.start()
        if self.endpoint_file:
            try:
                write_endpoint(self.endpoint_file, self.url)
            except InputError:
                self.stop()  # not left listening where no job can find it
                raise
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if not self._stopped:
            self._stopped = True
            try:  # after the writes queued before it, each waiting out a busy store
                self._db.submit(self._close_store).result(timeout=CLOSE_WAIT_S)
            except TimeoutError:  # a store another program holds: stop all the same (a
                # red-team: SIGTERM took 64 s, then exit 1 on this TimeoutError)
                log.warning("progress API: the store stayed busy for %g s; stopping with "
                            "reports unwritten (unanswered: their jobs send them again)",
                            CLOSE_WAIT_S)
                self._db.shutdown(wait=False, cancel_futures=True)
                return
            self._db.shutdown(wait=True)

    def _close_store(self) -> None:
        store: Store | None = getattr(self._local, "store", None)
        if store is not None:
            store.close()
            self._local.store = None

    def __enter__(self) -> ProgressAPI:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class _Handler(WholeRequestHandler):
    """One request, read whole by the server's reader (progress_server): a request cut at
    its deadline never gets here, so a report is never stored without the client hearing
    it was."""

    api: ProgressAPI
    timeout = 5  # each write of the answer: a client that does not read it frees its worker
    server_version = "shockwave-progress/1"

    def do_POST(self) -> None:
        if self.path != REPORT_PATH:
            self._answer(404, {"error": "no such endpoint", "field": "path"})
            return
        length = body_length(self.headers)
        if length is None:
            self.api.count_rejected()
            self._answer(411, {"error": "Content-Length required", "field": "body"})
            return
        if length < 0 or length > MAX_BODY:
            self.api.count_rejected()
            self._answer(413, {"error": f"body over {MAX_BODY} bytes", "field": "body"})
            return
        body = self.rfile.read(length)
        status, answer, headers = self.api.handle_report(body, self.headers.get(CRED_HEADER),
                                                         self.headers.get(KEY_HEADER))
        self._answer(status, answer, headers)

    def do_GET(self) -> None:
        if self.path == HEALTH_PATH:
            self._answer(200, self.api.health())
        elif self.path == METRICS_PATH and self.api.metrics is not None:
            body, kind = self.api.metrics()
            self._send(200, body, kind)
        else:
            self._answer(404, {"error": "no such endpoint", "field": "path"})

    def _answer(self, status: int, answer: Mapping[str, Any],
                headers: Mapping[str, str] | None = None) -> None:
        self._send(status, answer_body(answer), "application/json", headers)

    def _send(self, status: int, data: bytes, kind: str,
              headers: Mapping[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # the client gave up (its 2 s timeout) before the answer: what it sent is
            # kept or refused already, and it resends or spools; nothing to tell
            self.close_connection = True
            log.debug("%s left before its answer (%d)", self.address_string(), status)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def write_endpoint(path: str | Path, url: str) -> None:
    """The URL, atomically, world-readable: a TaskProlog exports it to jobs. A path that
    cannot take it (a directory, no room) is the endpoint file's fault, not the listen
    address's, and leaves no temporary file behind."""
    try:
        write_shared(path, url + "\n")
    except OSError as exc:
        raise InputError(f"cannot write the progress API's URL there "
                         f"({exc.strerror or exc})", source=str(path),
                         field="service.endpoint_file") from None
