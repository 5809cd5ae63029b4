"""One whole-system run: a local cluster, the service (or Slurm alone), a trace of emulated
jobs submitted at their scaled arrival times, and the metrics next to the simulator's.

Time: the trace's seconds are the wall's times ``time_scale``. The service's round is the
paper's 120 s of trace time, and the emulated job sleeps the simulator's 20 s restore
cost at every (re)start. Two live costs the paper's simulator does not have are modelled
in the comparison's simulator settings (``sim_*``; ``sim_paper_*`` are the paper's
settings): Slurm starts a released job at its next scheduling pass (on average half of
``sched_interval``, added to the restore cost), and a requeued job waits ``cred_expire``
+ 1 s before Slurm may start it again (the simulator's ``requeue_delay_s``); and the
service takes fill steps between rounds (the simulator's ``fill_freed``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_shockwave.live.cluster import LocalCluster
from slurm_shockwave.live.ctld_log import log_summaries
from slurm_shockwave.live.sigterm import sigterm_raises
from slurm_shockwave.metrics.summary import Finished, summarize
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.throughputs import ThroughputTable
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.sim.inputs import Workload, build_workload, load_throughputs, load_trace
from slurm_shockwave.sim.run import check_placeable, simulate
from slurm_shockwave.sim.trace import trace_digest
from slurm_shockwave.slurm.json_shapes import number, states

ACTIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED",
          "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
          "SPECIAL_EXIT"}
ROUND_TRACE_S = 120.0
RESTORE_TRACE_S = 20.0
SCHED_INTERVAL_S = 2.0
"""Slurm's sched_interval on the test cluster (docker-slurm/start.sh), wall seconds."""
START_WAIT_S = SCHED_INTERVAL_S / 2
"""The simulator's model of a start's wait for Slurm's next scheduling pass, wall seconds:
on average half of its interval (in ``live_restore_s``; checked against slurmctld's log
by ``_actuation``)."""


SLURM_END_MID_S = 0.5
"""Slurm's end_time is a whole second, truncated (``time(NULL)``): the job ended within
the second after it, on average half-way through it. Against submission times from
``time.time()`` the finish is read at that middle, not at the second's start (which read
every JCT, and the makespan, 0.5 x time scale trace seconds short)."""


TIME_SCALES = (1.0, 1000.0)
"""The time scales a live run takes (trace seconds per wall second), and its models."""


MAX_LIVE_GPUS = 64
"""The most GPUs of a local cluster: one slurmd a node of 8 on this machine (8 of them)."""


SLURM_ALONE = "slurm"
"""The policy name that runs no service: the same jobs under Slurm's own priority and
backfill, no hold (what every live comparison is against)."""


@dataclass(frozen=True)
class LiveSettings:
    trace: str | None
    gpus: int
    time_scale: float
    policy: str
    """Any registered policy, or SLURM_ALONE."""
    work_dir: Path
    throughputs: str | None = None
    kill_service_every_s: float | None = None
    fill_freed: bool = True
    """The service's fill steps between rounds (``service.fill_freed``)."""
    policy_config: Mapping[str, Any] | None = None
    """Settings of ``policy`` (its ``policies:`` section), for the service and the
    simulation alike; None: the policy's defaults, as shipped."""
    timeout_s: float = 1800.0
    cred_expire_s: int = 5
    gpus_per_node: int = 8
    ports: tuple[int, int] = (21817, 21900)


@dataclass
class JobState:
    trace_id: int
    slurm_id: int
    submit_wall: float
    state: str = "PENDING"
    start_wall: float = 0.0
    end_wall: float = 0.0
    restarts: int = 0


@dataclass
class LiveStatus:
    submitted: int
    total: int
    running: int
    done: int
    elapsed_s: float
    jobs: dict[int, JobState] = field(default_factory=dict)


class _Service:
    def __init__(self, settings: LiveSettings, env: dict[str, str], config: Path) -> None:
        self.settings, self.env, self.config = settings, env, config
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        with (self.settings.work_dir / "serve.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "slurm_shockwave.cli", "serve", "--config",
                 str(self.config), "--policy", self.settings.policy],
                env=self.env, stdout=log, stderr=log)

    def kill_and_restart(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 60.0)


def _await_heartbeat(path: Path, since: float, service: _Service,
                     timeout_s: float = 120.0) -> None:
    """Wait until the service has written its heartbeat since ``since`` (monotonic)."""
    written_after = time.time() - (time.monotonic() - since)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if path.stat().st_mtime >= written_after:
                return
        if service.proc is not None and service.proc.poll() is not None:
            raise InputError(f"the service exited ({service.proc.returncode}) before its "
                             f"first round: see {service.settings.work_dir / 'serve.log'}",
                             field="service")
        time.sleep(0.1)
    raise InputError(f"no heartbeat from the service within {timeout_s:g} s: see "
                     f"{service.settings.work_dir / 'serve.log'}", field="service")


def live_restore_s(time_scale: float) -> float:
    """A (re)start's cost in trace seconds: the emulated job's restore plus, on average,
    half of Slurm's scheduling interval before it starts."""
    return min(RESTORE_TRACE_S + START_WAIT_S * time_scale, ROUND_TRACE_S - 1)


def _service_config(settings: LiveSettings, env: dict[str, str]) -> Path:
    round_s = ROUND_TRACE_S / settings.time_scale
    path = settings.work_dir / "shockwave.yaml"
    heartbeat = Path(env.get("SHOCKWAVE_HEARTBEAT", str(settings.work_dir / "heartbeat")))
    path.write_text(json.dumps({  # JSON is YAML
        # the jobs train time_scale x faster than the table: the planner's table times
        # must be wall time too, like its round, its clock and the jobs' reports
        # what a (re)start costs here, in wall seconds: the emulated restore plus Slurm's
        # next scheduling pass, as the simulator's sim_* settings model it
        "slurm": {"round_s": round_s, "time_scale": settings.time_scale,
                  "restart_cost_s": live_restore_s(settings.time_scale) / settings.time_scale},
        "service": {"store": str(settings.work_dir / "state.db"), "heartbeat": str(heartbeat),
                    "stale_after_s": max(30.0, 5 * round_s),
                    # one port for the whole run: a restarted service must be where the
                    # jobs' SHOCKWAVE_URL (fixed when they started) says it is
                    "listen": f"127.0.0.1:{free_port()}",
                    "endpoint_file": str(heartbeat.parent / "endpoint"),
                    # the service's fill steps, scaled: a poll every 5 trace seconds (at
                    # most 4 a wall second) while GPUs idle
                    "fill_freed": settings.fill_freed,
                    "fill_poll_s": max(0.25, 5.0 / settings.time_scale)},
        "policies": {settings.policy: dict(settings.policy_config or {})}}))
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _poll(env: dict[str, str], jobs: dict[int, JobState]) -> None:
    """Each of our jobs' state, times and restarts from squeue (finished ones stay listed
    for MinJobAge). ``--states=all``: 22.05's ``squeue --json`` lists every record it
    keeps, 25.11's only the jobs not ended unless asked, so a run there never saw a job
    end and waited out its timeout (a live run with the pyslurm backend on 25.11)."""
    done = subprocess.run(["squeue", "--json", "--all", "--states=all"], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    if done.returncode != 0:
        return
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        return
    by_id = {j.slurm_id: j for j in jobs.values()}
    for obj in doc.get("jobs", []):
        job = by_id.get(number(obj.get("job_id")))
        if job is None:
            continue
        state = states(obj.get("job_state"))
        job.state = state[0] if state else "UNKNOWN"
        job.start_wall = float(number(obj.get("start_time")))
        job.end_wall = float(number(obj.get("end_time")))
        job.restarts = number(obj.get("restart_cnt"))


def run_live(settings: LiveSettings,
             on_tick: Callable[[LiveStatus], None] | None = None) -> dict[str, Any]:
    """Run the trace on a cluster of our own; one JSON-able dict of results."""
    # SIGTERM ends a run like Ctrl-C: the cluster, the service and the jobs it started are
    # stopped on the way out (a process started in the background ignores SIGINT)
    with sigterm_raises(lambda signum: KeyboardInterrupt(f"signal {signum}")):
        return _run_live(settings, on_tick)


@dataclass(frozen=True)
class Prepared:
    """A run's inputs, read and checked before anything starts."""
    trace_jobs: int
    workload: Workload
    identity: dict[str, Any]


def prepare(settings: LiveSettings) -> Prepared:
    """Read and check a run's inputs (one line naming the field, before any cluster or
    package install: ``demo`` asks first)."""
    low, high = TIME_SCALES
    if not (math.isfinite(settings.time_scale) and low <= settings.time_scale <= high):
        # click's FloatRange lets NaN through: ``demo --time-scale nan`` started a
        # cluster and ended in "internal error" (a red-team)
        raise InputError(f"must be a number from {low:g} to {high:g}, got "
                         f"{settings.time_scale!r}", field="time-scale")
    trace = load_trace(settings.trace)
    table = load_throughputs(settings.throughputs)
    workload = build_workload(trace, table, source=settings.trace or "demo")
    identity = run_identity(settings, workload, table)
    # the simulation of the results refuses these after the run: say so before it (12
    # GPUs ran on two whole nodes of 8 and then ended in that error, with no results)
    if not settings.gpus_per_node <= settings.gpus <= MAX_LIVE_GPUS:
        raise InputError(f"must be from {settings.gpus_per_node} (a node) to "
                         f"{MAX_LIVE_GPUS}, got {settings.gpus}", field="gpus")
    if settings.gpus % settings.gpus_per_node:
        raise InputError(f"{settings.gpus} GPUs are no whole number of nodes of "
                         f"{settings.gpus_per_node}", field="gpus")
    check_placeable(workload, settings.gpus, settings.gpus_per_node)
    return Prepared(len(trace), workload, identity)


def _run_live(settings: LiveSettings,
              on_tick: Callable[[LiveStatus], None] | None) -> dict[str, Any]:
    ready = prepare(settings)
    workload, identity = ready.workload, ready.identity
    try:
        settings.work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file there, or above it: before the cluster starts
        raise InputError(f"cannot make the folder {settings.work_dir} "
                         f"({exc.strerror or exc})", field="work-dir") from None
    started = time.monotonic()
    jobs: dict[int, JobState] = {}
    # the reader thread's rows, taken into ``jobs`` by this thread alone (it iterated the
    # dict while the reader added to it: "dictionary changed size", found by a red-team)
    arrived: queue.SimpleQueue[JobState] = queue.SimpleQueue()
    with LocalCluster(settings.work_dir / "cluster",
                      nodes=math.ceil(settings.gpus / settings.gpus_per_node),
                      gpus_per_node=settings.gpus_per_node, ctld_port=settings.ports[0],
                      node_port_base=settings.ports[1],
                      cred_expire_s=settings.cred_expire_s) as env:
        service = None
        submit: subprocess.Popen[str] | None = None
        reader: threading.Thread | None = None
        # everything started below is stopped on every way out: a SIGTERM, ^C or the
        # heartbeat's timeout before the first heartbeat left the service running
        try:
            if settings.policy != SLURM_ALONE:
                service = _Service(settings, env, _service_config(settings, env))
                service.start()
                # the first jobs are submitted once job_submit.lua holds them: before the
                # service's first heartbeat, they were Slurm's to start (fail-open)
                _await_heartbeat(Path(env.get("SHOCKWAVE_HEARTBEAT", "")), started, service)
            else:  # Slurm alone: no heartbeat, so job_submit.lua holds nothing
                Path(env.get("SHOCKWAVE_HEARTBEAT", "/nonexistent")).unlink(missing_ok=True)
            submit = _start_submit(settings, env)
            reader = _read_mapping(submit, arrived)
            timed_out = not _watch(settings, env, jobs, arrived, ready.trace_jobs, started,
                                   submit, reader, service, on_tick)
        finally:
            try:
                if service is not None:
                    service.stop()
            finally:  # a second ^C while the service stops: trace submit still is
                if submit is not None:
                    stop_process(submit, 10.0)
                if reader is not None:
                    reader.join(timeout=5)
    _take(arrived, jobs)
    return {**_results(settings, workload, identity, jobs, time.monotonic() - started,
                       service.kills if service else 0), "timed_out": timed_out}


def _start_submit(settings: LiveSettings, env: dict[str, str]) -> subprocess.Popen[str]:
    """``trace submit`` in the background, its JSON lines on a pipe."""
    with (settings.work_dir / "submit.log").open("ab") as submit_log:
        return subprocess.Popen(
            [sys.executable, "-m", "slurm_shockwave.cli", "trace", "submit",
             settings.trace or "demo", "--time-scale", str(settings.time_scale),
             "--partition", "shockwave", "--json",
             "--checkpoint-dir", str(settings.work_dir / "checkpoints"),
             "--output-dir", str(settings.work_dir / "out"),
             *(["--throughputs", settings.throughputs] if settings.throughputs else [])],
            env=env, stdout=subprocess.PIPE, stderr=submit_log, text=True)


def _read_mapping(submit: subprocess.Popen[str], arrived: queue.SimpleQueue[JobState]
                  ) -> threading.Thread:
    """A thread reading which Slurm job each trace job became into ``arrived``."""
    def read_mapping() -> None:
        assert submit.stdout is not None
        for line in submit.stdout:
            try:
                row = json.loads(line)
                arrived.put(JobState(int(row["trace_job_id"]), int(row["slurm_job_id"]),
                                     float(row["submitted_at"])))
            except (ValueError, KeyError, TypeError):
                continue

    reader = threading.Thread(target=read_mapping, daemon=True)
    reader.start()
    return reader


def _take(arrived: queue.SimpleQueue[JobState], jobs: dict[int, JobState]) -> None:
    while not arrived.empty():
        job = arrived.get()
        jobs[job.trace_id] = job


def _watch(settings: LiveSettings, env: dict[str, str], jobs: dict[int, JobState],
           arrived: queue.SimpleQueue[JobState], total: int, started: float,
           submit: subprocess.Popen[str], reader: threading.Thread,
           service: _Service | None, on_tick: Callable[[LiveStatus], None] | None) -> bool:
    """Poll the jobs until all of them finished (True) or the run's timeout (False, said
    in one line: its unfinished jobs count as lost), killing the service every
    ``kill_service_every_s`` if asked."""
    last_kill = time.monotonic()
    while time.monotonic() - started < settings.timeout_s:
        time.sleep(1.0)
        code = submit.poll()
        reading = reader.is_alive()  # before the take: all it read is taken
        _take(arrived, jobs)
        _poll(env, jobs)
        finished = [j for j in jobs.values() if j.state not in ACTIVE]
        if on_tick is not None:
            on_tick(LiveStatus(len(jobs), total,
                               sum(j.state == "RUNNING" for j in jobs.values()),
                               len(finished), time.monotonic() - started, jobs))
        if code is not None and len(jobs) == total == len(finished):
            return True
        if code is not None and (code != 0 or (not reading and len(jobs) < total)):
            raise RuntimeError(
                f"trace submit exited with {code} after {len(jobs)} of "
                f"{total} jobs (see {settings.work_dir / 'submit.log'})")
        every = settings.kill_service_every_s
        if service and every and time.monotonic() - last_kill >= every:
            service.kill_and_restart()
            last_kill = time.monotonic()
    done = sum(j.state not in ACTIVE for j in jobs.values())
    print(f"timeout: --timeout-s {settings.timeout_s:g} passed with {done} of {total} jobs "
          "finished; the others count as lost", file=sys.stderr)
    return False


def stop_process(proc: subprocess.Popen[Any], timeout_s: float) -> None:
    """SIGTERM, and wait ``timeout_s`` for it to end (the service finishes its round;
    ``trace submit`` removes its scripts' folder, /tmp/shockwave-submit-*); SIGKILL if it
    does not, or if a second ^C cuts the wait short: never left running."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except BaseException as exc:
        proc.kill()
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise


def run_identity(settings: LiveSettings, workload: Workload, table: ThroughputTable
                 ) -> dict[str, Any]:
    """What another run is compared on (``benchmarks.live --against``), from the jobs and
    table as read, whatever their files' names or formats."""
    return {"trace_digest": trace_digest(workload.jobs), "throughputs": settings.throughputs,
            "throughputs_digest": table.digest}


def _results(settings: LiveSettings, workload: Workload, identity: Mapping[str, Any],
             jobs: dict[int, JobState], wall_s: float, kills: int) -> dict[str, Any]:
    scale = settings.time_scale
    exclusive = {jid: p.exclusive_s for jid, p in workload.profiles.items()}
    arrivals = {j.spec.job_id: j.spec.arrival_s for j in workload.jobs}
    t0 = min((j.submit_wall - arrivals[j.trace_id] / scale for j in jobs.values()),
             default=0.0)
    done = [j for j in jobs.values() if j.state == "COMPLETED" and j.end_wall > 0]
    finished = [Finished(j.trace_id, arrivals[j.trace_id],
                         (j.end_wall + SLURM_END_MID_S - t0) * scale, exclusive[j.trace_id])
                for j in done]
    live = summarize(finished, num_gpus=settings.gpus, busy_gpu_s=0.0,
                     num_jobs=len(workload.jobs))
    sim_policy = "fifo" if settings.policy == SLURM_ALONE else settings.policy
    # the live costs, modelled: a started job waits for Slurm's next scheduling pass (on
    # average half its interval) before its restore, and a requeued job cred_expire + 1 s
    restore = live_restore_s(scale)
    delay = (settings.cred_expire_s + 1) * scale

    def sim(restore_s: float, requeue_delay_s: float, fill: bool) -> Any:
        config = settings.policy_config if sim_policy == settings.policy else None
        return simulate(workload, make_policy(sim_policy, config), gpus=settings.gpus,
                        gpus_per_node=settings.gpus_per_node, round_s=ROUND_TRACE_S,
                        restore_s=restore_s, requeue_delay_s=requeue_delay_s,
                        fill_freed=fill).summary

    # fill steps: the service takes them, and Slurm alone starts jobs on every end and
    # arrival, which FIFO with fill steps models closer than FIFO by rounds
    modelled = sim(restore, delay, settings.fill_freed or settings.policy == SLURM_ALONE)
    paper = sim(RESTORE_TRACE_S, 0.0, False)
    return {
        "policy": settings.policy, **identity, "jobs": len(workload.jobs),
        "completed": len(done),
        "lost": len(workload.jobs) - len(done),
        "makespan_s": round(live.makespan_s, 1), "avg_jct_s": round(live.avg_jct_s, 1),
        "worst_rho": round(live.worst_rho, 3),
        "sim_makespan_s": round(modelled.makespan_s, 1),
        "sim_avg_jct_s": round(modelled.avg_jct_s, 1),
        "sim_worst_rho": round(modelled.worst_rho, 3), "sim_policy": sim_policy,
        "sim_restore_s": restore, "sim_requeue_delay_s": delay,
        "fill_freed": settings.fill_freed, "policy_config": dict(settings.policy_config or {}),
        "sim_paper_makespan_s": round(paper.makespan_s, 1),
        "sim_paper_avg_jct_s": round(paper.avg_jct_s, 1),
        "sim_paper_worst_rho": round(paper.worst_rho, 3),
        "preemptions": sum(j.restarts for j in jobs.values()), "service_kills": kills,
        "time_scale": scale, "gpus": settings.gpus, "wall_s": round(wall_s, 1),
        "machine": {"cpus": os.cpu_count()},
        **_actuation(settings.work_dir / "cluster" / "log" / "slurmctld.log",
                     settings.cred_expire_s + 1),
    }


def _actuation(ctld_log: Path, requeue_delay_s: float) -> dict[str, Any]:
    """The run's actuation waits, wall seconds, measured from the controller's log next to
    what the simulation above charges for them: half of ``sched_interval`` for a start
    (in ``sim_restore_s``; a requeued job's from its eligible time, the delay before it
    being ``sim_requeue_delay_s``), nothing from the checkpoint signal to the requeue."""
    measured = log_summaries(ctld_log, requeue_delay_s)
    return {"start_wait": {**measured["start"], "modelled_mean_s": START_WAIT_S},
            "requeue_wait": {**measured["requeue"], "modelled_mean_s": 0.0}}
