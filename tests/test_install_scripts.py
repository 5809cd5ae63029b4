"""The packaged plugin scripts and ``shockwave install-scripts`` (real files, as root)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurm_shockwave.cli.live_options import handback_problem
from slurm_shockwave.slurm.plugin_files import (
    SCRIPT_NAMES,
    ScriptSettings,
    packaged,
    render,
    settings_in,
    version_of,
)
from slurm_shockwave.slurm.slurm_conf import parse_show_config, read_slurm_conf

REPO = Path(__file__).resolve().parents[1]


def test_the_package_ships_plugin_scripts_as_they_are_in_the_checkout() -> None:
    for name in SCRIPT_NAMES:
        assert packaged(name) == (REPO / "plugin_scripts" / name).read_text()
        assert version_of(name, packaged(name)) == "current"


def test_settings_lines_are_written_and_read_back() -> None:
    s = ScriptSettings(partition="gpu-a", heartbeat="/srv/sw/beat",
                       endpoint_file="/srv/sw/endpoint", is_default=True)
    lua = render("job_submit.lua", s)
    assert settings_in(lua) == {"partition": "gpu-a", "heartbeat": "/srv/sw/beat"}
    assert "SHOCKWAVE_IS_DEFAULT = true" in lua.splitlines()
    for name, extra in (("task_prolog.sh", {}), ("epilog.sh", {"shockwave_bin": ""})):
        assert settings_in(render(name, s)) == {"endpoint_file": "/srv/sw/endpoint",
                                                "partition": "gpu-a", **extra}
    events = render("events.sh", replace(s, events_dir="/srv/sw/events"))
    assert settings_in(events) == {"events_dir": "/srv/sw/events"}
    assert version_of("events.sh", events) == "current"
    assert version_of("job_submit.lua", lua) == "current"
    assert version_of("job_submit.lua", lua.replace("MAX_BYTES = 1000",
                                                    "MAX_BYTES = 999")) == "other version"
    assert version_of("prolog.sh", "#!/bin/sh\nexit 0\n") == "not ours"


def test_serve_compares_only_our_loaded_job_submit_lua(tmp_path: Path) -> None:
    """What `serve` compares its settings with: our script, when Slurm loads it."""
    from slurm_shockwave.service.doctor import lua_mismatch

    conf = parse_show_config(f"SLURM_CONF = {tmp_path}/slurm.conf\n"
                             "JobSubmitPlugins = lua\n")
    lua = tmp_path / "job_submit.lua"
    want = ScriptSettings(partition="gpu-a", heartbeat="/srv/sw/beat")
    assert lua_mismatch(conf, want) is None  # no script
    lua.write_text(render("job_submit.lua", want))
    assert lua_mismatch(conf, want) is None  # the service's own settings
    other = lua_mismatch(conf, ScriptSettings(partition="gpu-b", heartbeat="/srv/sw/beat"))
    assert other is not None and other[0] == "slurm.partition", other
    beat = lua_mismatch(conf, ScriptSettings(partition="gpu-a", heartbeat="/srv/sw/other"))
    assert beat is not None and beat[0] == "service.heartbeat", beat
    # a script Slurm does not load holds nothing
    unloaded = parse_show_config(f"SLURM_CONF = {tmp_path}/slurm.conf\n"
                                 "JobSubmitPlugins = (null)\n")
    assert lua_mismatch(unloaded, ScriptSettings(partition="gpu-b")) is None
    lua.write_text("-- a site's own job_submit.lua\nreturn slurm.SUCCESS\n")
    assert lua_mismatch(conf, ScriptSettings(partition="gpu-b")) is None  # doctor says so


def test_a_hand_back_of_another_partition_may_not_take_the_managed_ones_heartbeat(
        tmp_path: Path) -> None:
    """handback --partition other removed the heartbeat job_submit.lua reads for
    shockwave's jobs: new ones ran unheld while held ones stayed held (red-team)."""
    conf = parse_show_config(f"SLURM_CONF = {tmp_path}/slurm.conf\n"
                             "JobSubmitPlugins = lua\n")
    beat = str(tmp_path / "beat")
    (tmp_path / "job_submit.lua").write_text(render("job_submit.lua", ScriptSettings(
        partition="shockwave", heartbeat=beat)))
    problem = handback_problem(conf, "other", beat)
    assert problem is not None and "holds partition shockwave's new jobs" in problem
    assert handback_problem(conf, "shockwave", beat) is None  # its own: fine
    assert handback_problem(conf, "other", str(tmp_path / "another-beat")) is None


def test_start_sh_and_the_installer_write_the_same_scripts() -> None:
    """The test cluster's scripts (docker-slurm/start.sh patches them with sed) read as
    current: doctor judges both kinds of install alike."""
    lua = packaged("job_submit.lua")
    lua = lua.replace('SHOCKWAVE_PARTITION = SHOCKWAVE_PARTITION or "shockwave"',
                      'SHOCKWAVE_PARTITION = "shockwave"')
    assert version_of("job_submit.lua", lua) == "current"
    # each test cluster's own audit trail (two clusters on one host shared the host's)
    start = (REPO / "docker-slurm" / "start.sh").read_text()
    assert '-e "s|^DIR=.*|DIR=\\"$STATE/events\\"|"' in start
    events = packaged("events.sh").replace('DIR="/var/lib/slurm-shockwave/events"',
                                           'DIR="/tmp/cluster-a/events"')
    assert settings_in(events) == {"events_dir": "/tmp/cluster-a/events"}
    assert version_of("events.sh", events) == "current"


def _conf(tmp: Path, extra: str) -> Path:
    conf = tmp / "etc" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("ClusterName=x\n# Prolog=/not/this\n" + extra +
                    "PartitionName=shockwave Nodes=n1 Default=YES State=UP\n")
    return conf


@pytest.mark.parametrize("field", ["heartbeat", "endpoint_file", "shockwave_bin",
                                   "events_dir"])
def test_a_path_that_ends_in_a_newline_is_refused(field: str) -> None:
    """Found by a red-team: ``$`` passed a final newline, and a heartbeat path from a
    YAML block scalar was written into job_submit.lua as an unfinished string, which
    Lua cannot load and slurmctld stops on."""
    from slurm_shockwave.model.errors import InputError
    good = ScriptSettings(shockwave_bin="/usr/bin/shockwave")
    good.validate()
    with pytest.raises(InputError, match=field.replace("events_dir", "--events-dir")):
        replace(good, **{field: getattr(good, field) + "\n"}).validate()


@pytest.mark.parametrize("path", ["/events", "/srv/sw/events/", "/srv/../events",
                                  "/srv//events", "srv/events"])
def test_an_events_dir_events_sh_cannot_make_safely_is_refused(path: str) -> None:
    """events.sh makes DIR in the folder above it and checks it by its last part: at the
    root, with a trailing '/', '..' or '//' those are not the folder it writes."""
    from slurm_shockwave.model.errors import InputError
    with pytest.raises(InputError, match="--events-dir"):
        ScriptSettings(events_dir=path).validate()


def _install(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "install-scripts",
                           *args], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="installing root-owned scripts needs root")
def test_install_scripts_puts_each_where_slurm_conf_points(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    conf = _conf(tmp_path, f"JobSubmitPlugins=lua\nProlog={bin_dir}/prolog.sh\n"
                           f"Epilog={bin_dir}/epilog.sh\nTaskProlog={bin_dir}/task_prolog.sh\n")
    cfg = tmp_path / "sw.yaml"
    cfg.write_text("service: {heartbeat: /srv/sw/beat, endpoint_file: /srv/sw/endpoint}\n")
    dry = _install("--slurm-conf", str(conf), "--config", str(cfg), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert not bin_dir.exists() and "would install" in dry.stdout
    done = _install("--slurm-conf", str(conf), "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    assert "then: scontrol reconfigure" in done.stdout  # or a restart for a new plugin
    assert "or restart slurmctld if it has not loaded the lua plugin yet" in done.stdout
    modes = {p.name: stat.S_IMODE(p.stat().st_mode)
             for p in [*bin_dir.iterdir(), tmp_path / "etc" / "job_submit.lua"]}
    assert modes == {"job_submit.lua": 0o644, "prolog.sh": 0o755, "epilog.sh": 0o755,
                     "task_prolog.sh": 0o755, "events.sh": 0o644}
    lua = (tmp_path / "etc" / "job_submit.lua").read_text()
    assert settings_in(lua)["heartbeat"] == "/srv/sw/beat"
    assert settings_in((bin_dir / "events.sh").read_text()) == {
        "events_dir": "/var/lib/slurm-shockwave/events"}
    assert "SHOCKWAVE_IS_DEFAULT = true" in lua  # slurm.conf's Default=YES
    again = _install("--slurm-conf", str(conf), "--config", str(cfg))
    assert again.stdout.count("unchanged") == 5
    # an admin walkthrough: "then: scontrol reconfigure" after every run, all unchanged too
    assert "then:" not in again.stdout and "nothing changed" in again.stdout
    # a site's own prolog is never overwritten silently
    (bin_dir / "prolog.sh").write_text("#!/bin/sh\n# the site's prolog\nexit 0\n")
    refused = _install("--slurm-conf", str(conf), "--config", str(cfg))
    assert refused.returncode == 2
    assert "prolog.sh: Prolog: exists and is not slurm-shockwave's" in refused.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="installing root-owned scripts needs root")
def test_install_scripts_writes_the_events_dir_it_is_given(tmp_path: Path) -> None:
    dest, conf = tmp_path / "node", str(_conf(tmp_path, ""))
    done = _install("--slurm-conf", conf, "--dest", str(dest), "--events-dir", "/srv/sw/events")
    assert done.returncode == 0, done.stderr
    assert settings_in((dest / "events.sh").read_text()) == {"events_dir": "/srv/sw/events"}
    bad = _install("--slurm-conf", conf, "--dest", str(dest), "--events-dir", "/events")
    assert bad.returncode == 2 and "--events-dir" in bad.stderr, bad.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="installing root-owned scripts needs root")
def test_an_installed_script_is_read_once(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether it is ours and whether it is unchanged are answered from one read (it was
    read three times: by the check of every script, by install's own check and to
    compare); a forced dry run reads none."""
    from click.testing import CliRunner

    from slurm_shockwave.cli.install_scripts import install_scripts

    conf = _conf(tmp_path, "")
    args = ["--slurm-conf", str(conf), "--dest", str(tmp_path / "opt")]
    assert CliRunner().invoke(install_scripts, args).exit_code == 0
    reads: list[str] = []
    read_text = Path.read_text

    def counted(self: Path, *a: Any, **kw: Any) -> str:
        if tmp_path in self.parents:
            reads.append(self.name)
        return read_text(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", counted)
    again = CliRunner().invoke(install_scripts, args)
    assert again.exit_code == 0 and again.output.count("unchanged") == 5, again.output
    assert sorted(reads) == sorted(SCRIPT_NAMES)
    reads.clear()
    assert CliRunner().invoke(install_scripts, [*args, "--force", "--dry-run"]).exit_code == 0
    assert reads == []


@pytest.mark.skipif(os.geteuid() != 0, reason="installing root-owned scripts needs root")
def test_install_scripts_says_what_slurm_conf_lacks(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "")
    done = _install("--slurm-conf", str(conf), "--dest", str(tmp_path / "opt"))
    assert done.returncode == 0, done.stderr
    assert f"JobSubmitPlugins=lua Prolog={tmp_path}/opt/prolog.sh" in done.stdout
    bare = _install("--slurm-conf", str(conf))
    assert "skipped: TaskProlog is not set" in bare.stderr
    assert (tmp_path / "etc" / "job_submit.lua").exists()
    assert "warning" not in bare.stderr
    # a partition slurm.conf does not define: installed all the same (the partition may
    # come later), with one line saying so (no job_submit.lua of the other one there)
    (tmp_path / "etc" / "job_submit.lua").unlink()
    other = _install("--slurm-conf", str(conf), "--partition", "gpu", "--dry-run")
    assert other.returncode == 0, other.stderr
    assert f"warning: {conf} defines no partition 'gpu'" in other.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="installing root-owned scripts needs root")
def test_a_configless_node_installs_its_scripts_with_dest_and_no_slurm_conf(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node of a configless cluster has no slurm.conf: it was refused even with --dest,
    though its scripts need none. job_submit.lua is the slurmctld host's."""
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "none" / "slurm.conf"))
    done = _install("--dest", str(tmp_path / "opt"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "opt").iterdir()) == [
        "epilog.sh", "events.sh", "prolog.sh", "task_prolog.sh"]
    assert "skipped: job_submit.lua: no " in done.stderr and "configless" in done.stderr
    assert not (tmp_path / "none").exists()
    bare = _install("--dry-run")  # without --dest: where would they go? one line, exit 2
    assert bare.returncode == 2 and len(bare.stderr.strip().splitlines()) == 1
    assert "--dest" in bare.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="installing root-owned scripts needs root")
def test_a_second_partition_does_not_take_the_installed_job_submit_lua(tmp_path: Path) -> None:
    """Found by a review: a copy of the config for a second partition rewrote the one
    job_submit.lua silently (exit 0): the first partition's jobs were no longer checked
    or held, and the second's were held on the first service's heartbeat with nobody to
    plan them. Slurm loads one job_submit.lua, for one partition: refused unless
    --force."""
    conf = _conf(tmp_path, "JobSubmitPlugins=lua\nPartitionName=gpu2 Nodes=n1\n")
    lua = tmp_path / "etc" / "job_submit.lua"
    first, second, moved = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"
    first.write_text(f"service: {{heartbeat: {tmp_path}/beat}}\n")
    second.write_text(f"slurm: {{partition: gpu2}}\nservice: {{heartbeat: {tmp_path}/beat}}\n")
    moved.write_text(f"service: {{heartbeat: {tmp_path}/beat2}}\n")
    assert _install("--slurm-conf", str(conf), "--config", str(first)).returncode == 0
    installed = lua.read_text()
    for args, field, why in (
            (["--config", str(second)], "slurm.partition",
             f"manages partition shockwave (heartbeat {tmp_path}/beat), not gpu2: the plugin "
             "manages one partition per cluster"),
            (["--config", str(first), "--partition", "gpu2"], "--partition",
             "manages partition shockwave"),
            (["--config", str(second), "--dry-run"], "slurm.partition",
             "manages partition shockwave"),
            (["--config", str(moved)], "service.heartbeat",
             f"holds shockwave's new jobs on heartbeat {tmp_path}/beat, not {tmp_path}/beat2")):
        refused = _install("--slurm-conf", str(conf), *args)
        assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused
        assert f"error: {lua}: {field}: {why}" in refused.stderr, refused.stderr
        assert lua.read_text() == installed
    # the same config again is no retarget; --force moves it, and says so
    assert _install("--slurm-conf", str(conf), "--config", str(first)).returncode == 0
    forced = _install("--slurm-conf", str(conf), "--config", str(second), "--force")
    assert forced.returncode == 0, forced.stderr
    assert f"warning: --force: {lua} managed partition shockwave on heartbeat " \
           f"{tmp_path}/beat; it now manages gpu2 on {tmp_path}/beat" in forced.stderr
    assert settings_in(lua.read_text())["partition"] == "gpu2"


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    missing = _install("--slurm-conf", str(tmp_path / "nope.conf"), "--dry-run")
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith("slurm.conf: cannot read (No such file or directory)")
    conf = _conf(tmp_path, "Include extra.conf\n")
    (tmp_path / "etc" / "extra.conf").write_text("TaskProlog=/a/task_prolog.sh\n")
    assert read_slurm_conf(conf).paths("TaskProlog") == ["/a/task_prolog.sh"]


@pytest.mark.skipif(os.geteuid() != 0, reason="installing root-owned scripts needs root")
def test_every_script_can_be_written_or_none_is(tmp_path: Path) -> None:
    """Found by a red-team: two settings naming one file installed one script over the
    other (exit 0); a site's own epilog, a directory or a file where a folder must be
    failed after job_submit.lua and prolog.sh were written (the last two with a
    traceback). Each is one line, exit 2, and nothing is written."""
    bin_dir = tmp_path / "bin"
    lua = tmp_path / "etc" / "job_submit.lua"
    same = _conf(tmp_path, f"JobSubmitPlugins=lua\nProlog={bin_dir}/p.sh\n"
                           f"Epilog={bin_dir}/e.sh\nTaskProlog={bin_dir}/e.sh\n")
    clash = _install("--slurm-conf", str(same))
    assert clash.returncode == 2 and len(clash.stderr.splitlines()) == 1
    assert f"{bin_dir}/e.sh is where epilog.sh goes too (Epilog)" in clash.stderr
    assert not lua.exists() and not bin_dir.exists()
    bin_dir.mkdir()
    (bin_dir / "epilog.sh").write_text("#!/bin/sh\n# the site's epilog\nexit 0\n")
    (bin_dir / "task_prolog.sh").mkdir()
    (tmp_path / "afile").write_text("")
    for line, why in ((f"Epilog={bin_dir}/epilog.sh", "exists and is not slurm-shockwave's"),
                      (f"Epilog={bin_dir}/task_prolog.sh", "is a directory"),
                      (f"Epilog={tmp_path}/afile/epilog.sh",
                       f"{tmp_path}/afile is not a directory")):
        conf = tmp_path / "etc" / "slurm.conf"
        conf.write_text(f"JobSubmitPlugins=lua\nProlog={bin_dir}/prolog.sh\n{line}\n"
                        "PartitionName=shockwave Nodes=n1\n")
        refused = _install("--slurm-conf", str(conf))
        assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused
        assert f"Epilog: {why}" in refused.stderr
        assert not lua.exists() and not (bin_dir / "prolog.sh").exists()


def test_slurm_conf_is_read_without_hanging(tmp_path: Path) -> None:
    """A FIFO with no writer reads as empty; a file that includes itself ten times is
    read once, not 10^8 times (both hung install-scripts)."""
    fifo = tmp_path / "fifo.conf"
    os.mkfifo(fifo)
    assert read_slurm_conf(fifo).partitions == {}
    bomb = tmp_path / "bomb.conf"
    bomb.write_text(f"Include {bomb}\n" * 10 + "PartitionName=p Nodes=n1\n")
    assert list(read_slurm_conf(bomb).partitions) == ["p"]


def test_slurm_conf_is_read_as_slurms_own_parser_reads_it(tmp_path: Path) -> None:
    """Found by a review, each form Slurm's parse_config.c and slurm.conf(5) accept: a
    line continued by a backslash, double-quoted values, an Include of a path with %c
    (the ClusterName), and a relative Include in an included file, which is relative to
    slurm.conf's folder."""
    etc = tmp_path / "etc"
    (etc / "conf.d").mkdir(parents=True)
    (etc / "slurm.conf").write_text(
        "ClusterName=Lab\nJobSubmitPlugins=\"lua\"\nProlog=\"/etc/slurm/prolog.sh\"\n"
        "PartitionName=shockwave Nodes=n[1-4] \\\n    Default=YES State=UP\n"
        "Include %c-extra.conf\nInclude conf.d/more.conf\n")
    (etc / "lab-extra.conf").write_text("Epilog=/etc/slurm/epilog.sh\n")
    (etc / "conf.d" / "more.conf").write_text("Include nodes.conf\n")
    (etc / "nodes.conf").write_text("TaskProlog=/etc/slurm/task_prolog.sh\n")
    conf = read_slurm_conf(etc / "slurm.conf")
    assert conf.partitions["shockwave"]["default"] == "YES" and "default" not in conf.values
    assert conf.plugins("JobSubmitPlugins") == ["lua"]
    assert conf.paths("Prolog") == ["/etc/slurm/prolog.sh"]
    assert conf.paths("Epilog") == ["/etc/slurm/epilog.sh"]
    assert conf.paths("TaskProlog") == ["/etc/slurm/task_prolog.sh"]


def test_the_service_url_for_nodes_without_the_endpoint_file() -> None:
    from slurm_shockwave.model.errors import InputError
    from slurm_shockwave.slurm.plugin_files import ScriptSettings, render, settings_in

    url = ScriptSettings(service_url="http://ctl.example.org:7817")
    for name in ("task_prolog.sh", "epilog.sh"):
        text = render(name, url)
        assert 'SERVICE_URL="http://ctl.example.org:7817"' in text
        assert settings_in(text)["endpoint_file"] == url.endpoint_file
    try:
        render("task_prolog.sh", ScriptSettings(service_url="http://x:1; rm -rf /"))
    except InputError as exc:
        assert exc.field == "--service-url"
    else:
        raise AssertionError("a URL with shell in it was written into a script")
    # one rule for the option and the scripts (a red-team: these passed the option's
    # check, as the docs allow, and the scripts' stricter one refused them)
    for ok in ("http://h:7817/path", "http://[::1]:7817", "https://h.example.org:7817"):
        assert f'SERVICE_URL="{ok}"' in render("epilog.sh", ScriptSettings(service_url=ok))
    for bad in ("http://h:99999", "http://h:7817/$(id)", "http://h:0", "ftp://h:21"):
        with pytest.raises(InputError, match="HOST:PORT"):
            render("epilog.sh", ScriptSettings(service_url=bad))
    # the uid whose answers the jobs believe there (install-scripts --service-uid)
    owned = ScriptSettings(service_url="http://ctl.example.org:7817", service_uid="1002")
    for name in ("task_prolog.sh", "epilog.sh"):
        assert 'SERVICE_UID="1002"' in render(name, owned)
    with pytest.raises(InputError, match="must be a number"):
        render("epilog.sh", ScriptSettings(service_url="http://h:1", service_uid="1; id"))


def test_folders_made_for_scripts_and_the_heartbeat_are_0755_whatever_the_umask(
        tmp_path: Path) -> None:
    """Found by a review: under root's hardened umask 027 the folders made were 0750, so
    the TaskProlog (run as the job's user) and the heartbeat (read by SlurmUser) could
    not be reached, while doctor, reading as root, said all was well."""
    from slurm_shockwave.service.shared_file import write_shared
    from slurm_shockwave.slurm.plugin_files import make_dirs

    old = os.umask(0o027)
    try:
        make_dirs(tmp_path / "opt" / "slurm-shockwave" / "plugin_scripts")
        write_shared(tmp_path / "state" / "run" / "heartbeat", "1 50\n")
    finally:
        os.umask(old)
    for folder in ("opt", "opt/slurm-shockwave", "opt/slurm-shockwave/plugin_scripts",
                   "state", "state/run"):
        assert stat.S_IMODE((tmp_path / folder).stat().st_mode) == 0o755, folder


@pytest.mark.skipif(os.geteuid() != 0, reason="making files of other owners needs root")
def test_the_epilogs_command_must_be_one_only_root_can_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Epilog runs `shockwave` as root: one in a user's virtualenv gave that user root
    on every node (a red-team finding). install-scripts refuses it in one line."""
    from click.testing import CliRunner

    from slurm_shockwave.cli import install_scripts as cli
    from slurm_shockwave.slurm.root_only import changeable_by_others, root_only_problem

    safe = tmp_path / "safe"
    safe.mkdir(mode=0o755)
    script = safe / "shockwave"
    script.write_text(f"#!{sys.executable}\n")
    script.chmod(0o755)
    assert changeable_by_others(script) is None  # /tmp is sticky: its entries are safe
    assert root_only_problem(str(script)) is None
    venv = tmp_path / "venv"
    venv.mkdir()
    theirs = venv / "shockwave"
    theirs.write_text(f"#!{sys.executable}\n")
    os.chown(venv, 1001, 1001)
    assert root_only_problem(str(theirs)) == f"{venv} is owned by uid 1001"
    os.chown(venv, 0, 0)
    venv.chmod(0o775)
    os.chown(venv, 0, 50)  # a staff group may write it
    assert changeable_by_others(theirs) == f"{venv} is writable by group 50"
    venv.chmod(0o755)
    link = safe / "linked"
    link.symlink_to(theirs)
    os.chown(theirs, 1001, 1001)
    assert changeable_by_others(link) == f"{theirs} is owned by uid 1001"  # resolved too
    script.write_text(f"#!{theirs}\n")
    assert root_only_problem(str(script)) == f"{theirs} is owned by uid 1001"  # its interpreter

    monkeypatch.setattr(cli, "shockwave_bin", lambda: str(theirs))
    conf = _conf(tmp_path, "")
    done = CliRunner().invoke(cli.install_scripts, ["--slurm-conf", str(conf), "--dry-run"])
    assert done.exit_code == 2 and len(done.output.strip().splitlines()) == 1, done.output
    assert f"{theirs} is owned by uid 1001" in done.output and "shockwave" in done.output


@pytest.mark.skipif(os.geteuid() != 0, reason="the event log is root's")
def test_the_event_log_is_written_only_into_its_own_root_folder(tmp_path: Path) -> None:
    """events.sh appends as root: checked by path and written by path, whoever owned the
    folder above could swap the folder in between (a red-team finding). It now writes in
    the folder it checked, and not at all through a link, into another's folder, or into
    one others may write."""
    events = tmp_path / "lib" / "events"
    script = tmp_path / "events.sh"
    script.write_text(render("events.sh", ScriptSettings(events_dir=str(events))))

    def event(text: str) -> None:
        subprocess.run(["sh", "-c", f'. {script}; event "{text}"'], check=True, timeout=30,
                       env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "12"})

    event("made")  # the folder is made, root's, 0700
    assert (events / "12.log").read_text() == "made\n"
    assert stat.S_IMODE(events.stat().st_mode) == 0o700 and events.stat().st_uid == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (events / "12.log").unlink()
    events.rmdir()
    events.symlink_to(elsewhere)
    event("through a link")
    assert list(elsewhere.iterdir()) == []
    events.unlink()
    events.mkdir(mode=0o700)
    os.chown(events, 1001, 1001)
    event("theirs")
    os.chown(events, 0, 0)
    events.chmod(0o777)
    event("open")
    assert list(events.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the event log is root's")
def test_the_event_log_names_slurms_node(tmp_path: Path) -> None:
    """An admin walkthrough: ``node=`` was the host's name, which is not the node's where
    slurm.conf names nodes otherwise (NodeHostname) or one host runs several slurmd, so
    the trail could not answer "did job N start on this node". Slurm's name for it, the
    host's where Slurm gives none."""
    events = tmp_path / "events"
    for name in ("prolog.sh", "epilog.sh"):
        (tmp_path / name).write_text((REPO / "plugin_scripts" / name).read_text())
    (tmp_path / "events.sh").write_text(render("events.sh",
                                               ScriptSettings(events_dir=str(events))))
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "12", "SLURM_JOB_USER": "ann"}
    for name, node in (("prolog.sh", {"SLURMD_NODENAME": "gpu-a7"}), ("epilog.sh", {})):
        done = subprocess.run(["sh", str(tmp_path / name)], env={**env, **node},
                              capture_output=True, timeout=30, check=False)
        assert done.returncode == 0
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True, timeout=30,
                          check=True).stdout.strip()
    start, end = (events / "12.log").read_text().splitlines()
    assert " start job=12 user=ann node=gpu-a7 restart=0" in start
    assert end.endswith(f" end job=12 user=ann node={host}")


@pytest.mark.skipif(os.geteuid() != 0, reason="files of other owners and ACLs need root")
def test_what_the_epilogs_python_imports_is_checked_too(tmp_path: Path) -> None:
    """A review found root_only_problem passing commands whose Python then ran a user's
    code as root: a .pth naming a user's folder (its sitecustomize.py runs at start), an
    ACL granting a user write (the mode shows g+w of root's group), a sticky site folder
    anyone may add a module to, and the package of the Python doing the check rather than
    the one the command imports. A root-owned virtualenv with its own copy of the package."""
    import shutil
    import struct

    from slurm_shockwave.slurm.root_only import root_only_problem

    tmp_path.chmod(0o755)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    shutil.copytree(REPO / "slurm_shockwave", site / "slurm_shockwave",  # as a wheel has it
                    ignore=shutil.ignore_patterns("__pycache__"))
    program = venv / "bin" / "shockwave"
    program.write_text(f"#!{venv}/bin/python\nimport slurm_shockwave\n")
    program.chmod(0o755)
    assert root_only_problem(str(program)) is None
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 1001, 1001)
    (site / "tool.pth").write_text(f"{theirs}\n")
    assert root_only_problem(str(program)) == f"{theirs} is owned by uid 1001"
    (site / "tool.pth").unlink()
    init = site / "slurm_shockwave" / "__init__.py"
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in (
        (0x01, 6, 0xFFFFFFFF), (0x02, 6, 1001), (0x04, 4, 0xFFFFFFFF), (0x10, 6, 0xFFFFFFFF),
        (0x20, 4, 0xFFFFFFFF)))
    os.setxattr(init, "system.posix_acl_access", acl)
    assert root_only_problem(str(program)) == \
        f"{init} has an ACL entry that lets another user or group write it"
    os.removexattr(init, "system.posix_acl_access")
    site.chmod(0o1777)
    assert root_only_problem(str(program)) == f"{site} is writable by anyone"
    site.chmod(0o755)
    os.chown(site / "slurm_shockwave", 1001, 1001)  # the command's package, not this one's
    assert root_only_problem(str(program)) == f"{site / 'slurm_shockwave'} is owned by uid 1001"


def test_the_python_a_console_script_runs_is_read_as_the_epilog_would(tmp_path: Path) -> None:
    """The interpreter root_only_problem checks: an env lookup on the Epilog's own PATH
    (not the installer's: pyenv's python3 was checked where /usr/bin/python3 runs), and
    pip's sh header for long paths, quoted or not (a review)."""
    from slurm_shockwave.slurm.root_only import interpreter

    script = tmp_path / "shockwave"
    for head, python in (("#!/opt/py/bin/python3.11\n", "/opt/py/bin/python3.11"),
                         ("#!/usr/bin/env python3\n", "/usr/bin/python3"),
                         ("#!/bin/sh\n'''exec' \"/opt/x y/bin/python\" \"$0\" \"$@\"\n' '''\n",
                          "/opt/x y/bin/python"),
                         ("#!/bin/sh\n'''exec' /opt/py/bin/python \"$0\" \"$@\"\n' '''\n",
                          "/opt/py/bin/python"),
                         ("#!/bin/sh\n'''exec' /usr/bin/env python3 \"$0\" \"$@\"\n' '''\n",
                          "/usr/bin/python3"),
                         ("#!/usr/bin/env -S python3 -I\n", "/usr/bin/python3"),
                         ("import sys\n", None)):
        script.write_text(head)
        assert interpreter(script) == python, head


@pytest.mark.skipif(os.geteuid() != 0, reason="installing root-owned scripts needs root")
@pytest.mark.parametrize(("slurm_user", "mode", "refused"), [
    ("swtest1", 0o755, False),  # SlurmUser's folder: it runs job_submit.lua
    ("root", 0o755, True),      # a user's folder
    ("swtest1", 0o777, True),   # anyone's to write, whoever owns it
])
def test_job_submit_lua_goes_only_where_root_or_slurm_user_alone_can_change_it(
        tmp_path: Path, slurm_user: str, mode: int, refused: bool) -> None:
    """job_submit.lua goes beside slurm.conf, a folder a site may give to SlurmUser; its
    folders were then not checked at all (a review), so one anyone could write took it,
    and slurmctld ran whatever Lua was put in its place."""
    import pwd

    conf = _conf(tmp_path, f"JobSubmitPlugins=lua\nSlurmUser={slurm_user}\n")
    os.chown(conf.parent, pwd.getpwnam("swtest1").pw_uid, -1)
    conf.parent.chmod(mode)
    done = _install("--slurm-conf", str(conf))
    if refused:
        assert done.returncode == 2 and "runs code as SlurmUser" in done.stderr, done.stderr
        assert not (conf.parent / "job_submit.lua").exists()
    else:
        assert done.returncode == 0, done.stderr
        assert (conf.parent / "job_submit.lua").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="installing root-owned scripts needs root")
def test_scripts_are_not_installed_where_another_user_can_change_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a red-team: ``--dest`` a folder another user owns took the scripts Slurm
    runs as root, and that user could put their own prolog.sh in its place. Refused in
    one line, nothing written; and doctor's check of an installed script fails for it."""
    import pwd

    from slurm_shockwave.slurm.plugin_files import unsafe_problem
    uid = pwd.getpwnam("swtest1").pw_uid
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, uid, -1)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "none" / "slurm.conf"))
    done = _install("--dest", str(theirs / "opt"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{theirs} is owned by uid {uid}" in done.stderr and "gets root" in done.stderr
    assert list(theirs.iterdir()) == []
    script = theirs / "prolog.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    problem = unsafe_problem(str(script))
    assert problem is not None and f"{theirs} is owned by uid {uid}" in problem
