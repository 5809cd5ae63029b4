"""The emulated training job: the simulator's epochs, resume, the checkpoint signal."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_shockwave.emulate import train
from slurm_shockwave.emulate.__main__ import main, parser
from slurm_shockwave.emulate.train import (
    Checkpoint,
    LocalReporter,
    Trainer,
    epoch_plan,
    load_reporter,
    read_checkpoint,
    visible_gpus,
    write_checkpoint,
)
from slurm_shockwave.model.job import AdaptationMode, JobProgress
from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.prediction.observed import observed_progress
from slurm_shockwave.sim.inputs import build_workload, load_throughputs
from slurm_shockwave.sim.trace import parse_trace
from slurm_shockwave.workloads.bundled import load_table
from slurm_shockwave.workloads.profile import epoch_seconds

JOBS = [  # (model, batch size, GPUs, epochs): catalogue jobs whose patterns change
    ("ResNet-18", 32, 2, 60),
    ("LM", 10, 1, 50),
    ("Recommendation", 512, 1, 100),
    ("ResNet-50", 32, 4, 140),
]


class FakeReporter:
    """Records calls; install() catches SIGUSR1 for real."""

    def __init__(self) -> None:
        self.reports: list[tuple[float | None, int | None, float | None]] = []
        self.acks = 0
        self.signalled_at: float | None = None
        self.installed = False

    def report(self, epoch: float | None = None, batch_size: int | None = None,
               samples_per_s: float | None = None) -> None:
        self.reports.append((epoch, batch_size, samples_per_s))

    def checkpointed(self) -> None:
        self.acks += 1

    def should_checkpoint(self) -> bool:
        return self.signalled_at is not None

    def install(self) -> None:
        self.installed = True
        signal.signal(signal.SIGUSR1, self._caught)

    def _caught(self, signum: int, frame: object) -> None:
        self.signalled_at = time.monotonic()


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, s: float) -> None:
        assert 0 < s <= train.SLICE_S + 1e-12
        self.now += s

    def clock(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _restore_sigusr1() -> Iterator[None]:
    saved = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, saved)


def simulator_profile(model: str, bs: int, gpus: int, epochs: int, mode: str
                      ) -> list[tuple[int, float]]:
    """(batch size, seconds) of every epoch, read the simulator's way from a trace line."""
    line = json.dumps({"model": model, "batch_size": bs, "gpus": gpus, "mode": mode,
                       "epochs": epochs})
    jobs = parse_trace([line], source="t.jsonl")
    profile = build_workload(jobs, load_throughputs("builtin:tacc"), source="t").profiles[0]
    return [(b, profile.epoch_s(e)) for e, b in enumerate(profile.bs_by_epoch)]


def a_trainer(tmp_path: Path, plan: tuple[train.Epoch, ...], reporter: FakeReporter, *,
              scale: float = 1.0, clock: FakeClock | None = None,
              restore_s: float = 0.0) -> tuple[Trainer, io.StringIO]:
    out = io.StringIO()
    extra = {} if clock is None else {"sleep": clock.sleep, "clock": clock.clock}
    t = Trainer(plan=plan, time_scale=scale, checkpoint=tmp_path / "ckpt" / "7.json",
                reporter=reporter, out=out, samples_per_epoch=50_000, restore_s=restore_s,
                **extra)  # type: ignore[arg-type]
    return t, out


@pytest.mark.parametrize("mode", ["static", "accordion", "gns"])
@pytest.mark.parametrize(("model", "bs", "gpus", "epochs"), JOBS)
def test_epochs_and_durations_are_the_simulators(tmp_path: Path, mode: str, model: str,
                                                 bs: int, gpus: int, epochs: int) -> None:
    expected = simulator_profile(model, bs, gpus, epochs, mode)
    plan = epoch_plan(model, bs, epochs, AdaptationMode(mode), gpus, load_table(None))
    assert [(e.bs, e.seconds) for e in plan] == expected
    # the trainer sleeps exactly those durations (scaled) and moves to the next epoch's bs
    clock, rep = FakeClock(), FakeReporter()
    scale = 50.0
    trainer, out = a_trainer(tmp_path, plan, rep, scale=scale, clock=clock, restore_s=20)
    ends: list[float] = []
    real_report = rep.report

    def report(epoch: float | None = None, batch_size: int | None = None,
               samples_per_s: float | None = None) -> None:
        ends.append(clock.now)
        real_report(epoch, batch_size, samples_per_s)

    rep.report = report  # type: ignore[method-assign]
    assert trainer.run()
    # at a batch-size change the epoch is reported twice: at the old size (the epochs
    # since the last report were trained at it), then at the new one
    last = [i for i, r in enumerate(rep.reports)
            if i + 1 == len(rep.reports) or rep.reports[i + 1][0] != r[0]]
    for i, r in enumerate(rep.reports[:-1]):
        if i not in last:
            assert rep.reports[i - 1][1] == r[1] != rep.reports[i + 1][1]
    ends = [ends[i] for i in last]
    assert ends[0] == 0.0 and rep.reports[0][:2] == (0, expected[0][0])
    starts = [20 / scale, *ends[1:-1]]
    for (_b, s), start, end in zip(expected, starts, ends[1:], strict=True):
        assert end - start == pytest.approx(s / scale, abs=1e-9)
    epoch_reports = [rep.reports[i] for i in last][1:]
    assert [r[0] for r in epoch_reports] == list(range(1, epochs + 1))
    # after epoch e the job trains at the batch size of epoch e (the one it reached)
    assert [r[1] for r in epoch_reports] == [expected[min(e, epochs - 1)][0]
                                             for e in range(1, epochs + 1)]
    assert epoch_reports[0][2] == pytest.approx(50_000 / (expected[0][1] / scale))
    assert out.getvalue().splitlines()[-1] == f"done {epochs}/{epochs} epochs"
    last_bs = expected[-1][0]
    assert read_checkpoint(trainer.checkpoint) == Checkpoint(epochs, last_bs)
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("epoch ")]
    assert [int(ln.split()[2].removeprefix("bs=")) for ln in lines] == [b for b, _ in expected]


def test_gns_job_changes_its_batch_size() -> None:
    plan = epoch_plan("ResNet-18", 32, 2 * 30, AdaptationMode.GNS, 2, load_table(None))
    assert [e.bs for e in plan][:12] == [32] * 11 + [64]


def test_resume_continues_at_the_right_epoch_and_batch_size(tmp_path: Path) -> None:
    plan = epoch_plan("ResNet-18", 32, 30, AdaptationMode.GNS, 2, load_table(None))
    rep = FakeReporter()
    trainer, out = a_trainer(tmp_path, plan, rep, clock=FakeClock())
    trainer.restart_count = 1
    write_checkpoint(trainer.checkpoint, Checkpoint(22, plan[22].bs))
    assert trainer.run()
    first = out.getvalue().splitlines()[0]
    assert first == (f"resumed from {trainer.checkpoint}: 22/30 epochs done, batch size "
                     f"{plan[22].bs} (restart 1)")
    assert plan[22].bs == 128 and plan[10].bs == 32
    assert rep.reports[0][:2] == (22, 128)
    assert sorted(set(r[0] for r in rep.reports[1:])) == list(range(23, 31))
    assert out.getvalue().splitlines()[1].startswith("epoch 23/30 bs=128 ")


def test_signal_checkpoints_the_step_it_reached_and_acknowledges(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeReporter()
    module = types.ModuleType("slurm_shockwave.client.reporter")
    for name in ("report", "checkpointed", "should_checkpoint", "install"):
        setattr(module, name, getattr(fake, name))
    monkeypatch.setitem(sys.modules, "slurm_shockwave.client.reporter", module)
    reporter = load_reporter()
    assert reporter is module
    # 10 epochs of 0.2 s each; the signal comes in the middle of the 3rd
    plan = tuple(train.Epoch(32, 20.0) for _ in range(10))
    trainer, out = a_trainer(tmp_path, plan, fake, scale=100.0)
    trainer.reporter = reporter
    write_checkpoint(trainer.checkpoint, Checkpoint(1, 32))  # acknowledged earlier
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    assert trainer.run() is False
    saved_at = time.monotonic()
    timer.join()
    assert fake.installed and fake.acks == 1 and fake.signalled_at is not None
    assert saved_at - fake.signalled_at < 0.2
    # resumed at 1, finished epochs 2 and 3 (at 0.2 and 0.4 s), and half the 4th: saved
    # at the step the signal came, as a loop that checkpoints its step counter does
    saved = read_checkpoint(trainer.checkpoint)
    assert saved is not None and saved.batch_size == 32
    assert 3.0 < saved.epochs_done < 4.0 and saved.epochs_done != 3.0  # a part of the 4th
    assert [r[0] for r in fake.reports] == [1, 2, 3]
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("checkpoint signal: saved 3.")
    assert last.endswith("/10 epochs, batch size 32; training on from it")
    # after the requeue: continues from the checkpoint
    again, _ = a_trainer(tmp_path, plan, FakeReporter(), clock=FakeClock())
    assert again.run() and again.epochs_done == 10


def test_local_reporter_catches_the_signal_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOCKWAVE_SIGNAL", "usr1")
    rep = LocalReporter()
    rep.install()
    assert not rep.should_checkpoint()
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 2
    while not rep.should_checkpoint() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rep.should_checkpoint()


def test_gpus_come_from_cuda_visible_devices() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 2) == 4
    assert visible_gpus({"SLURM_JOB_GPUS": "5"}, 2) == 1
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
                         "SLURM_JOB_NUM_NODES": "2"}, 16) == 16
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, 2) == 2
    table = load_table(None)
    on2 = epoch_plan("ResNet-18", 32, 5, AdaptationMode.STATIC, 2, table)
    on4 = epoch_plan("ResNet-18", 32, 5, AdaptationMode.STATIC, 2, table, actual_gpus=4)
    assert on4[0].seconds == epoch_seconds("ResNet-18", 32, 4, table) < on2[0].seconds


def test_main_reads_the_gpus_and_finishes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(train, "load_reporter", lambda: FakeReporter())
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    args = ["--model", "ResNet-18", "--bs", "32", "--epochs", "3", "--gpus", "2",
            "--time-scale", "1e5", "--checkpoint", str(tmp_path), "--restore-s", "0"]
    totals = {}
    for devices in ("0,1", "0,1,2,3"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", devices)
        (tmp_path / "4242.json").unlink(missing_ok=True)
        assert main(args) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[-1] == "done 3/3 epochs"
        totals[devices] = lines[0]
    assert "gpus=2 (asked 2)" in totals["0,1"] and "gpus=4 (asked 2)" in totals["0,1,2,3"]
    assert totals["0,1"] != totals["0,1,2,3"]
    saved = read_checkpoint(tmp_path / "4242.json")
    assert saved is not None and (saved.epochs_done, saved.batch_size) == (3, 32)
    assert saved.run == "job 4242: ResNet-18 bs=32 epochs=3 mode=static gpus=2"


def test_epoch_s_for_a_model_the_table_has_is_said_unused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a red-team: ``--epoch-s`` was ignored without a word where the table has
    the model: the table's times win, and the job says so."""
    plan = train.epoch_plan("ResNet-18", 32, 2, AdaptationMode.STATIC, 1, load_table(None),
                            epoch_s=5.0)
    assert plan[0].seconds != 5.0
    assert capsys.readouterr().err.startswith("--epoch-s 5 not used: the throughput table "
                                              "has ResNet-18")


def test_unknown_model_needs_epoch_s(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(train, "load_reporter", lambda: FakeReporter())
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_GPUS", raising=False)
    base = ["--model", "my-bert", "--bs", "8", "--epochs", "2", "--time-scale", "1e5",
            "--checkpoint", str(tmp_path)]
    assert main(base) == 2
    assert "give --epoch-s" in capsys.readouterr().err
    assert main([*base, "--epoch-s", "60"]) == 0
    saved = read_checkpoint(tmp_path / "local.json")
    assert saved is not None and (saved.epochs_done, saved.batch_size) == (2, 8)


def an_emulated_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str], model: str, epochs: int,
                    restarts: int, *extra: str) -> tuple[list[str], list[str]]:
    """Slurm job 1 run by main() to its end: its output lines and its stderr lines."""
    monkeypatch.setattr(train, "load_reporter", lambda: FakeReporter())
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    monkeypatch.setenv("SLURM_RESTART_COUNT", str(restarts))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_GPUS", raising=False)
    assert main(["--model", model, "--bs", "32", "--epochs", str(epochs), "--gpus", "1",
                 "--time-scale", "1e5", "--restore-s", "0", "--checkpoint", str(tmp_path),
                 *extra]) == 0
    got = capsys.readouterr()
    return got.out.splitlines(), got.err.splitlines()


def test_a_new_job_never_takes_up_an_earlier_jobs_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a review: Slurm's job ids start again after its state is purged, and
    trace submit's checkpoint folder stays: a new job 1 took up the finished checkpoint
    of an earlier job 1 and exited 0 without training."""
    out, err = an_emulated_job(tmp_path, monkeypatch, capsys, "ResNet-18", 12, 0)
    assert out[-1] == "done 12/12 epochs" and err == []
    # another trace's job 1, and the same trace's job 1 again: both train every epoch
    for model, epochs in (("ResNet-50", 6), ("ResNet-50", 6)):
        out, err = an_emulated_job(tmp_path, monkeypatch, capsys, model, epochs, 0)
        assert not any(line.startswith("resumed") for line in out)
        assert sum(line.startswith("epoch ") for line in out) == epochs
        assert len(err) == 1 and err[0].startswith(
            f"ignoring checkpoint {tmp_path / '1.json'}: the job is new to Slurm")
    saved = read_checkpoint(tmp_path / "1.json")
    assert saved is not None and saved.epochs_done == 6 and "ResNet-50" in saved.run


def test_a_requeued_job_without_a_checkpoint_says_it_starts_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a red-team: restarted by Slurm with its checkpoint gone (a node-local
    folder), the job went back to epoch 0 without a word."""
    out, err = an_emulated_job(tmp_path, monkeypatch, capsys, "ResNet-18", 4, 2)
    assert out[-1] == "done 4/4 epochs"
    assert err == [f"no checkpoint {tmp_path / '1.json'} to take up (restart 2): training "
                   "from epoch 0"]


def test_a_requeued_job_takes_up_only_its_own_runs_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """After a requeue (restart count 1) the checkpoint at the job's path is taken up only
    if it names this run: the same job id, trace job, submission time and job."""
    run = "--trace-job-id", "3", "--submitted-at", "1800000000.5"
    mine = train.run_label({"SLURM_JOB_ID": "1"}, "ResNet-18", 32, 8, "static", 1, 3,
                           1800000000.5)
    path = tmp_path / "1.json"
    for other in ("", mine.replace("1800000000.5", "1700000000.25"),
                  mine.replace("epochs=8", "epochs=9")):
        write_checkpoint(path, Checkpoint(5, 32, other))
        out, err = an_emulated_job(tmp_path, monkeypatch, capsys, "ResNet-18", 8, 1, *run)
        assert sum(line.startswith("epoch ") for line in out) == 8, other
        assert len(err) == 1 and "another run's" in err[0] and err[0].endswith("replacing it")
    write_checkpoint(path, Checkpoint(5, 32, mine))
    out, err = an_emulated_job(tmp_path, monkeypatch, capsys, "ResNet-18", 8, 1, *run)
    assert out[1] == f"resumed from {path}: 5/8 epochs done, batch size 32 (restart 1)"
    assert sum(line.startswith("epoch ") for line in out) == 3 and err == []


@pytest.mark.parametrize(("restarts", "extra", "resumed"), [
    (1, (), True),  # requeued, submitted before checkpoints named their run: its own
    # submitted since (--submitted-at): its first start wrote a named one, so not its own
    (1, ("--submitted-at", "1800000000.5"), False),
    (0, (), False),  # new to Slurm: an earlier job's under the same id
], ids=["requeued", "submitted-since", "new-job"])
def test_an_unnamed_checkpoint_is_taken_up_only_by_a_requeued_job_of_its_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        restarts: int, extra: tuple[str, ...], resumed: bool) -> None:
    """Found by a review: a checkpoint from before checkpoints named their run (no "run")
    was another run's to every job, so a job started before an upgrade and requeued after
    it lost all the progress it had acknowledged."""
    path = tmp_path / "1.json"
    path.write_text(json.dumps({"epochs_done": 5, "batch_size": 32}) + "\n")  # the old format
    out, err = an_emulated_job(tmp_path, monkeypatch, capsys, "ResNet-18", 8, restarts,
                               "--trace-job-id", "3", *extra)
    trained = sum(line.startswith("epoch ") for line in out)
    assert len(err) == 1, err
    if resumed:
        assert out[1] == f"resumed from {path}: 5/8 epochs done, batch size 32 (restart 1)"
        assert trained == 3 and err[0].startswith(f"taking up checkpoint {path}, which "
                                                  "names no run")
    else:
        assert trained == 8 and err[0].startswith(f"ignoring checkpoint {path}: ")
    saved = read_checkpoint(path)  # named from now on
    assert saved is not None and saved.run.startswith("job 1, trace job 3")


def test_an_unnamed_checkpoint_is_not_taken_up_without_slurm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without Slurm no restart count says the job ran before: every start is a new one."""
    monkeypatch.setattr(train, "load_reporter", lambda: FakeReporter())
    for name in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "local.json"
    path.write_text(json.dumps({"epochs_done": 1, "batch_size": 8}) + "\n")
    assert main(["--model", "my-bert", "--bs", "8", "--epochs", "2", "--epoch-s", "60",
                 "--time-scale", "1e5", "--restore-s", "0", "--checkpoint", str(tmp_path)]) == 0
    got = capsys.readouterr()
    assert sum(line.startswith("epoch ") for line in got.out.splitlines()) == 2
    assert got.err.startswith(f"ignoring checkpoint {path}: another run's (unnamed: ")


def test_resumed_is_said_only_on_a_resume(tmp_path: Path) -> None:
    """Found by a review: after each checkpoint signal the job, training on in the same
    process, printed 'resumed from ... (restart 0)' again."""
    plan = tuple(train.Epoch(32, 10.0) for _ in range(3))

    def twice_signalled() -> tuple[Trainer, io.StringIO]:
        clock = FakeClock()

        class Twice(FakeReporter):
            def should_checkpoint(self) -> bool:
                return self.acks < 2 and clock.now >= 5.0 * (self.acks + 1)

        return a_trainer(tmp_path, plan, Twice(), clock=clock)

    trainer, out = twice_signalled()
    assert trainer.run() is False and trainer.run() is False and trainer.run()
    assert [ln for ln in out.getvalue().splitlines() if ln.startswith("resumed")] == []
    write_checkpoint(trainer.checkpoint, Checkpoint(1, 32))
    again, out = twice_signalled()
    assert again.run() is False and again.run() is False and again.run()
    assert [ln.split(":")[0] for ln in out.getvalue().splitlines()
            if ln.startswith("resumed")] == ["resumed from " + str(again.checkpoint)]


def test_a_signal_during_restore_keeps_the_checkpoint(tmp_path: Path) -> None:
    plan = tuple(train.Epoch(64, 10.0) for _ in range(5))
    rep = FakeReporter()
    trainer, _ = a_trainer(tmp_path, plan, rep, clock=FakeClock(), restore_s=20)
    write_checkpoint(trainer.checkpoint, Checkpoint(2, 64))
    rep.signalled_at = 0.0
    assert trainer.run() is False
    assert read_checkpoint(trainer.checkpoint) == Checkpoint(2, 64) and rep.acks == 1


class BlockingReporter(FakeReporter):
    """Each report takes ``seconds`` of ``clock``'s time, as a call to a slow service."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def report(self, epoch: float | None = None, batch_size: int | None = None,
               samples_per_s: float | None = None) -> None:
        super().report(epoch, batch_size, samples_per_s)
        self.clock.now += self.seconds


def test_the_loops_own_work_does_not_slow_the_epochs(tmp_path: Path) -> None:
    # 1,000 epochs of 40 ms (a scaled Recommendation job); every report takes 4 ms
    clock = FakeClock()
    plan = tuple(train.Epoch(32, 0.04) for _ in range(1000))
    trainer, _ = a_trainer(tmp_path, plan, BlockingReporter(clock, 0.004), clock=clock)
    assert trainer.run()
    # 40 s of epochs and two reports outside them (at the start, after the last): not 44 s
    assert clock.now == pytest.approx(40.0 + 2 * 0.004, abs=1e-6)


def test_a_service_answering_late_does_not_slow_the_job(tmp_path: Path) -> None:
    """Found by a red-team: the report interval was measured from before the call, so
    with each report blocking its 2 s timeout (a hung service) every overdue epoch
    reported again, one epoch a report: 76 times slower."""
    clock = FakeClock()
    rep = BlockingReporter(clock, 2.0)
    plan = tuple(train.Epoch(32, 0.1) for _ in range(300))  # 30 s of epochs
    trainer, _ = a_trainer(tmp_path, plan, rep, clock=clock)
    trainer.report_every_s = 1.0
    assert trainer.run()
    assert clock.now < 30.0 + 2.0 * 20, (clock.now, len(rep.reports))


def test_a_rate_past_the_apis_bound_leaves_the_rest_of_the_report(tmp_path: Path) -> None:
    """Found by a red-team: at a time scale of 20,000 a job's samples/s passed the API's
    1e9 and the client dropped every report whole, epochs and batch sizes too."""
    rep = FakeReporter()
    plan = tuple(train.Epoch(32, 1.0) for _ in range(3))
    trainer, _ = a_trainer(tmp_path, plan, rep, clock=FakeClock(), scale=1e6)
    trainer.samples_per_epoch = 10**7
    assert trainer.run()
    assert [r[0] for r in rep.reports][-1] == 3 and all(r[2] is None for r in rep.reports)
    trainer, _ = a_trainer(tmp_path / "b", plan, rep := FakeReporter(), clock=FakeClock())
    assert trainer.run() and rep.reports[-1][2] == pytest.approx(50_000)


def test_reports_are_spaced_but_batch_size_changes_and_the_end_are_sent(
        tmp_path: Path) -> None:
    clock, rep = FakeClock(), FakeReporter()
    plan = tuple(train.Epoch(32 if e < 20 else 64, 0.125) for e in range(50))
    trainer, _ = a_trainer(tmp_path, plan, rep, clock=clock)
    trainer.report_every_s = 1.0
    assert trainer.run()
    epochs = [r[0] for r in rep.reports]
    # start, each 1 s, the change (at the old size, then the new), the end
    assert epochs == [0, 8, 16, 20, 20, 28, 36, 44, 50]
    assert [r[1] for r in rep.reports if r[0] == 20] == [32, 64]
    # so the job's own history is exact: 20 epochs at 32, 30 at 64
    reports = [ProgressReport(7, ReportKind.PROGRESS, float(i), epoch=r[0], batch_size=r[1])
               for i, r in enumerate(rep.reports)]
    assert observed_progress(JobProgress(bs=32, epoch_s=1.0), reports).bs_history == (
        (32, 20), (64, 30))


@pytest.mark.parametrize(("signal_at", "done_at_signal"), [(25.0, 0.5), (5.0, 0.0)],
                         ids=["mid-epoch", "mid-restore"])
def test_training_on_after_a_checkpoint_does_not_restore_again(
        tmp_path: Path, signal_at: float, done_at_signal: float) -> None:
    """5 epochs of 10 s after a 20 s restore; the signal comes half-way through epoch 1,
    or 5 s into the restore: the job checkpoints and trains on in the same process, its
    state in memory, so it ends at 70 s, not 90 (a second restore), nor 75 (the restore's
    first 5 s again, found by a review)."""
    clock = FakeClock()

    class Once(FakeReporter):
        def should_checkpoint(self) -> bool:
            return clock.now >= signal_at and self.acks == 0

    plan = tuple(train.Epoch(32, 10.0) for _ in range(5))
    trainer, _ = a_trainer(tmp_path, plan, Once(), clock=clock, restore_s=20)
    assert trainer.run() is False and trainer.epochs_done == pytest.approx(done_at_signal)
    assert trainer.run() and clock.now == pytest.approx(70.0)


@pytest.mark.parametrize(("option", "value"), [("--epoch-s", "inf"), ("--time-scale", "inf"),
                                               ("--restore-s", "inf"),
                                               ("--time-scale", "1e-320"),
                                               # a docs audit: negative durations passed
                                               ("--restore-s", "-1"),
                                               ("--report-every-s", "-5"),
                                               # an overflow midway through fsum (review)
                                               ("--epoch-s", "1e308")])
def test_a_duration_past_any_number_is_refused_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
    """Found by a review: inf passed '> 0', and a denormal time scale made every epoch
    infinite; the job then slept for ever instead of exiting 2."""
    given = {"--time-scale": "1e5", "--epoch-s": "60", "--restore-s": "20", option: value}
    argv = ["--model", "my-bert", "--bs", "8", "--epochs", "2", "--checkpoint", str(tmp_path),
            *(x for pair in given.items() for x in pair)]
    try:
        code = main(argv)
    except SystemExit as exited:  # argparse's refusal
        code = exited.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert option in err[-1]  # the last line (argparse prints its usage first)


def test_the_local_reporter_asks_again_only_at_the_next_signal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review: its acknowledgement left the signal set, so after one signal
    every run returned at once and the job rewrote its checkpoint for ever."""
    monkeypatch.setenv("SHOCKWAVE_SIGNAL", "USR1")
    rep, clock = LocalReporter(), FakeClock()
    plan = tuple(train.Epoch(32, 10.0) for _ in range(3))
    trainer, _ = a_trainer(tmp_path, plan, rep, clock=clock)  # type: ignore[arg-type]
    trainer.reporter = rep
    rep.install()
    rep._caught(signal.SIGUSR1, None)
    assert trainer.run() is False and not rep.should_checkpoint()
    assert trainer.run() and trainer.epochs_done == 3


def test_epochs_past_a_traces_limit_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a review: --epochs 1000000000 filled the memory (MemoryError); the bound
    is a trace's (model/bounds.py MAX_EPOCHS)."""
    base = ["--model", "my-bert", "--bs", "8", "--checkpoint", "/nonexistent"]
    assert parser().parse_args([*base, "--epochs", "100000"]).epochs == 100_000
    with pytest.raises(SystemExit) as exited:
        parser().parse_args([*base, "--epochs", "1000000000"])
    assert exited.value.code == 2
    assert "--epochs: must be from 1 to 100000" in capsys.readouterr().err.splitlines()[-1]


def test_a_checkpoint_folder_it_cannot_write_is_one_line_before_any_epoch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review: a PermissionError traceback after the first epoch, that epoch
    lost; now checked at the start."""
    monkeypatch.setattr(train, "load_reporter", lambda: FakeReporter())
    for name in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    if os.access(folder, os.W_OK):  # root: permissions do not stop it
        folder = Path("/proc/self/nope")
    assert main(["--model", "my-bert", "--bs", "8", "--epochs", "2", "--epoch-s", "60",
                 "--time-scale", "1e5", "--restore-s", "0", "--checkpoint", str(folder)]) == 2
    got = capsys.readouterr()
    assert not any(line.startswith("epoch ") for line in got.out.splitlines())
    err = got.err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"error: {folder / 'local.json'}: --checkpoint: cannot write the checkpoint ("), err


def break_the_checkpoint(path: Path, how: str) -> None:
    """Make ``path`` unwritable for real, as root too (file modes do not stop root): a
    directory where the file goes, or a file where its folder is."""
    if how == "directory-at-its-path":
        path.unlink()
        path.mkdir()
    else:
        shutil.rmtree(path.parent)
        path.parent.write_text("a file, not a folder\n")


@pytest.mark.parametrize(("how", "cause"), [("directory-at-its-path", "Is a directory"),
                                            ("folder-is-a-file", "Not a directory")])
def test_a_checkpoint_it_cannot_write_mid_run_is_one_line_and_it_trains_on(
        tmp_path: Path, how: str, cause: str) -> None:
    """Found by a review: a checkpoint write failing mid-run (a full disk, a read-only
    folder) was a traceback, and the job died with its progress in memory."""
    class Breaking(FakeReporter):
        def report(self, epoch: float | None = None, batch_size: int | None = None,
                   samples_per_s: float | None = None) -> None:
            super().report(epoch, batch_size, samples_per_s)
            if epoch == 2:  # after its 2nd epoch's checkpoint
                break_the_checkpoint(trainer.checkpoint, how)

    plan = tuple(train.Epoch(32, 10.0) for _ in range(5))
    trainer, out = a_trainer(tmp_path, plan, Breaking(), clock=FakeClock())
    trainer.err = io.StringIO()
    assert trainer.run()
    assert out.getvalue().splitlines()[-1] == "done 5/5 epochs"
    assert trainer.err.getvalue().splitlines() == [  # once, not at each of 3 epochs
        f"cannot write checkpoint {trainer.checkpoint} ({cause}): training on; a restart "
        "resumes from the last one written (2.00/5 epochs)"]
    if how == "directory-at-its-path":  # no temporary file left behind
        assert sorted(p.name for p in trainer.checkpoint.parent.iterdir()) == ["7.json"]


def test_a_signal_whose_checkpoint_cannot_be_written_is_not_acknowledged(
        tmp_path: Path) -> None:
    """The service requeues a job at once on its acknowledgement: never given for a
    checkpoint not written (the restart would resume from an older one). The job trains
    on and acknowledges at the first epoch whose checkpoint is written."""
    clock = FakeClock()

    class Signalled(FakeReporter):
        def should_checkpoint(self) -> bool:
            return clock.now >= 15.0 and self.acks == 0  # half-way through epoch 2

        def report(self, epoch: float | None = None, batch_size: int | None = None,
                   samples_per_s: float | None = None) -> None:
            super().report(epoch, batch_size, samples_per_s)
            if epoch == 1:
                break_the_checkpoint(trainer.checkpoint, "directory-at-its-path")
            if epoch == 2:  # the disk has room again
                trainer.checkpoint.rmdir()

    plan = tuple(train.Epoch(32, 10.0) for _ in range(5))
    rep = Signalled()
    trainer, out = a_trainer(tmp_path, plan, rep, clock=clock)
    trainer.err = io.StringIO()
    assert trainer.run() is False and rep.acks == 0  # the signal: not written, not acked
    assert trainer.err.getvalue().splitlines() == [
        f"checkpoint signal: cannot write checkpoint {trainer.checkpoint} (Is a directory): "
        "not acknowledged; training on, to acknowledge at the first epoch whose checkpoint "
        "is written (a restart before it resumes from the last one written: 1.00/5 epochs)"]
    assert trainer.run() is False and rep.acks == 1  # epoch 3's checkpoint is written
    assert clock.now == pytest.approx(30.0)
    assert read_checkpoint(trainer.checkpoint) == Checkpoint(3, 32)
    assert out.getvalue().splitlines()[-1] == ("checkpoint signal: saved 3.00/5 epochs, "
                                               "batch size 32; training on from it")
    assert trainer.run() and rep.acks == 1 and len(trainer.err.getvalue().splitlines()) == 1
