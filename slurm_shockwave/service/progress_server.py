"""The progress API's HTTP server: a request is read whole before a worker takes it.

One reader thread accepts every connection and reads its request (request line, headers,
body up to the API's body limit) without blocking, under one deadline per connection:
READ_DEADLINE_S from its accept, however it trickles; past it the connection is closed
and what it sent is dropped, neither handled nor answered. Only a whole request goes to
the MAX_WORKERS worker threads, through a queue per client address served round-robin
(``progress_fairness``): a flood of whole requests from one address delays another's by
one of its requests, where first come first served let it hold every worker and have the
other nodes answered 503. A connection still sending its request holds a file descriptor
and its bytes so far, no thread: at most MAX_READING of them, and the next one closes the
oldest of the address holding the most (a flooder's own), so idle or trickling
connections, however many and however often reopened, cannot keep a client that sends
its request promptly from a worker. With a thread per connection from its accept, 13
idle connections a second held all 64 slots.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import logging
import re
import selectors
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from http.client import HTTPException, parse_headers
from http.server import BaseHTTPRequestHandler
from typing import Any

from slurm_shockwave.service.progress_fairness import FairQueue

log = logging.getLogger("shockwave.progress")

MAX_WORKERS = 64
"""Whole requests answered at once, a thread each: a flood cannot take the memory the
round loop needs."""
MAX_QUEUED = 256
"""Whole requests waiting for a worker (a descriptor and at most 12 KiB each): with
MAX_READING and the workers, well under the usual soft limit of 1024 descriptors. Past
it, the address with the most queued loses its oldest (503)."""
MAX_READING = 512
"""Connections still sending their request, each at most MAX_HEAD and a body: well under
the usual soft limit of 1024 descriptors, beside the workers, the store and the round
loop's Slurm commands."""
READ_DEADLINE_S = 5.0
"""From a connection's accept to the end of its request's body: past it, it is closed."""
MAX_HEAD = 8192
"""Request line and headers (a report's are under 500 bytes): past it, 431."""
LISTEN_BACKLOG = 1024
"""Connections the kernel completes and holds until the reader accepts them (capped by
net.core.somaxconn, 4096 since Linux 5.4): a burst of nodes reporting together waits in
it; past it the kernel drops their SYNs and each waits a 1 s retransmission, then 3 s,
past the client's 2 s timeout."""
ACCEPT_BATCH = 128
"""Connections accepted at most before the reader reads again."""

_HEAD_END = re.compile(rb"\n\r?\n")  # a blank line, as http.client reads headers
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
         b"Connection: close\r\n\r\n")


def body_length(headers: Message) -> int | None:
    """The request's Content-Length, None if it has none that is a number: the reader and
    the handler read it alike, so the handler finds the body the reader read."""
    try:
        return int(headers.get("Content-Length", ""))
    except ValueError:
        return None


def _refusal(status: str, error: str, field_name: str) -> bytes:
    body = json.dumps({"error": error, "field": field_name}).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


@dataclass(eq=False)
class _Whole:
    """A whole request waiting for a worker."""

    sock: socket.socket
    address: Any
    request: bytes
    due: float
    """Its connection's deadline: a request still queued then is answered 503 (its
    client, with a 2 s timeout, has gone)."""


def client_key(host: str) -> str:
    """Whose share of the workers and reading slots a connection from ``host`` takes: one
    host's. Every loopback address is the service's own host (a local user sending from
    300 addresses of 127/8 got 300 shares and pushed other nodes' reports out: a
    red-team), and an IPv4-mapped IPv6 address is its IPv4 one. Other addresses are
    their own (an IPv6 /64 is most often a whole cluster's network, not one host's)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return "loopback" if ip.is_loopback else str(ip)


@dataclass(eq=False)
class _Reading:
    """A connection still sending its request."""

    sock: socket.socket
    address: Any
    due: float
    peer: str
    """Its ``client_key``."""
    data: bytearray = field(default_factory=bytearray)
    need: int | None = None
    """Head and body in bytes, once the head is in."""


class WholeRequestHandler(BaseHTTPRequestHandler):
    """Answers one request the reader read whole: ``rfile`` holds its bytes, ``wfile``
    writes to the connection, each write timing out after ``timeout``."""

    def __init__(self, request: socket.socket, client_address: Any,
                 server: socketserver.BaseServer, received: bytes) -> None:
        self.received = received
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the connection's reader: its bytes are read already
        self.rfile = io.BytesIO(self.received)


class RequestServer(socketserver.TCPServer):
    """Listens on ``address`` (IPv6 when its host has a colon). ``serve_forever`` is the
    reader; ``handler`` answers each whole request on its own worker thread."""

    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], handler: type[WholeRequestHandler], *,
                 max_body: int, on_refused: Callable[[int], None] | None = None,
                 peer_key: Callable[[str], str] = client_key) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.handler = handler
        self.peer_key = peer_key
        """A client address's share (``client_key``; tests tell addresses of 127/8 apart)."""
        self.max_body = max_body
        self.on_refused = on_refused
        """Told the status of each answer the server sends itself, no handler asked (503
        busy, 431): the metrics count them (thread-safe: the reader and workers call it)."""
        self.max_reading = MAX_READING
        self._queue: FairQueue[_Whole] = FairQueue(MAX_QUEUED)
        self._workers: list[threading.Thread] = []
        # the reader thread's alone: accept order is deadline order, so the oldest is first
        self._reading: dict[socket.socket, _Reading] = {}
        self._by_peer: dict[str, dict[socket.socket, None]] = {}
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        super().__init__(address, handler)  # a bind that fails calls server_close: all set
        self.socket.setblocking(False)
        self._selector.register(self.socket, selectors.EVENT_READ)
        try:
            for _ in range(MAX_WORKERS):
                worker = threading.Thread(target=self._work, name="progress-request",
                                          daemon=True)
                worker.start()
                self._workers.append(worker)
        except RuntimeError:  # no thread to be had: not left listening with no worker
            self.server_close()
            raise

    # -- the reader thread -----------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.2) -> None:
        """Accepts and reads until ``shutdown()``; a whole request goes to a worker."""
        try:
            while not self._stop.is_set():
                first = next(iter(self._reading.values()), None)
                wait = poll_interval if first is None else min(
                    poll_interval, max(0.0, first.due - time.monotonic()))
                for key, _ in self._selector.select(wait):
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.fileobj in self._reading:  # not dropped by this round's accept
                        self._read(key.data)
                self._cut_overdue()
        finally:
            self._stopped.set()

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):  # the reads wait no longer
            try:
                sock, address = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # out of descriptors, say: not a busy loop of it
                log.warning("progress API: cannot accept a connection: %s", exc)
                self._stop.wait(0.1)
                return
            if len(self._reading) >= self.max_reading:
                busiest = max(self._by_peer.values(), key=len)
                self._drop(self._reading[next(iter(busiest))],
                           f"over {self.max_reading} connections sending their request: "
                           "the oldest of the address with the most is closed")
            sock.setblocking(False)
            reading = _Reading(sock, address, time.monotonic() + READ_DEADLINE_S,
                               self.peer_key(str(address[0])))
            self._reading[sock] = reading
            self._by_peer.setdefault(reading.peer, {})[sock] = None
            self._selector.register(sock, selectors.EVENT_READ, reading)

    def _read(self, reading: _Reading) -> None:
        limit = MAX_HEAD if reading.need is None else reading.need
        try:
            chunk = reading.sock.recv(limit - len(reading.data))
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(reading, "left before its request was in")
            return
        reading.data += chunk
        if reading.need is None:
            reading.need = self._request_size(reading.data, len(reading.data) - len(chunk))
            if reading.need is None:
                if len(reading.data) >= MAX_HEAD:
                    self._forget(reading)
                    self._refuse(reading.sock, _refusal(
                        "431 Request Header Fields Too Large",
                        f"request line and headers over {MAX_HEAD} bytes", "headers"))
                return
        if len(reading.data) >= reading.need:
            self._forget(reading)
            self._dispatch(reading.sock, reading.address, bytes(reading.data[:reading.need]),
                           reading.due)

    def _request_size(self, data: bytearray, searched: int) -> int | None:
        """Head and body in bytes, None while the head is not all in. A body the handler
        refuses (no Content-Length: 411; over the limit: 413) is not waited for."""
        end = _HEAD_END.search(data, max(0, searched - 2))
        if end is None:
            return None
        headers_start = data.index(b"\n") + 1  # after the request line
        try:
            headers = parse_headers(io.BytesIO(bytes(data[headers_start:end.end()])))
        except HTTPException:  # over 100 headers: the handler answers 431
            return end.end()
        length = body_length(headers)
        return end.end() + (length if length is not None and 0 <= length <= self.max_body
                            else 0)

    def _cut_overdue(self) -> None:
        now = time.monotonic()
        while self._reading:
            oldest = next(iter(self._reading.values()))
            if oldest.due > now:
                return
            self._drop(oldest, f"took over {READ_DEADLINE_S:.0f} s to send its request: "
                               "closed, and what it sent dropped")

    def _forget(self, reading: _Reading) -> None:
        self._selector.unregister(reading.sock)
        del self._reading[reading.sock]
        same = self._by_peer[reading.peer]
        del same[reading.sock]
        if not same:
            del self._by_peer[reading.peer]

    def _drop(self, reading: _Reading, why: str) -> None:
        self._forget(reading)
        reading.sock.close()
        log.debug("%s: %s", reading.peer, why)

    def _refuse(self, sock: socket.socket, answer: bytes) -> None:
        if self.on_refused is not None:  # counted before the client can read it: a test
            self.on_refused(int(answer.split(b" ", 2)[1]))  # that asked at once read 0
        with contextlib.suppress(OSError):
            sock.send(answer)  # a few bytes into an empty buffer: it does not block
        self.shutdown_request(sock)

    def _dispatch(self, sock: socket.socket, address: Any, request: bytes, due: float,
                  ) -> None:
        """Queues a whole request for a worker; one pushed out of the queue is 503."""
        pushed = self._queue.put(self.peer_key(str(address[0])),
                                 _Whole(sock, address, request, due))
        if pushed is not None:
            log.debug("%s: over %d requests waiting for a worker: the oldest of the "
                      "address with the most is answered 503", pushed.address[0],
                      MAX_QUEUED)
            self._refuse(pushed.sock, _BUSY)

    # -- a worker thread ---------------------------------------------------------------------
    def _work(self) -> None:
        """Answers the queue's requests, one address after another, until it is closed."""
        while (whole := self._queue.get()) is not None:
            if whole.due <= time.monotonic():
                self._refuse(whole.sock, _BUSY)  # waited past its deadline: not decoded
                continue
            whole.sock.setblocking(True)  # the handler sets its timeout
            try:
                self.handler(whole.sock, whole.address, self, whole.request)
            except OSError as exc:  # the client left mid-answer, or stopped reading it
                log.debug("%s: %s", whole.address[0], exc)
            except Exception:
                log.exception("progress API: a request failed")
            finally:
                self.shutdown_request(whole.sock)

    # -- lifecycle ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stops ``serve_forever``, running on another thread, and waits for it."""
        self._stop.set()
        self._stopped.wait()

    def server_close(self) -> None:
        """Closes the listening socket and every connection still sending its request (the
        reader stopped), answers 503 to the requests waiting for a worker, then waits for
        those being answered."""
        super().server_close()
        for reading in list(self._reading.values()):
            self._drop(reading, "the server stops")
        self._selector.close()
        for whole in self._queue.close():
            self._refuse(whole.sock, _BUSY)
        for worker in self._workers:
            worker.join()
