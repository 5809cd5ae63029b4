"""What ``shockwave trace submit`` hands to ``sbatch`` for one trace job.

Pure functions: the sbatch options (GPUs, hint, requeue, output file, name) and the job
script running ``python -m slurm_shockwave.emulate`` with the same parameters.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path

from slurm_shockwave.model.job import JobSpec

GPUS_PER_NODE = 8
SIGNAL = "USR1"
GRACE_S = 30


@dataclass(frozen=True, slots=True)
class EmulatorSettings:
    time_scale: float
    checkpoint_dir: Path
    output_dir: Path
    partition: str = "shockwave"
    throughputs: str | None = None
    python: str = "python3"
    pythonpath: str | None = None
    """Prepended to the job's PYTHONPATH so it runs the submitter's copy of the package."""


def hint_comment(spec: JobSpec) -> str:
    """The adaptation hint (docs/hints.md) for ``sbatch --comment``."""
    elastic = (f" gpus={spec.gpus_range[0]}-{spec.gpus_range[1]}"
               if spec.gpus_range is not None else "")
    return (f"model={spec.model} bs={spec.init_bs} epochs={spec.num_epochs} "
            f"mode={spec.mode.value}{elastic} signal={SIGNAL} grace={GRACE_S}")


def gpu_args(gpus: int) -> list[str]:
    """``--gres=gpu:G``; more than a node's 8: whole nodes of 8."""
    if gpus <= GPUS_PER_NODE:
        return [f"--gres=gpu:{gpus}"]
    return ["-N", str(math.ceil(gpus / GPUS_PER_NODE)), f"--gres=gpu:{GPUS_PER_NODE}"]


def sbatch_args(spec: JobSpec, settings: EmulatorSettings) -> list[str]:
    return ["-p", settings.partition, *gpu_args(spec.gpus), f"--comment={hint_comment(spec)}",
            "--requeue", "--open-mode=append", "-o", str(settings.output_dir / "%j.out"),
            "-J", f"trace-{spec.job_id}"]


def emulate_argv(spec: JobSpec, settings: EmulatorSettings,
                 submitted_at: float | None = None) -> list[str]:
    """The emulated job's command; ``submitted_at`` (Unix seconds) names its run, so that
    no checkpoint of another run under the same Slurm job id is resumed."""
    argv = [settings.python, "-m", "slurm_shockwave.emulate", "--model", spec.model,
            "--bs", str(spec.init_bs), "--epochs", str(spec.num_epochs),
            "--mode", spec.mode.value, "--gpus", str(spec.gpus),
            "--time-scale", repr(settings.time_scale),
            "--checkpoint", str(settings.checkpoint_dir), "--trace-job-id", str(spec.job_id)]
    if submitted_at is not None:
        argv += ["--submitted-at", repr(submitted_at)]
    if settings.throughputs:
        argv += ["--throughputs", settings.throughputs]
    return argv


def job_script(spec: JobSpec, settings: EmulatorSettings,
               submitted_at: float | None = None) -> str:
    """The batch script: ignore the signal until Python handles it, then exec the job."""
    # env ignores the signal before bash starts: a signal in bash's own start-up, before
    # its trap line, killed the job (WTERMSIG 10), which ended and was lost (seen in the
    # container demo, a job preempted 60 ms after Slurm allocated it)
    lines = [f"#!/usr/bin/env -S --ignore-signal={SIGNAL} /bin/bash",
             f"# trace job {spec.job_id}, from shockwave trace submit",
             f"trap '' {SIGNAL}", f"export SHOCKWAVE_SIGNAL={SIGNAL}"]
    if settings.pythonpath:
        lines.append(f"export PYTHONPATH={shlex.quote(settings.pythonpath)}"
                     "${PYTHONPATH:+:$PYTHONPATH}")
    lines.append("exec " + shlex.join(emulate_argv(spec, settings, submitted_at)))
    return "\n".join(lines) + "\n"
