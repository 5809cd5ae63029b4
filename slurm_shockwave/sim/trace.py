"""Trace formats: the paper's 12-column TSV and our own JSON-lines format.

Our format (docs/trace-format.md) has one JSON object per line; ``#`` lines and blank
lines are skipped. Fields: ``model``, ``batch_size`` (required), ``gpus`` (1),
``mode`` (static|accordion|gns, default static), ``arrival_s`` (0), exactly one of
``epochs`` or ``total_steps`` (steps at the initial batch size), ``priority_weight`` (1),
``id`` (the line's index), ``user`` (""), ``gpus_range`` ([LO, HI]: an elastic job,
docs/elastic.md; absent: the job runs on ``gpus`` only).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from slurm_shockwave.model.bounds import (
    MAX_ARRIVAL_S,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_JOB_GPUS,
    MAX_JOB_ID,
    MAX_JOBS,
    MAX_RANGE_GPUS,
    MAX_STEPS,
    MAX_TOTAL_EPOCHS,
    MAX_WEIGHT,
    MIN_WEIGHT,
    bounded,
    key_name,
    shown,
    text_field,
)
from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode, JobSpec
from slurm_shockwave.workloads.catalog import MODELS
from slurm_shockwave.workloads.input_files import read_lines, strict_json
from slurm_shockwave.workloads.profile import epochs_from_steps

_JOB_TYPE = re.compile(r"^(?P<model>.+?) \(batch size (?P<bs>[0-9]+)\)$")
_COLUMNS = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
            "total_steps", "scale_factor", "mode", "priority_weight", "SLO", "duration",
            "arrival_time")


@dataclass(frozen=True, slots=True)
class TraceJob:
    spec: JobSpec
    total_steps: int
    nominal_s: float = -1.0
    line: int = 0


def _model(name: Any, *, source: str, line: int, field: str) -> str:
    if not isinstance(name, str) or name not in MODELS:
        raise InputError(f"unknown model {shown(name)} (known: {', '.join(sorted(MODELS))})",
                         source=source, line=line, field=field)
    return name


def _mode(value: Any, *, source: str, line: int, field: str) -> AdaptationMode:
    try:
        return AdaptationMode(value.strip() if isinstance(value, str) else value)
    except ValueError:
        raise InputError(f"unknown mode {shown(value)} (static, accordion or gns)",
                         source=source, line=line, field=field) from None


def _steps_to_epochs(steps: int, model: str, bs: int, *, source: str, line: int,
                     field: str) -> int:
    epochs = epochs_from_steps(steps, MODELS[model].samples_per_epoch, bs)
    if epochs > MAX_EPOCHS:
        raise InputError(f"{steps} steps at batch size {bs} are {epochs} epochs; at most "
                         f"{MAX_EPOCHS} allowed", source=source, line=line, field=field)
    return epochs


def parse_gavel_line(text: str, index: int, *, source: str, line: int) -> TraceJob:
    cols = text.rstrip("\n").split("\t")
    if len(cols) != len(_COLUMNS):
        raise InputError(f"expected {len(_COLUMNS)} tab-separated columns, got {len(cols)}",
                         source=source, line=line, field="columns")
    where: dict[str, Any] = {"source": source, "line": line}
    m = _JOB_TYPE.match(cols[0].strip())
    if m is None:
        raise InputError(f"expected '<Model> (batch size <B>)', got {shown(cols[0])}", **where,
                         field="job_type")
    model = _model(m["model"], **where, field="job_type")
    bs = bounded(m["bs"], **where, field="job_type", integer=True, lo=1, hi=MAX_BATCH_SIZE)
    steps = bounded(cols[5], **where, field="total_steps", integer=True, lo=1, hi=MAX_STEPS)
    gpus = bounded(cols[6], **where, field="scale_factor", integer=True, lo=1, hi=MAX_JOB_GPUS)
    mode = _mode(cols[7], **where, field="mode")
    weight = bounded(cols[8], **where, field="priority_weight", lo=MIN_WEIGHT, hi=MAX_WEIGHT)
    # unused here, but Gavel's reader parses them: checked (a little stricter than its
    # bool(int(x)) and float(x): 0 or 1, and a finite SLO)
    bounded(cols[4], **where, field="needs_data_dir", integer=True, lo=0, hi=1)
    bounded(cols[9], **where, field="SLO", lo=-MAX_ARRIVAL_S, hi=MAX_ARRIVAL_S)
    nominal = bounded(cols[10], **where, field="duration", lo=-MAX_ARRIVAL_S, hi=MAX_ARRIVAL_S)
    arrival = bounded(cols[11], **where, field="arrival_time", lo=0, hi=MAX_ARRIVAL_S)
    epochs = _steps_to_epochs(steps, model, bs, **where, field="total_steps")
    spec = JobSpec(index, model, bs, gpus, mode, arrival, epochs, weight)
    return TraceJob(spec, steps, nominal, line)


_JSON_FIELDS = {"id", "model", "batch_size", "gpus", "mode", "arrival_s", "epochs",
                "total_steps", "priority_weight", "user", "gpus_range"}


def _gpus_range(value: Any, gpus: int, *, source: str,
                line: int) -> tuple[int, int] | None:
    """[LO, HI] around the request: the counts an elastic job may run on."""
    if value is None:
        return None
    ok = (isinstance(value, list) and len(value) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
          and 1 <= value[0] <= value[1] <= MAX_RANGE_GPUS)
    if not ok:
        raise InputError(f"expected [LO, HI] with integers 1 <= LO <= HI <= {MAX_RANGE_GPUS}, "
                         f"got {shown(value)}", source=source, line=line, field="gpus_range")
    if not value[0] <= gpus <= value[1]:
        raise InputError(f"must contain the job's gpus ({gpus}), got {shown(value)}",
                         source=source, line=line, field="gpus_range")
    return int(value[0]), int(value[1])


def parse_json_line(text: str, index: int, *, source: str, line: int) -> TraceJob:
    obj = strict_json(text, source=source, line=line)
    if not isinstance(obj, dict):
        raise InputError("expected a JSON object", source=source, line=line, field="json")
    where: dict[str, Any] = {"source": source, "line": line}

    def number(name: str, default: Any = None, **bounds: Any) -> Any:
        return bounded(obj.get(name, default), **where, field=name, strings=False, **bounds)

    unknown = sorted(set(obj) - _JSON_FIELDS)
    if unknown:
        raise InputError(f"unknown field (known: {', '.join(sorted(_JSON_FIELDS))})", **where,
                         field=key_name(unknown[0]))
    for required in ("model", "batch_size"):
        if required not in obj:
            raise InputError("missing", **where, field=required)
    model = _model(obj["model"], **where, field="model")
    bs = number("batch_size", integer=True, lo=1, hi=MAX_BATCH_SIZE)
    gpus = number("gpus", 1, integer=True, lo=1, hi=MAX_JOB_GPUS)
    if ("epochs" in obj) == ("total_steps" in obj):
        raise InputError("give exactly one of epochs or total_steps", **where, field="epochs")
    if "epochs" in obj:
        epochs = number("epochs", integer=True, lo=1, hi=MAX_EPOCHS)
        steps = epochs * -(-MODELS[model].samples_per_epoch // bs)
    else:
        steps = number("total_steps", integer=True, lo=1, hi=MAX_STEPS)
        epochs = _steps_to_epochs(steps, model, bs, **where, field="total_steps")
    spec = JobSpec(
        job_id=number("id", index, integer=True, lo=0, hi=MAX_JOB_ID),
        model=model, init_bs=bs, gpus=gpus,
        mode=_mode(obj.get("mode", "static"), **where, field="mode"),
        arrival_s=number("arrival_s", 0, lo=0, hi=MAX_ARRIVAL_S),
        num_epochs=epochs,
        priority_weight=number("priority_weight", 1, lo=MIN_WEIGHT, hi=MAX_WEIGHT),
        user=text_field(obj.get("user", ""), **where, field="user"),
        gpus_range=_gpus_range(obj.get("gpus_range"), gpus, source=source, line=line),
    )
    return TraceJob(spec, steps, line=line)


def parse_trace(lines: Iterable[str] | Iterable[tuple[int, str]], *, source: str,
                fmt: str = "auto") -> list[TraceJob]:
    """Parse a whole trace. ``fmt`` is ``gavel``, ``jsonl`` or ``auto`` (by first line).

    ``lines`` are texts, or (line number, text) pairs as ``read_lines`` streams them.
    """
    jobs: list[TraceJob] = []
    seen: dict[int, int] = {}
    total_epochs = 0
    for lineno, text in _numbered(lines):
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(jobs) >= MAX_JOBS:
            raise InputError(f"more than {MAX_JOBS} jobs", source=source, line=lineno,
                             field="trace")
        kind = fmt if fmt != "auto" else ("jsonl" if stripped.startswith("{") else "gavel")
        fmt = kind
        parse = parse_json_line if kind == "jsonl" else parse_gavel_line
        job = parse(text if kind == "gavel" else stripped, len(jobs), source=source, line=lineno)
        if job.spec.job_id in seen:
            # a line naming no id (every gavel line) takes its index: say so, or the
            # message names a field the line does not have
            own = kind == "jsonl" and '"id"' in stripped
            raise InputError(f"duplicate id {job.spec.job_id} (first on line "
                             f"{seen[job.spec.job_id]}"
                             f"{'' if own else '; a line naming no id takes its index'})",
                             source=source, line=lineno, field="id")
        total_epochs += job.spec.num_epochs
        if total_epochs > MAX_TOTAL_EPOCHS:
            raise InputError(f"the trace has more than {MAX_TOTAL_EPOCHS} epochs in all",
                             source=source, line=lineno, field="epochs")
        seen[job.spec.job_id] = lineno
        jobs.append(job)
    if not jobs:
        raise InputError("the trace has no jobs", source=source, field="trace")
    return jobs


def _numbered(lines: Iterable[str] | Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    for lineno, item in enumerate(lines, start=1):
        yield item if isinstance(item, tuple) else (lineno, item)


JSON_SUFFIXES = (".jsonl", ".json")
"""A trace file named so is read as JSON lines only (a bad line gets JSON's message)."""


def read_trace(path: str | Path) -> list[TraceJob]:
    fmt = "jsonl" if Path(path).suffix in JSON_SUFFIXES else "auto"
    return parse_trace(read_lines(path, field="trace"), source=str(path), fmt=fmt)


def to_json_line(job: TraceJob) -> str:
    s = job.spec
    obj: dict[str, Any] = {"id": s.job_id, "model": s.model, "batch_size": s.init_bs,
                           "gpus": s.gpus, "mode": s.mode.value, "arrival_s": s.arrival_s,
                           "total_steps": job.total_steps}
    if s.priority_weight != 1.0:
        obj["priority_weight"] = s.priority_weight
    if s.user:
        obj["user"] = s.user
    if s.gpus_range is not None:
        obj["gpus_range"] = list(s.gpus_range)
    return json.dumps(obj, sort_keys=False)


def trace_digest(jobs: Iterable[TraceJob]) -> str:
    """The jobs' identity, whatever file or format they were read from: two runs compare
    only on the same jobs (``benchmarks.live --against``)."""
    text = "\n".join(to_json_line(j) for j in jobs)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def elastic_factors(low: float, high: float, *, field: str = "--range") -> None:
    """Multiples of a request that make a range around it: 0 < LO <= 1 <= HI, and HI no
    more than the widest range (a wider HI only reaches the cap); not both 1, a range of
    the request alone, which is no elastic job."""
    if not 0 < low <= 1 <= high <= MAX_RANGE_GPUS:
        raise InputError(f"expected 0 < LO <= 1 <= HI <= {MAX_RANGE_GPUS}, got "
                         f"{low:g},{high:g}", field=field)
    if low == high:
        raise InputError("1,1 gives each job its request alone as its range: not elastic",
                         field=field)


def make_elastic(job: TraceJob, low: float, high: float) -> TraceJob:
    """The job with the range ``low`` x .. ``high`` x its request (at least 1 GPU and at
    most MAX_RANGE_GPUS, the low end rounded down and the high end up, so 0.5-2 of 1 GPU
    is 1-2); a job wider than any range stays fixed, and so does one whose range would be
    its request alone (0.5-1 of 1 GPU: a red-team found it written as elastic 1-1). The
    factors are taken as the decimals they print as: in binary 0.29 x 100 is 28.999...,
    which a red-team found floored to 28."""
    g = job.spec.gpus
    if g > MAX_RANGE_GPUS:
        return job
    lo = max(1, math.floor(Fraction(str(float(low))) * g))
    hi = max(lo, min(MAX_RANGE_GPUS, math.ceil(Fraction(str(float(high))) * g)))
    if lo == hi:
        return replace(job, spec=replace(job.spec, gpus_range=None))
    return replace(job, spec=replace(job.spec, gpus_range=(lo, hi)))


def to_gavel_line(job: TraceJob) -> str:
    s = job.spec
    info = MODELS[s.model]
    return "\t".join([f"{s.model} (batch size {s.init_bs})", info.command.format(bs=s.init_bs),
                      info.workdir, info.steps_arg, "1", str(job.total_steps), str(s.gpus),
                      s.mode.value, f"{s.priority_weight:g}", "-1.000000",
                      f"{round(job.nominal_s)}", f"{round(s.arrival_s)}"])
