import json
from pathlib import Path

import pytest

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.model.throughputs import from_gavel
from slurm_shockwave.sim.inputs import load_throughputs
from slurm_shockwave.workloads.bundled import bundled_table


def test_gavel_format_parses_and_skips_zero_entries() -> None:
    table = from_gavel({"v100": {
        "('LM (batch size 10)', 1)": {"null": 94.6, "('LM (batch size 10)', 1)": [1, 2]},
        "('LM (batch size 10)', 2)": {"null": 0.0},
        "('A3C', 1)": {"null": 3.0},
    }}, source="x.json")
    assert table.steps_per_s("LM", 10, 1) == 94.6
    assert not table.has("LM", 10, 2)


def test_missing_entry_and_bad_values() -> None:
    table = from_gavel({"v100": {"('LM (batch size 10)', 1)": {"null": 1.0}}}, source="x.json")
    with pytest.raises(InputError, match="no entry for LM batch size 20 on 1 GPU"):
        table.steps_per_s("LM", 20, 1)
    with pytest.raises(InputError) as err:
        from_gavel({"v100": {"('LM (batch size 10)', 1)": {"null": "fast"}}}, source="x.json")
    assert err.value.field == "v100.('LM (batch size 10)', 1).null"
    with pytest.raises(InputError, match="worker type 'v100'"):
        from_gavel({"k80": {}}, source="x.json")


def test_one_entry_spelled_twice_is_refused() -> None:
    """"batch size 064" and "batch size 64" are one entry: the later won silently
    (red-team finding)."""
    with pytest.raises(InputError, match="the same entry as") as err:
        from_gavel({"v100": {"('LM (batch size 64)', 1)": {"null": 1.0},
                             "('LM (batch size 064)', 1)": {"null": 2.0}}}, source="x.json")
    assert err.value.field == "v100.('LM (batch size 064)', 1)"


def test_broken_json_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"v100": {\n  "oops"\n')
    with pytest.raises(InputError) as err:
        load_throughputs(path)
    assert err.value.source == str(path) and "not valid JSON" in str(err.value)


def test_bundled_tables_cover_the_catalogue() -> None:
    for name in ("tacc", "wisr"):
        t = bundled_table(name)
        assert t.has("LM", 10, 1) and t.has("Recommendation", 8192, 1)
    assert bundled_table("tacc").steps_per_s("ResNet-18", 32, 1) == pytest.approx(42.98, rel=1e-3)
    with pytest.raises(InputError, match="no bundled table"):
        bundled_table("a100")


def test_bundled_table_matches_reference(tmp_path: Path) -> None:
    from tests.conftest import reference_file

    for name in ("tacc", "wisr"):
        ref = json.loads(reference_file(f"throughputs/{name}_throughputs.json").read_text())
        full = from_gavel(ref, source=name)
        ours = bundled_table(name)
        assert set(ours.rates) == set(full.rates)
        for key, value in full.rates.items():
            assert ours.rates[key] == pytest.approx(value, rel=1e-5)
