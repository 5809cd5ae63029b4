"""benchmarks.live_screen: every trace reported, and each policy's wins against FIFO."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_screen_counts_each_policys_wins_against_fifo_from_its_own_rows() -> None:
    out = subprocess.run([sys.executable, "-m", "benchmarks.live_screen", "--seeds", "1",
                          "--policies", "stretch_edf,fifo", "--json"], cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=600)
    result = json.loads(out.stdout)
    rows = result["traces"]
    assert len(rows) == 5 and set(result["against_fifo"]) == {"stretch_edf"}
    mine = result["against_fifo"]["stretch_edf"]
    assert mine["traces"] == 5
    assert mine["wins_makespan"] == sum(r["policies"]["stretch_edf"]["makespan_s"]
                                        < r["policies"]["fifo"]["makespan_s"] for r in rows)
    assert mine["wins_both"] <= min(mine["wins_makespan"], mine["wins_worst_rho"])
