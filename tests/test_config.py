from pathlib import Path

import pytest

from slurm_shockwave.config import load_settings, parse_settings
from slurm_shockwave.model.errors import InputError

ETC = Path(__file__).resolve().parents[1] / "etc" / "shockwave.yaml"


def test_shipped_example_config_is_valid() -> None:
    s = load_settings(ETC)
    assert s.simulator.round_s == 120 and s.policies["allox"]["alpha"] == 0.2


@pytest.mark.parametrize(("data", "field"), [
    ({"simulatr": {}}, "simulatr"),
    ({"simulator": {"round_s": "fast"}}, "simulator.round_s"),
    ({"simulator": {"restore_s": 200}}, "simulator.restore_s"),
    ({"simulator": {"deadline_factor": 0.5}}, "simulator.deadline_factor"),
    ({"policies": {"gavell": {}}}, "policies.gavell"),
    ({"policies": {"las": {"queue_thresholds_gpu_s": [10, 5]}}}, "las.queue_thresholds_gpu_s"),
    ({"policies": {"gavel": {"anything": 1}}}, "gavel.anything"),
])
def test_bad_settings_name_the_field(data: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        parse_settings(data, source="c.yaml")
    assert err.value.field == field and str(err.value).startswith(f"c.yaml: {field}: ")


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("simulator:\n  round_s: [1,\n")
    with pytest.raises(InputError, match="not valid YAML") as err:
        load_settings(path)
    assert err.value.line is not None
