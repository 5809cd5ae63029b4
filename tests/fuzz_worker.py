"""A reader worker for the fuzz tests: runs each input through the readers the CLI uses,
under an address-space cap, and says ``ok``, ``input`` (one-line InputError) or ``bug``.

Protocol: one JSON request per stdin line, ``{"kind": "trace"|"table"|"config",
"suffix": ".jsonl", "data": "<hex>"}``; one JSON reply per line, ``{"verdict": ...,
"message": ...}``. Run as ``python -m tests.fuzz_worker MEMORY_BYTES``.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import tempfile
import traceback
from pathlib import Path

from slurm_shockwave.config import load_settings
from slurm_shockwave.model.bounds import MAX_ARRIVAL_S, MAX_EPOCHS, MAX_EXCLUSIVE_S
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.sim.inputs import build_workload, load_throughputs, load_trace


def _check_trace(path: Path) -> None:
    jobs = load_trace(path)
    workload = build_workload(jobs, load_throughputs(None), source=str(path))
    for j in jobs:
        s = j.spec
        assert 1 <= s.num_epochs <= MAX_EPOCHS and s.gpus >= 1 and s.init_bs >= 1
        assert math.isfinite(s.arrival_s) and 0 <= s.arrival_s <= MAX_ARRIVAL_S
        assert math.isfinite(s.priority_weight) and s.priority_weight > 0
        assert workload.profiles[s.job_id].exclusive_s <= MAX_EXCLUSIVE_S


def _check_table(path: Path) -> None:
    table = load_throughputs(str(path))
    assert table.rates and all(math.isfinite(v) and v > 0 for v in table.rates.values())


def _check_config(path: Path) -> None:
    settings = load_settings(path)
    for section in (settings.simulator, settings.slurm, settings.service):
        for value in vars(section).values():
            assert not isinstance(value, float) or math.isfinite(value)


CHECKS = {"trace": _check_trace, "table": _check_table, "config": _check_config}


def handle(request: dict[str, str], folder: Path) -> dict[str, str]:
    path = folder / f"input{request.get('suffix', '')}"
    path.write_bytes(bytes.fromhex(request["data"]))
    try:
        CHECKS[request["kind"]](path)
    except InputError as exc:
        return {"verdict": "input", "message": str(exc)}
    except BaseException:
        return {"verdict": "bug", "message": traceback.format_exc()}
    return {"verdict": "ok", "message": ""}


def main() -> None:
    cap = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    with tempfile.TemporaryDirectory(prefix="shockwave-fuzz-") as tmp:
        for line in sys.stdin:
            reply = handle(json.loads(line), Path(tmp))
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
