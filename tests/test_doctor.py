"""Doctor's verdicts from settings as scontrol prints them (logic; the real cluster:
tests/test_doctor_live.py), and the command without any Slurm."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_shockwave.service.doctor import Expected, Status, slurm_checks
from slurm_shockwave.service.doctor_host import store_check
from slurm_shockwave.slurm.protocol import SlurmNode
from slurm_shockwave.slurm.slurm_conf import parse_show_config, parse_show_partitions

SHOW = """Configuration data as of 2026-11-30T12:57:49
AuthInfo                = cred_expire=10
JobRequeue              = 1
JobSubmitPlugins        = lua
PriorityType            = priority/multifactor
ProctrackType           = proctrack/cgroup
SLURM_CONF              = /etc/slurm/slurm.conf
"""
PART = ("PartitionName=shockwave AllowGroups=ALL Default=YES Nodes=g[1-2] State=UP "
        "TotalNodes=2\nPartitionName=cpu Nodes=c1 State=UP\n")
NODES = [SlurmNode("g1", ("IDLE",), 8, 0, ("shockwave",)),
         SlurmNode("g2", ("IDLE", "DRAIN"), 8, 0, ("shockwave",)),
         SlurmNode("c1", ("IDLE",), 0, 0, ("cpu",))]
WANT = Expected(partition="shockwave", round_s=120, heartbeat="/h", endpoint_file="/e",
                store="/s")


def verdicts(show: str, want: Expected = WANT) -> dict[str, Status]:
    checks = slurm_checks(parse_show_config(show), parse_show_partitions(PART), NODES, want)
    return {c.name: c.status for c in checks}


def test_each_setting_is_judged() -> None:
    assert verdicts(SHOW) == {"JobSubmitPlugins": Status.OK, "JobRequeue": Status.OK,
                              "cred_expire": Status.OK, "MinJobAge": Status.OK,
                              "PriorityType": Status.OK, "ProctrackType": Status.OK,
                              "partition shockwave": Status.WARN}  # g2 is drained
    broken = (SHOW.replace("= lua", "= (null)").replace("JobRequeue              = 1",
                                                         "JobRequeue = 0")
              .replace("cred_expire=10", "").replace("multifactor", "basic")
              .replace("proctrack/cgroup", "proctrack/linuxproc"))
    assert verdicts(broken) == {"JobSubmitPlugins": Status.FAIL, "JobRequeue": Status.FAIL,
                                "cred_expire": Status.WARN, "MinJobAge": Status.OK,
                                "PriorityType": Status.WARN, "ProctrackType": Status.WARN,
                                "partition shockwave": Status.WARN}
    # a job the checkpoint signal killed is run again only while Slurm lists it: purged
    # within a round, it is lost (0: never purged)
    for age, status in (("300 sec", Status.OK), ("0 sec", Status.OK), ("30 sec", Status.WARN),
                        ("240 sec", Status.WARN)):
        assert verdicts(SHOW + f"MinJobAge               = {age}\n")["MinJobAge"] == status
    long_round = Expected("shockwave", 600, "/h", "/e", "/s")
    assert verdicts(SHOW + "MinJobAge = 300 sec\n", long_round)["MinJobAge"] == Status.WARN
    assert verdicts(SHOW.replace("= lua", "= job_submit/lua,pbs"))["JobSubmitPlugins"] \
        == Status.OK
    cpu_only = Expected("cpu", 120, "/h", "/e", "/s")
    assert verdicts(SHOW, cpu_only)["partition cpu"] == Status.FAIL  # no GPUs
    assert verdicts(SHOW, Expected("gone", 120, "/h", "/e", "/s"))["partition gone"] \
        == Status.FAIL


def test_a_store_of_another_schema_fails(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "state.db"
    assert store_check(str(path)).status == Status.OK  # not created yet, directory writable
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE meta (key TEXT, value TEXT); CREATE TABLE rounds (id INT);"
                     "INSERT INTO meta VALUES ('schema_version', '99');")
    db.commit()
    db.close()
    check = store_check(str(path))
    assert check.status == Status.FAIL and "schema version 99" in check.detail
    # found by a review: a store under a file read "not created yet", which serve refuses
    under_file = store_check(str(path / "deeper" / "state.db"))
    assert under_file.status == Status.FAIL, under_file
    assert under_file.detail == f"{path}/deeper/state.db: {path} is not a directory"


def test_without_slurm_doctor_names_what_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "doctor",
                          "--slurm-conf", str(tmp_path / "none.conf"), "--store",
                          str(tmp_path / "s.db")], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 1
    assert f"[FAIL] slurmctld: cannot read the running configuration: no Slurm " \
           f"configuration: {tmp_path}/none.conf does not exist" in out.stdout
    assert out.stdout.strip().splitlines()[-1].endswith("failed")


def test_doctor_checks_a_changed_config_before_a_restart_would(tmp_path: Path) -> None:
    """docs/admin.md, "Changing the settings": an edit the service would refuse at its
    next start is one line naming the field, exit 2, before Slurm is asked anything."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PATH"] = str(tmp_path)  # no scontrol: a check of Slurm would fail otherwise
    config = tmp_path / "shockwave.yaml"
    for text, field in (("service:\n  policy: shockwav\n", "service.policy"),
                        ("slurm:\n  round_s: -5\n", "slurm.round_s"),
                        ("policies:\n  shockwave:\n    window_rounds: x\n",
                         "policies.shockwave.window_rounds")):
        config.write_text(text)
        out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "doctor",
                              "--config", str(config)], capture_output=True, text=True,
                             timeout=60, env=env)
        assert out.returncode == 2, (text, out.stdout, out.stderr)
        assert out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
        assert f"{config}: {field}: " in out.stderr, out.stderr


def test_a_listen_port_0_is_warned_of() -> None:
    """Found by a red-team: with ``service.listen`` on port 0 each start of the service
    took another port, and running jobs kept the URL they were given, so a checkpoint
    acknowledgement after a restart went nowhere and the job trained on past its
    checkpoint until its grace ran out. Doctor warns, naming a fixed port."""
    from slurm_shockwave.service.doctor_host import listen_check

    warned = listen_check("0.0.0.0:0")
    assert warned is not None and warned.status == Status.WARN
    assert warned.name == "service.listen"
    assert warned.fix == "service.listen: 0.0.0.0:7817, a port of its own"
    six = listen_check("[::1]:0")
    assert six is not None and six.fix == "service.listen: [::1]:7817, a port of its own"
    assert listen_check("127.0.0.1:7817") is None and listen_check("nonsense") is None


def test_a_task_prolog_behind_a_folder_others_cannot_search_is_named() -> None:
    """Left from a review: the TaskProlog runs as the job's user, so every folder above
    it needs o+x; a hand-made 0750 folder (root's umask 027) kept it from every job."""
    import os
    import shutil
    import tempfile

    from slurm_shockwave.slurm.plugin_files import closed_folder

    top = Path(tempfile.mkdtemp(prefix="sw-closed-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        (top / "open" / "deep").mkdir(parents=True)
        os.chmod(top / "open", 0o755)
        os.chmod(top / "open" / "deep", 0o755)
        assert closed_folder(str(top / "open" / "deep" / "task_prolog.sh")) is None
        os.chmod(top / "open", 0o750)
        assert closed_folder(str(top / "open" / "deep" / "task_prolog.sh")) == \
            f"{top / 'open'} is not searchable by other users (mode 750)"
    finally:
        shutil.rmtree(top)


@pytest.mark.parametrize("name", ["a?b", "a#b", "a%20b"])
def test_the_store_check_reads_a_path_with_uri_characters(tmp_path: Path, name: str) -> None:
    """Found by a review: the read-only address was built from the raw path, so a
    folder named with ``?``, ``#`` or ``%`` read another file (or none)."""
    from slurm_shockwave.service.store import Store

    path = tmp_path / name / "state.db"
    Store(path).close()
    check = store_check(str(path))
    assert check.status == Status.OK and "schema" in check.detail, check.detail


def test_a_job_submit_lua_of_another_partition_fails(tmp_path: Path) -> None:
    """The plugin manages one partition per cluster: a job_submit.lua installed for
    another partition (or heartbeat) holds none of this service's jobs."""
    from slurm_shockwave.service.doctor import script_checks
    from slurm_shockwave.slurm.plugin_files import ScriptSettings, render

    conf = parse_show_config(f"SLURM_CONF = {tmp_path}/slurm.conf\nJobSubmitPlugins = lua\n")
    lua = tmp_path / "job_submit.lua"
    for settings, status, detail in (
            (ScriptSettings(partition="shockwave", heartbeat="/h"), Status.OK, "ours, current"),
            (ScriptSettings(partition="gpu2", heartbeat="/h"), Status.FAIL,
             "partition 'gpu2', the service's is 'shockwave'"),
            (ScriptSettings(partition="shockwave", heartbeat="/x"), Status.FAIL,
             "heartbeat '/x', the service's is '/h'")):
        lua.write_text(render("job_submit.lua", settings))
        os.chmod(lua, 0o644)
        check = script_checks(conf, WANT)[0]
        assert (check.name, check.status) == ("job_submit.lua", status), check
        assert detail in check.detail, check


@pytest.mark.skipif(os.geteuid() != 0, reason="files of other owners need root")
def test_an_epilog_running_a_command_another_user_can_change_fails(tmp_path: Path) -> None:
    """The Epilog runs its `shockwave` as root: doctor fails one another user could
    change (install-scripts refuses to write it; an older install may have)."""
    from slurm_shockwave.service.doctor import script_checks
    from slurm_shockwave.slurm.plugin_files import ScriptSettings, render

    scripts = tmp_path / "scripts"
    scripts.mkdir(mode=0o755)
    venv = tmp_path / "venv"
    venv.mkdir(mode=0o755)
    program = venv / "shockwave"
    program.write_text(f"#!{sys.executable}\n")
    program.chmod(0o755)
    settings = ScriptSettings(partition="shockwave", heartbeat="/h", endpoint_file="/e",
                              shockwave_bin=str(program))
    for name in ("epilog.sh", "events.sh"):
        (scripts / name).write_text(render(name, settings))
        (scripts / name).chmod(0o755 if name == "epilog.sh" else 0o644)
    conf = parse_show_config(f"SLURM_CONF = {tmp_path}/slurm.conf\n"
                             f"Epilog = {scripts}/epilog.sh\n")

    def epilog() -> Any:
        return next(c for c in script_checks(conf, WANT) if c.name == "Epilog")

    assert epilog().status == Status.OK, epilog()
    os.chown(venv, 1001, 1001)
    check = epilog()
    assert check.status == Status.FAIL and f"{venv} is owned by uid 1001" in check.detail


@pytest.mark.skipif(os.geteuid() != 0, reason="files of other owners need root")
def test_a_script_another_user_can_change_fails_where_a_missing_one_warns(
        tmp_path: Path) -> None:
    """Found by a review: a Prolog, Epilog or TaskProlog in a folder another user owns was
    only a warning (they are not needed), so doctor exited 0 on a way to root; it fails.
    Not installed, such a script stays a warning. job_submit.lua's folder (slurm.conf's)
    may be SlurmUser's, who runs it (doctor failed that while install-scripts allowed it),
    but no other user's, nor writable by anyone (a later review: its folders were then
    not checked at all, and a folder of mode 0777 passed)."""
    from slurm_shockwave.service.doctor import script_checks
    from slurm_shockwave.slurm.plugin_files import ScriptSettings, render

    settings = ScriptSettings(partition="shockwave", heartbeat="/h", endpoint_file="/e")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    for name in ("prolog.sh", "events.sh", "job_submit.lua"):
        (theirs / name).write_text(render(name, settings))
        (theirs / name).chmod(0o755 if name == "prolog.sh" else 0o644)
    show = (f"SLURM_CONF = {theirs}/slurm.conf\nJobSubmitPlugins = lua\n"
            f"Prolog = {theirs}/prolog.sh\nEpilog = {tmp_path}/none/epilog.sh\n")
    conf = parse_show_config(show + "SlurmUser = swslurm(1001)\n")

    def checks() -> dict[str, Any]:
        return {c.name: c for c in script_checks(conf, WANT)}

    assert checks()["Prolog"].status == Status.OK, checks()["Prolog"]
    os.chown(theirs, 1001, 1001)  # SlurmUser's
    found = checks()
    assert found["Prolog"].status == Status.FAIL, found["Prolog"]
    assert f"{theirs} is owned by uid 1001" in found["Prolog"].detail
    assert found["Epilog"].status == Status.WARN and "No such file" in found["Epilog"].detail
    assert found["job_submit.lua"].status == Status.OK, found["job_submit.lua"]
    conf = parse_show_config(show + "SlurmUser = root(0)\n")  # then a user's folder
    found = checks()
    assert found["job_submit.lua"].status == Status.FAIL, found["job_submit.lua"]
    assert f"{theirs} is owned by uid 1001" in found["job_submit.lua"].detail
    conf = parse_show_config(show + "SlurmUser = swslurm(1001)\n")
    theirs.chmod(0o777)  # anyone's to write, whoever owns it
    assert checks()["job_submit.lua"].status == Status.FAIL
    theirs.chmod(0o755)
    (theirs / "job_submit.lua").chmod(0o666)
    assert checks()["job_submit.lua"].status == Status.FAIL
    # events.sh, which the Prolog sources as root, in a folder of its own: as the script
    os.chown(theirs, 0, 0)
    (theirs / "events.sh").chmod(0o666)
    found = checks()
    assert found["Prolog"].status == Status.FAIL and "events.sh" in found["Prolog"].detail


def test_serve_refuses_a_job_submit_lua_doctor_fails(tmp_path: Path) -> None:
    """Found by a review: doctor failed a job_submit.lua set for another partition, but
    serve started, planning a partition whose new jobs nobody validated or held (and,
    on a shared heartbeat, keeping the other partition's held with nobody to plan them).
    Serve and plan --apply now refuse it with doctor's own comparison, before anything
    is written. Slurm here is a stand-in scontrol that prints its configuration."""
    from slurm_shockwave.slurm.plugin_files import ScriptSettings, render

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "slurm.conf").write_text("ClusterName=t\n")
    (bin_dir / "scontrol").write_text(
        '#!/bin/sh\n[ "$1 $2" = "show config" ] || exit 1\n'
        f'printf "SLURM_CONF = {tmp_path}/slurm.conf\\nJobSubmitPlugins = lua\\n"\n')
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'no controller' >&2\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "shockwave.yaml"
    config.write_text(f"slurm: {{partition: gpu-a, slurm_conf: {tmp_path}/slurm.conf, "
                      f"backend: cli}}\nservice: {{store: {state}/s.db, heartbeat: "
                      f"{state}/beat, endpoint_file: {state}/endpoint, "
                      "listen: '127.0.0.1:0'}\n")
    lua = tmp_path / "job_submit.lua"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for settings, field in ((ScriptSettings(partition="gpu-b", heartbeat=f"{state}/beat"),
                             "slurm.partition"),
                            (ScriptSettings(partition="gpu-a", heartbeat="/elsewhere/beat"),
                             "service.heartbeat")):
        lua.write_text(render("job_submit.lua", settings))
        lua.chmod(0o644)
        for cmd in (["serve", "--rounds", "1"], ["plan", "--apply"]):
            out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", *cmd,
                                  "--config", str(config)], capture_output=True, text=True,
                                 timeout=60, env=env)
            lines = out.stderr.strip().splitlines()
            assert out.returncode == 2 and len(lines) == 1, out.stderr
            assert f"{field}: " in lines[0] and str(lua) in lines[0], lines
            assert not any(state.iterdir())  # no store, lock or heartbeat
        if field == "slurm.partition":
            assert "manages partition gpu-b" in lines[0], lines
        out = subprocess.run([sys.executable, "-m", "slurm_shockwave.cli", "serve",
                              "--rounds", "1", "--partition", "gpu-a", "--config",
                              str(config)], capture_output=True, text=True, timeout=60,
                             env=env)
        assert out.returncode == 2 and ("--partition: " in out.stderr) == \
            (field == "slurm.partition"), out.stderr


def test_a_heartbeat_slurmctld_cannot_read_fails() -> None:
    """Found by a review: job_submit.lua reads the heartbeat inside slurmctld, as
    SlurmUser; behind a 0700 folder every new job failed open while doctor, reading as
    root, said the heartbeat was fresh. Doctor's verdict is what the user (swtest1
    stands in for SlurmUser) can really read."""
    import shutil
    import tempfile
    import time

    from slurm_shockwave.service.doctor_host import service_checks
    from slurm_shockwave.service.heartbeat import write_heartbeat
    from slurm_shockwave.service.lock import ServiceLock

    top = Path(tempfile.mkdtemp(prefix="sw-beat-", dir="/tmp"))
    folder, beat = top / "state", top / "state" / "heartbeat"
    want = Expected("shockwave", 120, str(beat), str(top / "endpoint"), str(top / "s.db"))
    try:
        os.chmod(top, 0o755)
        folder.mkdir()
        write_heartbeat(beat, time.time(), 360)
        with ServiceLock(want.store, want.heartbeat):
            for folder_mode, file_mode, owner, user in (
                    (0o755, 0o644, 0, None), (0o700, 0o644, 0, None),
                    (0o700, 0o644, 0, "swtest1(1001)"), (0o700, 0o644, 0, "root(0)"),
                    (0o700, 0o644, 1001, "swtest1(1001)"), (0o711, 0o600, 0, "swtest1"),
                    (0o750, 0o644, 0, "swtest1(1001)")):
                os.chmod(folder, folder_mode)
                os.chmod(beat, file_mode)
                os.chown(folder, owner, 0)
                check = service_checks(want, slurm_user=user)[-1]
                who = "swtest1" if user and user.startswith("swtest1") else None
                can = subprocess.run(["su", who or "swtest2", "-s", "/bin/sh", "-c",
                                      f"cat {beat}"], capture_output=True).returncode == 0
                if user and user.startswith("root"):
                    can = True
                assert check.name == "heartbeat", check
                assert check.status == (Status.OK if can else Status.FAIL), (
                    oct(folder_mode), oct(file_mode), owner, user, check)
            # found by a review: whoever can write the heartbeat can name their uid as
            # the service's (its second line): a folder or file others may write warns
            os.chown(folder, 0, 0)
            for folder_mode, file_mode in ((0o775, 0o644), (0o1777, 0o644), (0o755, 0o666)):
                os.chmod(folder, folder_mode)
                os.chmod(beat, file_mode)
                check = service_checks(want, slurm_user="root(0)")[-1]
                assert check.status == Status.WARN and "writable by others" in check.detail
            os.chmod(beat, 0o644)
            os.chmod(folder, 0o700)
            check = service_checks(want)[-1]
            assert check.detail == (
                f"{beat}: {folder} is not searchable by other users (SlurmUser unknown) "
                "(mode 700): job_submit.lua reads it inside slurmctld, so every new job "
                "runs under Slurm alone (fail-open)") and check.fix == f"chmod o+x {folder}"
    finally:
        shutil.rmtree(top)


def test_the_progress_api_check_goes_through_no_proxy(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review: doctor asked the progress API through $http_proxy, which the
    jobs' client never uses, so with a site proxy in the admin's environment it failed a
    service that answers."""
    import http.server
    import socket
    import threading
    import time

    from slurm_shockwave.service.doctor_host import service_checks
    from slurm_shockwave.service.heartbeat import write_heartbeat
    from slurm_shockwave.service.lock import ServiceLock

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    proxy = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", proxy)
    want = Expected("shockwave", 120, str(tmp_path / "beat"), str(tmp_path / "endpoint"),
                    str(tmp_path / "s.db"))
    Path(want.endpoint_file).write_text(f"http://127.0.0.1:{server.server_address[1]}\n")
    write_heartbeat(want.heartbeat, time.time(), 360)
    try:
        with ServiceLock(want.store, want.heartbeat):
            api = next(c for c in service_checks(want, slurm_user="root(0)")
                       if c.name == "progress API")
    finally:
        server.shutdown()
    assert api.status == Status.OK, api


def test_the_lock_holder_is_found_by_device_and_inode(tmp_path: Path) -> None:
    """Found by a review: /proc/locks was matched by inode alone, so a flock on a file
    of another file system with the same inode number read as the running service."""
    from slurm_shockwave.service.lock import ServiceLock, holder_in, lock_holder, lock_path

    store = str(tmp_path / "s.db")
    assert lock_holder(store) is None
    with ServiceLock(store):
        assert lock_holder(store) == os.getpid()
        st = os.stat(lock_path(store))
        lines = Path("/proc/locks").read_text().splitlines()
        assert holder_in(lines, st.st_dev, st.st_ino) == os.getpid()
        elsewhere = os.makedev(os.major(st.st_dev) + 1, os.minor(st.st_dev))
        assert holder_in(lines, elsewhere, st.st_ino) is None  # same inode, another disk
        assert holder_in([f"1: FLOCK  ADVISORY  WRITE 77 {os.major(elsewhere):02x}:"
                          f"{os.minor(elsewhere):02x}:{st.st_ino} 0 EOF"],
                         elsewhere, st.st_ino) == 77
    assert lock_holder(store) is None
