"""``shockwave simulate`` and ``shockwave compare``."""

from __future__ import annotations

from pathlib import Path

import click

from slurm_shockwave.cli.checks import json_text
from slurm_shockwave.cli.errors import (
    is_input,
    one_line_errors,
    output_errors,
    writable_dir,
    writable_file,
)
from slurm_shockwave.cli.run_options import prepare, run_options, run_policy, run_settings
from slurm_shockwave.model.bounds import name_list
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import BASELINES, POLICIES
from slurm_shockwave.report.outputs import PLOTS, as_set, write_text
from slurm_shockwave.report.results import summary_record, write_per_job_csv
from slurm_shockwave.report.tables import compare_table, console, summary_table
from slurm_shockwave.workloads.input_files import read_text, strict_json


@click.command()
@run_options
@click.option("--policy", type=click.Choice(tuple(POLICIES)), default="gavel",
              show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None,
              help="Write per-job results (JCT, rho, ...) to this CSV file.")
@one_line_errors
def simulate(trace: str, gpus: int | None, gpus_per_node: int | None, throughputs: str | None,
             config_path: str | None, seed: int, round_s: float | None, cutoff: float | None,
             progress: bool | None, policy: str, as_json: bool, csv_path: str | None) -> None:
    """Simulate TRACE (default: the bundled demo trace) under one policy."""
    writable_file(csv_path, "--csv", inputs=(trace, throughputs, config_path))
    inputs = prepare(trace, gpus, gpus_per_node, throughputs, config_path, round_s, cutoff,
                     progress, seed)
    result = run_policy(inputs, policy)
    if csv_path:
        with output_errors("--csv", csv_path):
            write_per_job_csv(result, Path(csv_path))
    if as_json:
        click.echo(json_text(summary_record(result, trace=trace,
                                            settings=run_settings(inputs, policy))))
    else:
        console().print(summary_table(result, f"{trace} on {inputs.gpus} GPUs"))


@click.command()
@run_options
@click.option("--policies", "names", default=",".join(("shockwave", *BASELINES, "stretch_edf")),
              show_default=True, help="Comma-separated; ratios are against the first. "
              "By default Shockwave, all nine published baselines and stretch_edf (ours).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Write results.json, per-job CSVs and PNG plots here (the per-job CSVs "
                   "of policies an earlier results.json there listed, and this run has not, "
                   "are removed).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per policy.")
@one_line_errors
def compare(trace: str, gpus: int | None, gpus_per_node: int | None, throughputs: str | None,
            config_path: str | None, seed: int, round_s: float | None, cutoff: float | None,
            progress: bool | None, names: str, out: str | None, as_json: bool) -> None:
    """Run several policies on one TRACE and compare them side by side."""
    wanted = name_list(names, POLICIES, field="--policies")
    writable_dir(out, "--out")
    given = (trace, throughputs, config_path)
    if out and Path(out).is_dir():  # each file it will write, before the run
        for name in ("results.json", *(f"jobs_{n}.csv" for n in wanted), *PLOTS):
            writable_file(str(Path(out) / name), "--out", inputs=given)
    inputs = prepare(trace, gpus, gpus_per_node, throughputs, config_path, round_s, cutoff,
                     progress, seed)
    results = [run_policy(inputs, n) for n in wanted]
    records = [summary_record(r, trace=trace, settings=run_settings(inputs, r.policy))
               for r in results]
    if as_json:
        for rec in records:
            click.echo(json_text(rec))
    else:
        console().print(compare_table(results, f"{trace} on {inputs.gpus} GPUs"))
    if out:
        from slurm_shockwave.report.plots import write_plots  # matplotlib only when asked

        folder = Path(out)
        earlier = _listed_policies(folder / "results.json")
        with output_errors("--out", out), as_set():  # renamed at the end (outputs.py)
            folder.mkdir(parents=True, exist_ok=True)
            write_text(folder / "results.json", json_text(records, indent=1) + "\n")
            for r in results:
                write_per_job_csv(r, folder / f"jobs_{r.policy}.csv")
            paths = write_plots(results, folder,
                                f"{Path(trace).name[:40]}, {inputs.gpus} GPUs")
        for name in sorted(earlier - set(wanted)):  # the run results.json listed, whose
            csv = folder / f"jobs_{name}.csv"  # table the new one no longer has
            if not is_input(str(csv), given):
                csv.unlink(missing_ok=True)
        if not as_json:
            click.echo(f"wrote {folder / 'results.json'}, per-job CSVs and "
                       f"{', '.join(p.name for p in paths)}")


def _listed_policies(results: Path) -> set[str]:
    """The policies an earlier ``compare --out`` listed in its results.json (none where
    there is none, or it is not one): only their per-job CSVs are its to remove. Before,
    every ``jobs_<policy>.csv`` there went, a user's own ``simulate --csv`` too (found by
    a red-team)."""
    try:  # bounded and strict: a huge or deeply nested file is no results.json of ours
        records = strict_json(read_text(results, field="--out"), source=str(results))
    except (InputError, OSError, ValueError, RecursionError):
        return set()
    if not isinstance(records, list):
        return set()
    return {r["policy"] for r in records
            if isinstance(r, dict) and isinstance(r.get("policy"), str) and r["policy"] in POLICIES}
