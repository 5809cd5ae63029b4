"""Trace formats: the paper's 12-column TSV and our own JSON-lines format.

Our format (docs/trace-format.md) has one JSON object per line; ``#`` lines and blank
lines are skipped. Fields: ``model``, ``batch_size`` (required), ``gpus`` (1),
``mode`` (static|accordion|gns, default static), ``arrival_s`` (0), exactly one of
``epochs`` or ``total_steps`` (steps at the initial batch size), ``priority_weight`` (1),
``id`` (the line's index), ``user`` (""), ``gpus_range`` ([LO, HI]: an elastic job,
docs/elastic.md; absent: the job runs on ``gpus`` only).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode, JobSpec
from slurm_shockwave.workloads.catalog import MODELS
from slurm_shockwave.workloads.profile import epochs_from_steps

_JOB_TYPE = re.compile(r"^(?P<model>.+?) \(batch size (?P<bs>\d+)\)$")
_COLUMNS = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
            "total_steps", "scale_factor", "mode", "priority_weight", "SLO", "duration",
            "arrival_time")


@dataclass(frozen=True, slots=True)
class TraceJob:
    spec: JobSpec
    total_steps: int
    nominal_s: float = -1.0
    line: int = 0


def _number(value: Any, *, source: str, line: int, field: str, kind: type = float,
            minimum: float | None = None) -> Any:
    try:
        if isinstance(value, bool):
            raise ValueError
        out = kind(value) if kind is float else int(str(value).strip())
    except (TypeError, ValueError):
        raise InputError(f"expected {'an integer' if kind is int else 'a number'}, got {value!r}",
                         source=source, line=line, field=field) from None
    if minimum is not None and out < minimum:
        raise InputError(f"must be >= {minimum}, got {value!r}", source=source, line=line,
                         field=field)
    return out


def _model(name: str, *, source: str, line: int, field: str) -> str:
    if name not in MODELS:
        raise InputError(f"unknown model {name!r} (known: {', '.join(sorted(MODELS))})",
                         source=source, line=line, field=field)
    return name


def _mode(value: Any, *, source: str, line: int, field: str) -> AdaptationMode:
    try:
        return AdaptationMode(str(value).strip())
    except ValueError:
        raise InputError(f"unknown mode {value!r} (static, accordion or gns)", source=source,
                         line=line, field=field) from None


def parse_gavel_line(text: str, index: int, *, source: str, line: int) -> TraceJob:
    cols = text.rstrip("\n").split("\t")
    if len(cols) != len(_COLUMNS):
        raise InputError(f"expected {len(_COLUMNS)} tab-separated columns, got {len(cols)}",
                         source=source, line=line, field="columns")
    m = _JOB_TYPE.match(cols[0].strip())
    if m is None:
        raise InputError(f"expected '<Model> (batch size <B>)', got {cols[0]!r}", source=source,
                         line=line, field="job_type")
    model = _model(m["model"], source=source, line=line, field="job_type")
    bs = int(m["bs"])
    steps = _number(cols[5], source=source, line=line, field="total_steps", kind=int, minimum=1)
    gpus = _number(cols[6], source=source, line=line, field="scale_factor", kind=int, minimum=1)
    mode = _mode(cols[7], source=source, line=line, field="mode")
    weight = _number(cols[8], source=source, line=line, field="priority_weight", minimum=0)
    nominal = _number(cols[10], source=source, line=line, field="duration")
    arrival = _number(cols[11], source=source, line=line, field="arrival_time", minimum=0)
    epochs = epochs_from_steps(steps, MODELS[model].samples_per_epoch, bs)
    spec = JobSpec(index, model, bs, gpus, mode, arrival, epochs, weight)
    return TraceJob(spec, steps, nominal, line)


_JSON_FIELDS = {"id", "model", "batch_size", "gpus", "mode", "arrival_s", "epochs",
                "total_steps", "priority_weight", "user", "gpus_range"}


def _gpus_range(value: Any, *, source: str, line: int) -> tuple[int, int] | None:
    if value is None:
        return None
    ok = (isinstance(value, list) and len(value) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
          and 1 <= value[0] <= value[1])
    if not ok:
        raise InputError(f"expected [LO, HI] with integers 1 <= LO <= HI, got {value!r}",
                         source=source, line=line, field="gpus_range")
    return int(value[0]), int(value[1])


def parse_json_line(text: str, index: int, *, source: str, line: int) -> TraceJob:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", source=source, line=line,
                         field="json") from None
    if not isinstance(obj, dict):
        raise InputError("expected a JSON object", source=source, line=line, field="json")
    unknown = sorted(set(obj) - _JSON_FIELDS)
    if unknown:
        raise InputError(f"unknown field (known: {', '.join(sorted(_JSON_FIELDS))})",
                         source=source, line=line, field=unknown[0])
    for required in ("model", "batch_size"):
        if required not in obj:
            raise InputError("missing", source=source, line=line, field=required)
    model = _model(str(obj["model"]), source=source, line=line, field="model")
    bs = _number(obj["batch_size"], source=source, line=line, field="batch_size", kind=int,
                 minimum=1)
    gpus = _number(obj.get("gpus", 1), source=source, line=line, field="gpus", kind=int,
                   minimum=1)
    if ("epochs" in obj) == ("total_steps" in obj):
        raise InputError("give exactly one of epochs or total_steps", source=source, line=line,
                         field="epochs")
    samples = MODELS[model].samples_per_epoch
    if "epochs" in obj:
        epochs = _number(obj["epochs"], source=source, line=line, field="epochs", kind=int,
                         minimum=1)
        steps = epochs * -(-samples // bs)
    else:
        steps = _number(obj["total_steps"], source=source, line=line, field="total_steps",
                        kind=int, minimum=1)
        epochs = epochs_from_steps(steps, samples, bs)
    spec = JobSpec(
        job_id=_number(obj.get("id", index), source=source, line=line, field="id", kind=int,
                       minimum=0),
        model=model, init_bs=bs, gpus=gpus,
        mode=_mode(obj.get("mode", "static"), source=source, line=line, field="mode"),
        arrival_s=_number(obj.get("arrival_s", 0), source=source, line=line, field="arrival_s",
                          minimum=0),
        num_epochs=epochs,
        priority_weight=_number(obj.get("priority_weight", 1), source=source, line=line,
                                field="priority_weight", minimum=0),
        user=str(obj.get("user", "")),
        gpus_range=_gpus_range(obj.get("gpus_range"), source=source, line=line),
    )
    return TraceJob(spec, steps, line=line)


def parse_trace(lines: Iterable[str], *, source: str, fmt: str = "auto") -> list[TraceJob]:
    """Parse a whole trace. ``fmt`` is ``gavel``, ``jsonl`` or ``auto`` (by first line)."""
    jobs: list[TraceJob] = []
    seen: dict[int, int] = {}
    for lineno, text in enumerate(lines, start=1):
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        kind = fmt if fmt != "auto" else ("jsonl" if stripped.startswith("{") else "gavel")
        fmt = kind
        parse = parse_json_line if kind == "jsonl" else parse_gavel_line
        job = parse(text if kind == "gavel" else stripped, len(jobs), source=source, line=lineno)
        if job.spec.job_id in seen:
            raise InputError(f"duplicate id (first on line {seen[job.spec.job_id]})",
                             source=source, line=lineno, field="id")
        seen[job.spec.job_id] = lineno
        jobs.append(job)
    if not jobs:
        raise InputError("the trace has no jobs", source=source, field="trace")
    return jobs


def read_trace(path: str | Path) -> list[TraceJob]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", source=str(p), field="trace") from None
    fmt = "jsonl" if p.suffix in (".jsonl", ".json") else "auto"
    return parse_trace(text.splitlines(), source=str(p), fmt=fmt)


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


def make_elastic(job: TraceJob, low: float, high: float) -> TraceJob:
    """The job with the range ``low`` x .. ``high`` x its request (at least 1 GPU, the
    low end rounded down and the high end up, so 0.5-2 of 1 GPU is 1-2)."""
    g = job.spec.gpus
    lo = max(1, math.floor(low * g))
    hi = max(lo, math.ceil(high * g))
    return replace(job, spec=replace(job.spec, gpus_range=(lo, hi)))


def to_gavel_line(job: TraceJob) -> str:
    s = job.spec
    info = MODELS[s.model]
    return "\t".join([f"{s.model} (batch size {s.init_bs})", info.command.format(bs=s.init_bs),
                      info.workdir, info.steps_arg, "1", str(job.total_steps), str(s.gpus),
                      s.mode.value, f"{s.priority_weight:g}", "-1.000000",
                      f"{round(job.nominal_s)}", f"{round(s.arrival_s)}"])
