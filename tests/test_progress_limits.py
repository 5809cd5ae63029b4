"""The progress API's limits, for real on 127.0.0.1 (no credentials needed)."""

from __future__ import annotations

import http.client
import json
import selectors
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from slurm_shockwave.service import munge, progress_server
from slurm_shockwave.service.progress_api import CRED_HEADER, ProgressAPI


def request(url: str, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None, source: str | None = None) -> int:
    """The status of one request; ``source``: the local address to send it from (all of
    127/8 is this host's, so each is another client address to the server)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=5,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_a_full_worker_pool_queues_and_past_the_queue_the_busiest_address_loses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every worker busy a whole request waits for one (it was answered 503 at once);
    past MAX_QUEUED the oldest request of the address with the most waiting is answered
    503, never another address's, and the rest are served once a worker is free. A
    request still being sent takes no worker."""
    monkeypatch.setattr(progress_server, "MAX_WORKERS", 1)
    monkeypatch.setattr(progress_server, "MAX_QUEUED", 3)
    entered, release = threading.Event(), threading.Event()

    def decode(_credential: str) -> munge.Decoded:  # keeps its worker until released
        entered.set()
        release.wait(10)
        raise munge.MungeError("refused")

    with ProgressAPI(str(tmp_path / "s.db"), listen="127.0.0.1:0", decode=decode,
                     peer_key=str) as api:  # each address of 127/8 a client of its own
        host, port = api.url.removeprefix("http://").rsplit(":", 1)
        stall = socket.create_connection((host, int(port)))
        stall.sendall(b"POST /v1/report HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")  # and waits
        answers: dict[str, int] = {}

        def send(name: str, *args: Any, source: str = "127.0.0.1") -> threading.Thread:
            thread = threading.Thread(target=lambda: answers.__setitem__(
                name, request(api.url, *args, source=source)))
            thread.start()
            time.sleep(0.3)  # in the queue before the next
            return thread

        try:
            assert request(api.url, "GET", "/v1/health") == 200  # the stalled one holds none
            sent = [send("busy", "POST", "/v1/report", b"{}", {CRED_HEADER: "MUNGE:x:"})]
            assert entered.wait(5)
            sent += [send("other", "GET", "/v1/health", source="127.0.0.2"),
                     send("first", "GET", "/v1/health"), send("second", "GET", "/v1/health")]
            assert answers == {}  # all waiting: the queue is full
            sent.append(send("third", "GET", "/v1/health"))
            assert answers == {"first": 503}  # 127.0.0.1's oldest, not 127.0.0.2's older one
            release.set()
            for thread in sent:
                thread.join()
            assert answers == {"busy": 401, "other": 200, "first": 503, "second": 200,
                               "third": 200}
            # the 503 is counted (GET /metrics's outcome="busy"), and the 401 refused
            assert api.health() == {"ok": True, "accepted": 0, "rejected": 1, "busy": 1}
        finally:
            release.set()
            stall.close()


def test_headers_over_the_limit_are_431(tmp_path: Path) -> None:
    with ProgressAPI(str(tmp_path / "s.db"), listen="127.0.0.1:0") as api:
        host, port = api.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nX-Big: " + b"a" * progress_server.MAX_HEAD)
            answer = sock.makefile("rb").read()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 ") and json.loads(body)["field"] == "headers"
        assert api.health()["rejected"] == 1


def test_past_the_reading_bound_the_busiest_address_loses_its_oldest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One idle connection from 127.0.0.2, then more from 127.0.0.1 than the bound: the
    oldest of 127.0.0.1's are closed, never the older one of the other address."""
    monkeypatch.setattr(progress_server, "MAX_READING", 3)
    with ProgressAPI(str(tmp_path / "s.db"), listen="127.0.0.1:0", peer_key=str) as api:
        port = int(api.url.rsplit(":", 1)[1])
        other = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0))
        time.sleep(0.2)  # accepted first: the oldest of all
        flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        try:
            for sock in flood[:2]:
                sock.settimeout(5)
                assert sock.recv(1) == b""  # closed for the newer ones
            for sock in (other, *flood[2:]):
                sock.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    sock.recv(1)  # still open
            assert request(api.url, "GET", "/v1/health") == 200
        finally:
            for sock in (other, *flood):
                sock.close()


def test_listens_on_ipv6(tmp_path: Path) -> None:
    with ProgressAPI(str(tmp_path / "s.db"), listen="[::1]:0") as api:
        assert api.url.startswith("http://[::1]:")
        assert request(api.url, "GET", "/v1/health") == 200


def test_listening_everywhere_advertises_the_host_name(tmp_path: Path) -> None:
    with ProgressAPI(str(tmp_path / "s.db"), listen="0.0.0.0:0",
                     endpoint_file=str(tmp_path / "endpoint")) as api:
        assert "0.0.0.0" not in api.url
        assert (tmp_path / "endpoint").read_text().strip() == api.url


def test_a_burst_of_connections_waits_in_the_kernels_queue_until_accepted(
        tmp_path: Path) -> None:
    """600 connections at once while the reader accepts none (a server not yet serving):
    all complete their handshake and wait in the listen backlog. With a backlog of 128
    the kernel completed 129 and dropped the others' SYNs: each waits a 1 s retransmission
    (then 3 s, past the client's 2 s timeout) and the job spools its report."""
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    if somaxconn < 600:
        pytest.skip(f"net.core.somaxconn is {somaxconn}: the kernel caps the backlog")
    server = progress_server.RequestServer(("127.0.0.1", 0), progress_server.WholeRequestHandler,
                                           max_body=4096)
    port = server.server_address[1]
    clients = [socket.socket() for _ in range(600)]
    selector = selectors.DefaultSelector()
    try:
        for sock in clients:
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            selector.register(sock, selectors.EVENT_WRITE)
        connected, end = 0, time.monotonic() + 0.5  # well before a SYN's retransmission
        while time.monotonic() < end and connected < len(clients):
            for key, _ in selector.select(0.1):
                selector.unregister(key.fileobj)
                connected += key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        assert connected == len(clients)
    finally:
        selector.close()
        for sock in clients:
            sock.close()
        server.server_close()
