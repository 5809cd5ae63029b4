"""The progress API under load: MUNGE-authenticated reports at a steady rate.

By default it starts its own local Slurm cluster (docker-slurm/start.sh) and
``shockwave serve`` on it (the shockwave policy, a round every ``--round-s``), submits
``--jobs`` one-GPU jobs into the managed partition, waits until the service has started
them all, and sends reports for them while the service plans its rounds: the API's
threads share the service's process with the planner, as in production. ``--emulated``
instead runs the API in this process over a temporary store, with a thread writing a
round a second (no cluster, no planner: the earlier measurement).

``--clients`` threads send ``--rate`` reports a second in all for ``--seconds`` (open
loop: each send is due at its slot), each with a fresh credential over the hex SHA-256
of its body and a fresh HTTP connection, as the job-side client does. A report's latency
is counted from its slot, not from when a thread got to send it, so a stall delays every
report due during it (a red-team: counted from the send, a 1.5 s stall left p99 at 10
ms). ``lost`` = accepted - stored (this run's jobs' reports since it began). Exits 1
when a report is lost or refused, p99 is not under 100 ms, or the reports went out at
less than 95% of the rate, lateness included (``checks``); 2 for bad arguments or a
cluster or service that does not start (its folder is kept, with serve.log). Needs
munged.

    python -m benchmarks.progress --rate 200 --seconds 60 --json
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import math
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.args import Parser
from benchmarks.reference_runs import machine
from slurm_shockwave.live.cluster import LocalCluster
from slurm_shockwave.live.run import MAX_LIVE_GPUS, free_port, stop_process
from slurm_shockwave.live.sigterm import sigterm_raises
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.service import munge
from slurm_shockwave.service.progress_api import CRED_HEADER, ProgressAPI
from slurm_shockwave.service.report_budget import MAX_REPORTS, MAX_REPORTS_PER_JOB
from slurm_shockwave.service.store import JobRow, RoundRecord, Store

P99_TARGET_MS = 100.0
"""Issue 8: p99 under 100 ms at 200 reports a second on these 2 cores."""

PORTS = (22817, 22900)
"""The local cluster's controller port and its nodes' base (benchmarks.live uses 21817)."""


def rows(jobs: int) -> list[JobRow]:
    return [JobRow(job_id=1000 + j, user="root", model="resnet18", phase="running", gpus=1,
                   epochs=90, bs=64) for j in range(jobs)]


def loop_emulator(path: str, jobs: int, stop: threading.Event,
                  write_s: list[float]) -> None:
    """A round a second through the loop's own connection, as `shockwave serve` writes."""
    store = Store(path)
    index = store.next_round_index()
    try:
        while not stop.wait(1.0):
            start = time.perf_counter()
            store.save_round(
                RoundRecord(round_index=index, at_s=time.time(), policy="fifo", dry_run=True,
                            jobs=jobs, phase_s={}, solver_status=None, solver_gap=None,
                            applied=0, rejected=0, deferred=0),
                rows(jobs), [], {"round": index}, read_round_id=store.last_round_id())
            write_s.append(time.perf_counter() - start)
            index += 1
    finally:
        store.close()


def client(url: str, job_ids: list[int], rate: float, until: float, first: float, me: int,
           out: dict[str, Any], lock: threading.Lock) -> None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sent = accepted = rejected = errors = 0
    latencies: list[float] = []
    n = 0
    while True:
        due = first + n / rate
        if due >= until:
            break
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        body = json.dumps({"job_id": job_ids[(me + n) % len(job_ids)], "kind": "progress",
                           "epoch": n / 100, "batch_size": 64, "samples_per_s": 812.5,
                           "restart_count": 0}, separators=(",", ":")).encode()
        sent += 1
        try:
            cred = munge.encode(hashlib.sha256(body).hexdigest().encode())
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.request("POST", "/v1/report", body=body,
                         headers={"Content-Type": "application/json", CRED_HEADER: cred})
            resp = conn.getresponse()
            resp.read()
            conn.close()
            if resp.status == 202:
                accepted += 1
            else:
                rejected += 1
        except Exception:
            errors += 1
        latencies.append(time.perf_counter() - due)  # from its slot: a stall counts
        n += 1
    with lock:
        out["sent"] += sent
        out["accepted"] += accepted
        out["rejected"] += rejected
        out["errors"] += errors
        out["latencies"] += latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


@dataclass
class Target:
    """Where the reports go, for which jobs, and how to count what the service kept."""
    url: str
    job_ids: list[int]
    stored: Callable[[float], int]
    """This run's reports the store holds, received since the given epoch second."""
    rounds: Callable[[float, float], tuple[int, float]]
    """(rounds whose start fell in [t0, t1] (epoch seconds), the longest one's seconds)."""


@contextmanager
def emulated(jobs: int) -> Iterator[Target]:
    """The API in this process over a temporary store, a round a second written beside it."""
    with tempfile.TemporaryDirectory(prefix="sw-progress-") as tmp:
        path = str(Path(tmp) / "state.db")
        store = Store(path)
        store.save_round(RoundRecord(round_index=0, at_s=time.time(), policy="fifo",
                                     dry_run=True, jobs=jobs, phase_s={},
                                     solver_status=None, solver_gap=None, applied=0,
                                     rejected=0, deferred=0),
                         rows(jobs), [], {}, read_round_id=0)
        stop = threading.Event()
        write_s: list[float] = []
        loop = threading.Thread(target=loop_emulator, args=(path, jobs, stop, write_s))
        api = ProgressAPI(path, listen="127.0.0.1:0")
        url = api.start()
        loop.start()
        try:
            ids = [1000 + j for j in range(jobs)]
            yield Target(url, ids, lambda since: _count(path, ids, since),
                         lambda _t0, _t1: (len(write_s), max(write_s, default=0.0)))
        finally:
            stop.set()
            loop.join()
            api.stop()
            store.close()


def _query(path: str, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...]:
    """One row from the store, read-only (beside the service's own connections)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return tuple(db.execute(sql, params).fetchone())
    finally:
        db.close()


def _count(path: str, job_ids: list[int], since: float) -> int:
    """This run's reports in the store: its jobs', received since it began (a
    ``--work-dir`` used again holds an earlier run's)."""
    marks = ",".join("?" * len(job_ids))
    return int(_query(path, f"SELECT COUNT(*) FROM reports WHERE kind = 'progress' AND "
                            f"at_s >= ? AND job_id IN ({marks})", (since, *job_ids))[0])


def _rounds(path: str, t0: float, t1: float) -> tuple[int, float]:
    got = _query(path, "SELECT COUNT(*), MAX(total_s) FROM rounds WHERE at_s BETWEEN ? AND ?",
                 (t0, t1))
    return int(got[0]), float(got[1] or 0.0)


JOB = "#!/bin/sh\nsleep 7200\n"
HINT = "model=resnet18 bs=64 epochs=90"


@contextmanager
def live(jobs: int, round_s: float, work: Path, ports: tuple[int, int]) -> Iterator[Target]:
    """A local cluster of ``jobs`` GPUs (nodes of 8), ``shockwave serve`` on it and
    ``jobs`` one-GPU jobs it has started; all of it stopped on the way out."""
    work.mkdir(parents=True, exist_ok=True)
    with LocalCluster(work / "cluster", nodes=math.ceil(jobs / 8), ctld_port=ports[0],
                      node_port_base=ports[1]) as env:
        heartbeat = Path(env["SHOCKWAVE_HEARTBEAT"])
        store = work / "state.db"
        listen = f"127.0.0.1:{free_port()}"
        config = work / "shockwave.yaml"
        config.write_text(json.dumps({  # JSON is YAML
            "slurm": {"round_s": round_s},
            "service": {"store": str(store), "heartbeat": str(heartbeat), "listen": listen,
                        "endpoint_file": str(heartbeat.parent / "endpoint"),
                        "stale_after_s": max(30.0, 5 * round_s)}}))
        since = time.time()
        with (work / "serve.log").open("ab") as log:
            serve = subprocess.Popen([sys.executable, "-m", "slurm_shockwave.cli", "serve",
                                      "--config", str(config), "--policy", "shockwave"],
                                     env=env, stdout=log, stderr=log)
        try:
            _wait(lambda: heartbeat.exists() and heartbeat.stat().st_mtime >= since,
                  120, serve, work, "the service's first heartbeat")
            script = work / "job.sh"
            script.write_text(JOB)
            ids = [_submit(script, env) for _ in range(jobs)]

            def all_running() -> bool:
                out = subprocess.run(["squeue", "-h", "-o", "%T", "-j",
                                      ",".join(map(str, ids))], env=env,
                                     capture_output=True, text=True, check=False).stdout
                return out.split().count("RUNNING") == len(ids)

            _wait(all_running, 120, serve, work, f"start of its {jobs} jobs by the service")
            yield Target(f"http://{listen}", ids, lambda since: _count(str(store), ids, since),
                         lambda t0, t1: _rounds(str(store), t0, t1))
        finally:
            stop_process(serve, 60.0)


def _submit(script: Path, env: dict[str, str]) -> int:
    done = subprocess.run(["sbatch", "--parsable", "-p", "shockwave", "--gres=gpu:1",
                           f"--comment={HINT}", "-o", "/dev/null", str(script)], env=env,
                          capture_output=True, text=True, check=False)
    try:
        return int(done.stdout.split(";")[0])
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no job id"])[-1]
        raise InputError(f"sbatch: {last}", field="cluster") from None


def _wait(done: Callable[[], bool], timeout_s: float, serve: subprocess.Popen[bytes],
          work: Path, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if serve.poll() is not None:
            raise InputError(f"the service exited ({serve.returncode}) waiting for {what}: "
                             f"see {work / 'serve.log'}", field="service")
        if time.monotonic() > deadline:
            raise InputError(f"no {what} within {timeout_s:g} s: see {work / 'serve.log'}",
                             field="service")
        time.sleep(0.2)


def send(target: Target, rate: float, seconds: float, clients: int) -> dict[str, Any]:
    """The reports, open loop; the counts and latencies. The senders are daemon threads:
    a ^C ends the run at once, not when ``seconds`` are over."""
    out: dict[str, Any] = {"sent": 0, "accepted": 0, "rejected": 0, "errors": 0,
                           "latencies": []}
    lock = threading.Lock()
    first = time.perf_counter() + 0.1
    until = first + seconds
    threads = [threading.Thread(target=client,
                                args=(target.url, target.job_ids, rate / clients, until,
                                      first + i / rate, i, out, lock), daemon=True)
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["elapsed"] = time.perf_counter() - first
    return out


def checks(out: dict[str, Any], stored: int, rate: float, p99_ms: float) -> dict[str, bool]:
    """Issue 8's targets, each a check the run fails (exit 1) without: every report
    accepted and stored, p99 under 100 ms, and the rate reached (reports sent over the
    time they took, late ones included: every slot is sent however late, so the count
    alone always reached it; found by a review)."""
    sent = int(out["sent"])
    return {"none_lost": sent > 0 and out["accepted"] == stored,
            "all_accepted": sent > 0 and out["accepted"] == sent,
            "p99_under_100_ms": bool(out["latencies"]) and p99_ms < P99_TARGET_MS,
            "rate_reached": sent / max(out["elapsed"], 1e-9) >= 0.95 * rate}


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="reports a second, in all")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--clients", type=int, default=4, help="sending threads")
    ap.add_argument("--jobs", type=int, default=16,
                    help="running jobs the reports are for (GPUs of the local cluster)")
    ap.add_argument("--round-s", type=float, default=5.0, help="the service's round")
    ap.add_argument("--emulated", action="store_true",
                    help="no cluster or service: the API in this process, a round a second")
    ap.add_argument("--work-dir", default=None,
                    help="the cluster's and service's files (default: a new folder, removed "
                         "after a run that went through)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    for name, value, lo, hi in (("--rate", args.rate, 1, 5000),
                                ("--seconds", args.seconds, 1, 3600),
                                ("--clients", args.clients, 1, 64),
                                ("--jobs", args.jobs, 1, MAX_LIVE_GPUS),
                                ("--round-s", args.round_s, 1, 3600)):
        if not (math.isfinite(value) and lo <= value <= hi):
            ap.error(f"{name}: must be from {lo:g} to {hi:g}")
    total = args.rate * args.seconds
    if total > MAX_REPORTS or total / args.jobs > MAX_REPORTS_PER_JOB:
        # past them the store trims the oldest on purpose, and they would read as lost
        ap.error(f"--seconds: {total:.0f} reports are more than the store keeps "
                 f"({MAX_REPORTS} in all, {MAX_REPORTS_PER_JOB} a job)")
    try:  # SIGTERM as ^C: the cluster, the service and its jobs are stopped either way
        with sigterm_raises(lambda signum: KeyboardInterrupt(f"signal {signum}")):
            return _measure(args)
    except KeyboardInterrupt:
        print("interrupted: the local cluster and the service were stopped", file=sys.stderr)
        return 130


def _measure(args: Any) -> int:
    made = None if args.emulated or args.work_dir else tempfile.mkdtemp(prefix="sw-progress-")
    with contextlib.ExitStack() as stack:
        if args.emulated:
            target = stack.enter_context(emulated(args.jobs))
        else:
            work = Path(args.work_dir or made or "")
            try:
                target = stack.enter_context(live(args.jobs, args.round_s, work, PORTS))
            except InputError as exc:
                print(f"error: {exc}", file=sys.stderr)  # its folder kept, its logs in it
                return 2
        t0 = time.time()
        out = send(target, args.rate, args.seconds, args.clients)
        t1 = time.time()
        time.sleep(1.0)  # the API's database thread writes what it accepted
        stored = target.stored(t0 - 1.0)
        rounds, round_max_s = target.rounds(t0, t1)
    if made:
        shutil.rmtree(made, ignore_errors=True)

    lat_ms = [x * 1000 for x in out["latencies"]]
    p99 = round(percentile(lat_ms, 0.99), 2)
    result = {
        "benchmark": "progress", "mode": "emulated" if args.emulated else "live",
        "rate": args.rate, "seconds": args.seconds, "clients": args.clients,
        "jobs": args.jobs, "munge": munge.backend(),
        "sent": out["sent"], "accepted": out["accepted"], "rejected": out["rejected"],
        "errors": out["errors"], "stored": stored, "lost": out["accepted"] - stored,
        "achieved_rate": round(out["sent"] / out["elapsed"], 1),
        "p50_ms": round(percentile(lat_ms, 0.50), 2), "p99_ms": p99,
        "max_ms": round(max(lat_ms, default=0.0), 2),
        "mean_ms": round(statistics.fmean(lat_ms), 2) if lat_ms else 0.0,
        "rounds": rounds, "round_max_ms": round(round_max_s * 1000, 2),
        "machine": machine(),
    }
    result["checks"] = checks(out, stored, args.rate, p99)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:20} {value}")
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
