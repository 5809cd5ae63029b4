import json
from pathlib import Path

import pytest

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.sim.inputs import build_workload, load_throughputs
from slurm_shockwave.sim.trace import parse_trace, read_trace, to_gavel_line, to_json_line

GAVEL_LINE = ("LM (batch size 10)\tpython3 main.py --cuda --data %s/wikitext2 --batch_size 10\t"
              "language_modeling\t--steps\t1\t134583\t1\tgns\t1\t-1.000000\t1418\t0")


def test_gavel_line_parses_to_spec() -> None:
    (job,) = parse_trace([GAVEL_LINE], source="t")
    s = job.spec
    assert (s.model, s.init_bs, s.gpus, s.mode, s.arrival_s) == ("LM", 10, 1, AdaptationMode.GNS, 0)
    assert s.num_epochs == 23  # ceil(134583 / ceil(59675 / 10))
    assert job.total_steps == 134583 and job.nominal_s == 1418


def test_json_lines_with_epochs_or_steps() -> None:
    jobs = parse_trace([
        "# a comment",
        json.dumps({"model": "ResNet-18", "batch_size": 32, "epochs": 5, "gpus": 2}),
        "",
        json.dumps({"id": 9, "model": "LM", "batch_size": 10, "total_steps": 134583,
                    "mode": "accordion", "arrival_s": 30}),
    ], source="t")
    assert [j.spec.job_id for j in jobs] == [0, 9]
    assert jobs[0].spec.num_epochs == 5 and jobs[0].spec.gpus == 2
    assert jobs[1].spec.num_epochs == 23 and jobs[1].spec.arrival_s == 30


def test_round_trip_both_formats() -> None:
    (job,) = parse_trace([GAVEL_LINE], source="t")
    assert parse_trace([to_gavel_line(job)], source="t")[0].spec == job.spec
    assert parse_trace([to_json_line(job)], source="t")[0].spec == job.spec


@pytest.mark.parametrize(("line", "field"), [
    (GAVEL_LINE.replace("LM (batch size 10)", "GPT-9 (batch size 10)"), "job_type"),
    (GAVEL_LINE.replace("LM (batch size 10)", "LM bs10"), "job_type"),
    (GAVEL_LINE.replace("\t134583\t", "\tmany\t"), "total_steps"),
    (GAVEL_LINE.replace("\tgns\t", "\tturbo\t"), "mode"),
    (GAVEL_LINE.replace("\t1418\t0", "\t1418\t-5"), "arrival_time"),
    ("\t".join(GAVEL_LINE.split("\t")[:11]), "columns"),
    (GAVEL_LINE.replace("--steps\t1\t", "--steps\tyes\t"), "needs_data_dir"),
    (GAVEL_LINE.replace("\t-1.000000\t", "\tsoon\t"), "SLO"),
    (GAVEL_LINE.replace("\t-1.000000\t", "\tnan\t"), "SLO"),
    ('{"model": "LM"}', "batch_size"),
    ('{"model": "LM", "batch_size": 10, "epochs": 3, "total_steps": 9}', "epochs"),
    ('{"model": "LM", "batch_size": 10, "epochs": 3, "colour": "red"}', "colour"),
    ('{"model": "LM", "batch_size": 10, "epochs": 3, "gpus": 0}', "gpus"),
    ('{"model": "LM", "batch_size": "ten", "epochs": 3}', "batch_size"),
    ('{"model": "LM", "batch_size": 10', "json"),
    # red-team: 5e-324 overflowed Gavel's water-fill into NaN shares
    ('{"model": "LM", "batch_size": 10, "epochs": 3, "priority_weight": 5e-324}',
     "priority_weight"),
    (GAVEL_LINE.replace("\tgns\t1\t", "\tgns\t1e-9\t"), "priority_weight"),
])
def test_bad_lines_name_file_line_and_field(line: str, field: str) -> None:
    ok = json.dumps({"model": "LM", "batch_size": 10, "epochs": 3})
    fmt = "jsonl" if line.startswith("{") else "gavel"
    good = ok if fmt == "jsonl" else GAVEL_LINE
    with pytest.raises(InputError) as err:
        parse_trace([good, line], source="bad.trace", fmt=fmt)
    assert err.value.source == "bad.trace" and err.value.line == 2 and err.value.field == field
    assert str(err.value).startswith(f"bad.trace:2: {field}: ")
    assert "\n" not in str(err.value)


def test_duplicate_ids_and_empty_trace() -> None:
    line = json.dumps({"id": 1, "model": "LM", "batch_size": 10, "epochs": 3})
    with pytest.raises(InputError, match=r"duplicate id 1 \(first on line 1\)$"):
        parse_trace([line, line], source="t")
    unnamed = json.dumps({"model": "LM", "batch_size": 10, "epochs": 3})
    with pytest.raises(InputError, match="a line naming no id takes its index"):
        parse_trace([line, unnamed], source="t")  # line 2's index is 1 (review)
    with pytest.raises(InputError, match="no jobs"):
        parse_trace(["# nothing"], source="t")


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        read_trace(tmp_path / "absent.trace")


def test_missing_throughput_entry_names_the_job(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + json.dumps({"id": 4, "model": "Recommendation", "batch_size": 512,
                                       "gpus": 8, "epochs": 3}) + "\n")
    with pytest.raises(InputError) as err:
        build_workload(read_trace(path), load_throughputs("builtin:tacc"), source=str(path))
    assert err.value.line == 2 and err.value.field == "throughput"
    assert "job 4" in str(err.value) and "Recommendation batch size 512 on 8 GPU" in str(err.value)
