"""The progress API's workers shared fairly between client addresses: real munged,
SQLite, sockets from 127.0.0.x (all of 127/8 is this host's, each address another client
to the server)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_shockwave.service import munge
from slurm_shockwave.service.progress_api import CRED_HEADER, ProgressAPI, body_digest
from slurm_shockwave.service.progress_fairness import FairQueue
from slurm_shockwave.service.store import Store
from tests.test_progress_api import jobs, munged_running

needs_munged = pytest.mark.skipif(not munged_running(), reason="munged is not running")


def post(url: str, body: bytes, cred: str, source: str) -> tuple[int, http.client.HTTPResponse]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5, source_address=(source, 0))
    try:
        conn.request("POST", "/v1/report", body=body, headers={CRED_HEADER: cred})
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp
    finally:
        conn.close()


def good_report(url: str, epoch: float, source: str) -> int:
    body = json.dumps({"job_id": 103, "kind": "progress", "epoch": epoch}).encode()
    return post(url, body, munge.encode(body_digest(body).encode()), source)[0]


@pytest.fixture
def store_path(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "state.db")
    store = Store(path)
    jobs(store, {103: "root"})
    store.close()
    yield path


# -- the logic ------------------------------------------------------------------------------

def test_a_hosts_addresses_share_one_share() -> None:
    """Found by a red-team: a local user sending from 300 addresses of 127/8 took 300
    shares of the workers and had other nodes' reports answered 503. Every loopback
    address is one client, an IPv4-mapped address its IPv4 one; other addresses their own
    (a /64 is most often a whole cluster's network: a review)."""
    from slurm_shockwave.service.progress_server import client_key

    assert {client_key(a) for a in ("127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.9")} \
        == {"loopback"}
    assert client_key("::ffff:10.0.0.5") == client_key("10.0.0.5") == "10.0.0.5"
    assert client_key("2001:db8::1") != client_key("2001:db8::2")
    assert client_key("fe80::1%eth0") == "fe80::1" and client_key("not an ip") == "not an ip"


def test_the_queue_serves_addresses_in_turn_and_the_busiest_loses_its_oldest() -> None:
    queue: FairQueue[str] = FairQueue(limit=5)
    for item in ("a1", "a2", "a3", "b1", "c1"):
        assert queue.put(item[0], item) is None
    assert queue.put("b", "b2") == "a1"  # full: a has the most waiting
    assert [queue.get() for _ in range(5)] == ["a2", "b1", "c1", "a3", "b2"]
    assert queue.put("a", "a4") is None
    assert queue.close() == ["a4"] and queue.get() is None
    assert queue.put("a", "a5") == "a5"  # closed: handed back to be refused


# -- for real -------------------------------------------------------------------------------

FLOOD = """
import selectors, socket, sys, time
host, port, seconds, conns = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
body = b'{"job_id": 103, "kind": "progress"}'
req = (b"POST /v1/report HTTP/1.1\\r\\nX-Munge-Credential: MUNGE:AwQFAAD" + b"x" * 120
       + b":\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
sel, answered, start = selectors.DefaultSelector(), 0, time.monotonic()
def connect():
    sock = socket.socket()
    sock.setblocking(False)
    sock.bind(("127.0.0.2", 0))
    sock.connect_ex((host, port))
    sel.register(sock, selectors.EVENT_WRITE)
for _ in range(conns):
    connect()
while time.monotonic() < start + seconds:
    for key, events in sel.select(0.05):
        sock = key.fileobj
        try:
            if events & selectors.EVENT_WRITE:
                sock.sendall(req)
                sel.modify(sock, selectors.EVENT_READ)
                continue
            if sock.recv(65536):
                continue
            answered += 1
        except OSError:
            pass
        sel.unregister(sock)
        sock.close()
        connect()
print(answered)
"""


@needs_munged
def test_a_flood_of_whole_requests_from_one_address_keeps_no_report_of_another_out(
        store_path: str) -> None:
    """300 connections from 127.0.0.2 send bogus reports (a bad credential each) without
    end while munged takes 50 ms a decode (loaded): 20 reports from 127.0.0.3 are each
    accepted within a second. Workers taken first come first served, the flood held all
    64 and about a quarter of the reports were answered 503 (spooled, sent late); the
    queue of each address, served in turn, gives 127.0.0.3's report the next free worker.
    """
    decoded = threading.Semaphore(0)

    def loaded_munged(cred: str) -> munge.Decoded:
        time.sleep(0.05)
        decoded.release()
        return munge.decode(cred)

    with ProgressAPI(store_path, listen="127.0.0.1:0", decode=loaded_munged,
                     peer_key=str) as api:  # each address of 127/8 a client of its own
        host, port = api.url.removeprefix("http://").rsplit(":", 1)
        flood = subprocess.Popen([sys.executable, "-c", FLOOD, host, port, "8", "300"],
                                 stdout=subprocess.PIPE, text=True)
        try:
            for _ in range(200):  # the workers are busy with the flood
                assert decoded.acquire(timeout=5)
            answers, waited = [], []
            for epoch in range(20):
                sent = time.monotonic()
                answers.append(good_report(api.url, float(epoch), "127.0.0.3"))
                waited.append(time.monotonic() - sent)
            assert flood.poll() is None  # the flood went on all along
        finally:
            flood.kill()
            flood.wait()
        assert answers == [202] * 20, answers
        assert max(waited) < 1.0, waited
