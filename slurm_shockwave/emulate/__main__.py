"""``python -m slurm_shockwave.emulate``: an emulated training job (docs/emulation.md).

Exit 0 when every epoch is done, 2 on bad arguments (one line on stderr). After its
checkpoint signal it saves, acknowledges and sleeps until Slurm requeues it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from slurm_shockwave.emulate import train
from slurm_shockwave.emulate.train import (
    Trainer,
    epoch_plan,
    full_scale_s,
    job_label,
    restart_count,
    run_label,
    visible_gpus,
)
from slurm_shockwave.model.bounds import MAX_EPOCHS
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.workloads.bundled import load_table
from slurm_shockwave.workloads.catalog import MODELS


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
        return value
    parse.__name__ = getattr(kind, "__name__", "number")
    return parse


def _epochs(text: str) -> int:
    """1 to MAX_EPOCHS, as a trace's epochs are (a billion filled the memory)."""
    value = int(text)
    if not 1 <= value <= MAX_EPOCHS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_EPOCHS}, got {text!r}")
    return value


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _at_least_0(text: str) -> float:
    """A duration that may be 0 (no restore, a report every epoch), not below."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m slurm_shockwave.emulate",
                                description="Emulate a training job by sleeping each epoch.")
    p.add_argument("--model", required=True, help=f"one of {', '.join(MODELS)} or any label "
                                                  "(then --epoch-s)")
    p.add_argument("--bs", type=_positive(int), required=True, help="initial batch size")
    p.add_argument("--epochs", type=_epochs, required=True)
    p.add_argument("--mode", choices=[m.value for m in AdaptationMode], default="static")
    p.add_argument("--gpus", type=_positive(int), default=1,
                   help="GPUs requested (used when CUDA_VISIBLE_DEVICES/SLURM_JOB_GPUS "
                        "are unset)")
    p.add_argument("--time-scale", type=_positive(float), default=1.0,
                   help="divide every duration by this")
    p.add_argument("--checkpoint", required=True, metavar="DIR",
                   help="checkpoints go to DIR/<SLURM_JOB_ID>.json")
    p.add_argument("--throughputs", default=None, help="builtin:tacc (default), builtin:wisr "
                                                       "or a Gavel-format JSON file")
    p.add_argument("--epoch-s", type=_positive(float), default=None,
                   help="seconds per epoch at full scale, for a model the table lacks")
    p.add_argument("--restore-s", type=_at_least_0, default=20.0,
                   help="checkpoint restore at every start, full scale (the simulator's 20)")
    p.add_argument("--report-every-s", type=_at_least_0, default=1.0,
                   help="wall seconds between progress reports at least (0: every epoch; "
                        "batch-size changes and the last epoch are sent at once)")
    p.add_argument("--trace-job-id", type=int, default=None)
    p.add_argument("--submitted-at", type=_finite, default=None, metavar="UNIX_S",
                   help="when trace submit submitted it: with the Slurm job id and the "
                        "trace job id, names the run its checkpoints belong to")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    env = os.environ
    try:
        table = load_table(args.throughputs)
        got = visible_gpus(env, args.gpus)
        plan = epoch_plan(args.model, args.bs, args.epochs, AdaptationMode(args.mode),
                          args.gpus, table, actual_gpus=got, epoch_s=args.epoch_s)
        full_s = full_scale_s(plan) + args.restore_s
        if not math.isfinite(full_s):
            raise InputError("the job's seconds at full scale (its epochs and --restore-s) "
                             "pass any number", source="emulate",
                             field="--restore-s" if args.epoch_s is None else "--epoch-s")
        if not math.isfinite(full_s / args.time_scale):
            raise InputError(f"{args.time_scale!r} scales the job's seconds past any "
                             "number: a time scale so small is no time scale",
                             source="emulate", field="--time-scale")
        job = job_label(env)
        label = "" if args.trace_job_id is None else f" (trace job {args.trace_job_id})"
        info = MODELS.get(args.model)
        restarts = restart_count(env)
        slurm = bool(env.get("SLURM_JOB_ID"))
        trainer = Trainer(plan=plan, time_scale=args.time_scale,
                          checkpoint=Path(args.checkpoint) / f"{job}.json",
                          reporter=train.load_reporter(), out=sys.stdout,
                          samples_per_epoch=info.samples_per_epoch if info else None,
                          restore_s=max(0.0, args.restore_s),
                          report_every_s=max(0.0, args.report_every_s),
                          restart_count=restarts,
                          run_id=run_label(env, args.model, args.bs, args.epochs, args.mode,
                                           args.gpus, args.trace_job_id, args.submitted_at),
                          # under Slurm, a job at restart 0 never resumes (an earlier
                          # job's file is at its path once Slurm's ids start again)
                          new_job=slurm and restarts == 0,
                          # a requeued job submitted before checkpoints named their run
                          # wrote an unnamed one: its own
                          unnamed_is_own=slurm and restarts > 0
                          and args.submitted_at is None)
        print(f"start job {job}{label}: {args.model} bs={args.bs} mode={args.mode} "
              f"epochs={len(plan)} gpus={got} (asked {args.gpus}) full-scale "
              f"{full_scale_s(plan):.0f}s / {args.time_scale:g}", flush=True)
        # after a checkpoint the job trains on (no second restore: its state is in
        # memory) until the service requeues it, which kills it, or to the end if the
        # plan keeps it
        while not trainer.run():
            pass
        return 0
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
