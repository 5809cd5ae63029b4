"""``shockwave trace generate`` and ``shockwave trace show``."""

from __future__ import annotations

from pathlib import Path

import click

from slurm_shockwave.cli.errors import one_line_errors
from slurm_shockwave.model.typed_config import build_config
from slurm_shockwave.report.tables import console, rows_table
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import DEMO_TRACE, build_workload, load_throughputs, load_trace
from slurm_shockwave.sim.trace import to_gavel_line, to_json_line


@click.group()
def trace() -> None:
    """Make and inspect workload traces."""


def _floats(text: str, n: int, name: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected {n} comma-separated numbers", param_hint=name) from None
    if len(values) != n:
        raise click.BadParameter(f"expected {n} comma-separated numbers", param_hint=name)
    return values


@trace.command("generate")
@click.option("--jobs", "num_jobs", type=int, default=120, show_default=True)
@click.option("--mean-gap-s", type=float, default=40.0, show_default=True,
              help="Mean Poisson inter-arrival time.")
@click.option("--min-h", type=float, default=0.2, show_default=True)
@click.option("--max-h", type=float, default=5.0, show_default=True)
@click.option("--durations", "num_durations", type=int, default=100, show_default=True,
              help="How many distinct nominal durations between min and max.")
@click.option("--mode-mix", default="0,0.5,0.5", show_default=True,
              help="Probabilities of static,accordion,gns.")
@click.option("--gpu-mix", default="0.6,0.3,0.09,0.01", show_default=True,
              help="Probabilities of 1,2,4,8 GPUs.")
@click.option("--throughputs", default=None, help="Table for steps (default builtin:tacc).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "gavel"]), default="jsonl",
              show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Write here (default: standard output).")
@one_line_errors
def generate_cmd(num_jobs: int, mean_gap_s: float, min_h: float, max_h: float,
                 num_durations: int, mode_mix: str, gpu_mix: str, throughputs: str | None,
                 seed: int, fmt: str, out: str | None) -> None:
    """Generate a seeded synthetic trace shaped like the paper's."""
    shape = build_config(TraceShape, {
        "num_jobs": num_jobs, "mean_gap_s": mean_gap_s, "min_h": min_h, "max_h": max_h,
        "num_durations": num_durations, "mode_mix": _floats(mode_mix, 3, "--mode-mix"),
        "gpu_mix": _floats(gpu_mix, 4, "--gpu-mix")}, source="options")
    jobs = generate(shape, load_throughputs(throughputs), seed)
    line = to_json_line if fmt == "jsonl" else to_gavel_line
    text = "\n".join(line(j) for j in jobs) + "\n"
    if out:
        Path(out).write_text(text, encoding="utf-8")
        click.echo(f"wrote {len(jobs)} jobs to {out}", err=True)
    else:
        click.echo(text, nl=False)


@trace.command("show")
@click.argument("trace_file", required=False, default=DEMO_TRACE)
@click.option("--throughputs", default=None, help="Gavel JSON or builtin:tacc|wisr.")
@one_line_errors
def show(trace_file: str, throughputs: str | None) -> None:
    """Per-job summary of TRACE: epochs, batch-size pattern and exclusive runtime."""
    jobs = load_trace(trace_file)
    workload = build_workload(jobs, load_throughputs(throughputs), source=trace_file)
    rows = []
    for j in jobs:
        s, p = j.spec, workload.profiles[j.spec.job_id]
        segs = " ".join(f"{b}x{n}" for b, n in p.segments()[:4])
        rows.append((s.job_id, s.model, s.init_bs, s.gpus, s.mode.value, f"{s.arrival_s:,.0f}",
                     s.num_epochs, f"{p.exclusive_s:,.0f}",
                     segs + (" ..." if len(p.segments()) > 4 else "")))
    out = console()
    out.print(rows_table(f"{trace_file}: {len(jobs)} jobs",
                             ("id", "model", "bs", "GPUs", "mode", "arrival s", "epochs",
                              "exclusive s", "batch size x epochs"), rows))
    gpu_h = sum(workload.profiles[j.spec.job_id].exclusive_s * j.spec.gpus for j in jobs) / 3600
    last = max(j.spec.arrival_s + workload.profiles[j.spec.job_id].exclusive_s for j in jobs)
    out.print(f"total work {gpu_h:,.1f} GPU-h; latest arrival + exclusive runtime "
                  f"{last:,.0f} s (a lower bound on makespan)")
