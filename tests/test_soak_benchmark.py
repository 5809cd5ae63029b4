"""benchmarks/soak.py: the service's loop over many rounds, and its checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.soak import _checks, soak

REPO = Path(__file__).resolve().parents[1]


def test_a_short_soak_passes_its_checks_and_counts_what_it_did(tmp_path: Path) -> None:
    result = soak("fifo", 120, 30, 0.05 * 86400, 3, tmp_path / "state.db")
    assert all(result["checks"].values()), result["checks"]
    assert [s["round"] for s in result["samples"]] == [30, 60, 90, 120]
    assert result["failed"] == 0 and result["stale_entries"] == {}
    assert result["jobs_submitted"] > 40 and result["checkpoint_signals"] >= 0
    rows = result["samples"][-1]["rows"]
    assert 0 < rows["rounds"] <= 2 * 72 + 10 and rows["job_now"] > 0


def test_each_check_fails_when_its_measure_does() -> None:
    def sample(index: int, rss: float = 60.0, kb: int = 4000, rounds: int = 80,
               p50: float = 5.0) -> dict[str, object]:
        return {"round": index, "rss_mb": rss, "store_kb": kb, "rows": {"rounds": rounds},
                "round_ms_p50": p50}

    flat = [sample(i) for i in range(1, 9)]
    assert all(_checks(flat, 0, {}, 4320).values())
    assert not _checks(flat, 1, {}, 4320)["no_step_failed"]
    assert not _checks([*flat[:-1], sample(8, rss=69.0)], 0, {}, 4320)["rss_flat"]
    assert not _checks([*flat[:-1], sample(8, kb=17 * 1024)], 0, {}, 4320)["store_bounded"]
    assert not _checks([*flat[:-1], sample(8, rounds=200)], 0, {}, 4320)["store_bounded"]
    assert not _checks(flat, 0, {"world._jobs": 3}, 4320)["caches_forget"]
    slow = [*flat[:6], sample(7, p50=40.0), sample(8, p50=40.0)]
    assert not _checks(slow, 0, {}, 4320)["rounds_not_slower"]


def test_bad_arguments_are_one_line_and_exit_2() -> None:
    for args in (["--rounds", "5"], ["--retention-days", "nan"], ["--every", "0"],
                 ["--policy", "nope"]):
        done = subprocess.run([sys.executable, "-m", "benchmarks.soak", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2 and done.stdout == "", (args, done)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
