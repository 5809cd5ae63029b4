"""The service's own files changing under it: its lock files and its heartbeat (found by a
red-team of the service's processes, on a real cluster; here over the fake)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from slurm_shockwave.service.lock import ServiceLock
from slurm_shockwave.service.store import Store, StoreGone
from tests.builders import WallLikeClock as Clock
from tests.test_service_loop import fake_cluster, job, service


@pytest.mark.parametrize("which", ["store", "heartbeat"])
@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_lock_file_deleted_or_replaced_stops_the_service(tmp_path: Path, which: str,
                                                           how: str) -> None:
    """Deleted while the service ran, a lock let a second service take a new one and plan
    the same partition beside it (rounds alternating over one store), and `handback` run
    under it. The service stops at its next round, as for a replaced store."""
    store_path, beat = tmp_path / "s.db", tmp_path / "hb" / "heartbeat"
    with ServiceLock(str(store_path), str(beat)) as lock:
        lock.check()  # as taken
        path = Path(f"{store_path}.lock") if which == "store" else beat.with_name(
            "heartbeat.lock")
        path.unlink()
        if how == "replaced":
            path.write_text("4242")
        with pytest.raises(StoreGone, match="lock file"):
            lock.check()


def test_a_heartbeat_that_cannot_be_written_fails_open_but_not_the_rounds(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A heartbeat unwritable at run time made every round a failure with a traceback,
    though Slurm and the store had it, and ``--rounds`` was never reached. Now one line
    when it starts failing, one when it is written again, and the rounds count."""
    fake = fake_cluster(nodes=1, gpus=4)
    fake.add(job(1, 2))
    blocker = tmp_path / "hb"
    blocker.write_text("a file where the heartbeat's folder should be")
    store, clock = Store(tmp_path / "s.db"), Clock()
    svc = service(fake, store, clock, heartbeat=str(blocker / "heartbeat"))
    svc.round_s = 0.01
    stop = threading.Event()
    stop.wait = lambda t=None: False  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="shockwave.service"):
        assert svc.run(stop, max_rounds=3) == 3
        blocker.unlink()
        os.mkdir(blocker)
        assert svc.run(stop, max_rounds=1) == 1
    said = [r.getMessage() for r in caplog.records if "heartbeat" in r.getMessage()]
    assert sum("not written (" in m for m in said) == 1, said
    assert any("written again" in m for m in said), said
    assert not any(r.exc_info for r in caplog.records)
    assert (blocker / "heartbeat").exists()
