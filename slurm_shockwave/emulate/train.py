"""The emulated training loop: epochs of sleep, progress reports, checkpoints, resume.

The epoch plan (batch size and duration of every epoch) comes from the simulator's own
profile code (``workloads/profile.py``), so an emulated job on Slurm and the same job in
``shockwave simulate`` train the same epochs at the same batch sizes for the same time.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TextIO

from slurm_shockwave.client.reporter import check as report_problem
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode, JobSpec
from slurm_shockwave.model.throughputs import ThroughputTable
from slurm_shockwave.workloads.adaptation import bs_schedule
from slurm_shockwave.workloads.catalog import MODELS
from slurm_shockwave.workloads.profile import build_profile
from slurm_shockwave.workloads.scaling import relative_rates, table_rates

SLICE_S = 0.1
"""Longest single sleep: the job notices its checkpoint signal within this."""


@dataclass(frozen=True, slots=True)
class Epoch:
    bs: int
    seconds: float
    """Wall time at full scale (time scale 1)."""


def epoch_plan(model: str, init_bs: int, epochs: int, mode: AdaptationMode, gpus: int,
               table: ThroughputTable, *, actual_gpus: int | None = None,
               epoch_s: float | None = None) -> tuple[Epoch, ...]:
    """Batch size and full-scale duration of every epoch.

    The batch sizes follow the simulator's profile for the job as submitted (``gpus``);
    the durations are those of the GPUs the job got (``actual_gpus``), from the table
    when it has them, else the nearest count's the table has, scaled by the prior of
    ``workloads/scaling.py`` (``fill_rates``, as the simulator does for an elastic job).
    A model the table lacks needs ``epoch_s`` (seconds per epoch at full scale on
    ``gpus`` GPUs, the same at every batch size; catalogue models keep their pattern).
    """
    got = actual_gpus or gpus
    try:
        profile = build_profile(JobSpec(0, model, init_bs, gpus, mode, 0.0, epochs), table)
    except (InputError, KeyError) as exc:
        if epoch_s is None:
            problem = exc.problem if isinstance(exc, InputError) else str(exc.args[0])
            raise InputError(f"{problem}; give --epoch-s (seconds per epoch)",
                             field="model") from None
        sizes = (bs_schedule(mode, model, init_bs, gpus, epochs) if model in MODELS
                 else [init_bs] * epochs)
        factor = relative_rates({gpus: 1.0}, [got], gpus)[got]
        return tuple(Epoch(b, epoch_s / factor) for b in sizes)
    if epoch_s is not None:  # the table's times win: said, not ignored silently (a red-team)
        _say(sys.stderr, f"--epoch-s {epoch_s:g} not used: the throughput table has {model} "
                         f"at batch size {init_bs} on {gpus} GPU(s)")
    plan = []
    for e, b in enumerate(profile.bs_by_epoch):
        seconds = profile.epoch_s(e)
        if got != gpus:
            known = table_rates(table, model, b, [gpus, got])
            seconds /= relative_rates(known or {gpus: 1.0}, [got], gpus)[got]
        plan.append(Epoch(b, seconds))
    return tuple(plan)


def visible_gpus(env: Mapping[str, str], requested: int) -> int:
    """GPUs the job got: CUDA_VISIBLE_DEVICES, else SLURM_JOB_GPUS (times the nodes of a
    multi-node job, which list only the batch node's), else what was requested."""
    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS"):
        ids = [i for i in env.get(name, "").split(",") if i.strip()]
        if ids and ids != ["NoDevFiles"]:
            try:
                nodes = max(1, int(env.get("SLURM_JOB_NUM_NODES", "1")))
            except ValueError:
                nodes = 1
            return len(ids) * nodes
    return requested


UNNAMED_RUN = ("unnamed: written before checkpoints named their run, taken up only by a "
               "job Slurm restarted that names no --submitted-at")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    epochs_done: float
    """Whole epochs and the part of the next one trained (saved at the step the signal
    came, as a training loop checkpointing its step counter does; Gavel's and
    Shockwave's simulators assume no partial epoch is lost either)."""
    batch_size: int
    run: str = ""
    """The run it belongs to (``run_label``): another run's is never resumed. Empty in a
    checkpoint from before checkpoints named their run (``Trainer.unnamed_is_own``)."""


def read_checkpoint(path: Path) -> Checkpoint | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        done = float(data["epochs_done"])
        if not math.isfinite(done):
            raise ValueError(f"epochs_done {done}")
        run = data.get("run", "")
        if not isinstance(run, str):
            raise ValueError(f"run {run!r}")
        return Checkpoint(done, int(data["batch_size"]), run)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"unreadable checkpoint ({exc})", source=str(path),
                         field="checkpoint") from None


def write_checkpoint(path: Path, ckpt: Checkpoint) -> None:
    """Atomically: a temporary file in the same directory, then rename. A failed write
    leaves the previous checkpoint, and no temporary file."""
    if not os.path.lexists(path.parent):  # a file there: "Not a directory", said below
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"epochs_done": ckpt.epochs_done,
                                   "batch_size": ckpt.batch_size, "run": ckpt.run}) + "\n",
                       encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class Reporter(Protocol):
    """``slurm_shockwave.client.reporter``'s functions (they never raise)."""

    def report(self, epoch: float | None = None, batch_size: int | None = None,
               samples_per_s: float | None = None) -> None: ...

    def checkpointed(self) -> None: ...

    def should_checkpoint(self) -> bool: ...

    def install(self) -> None: ...


class LocalReporter:
    """Stand-in when the client is not installed: reports nothing, but still catches the
    checkpoint signal named by SHOCKWAVE_SIGNAL (or ``signal_name``)."""

    def __init__(self, signal_name: str | None = None) -> None:
        self.signal_name = signal_name
        self.signalled = False

    def report(self, epoch: float | None = None, batch_size: int | None = None,
               samples_per_s: float | None = None) -> None:
        return None

    def checkpointed(self) -> None:
        self.signalled = False  # as the client's: asked again only by the next signal

    def should_checkpoint(self) -> bool:
        return self.signalled

    def install(self) -> None:
        name = (self.signal_name or os.environ.get("SHOCKWAVE_SIGNAL", "")).upper()
        if not name:
            return
        sig = getattr(signal, "SIG" + name.removeprefix("SIG"), None)
        if isinstance(sig, signal.Signals):
            signal.signal(sig, self._caught)
            # a signal sent as the job finishes must not kill it (reporter.install says why)
            atexit.register(signal.signal, sig, signal.SIG_IGN)

    def _caught(self, signum: int, frame: FrameType | None) -> None:
        self.signalled = True


def load_reporter() -> Reporter:
    """The client's reporter module if it is installed, else a LocalReporter."""
    try:
        module: Any = importlib.import_module("slurm_shockwave.client.reporter")
    except ImportError:
        return LocalReporter()
    reporter: Reporter = module
    return reporter


def _say(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()


@dataclass
class Trainer:
    """One run of the job, from its checkpoint (if any) to done or to its signal."""

    plan: tuple[Epoch, ...]
    time_scale: float
    checkpoint: Path
    reporter: Reporter
    out: TextIO
    samples_per_epoch: int | None = None
    restore_s: float = 0.0
    restart_count: int = 0
    run_id: str = ""
    """The run this is (``run_label``), written into its checkpoints."""
    new_job: bool = False
    """Slurm started the job for the first time (restart count 0): any checkpoint at its
    path is an earlier job's under the same id (Slurm's ids start again after its state
    is purged), never resumed."""
    unnamed_is_own: bool = False
    """A checkpoint naming no run (written before checkpoints named theirs) is this job's:
    Slurm restarted it, and no ``--submitted-at`` says it was submitted since then (such
    a job wrote a named checkpoint at its first start). Taken up, so that a job upgraded
    between its start and its requeue keeps the progress it acknowledged."""
    report_every_s: float = 0.0
    """Wall seconds between progress reports at least (0: every epoch). A batch-size
    change, the last epoch and the checkpoint acknowledgement are always sent at once."""
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    epochs_done: float = 0.0
    restore_until: float | None = None
    """When this process's restore ends (the clock's time): the restore is slept once a
    process, a signal during it included, so a job that trains on after its checkpoint
    (until the requeue kills it) sleeps only the rest of it, its state in memory as a
    real job's is."""
    started: bool = False
    """The checkpoint was looked for: once a process (after a checkpoint signal the job
    trains on from its state in memory)."""
    err: TextIO = field(default_factory=lambda: sys.stderr)
    saved_epochs: float = 0.0
    """What the last checkpoint written holds: where a restart would resume."""
    write_failing: bool = False
    """The last checkpoint write failed: said once, until a write succeeds again."""
    unacknowledged: bool = False
    """The checkpoint signal came but its checkpoint could not be written, so it was not
    acknowledged (the service requeues the job after its grace, and it resumes from the
    last checkpoint written): acknowledged at the first epoch end whose checkpoint is
    written. Meanwhile the pending signal does not stop the epochs again."""

    def bs_now(self) -> int:
        """The batch size the job trains at next: that of the epoch it has reached."""
        return self.plan[min(int(self.epochs_done), len(self.plan) - 1)].bs

    def _wait_until(self, deadline: float) -> bool:
        """Sleep to the ``deadline`` (the clock's time) in slices; False as soon as the
        checkpoint signal arrived."""
        while True:
            if not self.unacknowledged and self.reporter.should_checkpoint():
                return False
            left = deadline - self.clock()
            if left <= 0:
                return True
            self.sleep(min(SLICE_S, left))

    def _save(self) -> str | None:
        """Write the checkpoint: None, or why it could not be (a full disk, a read-only
        folder, a directory at its path), for the caller to say."""
        try:
            write_checkpoint(self.checkpoint,
                             Checkpoint(self.epochs_done, self.bs_now(), self.run_id))
        except OSError as exc:
            return str(exc.strerror or exc)
        self.saved_epochs = self.epochs_done
        return None

    def _saved_text(self) -> str:
        # rounded down: the log never shows more progress than the checkpoint holds
        return f"{math.floor(self.saved_epochs * 100) / 100:.2f}/{len(self.plan)} epochs"

    def _resume(self) -> None:
        """Take up this run's checkpoint if there is one. Any other is replaced at once,
        so that no later restart of this job takes it up either."""
        ckpt = None
        if self.new_job:
            if os.path.lexists(self.checkpoint):
                _say(self.err, f"ignoring checkpoint {self.checkpoint}: the job is new to "
                               "Slurm (restart count 0), so it is an earlier job's under "
                               "the same id; replacing it")
        else:
            ckpt = read_checkpoint(self.checkpoint)
            if ckpt is None and self.restart_count:
                # requeued before any checkpoint was written, or its file is gone (a
                # node-local folder): said, not silent (a red-team)
                _say(self.err, f"no checkpoint {self.checkpoint} to take up (restart "
                               f"{self.restart_count}): training from epoch 0")
            if ckpt is not None and not ckpt.run and self.unnamed_is_own:
                _say(self.err, f"taking up checkpoint {self.checkpoint}, which names no run "
                               "(written before checkpoints named theirs), as this job's: "
                               f"Slurm restarted it (restart {self.restart_count}) and no "
                               "--submitted-at says it was submitted since")
            elif ckpt is not None and ckpt.run != self.run_id:
                whose = ckpt.run or UNNAMED_RUN
                _say(self.err, f"ignoring checkpoint {self.checkpoint}: another run's "
                               f"({whose}), not this one's ({self.run_id}); replacing it")
                ckpt = None
        if ckpt is not None:
            total = len(self.plan)
            self.epochs_done = max(0.0, min(float(total), ckpt.epochs_done))
            _say(self.out, f"resumed from {self.checkpoint}: "
                           f"{self.epochs_done:g}/{total} epochs done, batch size "
                           f"{self.bs_now()} (restart {self.restart_count})")
        problem = self._save()  # a folder it cannot write: now, not after an epoch
        if problem is not None:
            raise InputError(f"cannot write the checkpoint ({problem})",
                             source=str(self.checkpoint), field="--checkpoint")

    def run(self) -> bool:
        """Train to the end (True) or until the checkpoint signal (False: checkpointed and
        acknowledged, or its checkpoint could not be written: ``unacknowledged``)."""
        total = len(self.plan)
        if not self.started:
            self.started = True
            self._resume()
        self.reporter.install()
        self.reporter.report(epoch=self.epochs_done, batch_size=self.bs_now())
        if self.restore_until is None:
            self.restore_until = self.clock() + self.restore_s / self.time_scale
        if not self._wait_until(self.restore_until):
            return self._on_signal()
        # Epochs end on a schedule kept from the start, not one sleep after another: the
        # scaled epochs are short (a 1 s epoch is 33 ms at time scale 30) and the loop's
        # own work (checkpoint file, report, log line: a few ms) would otherwise add
        # ~10% to a job of thousands of epochs, a cost the real job, whose epochs are
        # 30x longer, does not have.
        due = self.clock()
        reported_at, reported_bs = due, self.bs_now()
        while self.epochs_done < total:
            index = int(self.epochs_done)
            epoch = self.plan[index]
            wall = epoch.seconds / self.time_scale
            began = due
            due += wall * (index + 1 - self.epochs_done)
            if not self._wait_until(due):
                trained = (self.clock() - began) / wall if wall > 0 else 0.0
                self.epochs_done = min(self.epochs_done + trained, index + 1 - 1e-9)
                return self._on_signal()
            self.epochs_done = float(index + 1)
            problem = self._save()
            if problem is not None and not self.write_failing:
                _say(self.err, f"cannot write checkpoint {self.checkpoint} ({problem}): "
                               "training on; a restart resumes from the last one written "
                               f"({self._saved_text()})")
            self.write_failing = problem is not None
            now = self.clock()
            changed = self.bs_now() != reported_bs
            if now - reported_at >= self.report_every_s or changed or self.epochs_done >= total:
                rate: float | None = (self.samples_per_epoch / wall
                                      if self.samples_per_epoch and wall > 0 else None)
                if rate is not None and report_problem("samples_per_s", rate) is not None:
                    # past the API's bound at a huge time scale: the client dropped the
                    # whole report, epoch and batch size too (a red-team); sent without it
                    rate = None
                if changed:  # the epochs since the last report were at the old size
                    self.reporter.report(epoch=self.epochs_done, batch_size=reported_bs,
                                         samples_per_s=rate)
                self.reporter.report(epoch=self.epochs_done, batch_size=self.bs_now(),
                                     samples_per_s=rate)
                # after the reports: a service that answers each at its timeout (2 s) made
                # every overdue epoch report again, one epoch a report (76x slower, a
                # red-team); the schedule from the start catches the epochs up
                reported_at, reported_bs = self.clock(), self.bs_now()
            _say(self.out, f"epoch {index + 1}/{total} bs={epoch.bs} "
                           f"{epoch.seconds:.1f}s (slept {wall:.3f}s) next_bs={self.bs_now()}")
            if self.unacknowledged and problem is None and self.epochs_done < total:
                return self._acknowledge()  # the signal's checkpoint, written at last
        _say(self.out, f"done {total}/{total} epochs")
        return True

    def _on_signal(self) -> bool:
        problem = self._save()
        if problem is None:
            return self._acknowledge()
        # never acknowledged unwritten: the service would requeue the job at once, and
        # its restart resume from an older checkpoint than the one it was told of
        self.unacknowledged = self.write_failing = True
        _say(self.err, f"checkpoint signal: cannot write checkpoint {self.checkpoint} "
                       f"({problem}): not acknowledged; training on, to acknowledge at the "
                       "first epoch whose checkpoint is written (a restart before it "
                       f"resumes from the last one written: {self._saved_text()})")
        return False

    def _acknowledge(self) -> bool:
        """The signal's checkpoint is written: tell the service, and train on."""
        self.unacknowledged = False
        self.reporter.checkpointed()
        _say(self.out, f"checkpoint signal: saved {self._saved_text()}, batch size "
                       f"{self.bs_now()}; training on from it")
        return False


def job_label(env: Mapping[str, str]) -> str:
    return env.get("SLURM_JOB_ID", "") or "local"


def run_label(env: Mapping[str, str], model: str, bs: int, epochs: int, mode: str,
              gpus: int, trace_job_id: int | None = None,
              submitted_at: float | None = None) -> str:
    """Which run a checkpoint belongs to: the Slurm job id (reused once Slurm's state is
    purged), the trace job and the time ``trace submit`` submitted it, and the job."""
    parts = [f"job {job_label(env)}"]
    if trace_job_id is not None:
        parts.append(f"trace job {trace_job_id}")
    if submitted_at is not None:
        parts.append(f"submitted at {submitted_at!r}")
    return ", ".join(parts) + f": {model} bs={bs} epochs={epochs} mode={mode} gpus={gpus}"


def restart_count(env: Mapping[str, str]) -> int:
    with contextlib.suppress(ValueError):
        return int(env.get("SLURM_RESTART_COUNT", "0") or 0)
    return 0


def full_scale_s(plan: tuple[Epoch, ...]) -> float:
    """The plan's seconds; inf past any float (fsum raises on an overflow midway)."""
    try:
        return math.fsum(e.seconds for e in plan)
    except OverflowError:
        return math.inf
