"""benchmarks.progress's measurement itself (its numbers back issue 8's p99 claim)."""

from __future__ import annotations

import http.server
import threading
import time
from typing import Any

import pytest

from benchmarks import progress
from tests.test_progress_api import munged_running


class _Stalls(http.server.BaseHTTPRequestHandler):
    seen = 0

    def do_POST(self) -> None:
        type(self).seen += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if type(self).seen == 10:
            time.sleep(1.0)  # one stall
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.mark.skipif(not munged_running(), reason="munged is not running")
def test_a_stall_delays_every_report_due_during_it() -> None:
    """Found by a red-team: latency was counted from when the sending thread got to a
    report, so a 1.5 s stall left p99 at 10 ms. Counted from each report's slot, the
    reports due during a 1 s stall at 50 a second wait for it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stalls)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = progress.Target(f"http://127.0.0.1:{server.server_address[1]}", [1],
                                 lambda: 0, lambda _a, _b: (0, 0.0))
        out = progress.send(target, rate=50, seconds=3, clients=1)
    finally:
        server.shutdown()
    waited = [x for x in out["latencies"] if x > 0.5]
    assert out["sent"] == out["accepted"] >= 140
    assert len(waited) >= 20, sorted(out["latencies"])[-5:]


def test_the_checks_fail_on_a_slow_rate_a_loss_or_nothing_sent() -> None:
    """Found by a review: every slot is sent however late, so a count of the reports sent
    always reached the rate; the rate is what was sent over the time it took."""
    def out(sent: int, accepted: int, elapsed: float) -> dict[str, object]:
        return {"sent": sent, "accepted": accepted, "elapsed": elapsed,
                "latencies": [0.001] * sent}

    assert all(progress.checks(out(1000, 1000, 5.0), 1000, 200, 3.0).values())
    slow = progress.checks(out(1000, 1000, 8.3), 1000, 200, 3.0)
    assert not slow["rate_reached"] and slow["none_lost"]
    assert not progress.checks(out(1000, 1000, 5.0), 999, 200, 3.0)["none_lost"]
    assert not progress.checks(out(1000, 990, 5.0), 990, 200, 3.0)["all_accepted"]
    assert not any(progress.checks(out(0, 0, 5.0), 0, 200, 0.0).values())


def test_bad_arguments_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a red-team: --jobs 0 sent nothing and passed; a run past the store's
    budget would count its trimmed reports as lost."""
    for argv in (["--jobs", "0"], ["--rate", "nan"], ["--rate", "5000", "--seconds", "3600"]):
        with pytest.raises(SystemExit) as stop:
            progress.main([*argv, "--emulated"])
        assert stop.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
