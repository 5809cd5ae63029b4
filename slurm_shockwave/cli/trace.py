"""``shockwave trace generate``, ``shockwave trace show`` and ``shockwave trace submit``."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import slurm_shockwave
from slurm_shockwave.cli.checks import PARTITION, PATH_TEXT, Bounded, json_text, note_bundled
from slurm_shockwave.cli.errors import (
    one_line_errors,
    output_errors,
    writable_dir,
    writable_file,
)
from slurm_shockwave.emulate.submit import EmulatorSettings, hint_comment, job_script, sbatch_args
from slurm_shockwave.live.sigterm import sigterm_raises
from slurm_shockwave.model.bounds import (
    MAX_ARRIVAL_S,
    MAX_EPOCHS,
    MAX_JOBS,
    MAX_RANGE_GPUS,
    MAX_SEED,
    MAX_TOTAL_EPOCHS,
    number_list,
)
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.typed_config import build_config
from slurm_shockwave.report.outputs import write_text
from slurm_shockwave.report.tables import console, rows_table
from slurm_shockwave.sim.generate import ARRIVALS, DURATIONS, TraceShape, generate
from slurm_shockwave.sim.inputs import DEMO_TRACE, build_workload, load_throughputs, load_trace
from slurm_shockwave.sim.trace import (
    JSON_SUFFIXES,
    TraceJob,
    elastic_factors,
    make_elastic,
    to_gavel_line,
    to_json_line,
)
from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.hints import parse_hint
from slurm_shockwave.slurm.protocol import SlurmError

MAX_MEAN_GAP_S = 86_400.0
MAX_HOURS = 24.0
"""At most a day per job: at the fastest bundled throughput, under 100,000 epochs."""
MAX_DURATIONS = 1_000


@click.group()
def trace() -> None:
    """Make and inspect workload traces."""


@trace.command("generate")
@click.option("--jobs", "num_jobs", type=Bounded(1, MAX_JOBS, integer=True), default=120,
              show_default=True)
@click.option("--mean-gap-s", type=Bounded(0, MAX_MEAN_GAP_S), default=40.0, show_default=True,
              help="Mean Poisson inter-arrival time.")
@click.option("--min-h", type=Bounded(0, MAX_HOURS, lo_open=True), default=0.2,
              show_default=True)
@click.option("--max-h", type=Bounded(0, MAX_HOURS, lo_open=True), default=5.0,
              show_default=True)
@click.option("--durations", "num_durations", type=Bounded(1, MAX_DURATIONS, integer=True),
              default=None, help="How many distinct nominal durations between min and max "
              f"(--duration-dist buckets; default {TraceShape.num_durations}).")
@click.option("--mode-mix", default="0,0.5,0.5", show_default=True,
              help="Probabilities of static,accordion,gns.")
@click.option("--gpu-mix", default="0.6,0.3,0.09,0.01", show_default=True,
              help="Probabilities of 1,2,4,8 GPUs.")
@click.option("--arrivals", type=click.Choice(ARRIVALS), default="poisson", show_default=True,
              help="diurnal: a day/night cycle, --mean-gap-s at the daily peak.")
@click.option("--diurnal-depth", type=float, default=None,
              help="How much quieter the night is (0 to 0.99; --arrivals diurnal; default "
              f"{TraceShape.diurnal_depth}).")
@click.option("--duration-dist", type=click.Choice(DURATIONS), default="buckets",
              show_default=True, help="pareto: heavy-tailed from --min-h, capped at --max-h.")
@click.option("--tail-alpha", type=float, default=None,
              help="Pareto shape (smaller: heavier tail; --duration-dist pareto; default "
              f"{TraceShape.tail_alpha}).")
@click.option("--throughputs", default=None, help="Table for steps (default builtin:tacc).")
@click.option("--seed", type=Bounded(0, MAX_SEED, integer=True), default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "gavel"]), default="jsonl",
              show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Write here (default: standard output).")
@one_line_errors
def generate_cmd(num_jobs: int, mean_gap_s: float, min_h: float, max_h: float,
                 num_durations: int | None, mode_mix: str, gpu_mix: str, arrivals: str,
                 diurnal_depth: float | None, duration_dist: str, tail_alpha: float | None,
                 throughputs: str | None, seed: int, fmt: str, out: str | None) -> None:
    """Generate a seeded synthetic trace shaped like the paper's."""
    # an option of another shape than the one asked for would be silently without effect
    for option, value, needs, given in (
            ("--diurnal-depth", diurnal_depth, "--arrivals diurnal", arrivals == "diurnal"),
            ("--tail-alpha", tail_alpha, "--duration-dist pareto", duration_dist == "pareto"),
            ("--durations", num_durations, "--duration-dist buckets",
             duration_dist == "buckets")):
        if value is not None and not given:
            raise InputError(f"only with {needs}", field=option)
    writable_file(out, "--out", inputs=(throughputs,))
    if fmt == "gavel" and out is not None and Path(out).suffix in JSON_SUFFIXES:
        raise InputError(f"a {Path(out).suffix} file is read as JSON lines: name the "
                         "12-column format otherwise (.trace)", source=out, field="--out")
    modes = number_list(mode_mix, field="--mode-mix", count=3)
    gpu_shares = number_list(gpu_mix, field="--gpu-mix", count=4)
    try:
        shape = build_config(TraceShape, {
            "num_jobs": num_jobs, "mean_gap_s": mean_gap_s, "min_h": min_h, "max_h": max_h,
            "num_durations": num_durations or TraceShape.num_durations, "mode_mix": modes,
            "gpu_mix": gpu_shares, "arrivals": arrivals, "durations": duration_dist,
            **{k: v for k, v in (("diurnal_depth", diurnal_depth), ("tail_alpha", tail_alpha))
               if v is not None}})
    except InputError as exc:  # name the option, not the TraceShape field
        field = exc.field.split("[")[0]
        option = {"num_jobs": "--jobs", "num_durations": "--durations",
                  "durations": "--duration-dist"}.get(field, "--" + field.replace("_", "-"))
        raise InputError(exc.problem, field=option) from None
    jobs = generate(shape, load_throughputs(throughputs), seed)
    for job in jobs:  # what simulate will accept: fail here, not when it reads the trace
        if job.spec.num_epochs > MAX_EPOCHS:
            raise InputError(f"job {job.spec.job_id} would have {job.spec.num_epochs} epochs "
                             f"(limit {MAX_EPOCHS}); lower --max-h, or a table with slower "
                             "epochs (--throughputs)", field="--max-h")
        if job.spec.arrival_s > MAX_ARRIVAL_S:
            raise InputError(f"job {job.spec.job_id} would arrive at {job.spec.arrival_s:g} s "
                             f"(limit {MAX_ARRIVAL_S:g} s); lower --mean-gap-s or --jobs",
                             field="--mean-gap-s")
    if sum(j.spec.num_epochs for j in jobs) > MAX_TOTAL_EPOCHS:
        raise InputError(f"the trace would have more than {MAX_TOTAL_EPOCHS} epochs in all; "
                         "fewer --jobs or a lower --max-h", field="--jobs")
    line = to_json_line if fmt == "jsonl" else to_gavel_line
    text = "\n".join(line(j) for j in jobs) + "\n"
    if out:
        with output_errors("--out", out):
            write_text(Path(out), text)
        click.echo(f"wrote {len(jobs)} jobs to {out}", err=True)
    else:
        click.echo(text, nl=False)


@trace.command("elastic")
@click.argument("trace_file", callback=note_bundled)
@click.option("--range", "factors", default="0.5,2", show_default=True,
              help="LO,HI: each job's GPU range as multiples of its request.")
@click.option("--out", type=click.Path(dir_okay=False), required=True,
              help="Write the elastic trace here (JSON lines).")
@one_line_errors
def elastic_cmd(trace_file: str, factors: str, out: str) -> None:
    """Make every job of TRACE elastic: range LO x .. HI x its GPU request (docs/elastic.md)."""
    low, high = number_list(factors, field="--range", count=2)
    elastic_factors(low, high)
    writable_file(out, "--out", inputs=(trace_file,))
    given = load_trace(trace_file)
    jobs = [make_elastic(j, low, high) for j in given]
    with output_errors("--out", out):
        write_text(Path(out), "".join(to_json_line(j) + "\n" for j in jobs))
    # say what the trace had that this changed or left: nothing is replaced unsaid
    replaced = sum(1 for a, b in zip(given, jobs, strict=True)
                   if a.spec.gpus_range is not None and a.spec.gpus_range != b.spec.gpus_range)
    wide = sum(1 for j in jobs if j.spec.gpus > MAX_RANGE_GPUS)
    alone = sum(1 for j in jobs if j.spec.gpus_range is None) - wide
    fixed = wide + alone
    notes = [f"{replaced} range(s) the trace gave replaced"] if replaced else []
    notes += [f"{wide} job(s) wider than {MAX_RANGE_GPUS} GPUs left fixed"] if wide else []
    notes += [f"{alone} job(s) whose range would be their request alone left fixed"
              ] if alone else []
    click.echo(f"wrote {len(jobs) - fixed} elastic jobs to {out}"
               + (f" ({'; '.join(notes)})" if notes else ""), err=True)


@trace.command("show")
@click.argument("trace_file", required=False, default=DEMO_TRACE, callback=note_bundled)
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
    gpu_h = workload.gpu_work_s / 3600
    # an elastic job may run faster than at its request: at its fastest count
    last = max(j.spec.arrival_s + workload.profiles[j.spec.job_id].fastest_s(
        j.spec.gpu_counts()) for j in jobs)
    fastest = " at its fastest count" if any(j.spec.is_elastic for j in jobs) else ""
    out.print(f"total work {gpu_h:,.1f} GPU-h; latest arrival + exclusive runtime{fastest} "
                  f"{last:,.0f} s (a lower bound on makespan)")


def _throughputs_for_jobs(spec: str | None) -> str | None:
    """The table as the jobs must name it: builtin as is, a file by its absolute path."""
    if spec is None or spec.startswith("builtin:"):
        return spec
    return str(Path(spec).resolve())


@trace.command("submit")
@click.argument("trace_file", callback=note_bundled)
@click.option("--time-scale", type=Bounded(1e-6, 1e6), required=True,
              help="Divide arrival times and epoch durations by this.")
@click.option("--partition", type=PARTITION, default="shockwave", show_default=True)
@click.option("--throughputs", default=None, help="Gavel JSON or builtin:tacc|wisr "
                                                  "(default builtin:tacc).")
@click.option("--max-jobs", type=click.IntRange(min=1), default=None,
              help="Only the first N jobs of the trace.")
@click.option("--output-dir", type=PATH_TEXT, default="trace-out", show_default=True,
              help="The jobs' output files (%j.out); must be visible to the nodes.")
@click.option("--checkpoint-dir", type=PATH_TEXT, default=None,
              help="The jobs' checkpoints [OUTPUT_DIR/checkpoints].")
@click.option("--slurm-conf", type=PATH_TEXT, default=None, help="slurm.conf [$SLURM_CONF].")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON line per job on standard output, no progress bar.")
@one_line_errors
def submit(trace_file: str, time_scale: float, partition: str, throughputs: str | None,
           max_jobs: int | None, output_dir: str, checkpoint_dir: str | None,
           slurm_conf: str | None, as_json: bool) -> None:
    """Submit TRACE's jobs as emulated training jobs, each at its scaled arrival time.

    Prints which Slurm job each trace job became. Never cancels anything; exit 1 if
    sbatch refused a job (the others are still submitted).
    """
    jobs = load_trace(trace_file)[:max_jobs]
    # every job's throughputs and hint are checked before anything is submitted
    build_workload(jobs, load_throughputs(throughputs), source=trace_file)
    for j in jobs:
        try:
            parse_hint(hint_comment(j.spec))
        except InputError as exc:  # named by the trace's line, not the hint it makes
            raise InputError(f"its hint: {exc.problem}", source=trace_file, line=j.line,
                             field=exc.field) from None
    out_dir = Path(output_dir).resolve()
    if "%" in str(out_dir) or "\\" in str(out_dir):
        # sbatch -o reads %x, %j ... as a filename pattern (and a backslash turns that off):
        # the job's log went elsewhere and the job failed to launch, reported as submitted
        raise InputError("must not hold % or \\ (sbatch reads the log path as a pattern)",
                         source=output_dir, field="--output-dir")
    ckpt_dir = Path(checkpoint_dir if checkpoint_dir is not None
                    else out_dir / "checkpoints").resolve()
    # both folders checked before Slurm is asked anything (and made only after it answers)
    writable_dir(str(out_dir), "--output-dir")
    writable_dir(str(ckpt_dir), "--checkpoint-dir" if checkpoint_dir else "--output-dir")
    settings = EmulatorSettings(
        time_scale=time_scale, partition=partition, output_dir=out_dir,
        checkpoint_dir=ckpt_dir,
        throughputs=_throughputs_for_jobs(throughputs), python=sys.executable,
        pythonpath=str(Path(slurm_shockwave.__file__).resolve().parents[1]))
    backend = CliBackend(slurm_conf=slurm_conf)
    # a Slurm that does not answer, or no such partition: one line now, not a refusal
    # per job after sleeping through every arrival, and no folders left behind
    if not backend.partition_state(partition):
        raise InputError(f"Slurm has no partition {partition!r}", field="--partition")
    with output_errors("--checkpoint-dir" if checkpoint_dir else "--output-dir"):
        settings.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    with output_errors("--output-dir"):
        out_dir.mkdir(parents=True, exist_ok=True)
    ordered = sorted(jobs, key=lambda j: (j.spec.arrival_s, j.spec.job_id))
    failed = _submit_all(backend, ordered, settings, as_json)
    if failed:
        raise SystemExit(1)


def _submit_all(backend: CliBackend, jobs: list[TraceJob], settings: EmulatorSettings,
                as_json: bool) -> int:
    out = console()
    failed = 0
    start = time.monotonic()
    last_s = jobs[-1].spec.arrival_s / settings.time_scale
    # SIGTERM (a live run stopping, ``kill``) exits 143 through the ``with`` blocks, so the
    # scripts' folder is removed: killed by it, the command left /tmp/shockwave-submit-*
    with sigterm_raises(lambda signum: SystemExit(128 + signum)), tempfile.TemporaryDirectory(
            prefix="shockwave-submit-") as scripts, Progress(
            TextColumn("[progress.description]{task.description}"), BarColumn(),
            TextColumn("{task.completed}/{task.total} jobs"), TimeElapsedColumn(),
            console=out, disable=as_json) as progress:
        task = progress.add_task(f"submitting over {last_s:,.0f} s", total=len(jobs))
        for job in jobs:
            spec = job.spec
            due = start + spec.arrival_s / settings.time_scale
            while (left := due - time.monotonic()) > 0:
                time.sleep(min(left, 0.5))
            script = Path(scripts) / f"trace-{spec.job_id}.sh"
            # the job's checkpoints name it, so none from before a reuse of its Slurm id
            submitted_at = round(time.time(), 3)
            script.write_text(job_script(spec, settings, submitted_at), encoding="utf-8")
            offset = time.monotonic() - start
            record: dict[str, object] = {"trace_job_id": spec.job_id,
                                         "arrival_s": spec.arrival_s,
                                         "submitted_at": submitted_at,
                                         "offset_s": round(offset, 3)}
            try:
                record["slurm_job_id"] = backend.submit(str(script),
                                                        sbatch_args(spec, settings))
            except SlurmError as exc:
                failed += 1
                record["error"] = str(exc)
            if as_json:
                click.echo(json_text(record))
            elif "error" in record:
                progress.console.print(f"trace job {spec.job_id}: not submitted: "
                                       f"{record['error']}", markup=False)
            else:
                progress.console.print(
                    f"trace job {spec.job_id} -> Slurm job {record['slurm_job_id']} at "
                    f"+{offset:.1f} s ({spec.model} bs={spec.init_bs} "
                    f"{spec.gpus} GPU{'s' if spec.gpus > 1 else ''} {spec.mode.value} "
                    f"{spec.num_epochs} epochs)", markup=False)
            progress.advance(task)
    if not as_json:
        out.print(f"submitted {len(jobs) - failed} of {len(jobs)} jobs; outputs in "
                  f"{settings.output_dir}", markup=False)
    return failed
