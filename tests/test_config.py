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
    # restore_s left at its 20 s: the round_s given is what is too short (red-team)
    ({"simulator": {"round_s": 16}}, "simulator.round_s"),
    ({"simulator": {"deadline_factor": 0.5}}, "simulator.deadline_factor"),
    ({"slurm": {"time_scale": 0}}, "slurm.time_scale"),
    ({"policies": {"gavell": {}}}, "policies.gavell"),
    ({"policies": {"las": {"queue_thresholds_gpu_s": [10, 5]}}},
     "policies.las.queue_thresholds_gpu_s"),
    ({"policies": {"gavel": {"anything": 1}}}, "policies.gavel.anything"),
    # found by a review: one typo wrote the progress API's URL over the store, and a
    # heartbeat shorter than a round ran new jobs unheld for most of every round
    ({"service": {"store": "/v/s.db", "endpoint_file": "/v/s.db"}}, "service.endpoint_file"),
    ({"service": {"heartbeat": "/v/h", "endpoint_file": "/v/./h"}}, "service.endpoint_file"),
    ({"service": {"store": "/v/h", "heartbeat": "/v/h"}}, "service.heartbeat"),
    ({"service": {"stale_after_s": 30}}, "service.stale_after_s"),
    ({"slurm": {"round_s": 60}, "service": {"stale_after_s": 60}}, "service.stale_after_s"),
    # found by a review: refused as options (--store " "), accepted in the file; and an
    # empty list or false was silently no policy settings
    ({"service": {"store": " "}}, "service.store"),
    ({"service": {"heartbeat": ""}}, "service.heartbeat"),
    # found by a red-team: a YAML block scalar ends in a newline, which was written into
    # job_submit.lua as an unfinished string: slurmctld stops on a script it cannot load
    ({"service": {"heartbeat": "/v/hb\n"}}, "service.heartbeat"),
    ({"service": {"endpoint_file": "/v/e\tx"}}, "service.endpoint_file"),
    ({"slurm": {"slurm_conf": " "}}, "slurm.slurm_conf"),
    ({"policies": []}, "policies"),
    ({"policies": False}, "policies"),
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


@pytest.mark.parametrize(("value", "expected"), [
    ("2025-02-30", "cannot read '2025-02-30' as timestamp (day is out of range for month)"),
    ("!!int abc", "cannot read 'abc' as int"),
    ("!!bool maybe", "cannot read 'maybe' as bool"),
    ("!!float x", "cannot read 'x' as float"),
    pytest.param("9" * 5000, "as int (Exceeds the limit", id="5000 digits"),
])
def test_a_yaml_value_its_type_cannot_hold_names_its_line(tmp_path: Path, value: str,
                                                           expected: str) -> None:
    """Found by a review: each was a ValueError from PyYAML's int() or date(), reported
    as a bug (exit 1) by every command with --config."""
    path = tmp_path / "c.yaml"
    path.write_text(f"slurm: {{}}\nsimulator:\n  round_s: {value}\n")
    with pytest.raises(InputError, match="not valid YAML") as err:
        load_settings(path)
    assert err.value.line == 3 and expected in str(err.value), err.value


def test_a_yaml_merge_key_may_be_overridden_a_key_not_given_twice(tmp_path: Path) -> None:
    """A key given beside a merge key (``<<``) overrides the merged one, as YAML says;
    it was refused as a duplicate (red-team). A key given twice still is, merged or not."""
    path = tmp_path / "c.yaml"
    path.write_text("simulator: &base\n  <<: {round_s: 60}\n  round_s: 90\n"
                    "slurm: {<<: *base, round_s: 30}\n"  # a mapping merged once flattened
                    "service: {<<: {policy: fifo}, policy: las}\n")
    s = load_settings(path)
    assert (s.simulator.round_s, s.slurm.round_s, s.service.policy) == (90, 30, "las")
    for text, line in [("simulator:\n  <<: {round_s: 60}\n  round_s: 90\n  round_s: 91\n", 4),
                       ("simulator:\n  <<: {round_s: 60, round_s: 61}\n", 2),
                       ("slurm: &s {round_s: 30}\nsimulator: {<<: *s, round_s: 1, round_s: 2}\n",
                        2)]:
        path.write_text(text)
        with pytest.raises(InputError, match="duplicate key 'round_s'") as err:
            load_settings(path)
        assert err.value.line == line, text


def test_a_yaml_1_1_hex_integer_is_read_and_named_as_given(tmp_path: Path) -> None:
    """``round_s: 0x10`` is 16 (YAML 1.1), too short for the default restore_s: the error
    names round_s, not restore_s, which the file does not set (red-team)."""
    path = tmp_path / "c.yaml"
    path.write_text("simulator:\n  round_s: 0x10\n")
    with pytest.raises(InputError) as err:
        load_settings(path)
    assert str(err.value) == f"{path}: simulator.round_s: must be longer than restore_s (20 s)"
    path.write_text("simulator:\n  round_s: 0x20\n")
    assert load_settings(path).simulator.round_s == 32


@pytest.mark.parametrize(("text", "line", "expected"), [
    ("simulator: {round_s: 0120}", 1, "round_s: 0120 is octal to YAML 1.1 (80)"),
    ("simulator:\n  restore_s: 020", 2, "restore_s: 020 is octal to YAML 1.1 (16)"),
    ("simulator:\n  round_s: 2:00", 2, "round_s: 2:00 is base 60 to YAML 1.1 (120)"),
    ("simulator: {round_s: 1:30.5}", 1, "round_s: 1:30.5 is base 60 to YAML 1.1 (90.5)"),
    ("policies:\n  las: {queue_thresholds_gpu_s: [3600, 036000]}", 2,
     "queue_thresholds_gpu_s[1]: 036000 is octal"),
])
def test_a_yaml_1_1_octal_or_base_60_number_is_refused_not_misread(
        tmp_path: Path, text: str, line: int, expected: str) -> None:
    """Found by a review: ``round_s: 0120`` was 80 s and ``2:00`` 120 s, silently."""
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(InputError) as err:
        load_settings(path)
    assert err.value.line == line and expected in str(err.value), err.value


def test_a_zero_and_a_quoted_or_decimal_zero_padded_number_are_read_as_written(
        tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("simulator: {round_s: '0120', restore_s: 0, requeue_delay_s: 0120.5}\n")
    s = load_settings(path).simulator
    assert (s.round_s, s.restore_s, s.requeue_delay_s) == (120, 0, 120.5)


def test_the_live_run_tells_the_service_its_time_scale(tmp_path: Path) -> None:
    """The planner's table times must be wall time like its 2 s round (120 s / 60)."""
    from slurm_shockwave.live.run import LiveSettings, _service_config

    settings = LiveSettings(None, 16, 60.0, "shockwave", tmp_path)
    s = load_settings(_service_config(settings, {}))
    assert s.slurm.time_scale == 60.0 and s.slurm.round_s == 2.0


def test_live_rounds_get_a_wall_clock_limit_simulation_none() -> None:
    from slurm_shockwave.config import live_policy
    from slurm_shockwave.policies.registry import make_policy

    settings = load_settings(Path(__file__).resolve().parents[1] / "etc" / "shockwave.yaml")
    assert make_policy("shockwave", settings.policies["shockwave"]).config.time_limit_s is None
    assert live_policy(settings, "shockwave").config.time_limit_s == 1.5
    own = parse_settings({"policies": {"shockwave": {"time_limit_s": 0.5}}}, source="x")
    assert live_policy(own, "shockwave").config.time_limit_s == 0.5


def test_a_heartbeat_longer_than_a_round_is_taken_and_written_rounded_up(
        tmp_path: Path) -> None:
    from slurm_shockwave.service.heartbeat import read_heartbeat, write_heartbeat

    settings = parse_settings({"slurm": {"round_s": 60}, "service": {"stale_after_s": 60.5}},
                              source="c.yaml")
    assert settings.service.stale_after_s == 60.5
    write_heartbeat(tmp_path / "h", 1000.0, 0.5)  # was written 0: stale at once
    beat = read_heartbeat(tmp_path / "h")
    assert beat is not None and beat[1] >= 0.5


def test_the_live_table_is_the_configs_and_a_bad_one_is_one_line_before_slurm(
        tmp_path: Path) -> None:
    """The live service started every job's estimate from the bundled V100 table with no
    way to give another (docs review): ``slurm.throughputs`` names it, read before Slurm
    is reached, and a bad one is one line naming the key, exit 2."""
    import json
    import os
    import subprocess
    import sys

    from slurm_shockwave.cli.live_options import Live
    from slurm_shockwave.config import Settings
    from slurm_shockwave.slurm.fake import FakeSlurm
    from slurm_shockwave.slurm.hints import parse_hint
    from slurm_shockwave.slurm.protocol import SlurmJob
    from slurm_shockwave.workloads.bundled import load_table

    table = tmp_path / "a100.json"  # ResNet-18 at batch 64 on 1 GPU, twice the V100's
    tacc = load_table(None)
    fast = 2 * tacc.steps_per_s("ResNet-18", 64, 1)
    table.write_text(json.dumps({"v100": {"('ResNet-18 (batch size 64)', 1)": {"null": fast}}}))
    job = SlurmJob(7, "r18", "alice", "shockwave", "PENDING", gpus=1)
    hint = parse_hint("shockwave: model=resnet18 bs=64 epochs=10")
    settings = parse_settings({"slurm": {"throughputs": str(table)}}, source="t.yaml")
    ours = Live(settings, FakeSlurm([]), throughputs=load_table(str(table))).table()
    bundled = Live(Settings(), FakeSlurm([])).table()
    assert ours(job, hint).epoch_s == pytest.approx(bundled(job, hint).epoch_s / 2)

    config = tmp_path / "bad.yaml"
    for spec in (str(tmp_path / "missing.json"), "builtin:a100", str(config)):
        config.write_text(f"slurm:\n  throughputs: {spec}\n")
        env = {**os.environ, "SLURM_CONF": str(tmp_path / "no-slurm.conf"), "PATH": "/usr/bin:/bin"}
        done = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "queue",
                               "--config", str(config)], capture_output=True, text=True,
                              env=env, timeout=60)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "slurm.throughputs" in done.stderr, done.stderr


def test_stale_after_s_is_checked_against_the_round_in_use(tmp_path: Path) -> None:
    """Found by a review: with `serve --round-s 30` a stale_after_s of 60 was refused
    against the file's 120 s round; the command line's round is the one checked."""
    path = tmp_path / "c.yaml"
    path.write_text("service:\n  stale_after_s: 60\n")
    with pytest.raises(InputError) as exc:
        load_settings(path)
    assert exc.value.field == "service.stale_after_s" and "(120 s)" in str(exc.value)
    settings = load_settings(path, round_s=30.0)
    assert settings.slurm.round_s == 30.0 and settings.service.stale_after_s == 60
    with pytest.raises(InputError, match=r"\(90 s\)"):
        load_settings(path, round_s=90.0)
    assert load_settings(None, round_s=30.0).slurm.round_s == 30.0


@pytest.mark.parametrize(("text", "message"), [
    ("simulator:\n  round_s: 2001-12-14\n", "simulator.round_s: expected a number, got the date "
                                            "2001-12-14"),
    ("simulator:\n  round_s: true\n", "simulator.round_s: expected a number, got true"),
    ("simulator:\n  round_s: !!binary aGVsbG8=\n",
     "simulator.round_s: expected a number, got binary data of 5 bytes"),
    ("~:\n  a: 1\n", "null: unknown section"),
    ("policies:\n  stretch_edf:\n    stretch: true\n",
     "policies.stretch_edf.stretch: expected a number or a string, got true"),
    ("policies:\n  las:\n    queue_thresholds_gpu_s: abc\n",
     "policies.las.queue_thresholds_gpu_s: expected a list, got 'abc'"),
    ("policies:\n  stretch_edf:\n    seed: 1.5\n",
     "policies.stretch_edf.seed: expected an integer, got 1.5"),
])
def test_a_value_is_shown_as_the_yaml_spells_it(tmp_path: Path, text: str,
                                                message: str) -> None:
    """Found by a red-team: ``got datetime.date(2001, 12, 14)``, ``got True``,
    ``got b'hello'`` and ``None: unknown section`` spelt the values in Python, and
    ``expected float | str`` or ``expected tuple`` the types."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_settings(path)
    assert f"{path}: {message}" in str(err.value), str(err.value)
