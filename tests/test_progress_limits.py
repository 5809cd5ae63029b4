"""The progress API's limits, for real on 127.0.0.1 (no credentials needed)."""

from __future__ import annotations

import http.client
import socket
from pathlib import Path

import pytest

from slurm_shockwave.service import progress_api
from slurm_shockwave.service.progress_api import ProgressAPI


def test_a_flood_of_connections_gets_503_not_threads(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_api, "MAX_CONNECTIONS", 1)
    with ProgressAPI(str(tmp_path / "s.db"), listen="127.0.0.1:0") as api:
        host, port = api.url.removeprefix("http://").rsplit(":", 1)
        stall = socket.create_connection((host, int(port)))
        stall.sendall(b"POST /v1/report HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")  # and waits
        try:
            conn = http.client.HTTPConnection(host, int(port), timeout=5)
            conn.request("GET", "/v1/health")
            assert conn.getresponse().status == 503
        finally:
            stall.close()


def test_listening_everywhere_advertises_the_host_name(tmp_path: Path) -> None:
    with ProgressAPI(str(tmp_path / "s.db"), listen="0.0.0.0:0",
                     endpoint_file=str(tmp_path / "endpoint")) as api:
        assert "0.0.0.0" not in api.url
        assert (tmp_path / "endpoint").read_text().strip() == api.url
