"""Options shared by ``simulate`` and ``compare``, and the one function both call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from slurm_shockwave.cli.checks import Bounded, note_bundled
from slurm_shockwave.config import Settings, load_settings
from slurm_shockwave.model.bounds import (
    MAX_CLUSTER_GPUS,
    MAX_FACTOR,
    MAX_JOB_GPUS,
    MAX_ROUND_S,
    MAX_ROUNDS,
    MAX_SEED,
)
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.base import Policy
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.sim.inputs import (
    DEMO_TRACE,
    LIVE_DEMO_TRACE,
    Workload,
    build_workload,
    load_throughputs,
    load_trace,
)
from slurm_shockwave.sim.rounds import busy_s_at_least, rounds_at_least
from slurm_shockwave.sim.run import RoundLimit, SimResult, simulate

DEMO_GPUS = 16


def run_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed((
        click.argument("trace", required=False, default=DEMO_TRACE, callback=note_bundled),
        click.option("--gpus", type=Bounded(1, MAX_CLUSTER_GPUS, integer=True), default=None,
                     help=f"GPUs in the cluster (default {DEMO_GPUS} for the bundled traces "
                     f"{DEMO_TRACE} and {LIVE_DEMO_TRACE})."),
        click.option("--gpus-per-node", type=Bounded(1, MAX_JOB_GPUS, integer=True),
                     default=None,
                     help="Make placement real: nodes of K GPUs (default: one pool)."),
        click.option("--throughputs", default=None,
                     help="Gavel-format JSON, or builtin:tacc / builtin:wisr (default tacc)."),
        click.option("--config", "config_path", default=None, help="YAML settings file."),
        click.option("--seed", type=Bounded(0, MAX_SEED, integer=True), default=None,
                     help="Seeds every random choice of the run, over a policy's own "
                          "seed in --config (default: that seed, else 0)."),
        click.option("--round-s", type=Bounded(1, MAX_ROUND_S), default=None,
                     help="Round length (default: the config's simulator.round_s, 120 as "
                     "shipped)."),
        click.option("--cutoff", type=Bounded(1, MAX_FACTOR, lo_open=True), default=None,
                     help="Force-complete jobs past this x exclusive runtime (paper: 1.5; "
                     "default: the config's simulator.deadline_factor, off as shipped)."),
        click.option("--progress/--no-progress", default=None,
                     help="Progress bar (default: when stderr is a terminal)."),
    )):
        fn = opt(fn)
    return fn


@dataclass
class RunInputs:
    trace: str
    gpus: int
    gpus_per_node: int | None
    workload: Workload
    settings: Settings
    round_s: float
    cutoff: float | None
    progress: bool
    seed: int | None = None
    """--seed: over a policy's seed in the config file; None: that seed, else 0."""
    throughputs: str | None = None
    """--throughputs: the table's path; None: the bundled one."""


def prepare(trace: str, gpus: int | None, gpus_per_node: int | None, throughputs: str | None,
            config_path: str | None, round_s: float | None, cutoff: float | None,
            progress: bool | None, seed: int | None = None) -> RunInputs:
    if gpus is None:
        if trace not in (DEMO_TRACE, LIVE_DEMO_TRACE):  # both made for 16 GPUs
            raise click.UsageError("--gpus is required with a trace file")
        gpus = DEMO_GPUS
    if gpus_per_node is not None and gpus % gpus_per_node:
        raise InputError(f"--gpus ({gpus}) must be a multiple of it", field="--gpus-per-node")
    settings = load_settings(config_path)
    period = round_s if round_s is not None else settings.simulator.round_s
    if not settings.simulator.restore_s < period:
        raise InputError(f"must be longer than simulator.restore_s "
                         f"({settings.simulator.restore_s:g} s)", field="--round-s")
    jobs = load_trace(trace)
    workload = build_workload(jobs, load_throughputs(throughputs), source=trace)
    gpu_s = workload.gpu_work_s
    longest = max((workload.profiles[j.spec.job_id].exclusive_s for j in jobs), default=0.0)
    if longest / period > MAX_ROUNDS:
        raise InputError(f"its longest job alone needs more than {MAX_ROUNDS} rounds of "
                         f"{period:g} s ({longest:.3g} s); give longer rounds", source=trace,
                         field="--round-s")
    if gpu_s / (gpus * period) > MAX_ROUNDS:
        raise InputError(f"the trace's {gpu_s:.3g} GPU-seconds of work need more than "
                         f"{MAX_ROUNDS} rounds of {period:g} s on {gpus} GPUs; give more GPUs "
                         "or longer rounds (--round-s)", source=trace, field="--gpus")
    busy = busy_s_at_least(workload, settings.simulator.restore_s)
    if busy / period > MAX_ROUNDS:  # jobs one after another: the work fits, the time not
        raise InputError(f"its jobs, each from its arrival for its runtime alone, keep the "
                         f"cluster busy {busy:.3g} s: more than {MAX_ROUNDS} rounds of "
                         f"{period:g} s; give longer rounds", source=trace, field="--round-s")
    show = progress if progress is not None else Console(stderr=True).is_terminal
    return RunInputs(trace, gpus, gpus_per_node, workload, settings, period,
                     cutoff if cutoff is not None else settings.simulator.deadline_factor, show,
                     seed, throughputs)


def simulate_kwargs(inputs: RunInputs) -> dict[str, Any]:
    """The simulator's keywords of a run: the config's ``simulator`` section with the
    command line's cluster, round and cut-off over it. ``run_policy`` runs with them, and
    the JSON records them (``run_settings``)."""
    return {**inputs.settings.simulator.simulate_kwargs(), "gpus": inputs.gpus,
            "gpus_per_node": inputs.gpus_per_node, "round_s": inputs.round_s,
            "deadline_factor": inputs.cutoff}


def policy_settings(inputs: RunInputs, name: str) -> dict[str, Any]:
    """The settings the policy ``name`` runs with: its config section, the seed given on
    the command line over the file's (0 where neither gives one, for a policy that
    draws)."""
    config = dict(inputs.settings.policies.get(name) or {})
    cls = POLICIES.get(name)  # an unknown name is make_policy's one-line error
    if cls is not None and "seed" in {f.name for f in fields(cls.Config)}:
        if inputs.seed is not None:  # given on the command line: over the file's
            config["seed"] = inputs.seed
        config.setdefault("seed", 0)
    return config


def run_settings(inputs: RunInputs, name: str) -> dict[str, Any]:
    """How the run of ``name`` was made, for its JSON record: the simulator's keywords,
    the policy's settings as it ran (its seed among them), the config file and the
    throughput table (found by a red-team: a record could not say which seed or cut-off
    made it). The policy's settings are all of them, its defaults too (a docs audit: a
    record said only what the config file gave), as plain JSON values."""
    return {**simulate_kwargs(inputs), "policy": asdict(_policy(inputs, name).config),
            "config": inputs.settings.source or None, "throughputs": inputs.throughputs}


def _policy(inputs: RunInputs, name: str) -> Policy[Any]:
    """The policy ``name`` as a run makes it (``policy_settings``): the one the run plans
    with and the one its record describes."""
    return make_policy(name, policy_settings(inputs, name), source=inputs.settings.source,
                       path=f"policies.{name}")


def run_policy(inputs: RunInputs, name: str) -> SimResult:
    policy = _policy(inputs, name)
    kwargs = simulate_kwargs(inputs)
    try:
        if not inputs.progress:
            return simulate(inputs.workload, policy, **kwargs)
        with Progress(TextColumn(f"[bold]{name}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("jobs done"), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(name, total=len(inputs.workload.jobs))
            return simulate(inputs.workload, policy,
                            on_round=lambda done, _total: bar.update(task, completed=done),
                            **kwargs)
    except RoundLimit as exc:
        if not exc.from_input:
            raise  # no input makes a policy that progresses take that long: a bug
        sim = inputs.settings.simulator
        least = rounds_at_least(inputs.workload, gpus=inputs.gpus, round_s=inputs.round_s,
                                restore_s=sim.restore_s)
        raise InputError(
            f"{exc.said} of {inputs.round_s:g} s (this trace needs at least {least:,.0f}; "
            f"restores of {sim.restore_s:g} s and requeue delays of "
            f"{sim.requeue_delay_s:g} s a round can make it many more); give longer rounds",
            source=inputs.trace, field="--round-s") from None
