"""``shockwave demo``: the whole system on a local cluster, then the numbers side by side.

Starts a local Slurm cluster (installing Debian's Slurm packages first when it is root on
Debian), the service with Shockwave, and a small trace of emulated jobs; shows the queue
with each job's reason and a progress bar while they run; then runs the same jobs under
Slurm alone; ends with live, simulated and Slurm-alone metrics. Stops all it started.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from slurm_shockwave.cli.checks import json_text, note_bundled
from slurm_shockwave.cli.errors import one_line_errors
from slurm_shockwave.live.cluster import (
    can_install_packages,
    install_slurm_packages,
    missing_for_cluster,
)
from slurm_shockwave.live.run import (
    MAX_LIVE_GPUS,
    SLURM_ALONE,
    TIME_SCALES,
    LiveSettings,
    LiveStatus,
    prepare,
    run_live,
)
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import POLICIES
from slurm_shockwave.report.tables import console, rows_table
from slurm_shockwave.sim.inputs import LIVE_DEMO_TRACE


def _reasons(store: Path) -> dict[int, tuple[str, str]]:
    """job id -> (state, reason) from the service's last round, read-only."""
    try:
        db = sqlite3.connect(f"{store.absolute().as_uri()}?mode=ro", uri=True, timeout=2)
        try:
            return {int(jid): (row["phase"], row["reason"]) for jid, text in
                    db.execute("SELECT job_id, row FROM job_now") for row in [json.loads(text)]}
        finally:
            db.close()
    except sqlite3.Error:
        return {}


def _run(settings: LiveSettings, title: str, *, to_stderr: bool = False) -> dict[str, Any]:
    """``to_stderr``: the live view goes to standard error (with --json, standard output
    holds only the JSON object)."""
    out = console(stderr=to_stderr)
    bar = Progress(TextColumn(title, markup=False), BarColumn(),
                   TextColumn("{task.completed}/{task.total} done"), TimeElapsedColumn(),
                   console=out)
    task = bar.add_task(title, total=None)
    with Live(bar, console=out, refresh_per_second=2, transient=False) as live:
        def tick(s: LiveStatus) -> None:
            bar.update(task, total=s.total, completed=s.done)
            reasons = _reasons(settings.work_dir / "state.db")
            rows = [(j.trace_id, j.slurm_id, j.state.lower(),
                     *(reasons.get(j.slurm_id, ("", ""))[1:]), j.restarts)
                    for j in sorted(s.jobs.values(), key=lambda j: j.trace_id)
                    if j.state in ("PENDING", "RUNNING")]
            live.update(Group(bar, rows_table(
                f"{s.running} running, {s.submitted - s.done - s.running} waiting",
                ("trace job", "slurm job", "state", "reason", "restarts"), rows[:20])))
        return run_live(settings, tick)


@click.command()
@click.option("--trace", default=LIVE_DEMO_TRACE, show_default=True,
              help="Trace file, or the bundled live demo (16 jobs).", callback=note_bundled)
@click.option("--gpus", type=click.IntRange(8, MAX_LIVE_GPUS), default=16, show_default=True)
@click.option("--time-scale", type=click.FloatRange(*TIME_SCALES), default=60.0,
              show_default=True, help="Trace seconds per wall second.")
@click.option("--policy", type=click.Choice((*POLICIES, SLURM_ALONE)), default="shockwave",
              show_default=True, help=f"{SLURM_ALONE}: Slurm alone, no service.")
@click.option("--no-slurm-alone", is_flag=True, help="Skip the Slurm-alone run.")
@click.option("--work-dir", default=None, help="Keep logs and the store here.")
@click.option("--json", "as_json", is_flag=True, help="The results as one JSON object.")
@one_line_errors
def demo(trace: str, gpus: int, time_scale: float, policy: str, no_slurm_alone: bool,
         work_dir: str | None, as_json: bool) -> None:
    """Run the service on a local cluster with emulated jobs; compare with the simulator
    and with Slurm alone."""
    if work_dir is not None and not work_dir.strip():
        raise InputError("an empty path", field="work-dir")
    # the inputs first: a bad trace or time scale was found only after the packages
    # were installed and the folder made (a red-team)
    prepare(LiveSettings(trace=trace, gpus=gpus, time_scale=time_scale, policy=policy,
                         work_dir=Path(work_dir or ".")))
    problem = missing_for_cluster()
    if problem and "not installed" in problem and can_install_packages():
        click.echo("installing Debian's Slurm packages ...", err=True)
        problem = install_slurm_packages()
    if problem:
        raise InputError(problem, field="demo")
    work = Path(work_dir or tempfile.mkdtemp(prefix="shockwave-demo-"))
    runs = [(policy, f"{policy} (live)", (21817, 21900))]
    if not no_slurm_alone and policy != SLURM_ALONE:  # not the same run twice
        runs.append((SLURM_ALONE, "Slurm alone", (22817, 22900)))
    results = []
    try:
        for name, title, ports in runs:
            results.append(_run(LiveSettings(trace=trace, gpus=gpus, time_scale=time_scale,
                                             policy=name, work_dir=work / name, ports=ports),
                                title, to_stderr=as_json))
    except BaseException:  # ^C or an error: where its logs are (printed on success only)
        click.echo(f"logs and the store: {work}", err=True)
        raise
    if as_json:
        click.echo(json_text({"results": results, "work_dir": str(work)}))
        return
    first = results[0]
    rows = [(f"{policy}, live", first["completed"], first["makespan_s"], first["avg_jct_s"],
             first["worst_rho"], first["preemptions"]),
            (f"{policy}, simulator (live costs)", first["jobs"], first["sim_makespan_s"],
             first["sim_avg_jct_s"], first["sim_worst_rho"], ""),
            (f"{policy}, simulator (paper's settings)", first["jobs"],
             first["sim_paper_makespan_s"], first["sim_paper_avg_jct_s"],
             first["sim_paper_worst_rho"], "")]
    rows += [("Slurm alone, live", r["completed"], r["makespan_s"], r["avg_jct_s"],
              r["worst_rho"], r["preemptions"]) for r in results[1:]]
    if policy == SLURM_ALONE:
        rows[0] = ("Slurm alone, live", *rows[0][1:])
    console().print(rows_table(
        f"{first['jobs']} jobs on {gpus} GPUs, time scale {time_scale:g} (trace seconds)",
        ("run", "completed", "makespan s", "avg JCT s", "worst rho", "requeues"), rows))
    click.echo(_actuation_line(first))
    click.echo(f"logs and the store: {work}")


def _actuation_line(result: dict[str, Any]) -> str:
    """Slurm's two actuation waits as the controller logged them (live/ctld_log.py), next
    to what the simulator row charges: where they differ, so may live and simulated."""
    def part(key: str, what: str) -> str:
        w = result.get(key) or {}
        if not w.get("n"):
            return f"{what}: none"
        return (f"{what}: {w['mean_s']:.2f} s mean, p90 {w['p90_s']:.2f} s over {w['n']} "
                f"(simulator {w['modelled_mean_s']:g} s)")
    return ("Slurm's actuation, wall seconds from slurmctld's log: "
            f"{part('start_wait', 'release to start')}; "
            f"{part('requeue_wait', 'checkpoint signal to requeue')}")
