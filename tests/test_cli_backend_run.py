"""How the CLI backend runs Slurm's commands: what they print is read whatever its bytes,
and a command that cannot run is a SlurmError (one line), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_shockwave.slurm.cli_backend import CliBackend
from slurm_shockwave.slurm.protocol import SlurmError, SlurmUnanswered


def test_output_that_is_not_utf8_is_read_and_a_command_that_cannot_run_is_a_slurm_error(
        tmp_path: Path) -> None:
    tool = tmp_path / "scontrol"
    tool.write_bytes(b"#!/bin/sh\nprintf 'NodeName=n\\377x\\n'\n")
    tool.chmod(0o755)
    cli = CliBackend(env={"PATH": str(tmp_path)}, check_conf=False)
    assert cli.scontrol("show", "config") == "NodeName=n\ufffdx\n"
    tool.chmod(0o644)
    with pytest.raises(SlurmError, match=r"^scontrol: Permission denied$"):
        cli.scontrol("show", "config")


def test_slurms_commands_print_their_defaults_whatever_the_sites_environment(
        tmp_path: Path) -> None:
    """Found by a review: a profile's SLURM_TIME_FORMAT=relative (squeue(1)) made every
    time read 0, so a job in its requeue delay looked eligible at once; SQUEUE_USERS,
    SQUEUE_STATES or SLURM_CLUSTERS would list fewer jobs, or another cluster's."""
    tool = tmp_path / "squeue"
    tool.write_text('#!/bin/sh\necho "$SLURM_TIME_FORMAT|$SQUEUE_USERS|$SQUEUE_STATES|'
                    '$SINFO_FORMAT|$SLURM_CLUSTERS"\n')
    tool.chmod(0o755)
    site = {"PATH": str(tmp_path), "SLURM_TIME_FORMAT": "relative", "SQUEUE_USERS": "alice",
            "SQUEUE_STATES": "R", "SINFO_FORMAT": "%N", "SLURM_CLUSTERS": "other"}
    cli = CliBackend(env=site, check_conf=False)
    assert cli._run(["squeue"]).strip() == "standard||||"


def test_a_running_job_slurm_prints_as_configuring_is_running_on_its_gpus(
        tmp_path: Path) -> None:
    """Slurm prints a state flag before the base state (job_state_string): a running job
    whose nodes boot or whose PrologSlurmctld runs reads CONFIGURING. Found by a review:
    it was neither running nor pending, so it left the view and its GPUs looked free."""
    hint = "shockwave:v1 model=ResNet-18 bs=32 epochs=90 mode=static submitted=1795942800"

    def row(jid: int, state: str) -> str:
        return "|".join([str(jid), state, "None", "4294901757", "alice", "1", "n1",
                         "2026-11-29T09:01:00", "gres:gpu:4", "N/A", "0",
                         f"2026-11-29T09:0{jid}:00", "2026-11-29T09:01:00", "4:00:00",
                         "N/A", "1", "1", "(null)", f"j{jid}", "(null)" if jid == 8 else ""])

    def detail(jid: int, state: str, idx: str) -> str:
        return (f"JobId={jid} JobName=j{jid} UserId=alice(1000) JobState={state} "
                f"Reason=None Requeue=1 Restarts=0 BatchFlag=1 SubmitTime=2026-11-29T09:01:00 "
                f"StartTime=2026-11-29T09:0{jid}:00 TimeLimit=04:00:00 Partition=shockwave "
                "NodeList=n1 NumNodes=1 CoreSpec=* JOB_GRES=gpu:4 Nodes=n1 CPU_IDs=0-3 "
                f"Mem=1000 GRES=gpu:4(IDX:{idx}) MinCPUsNode=1 WorkDir=/w AdminComment={hint}")

    rows = [row(7, "RUNNING"), row(8, "CONFIGURING")]
    alloc = ["|".join([*(r.split("|")[i] for i in (0, 1, 10, 11, 7)), "shockwave",
                       r.split("|")[6]]) for r in rows]
    (tmp_path / "squeue").write_text(
        "#!/bin/sh\ncase \"$*\" in\n"
        f"  *'-p shockwave'*) printf '%s\\n' '{rows[0]}' '{rows[1]}' ;;\n"
        f"  *) printf '%s\\n' '{alloc[0]}' '{alloc[1]}' ;;\nesac\n")
    (tmp_path / "scontrol").write_text(
        "#!/bin/sh\ncase \"$*\" in\n"
        f"  *' 7') echo '{detail(7, 'RUNNING', '0-3')}' ;;\n"
        f"  *' 8') echo '{detail(8, 'CONFIGURING', '4-7')}' ;;\n"
        f"  *) printf '%s\\n' '{detail(7, 'RUNNING', '0-3')}' "
        f"'{detail(8, 'CONFIGURING', '4-7')}' ;;\nesac\n")
    for tool in ("squeue", "scontrol"):
        (tmp_path / tool).chmod(0o755)
    cli = CliBackend(env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, check_conf=False)
    jobs = {j.job_id: j for j in cli.list_jobs("shockwave")}
    assert jobs[8].state == "RUNNING" and jobs[8].state_flags == ("CONFIGURING",)
    assert jobs[8].gpu_alloc == (("n1", (4, 5, 6, 7)),)
    assert cli._alloc_of_all_jobs() == {"n1": {0, 1, 2, 3, 4, 5, 6, 7}}
    # squeue prints a job without a comment "(null)": none, as JSON and pyslurm say (a
    # red-team of the backends)
    assert jobs[7].comment == jobs[8].comment == ""


def test_odd_listings_are_read_or_one_line(tmp_path: Path) -> None:
    """Found by a red-team: a "²" in squeue's job id column passed ``isdigit`` and failed
    in ``int`` (a traceback); sinfo's ``errors`` as an object, not a list, was a KeyError.
    The listing is read from JSON instead (squeue prints every job id as a number, so
    such a row is a broken line: a review), the errors are one line."""
    from slurm_shockwave.slurm.cli_backend import _FIELDS
    row = "|".join(["\u00b2", "RUNNING", *["1"] * (len(_FIELDS) - 2)])
    (tmp_path / "squeue").write_text(
        f"#!/bin/sh\ncase \"$*\" in *--json*) echo '{{\"jobs\": []}}' ;; *) echo '{row}' ;; esac\n")
    (tmp_path / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "sinfo").write_text('#!/bin/sh\necho \'{"errors": {"error": "odd"}}\'\n')
    for tool in ("squeue", "scontrol", "sinfo"):
        (tmp_path / tool).chmod(0o755)
    cli = CliBackend(env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, check_conf=False)
    assert cli.list_jobs("shockwave") == []
    with pytest.raises(SlurmError, match=r"^sinfo --json: odd$"):
        cli.list_nodes()


_STAND_IN_SQUEUE = '''#!/usr/bin/env python3
import json, os, sys
args = " ".join(sys.argv[1:])
for j in json.load(open(os.environ["FAKE_STATE"])):
    run = j["state"] == "RUNNING"
    if "-p shockwave" in args:
        print("|".join([str(j["id"]), j["state"], "None", "0", "alice", "1",
                        "n1" if run else "", j["submit"], "gres:gpu:1", "N/A", "0",
                        "2026-01-01T10:01:00" if run else "N/A", "N/A", "4:00:00",
                        "N/A", "1", "1", j.get("dependency", "(null)"), "j", ""]))
    elif run:
        print(f'{j["id"]}|RUNNING|0|2026-01-01T10:01:00|{j["submit"]}|shockwave|n1')
'''
_STAND_IN_SCONTROL = '''#!/usr/bin/env python3
import json, os, sys
with open(os.environ["FAKE_STATE"] + ".calls", "a") as calls:
    calls.write(" ".join(sys.argv[1:]) + "\\n")
for j in json.load(open(os.environ["FAKE_STATE"])):
    if sys.argv[-1].isdigit() and str(j["id"]) != sys.argv[-1]:
        continue
    run = j["state"] == "RUNNING"
    print(f'JobId={j["id"]} JobName=j UserId=alice(1000) JobState={j["state"]} Restarts=0 '
          f'SubmitTime={j["submit"]} StartTime={"2026-01-01T10:01:00" if run else "Unknown"} '
          f'TimeLimit=04:00:00 Partition=shockwave NodeList={"n1" if run else "(null)"} '
          'CoreSpec=* ' + ('Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0) ' if run else '')
          + f'MinCPUsNode=1 WorkDir=/w AdminComment={j["admin"]}')
'''


def test_a_job_id_given_out_again_is_read_as_the_new_job(tmp_path: Path) -> None:
    """Found by a red-team: each job's ``scontrol show job`` detail (its admin comment:
    hint and ``submitted=`` stamp) was cached by id and read again only at a start, and
    the entry of a job last seen running was never dropped: a new pending job under an
    ended job's id (Slurm gives ids out again) was planned with the earlier job's model,
    epochs and signal. A listing whose submit time is not the cached one is read again;
    a job listed as before is not; a job gone is forgotten."""
    state = tmp_path / "jobs.json"
    for tool, text in (("squeue", _STAND_IN_SQUEUE), ("scontrol", _STAND_IN_SCONTROL)):
        (tmp_path / tool).write_text(text)
        (tmp_path / tool).chmod(0o755)
    cli = CliBackend(env={"PATH": f"{tmp_path}:/usr/bin:/bin", "FAKE_STATE": str(state)},
                     check_conf=False)
    old = "shockwave:v1 model=LM bs=80 epochs=40 signal=USR1 grace=30 submitted=1700000000"
    new = "shockwave:v1 model=ResNet-18 bs=32 epochs=3 submitted=1800000000"

    def listed(*jobs: dict[str, str | int]) -> dict[int, str]:
        state.write_text(json.dumps(jobs))
        return {j.job_id: j.admin_comment for j in cli.list_jobs("shockwave")}

    assert listed({"id": 500, "state": "RUNNING", "submit": "2026-01-01T10:00:00",
                   "admin": old}) == {500: old}
    cli._alloc_of_all_jobs()
    calls = (tmp_path / "jobs.json.calls").read_text().count("show job")
    assert listed({"id": 500, "state": "RUNNING", "submit": "2026-01-01T10:00:00",
                   "admin": old}) == {500: old}
    assert (tmp_path / "jobs.json.calls").read_text().count("show job") == calls  # cached
    assert listed() == {}
    assert listed({"id": 500, "state": "PENDING", "submit": "2026-03-01T08:00:00",
                   "admin": new}) == {500: new}
    cli._alloc_of_all_jobs()  # nothing holds nodes now
    assert listed() == {} and cli._details == {}


def test_a_controller_that_does_not_answer_is_asked_once_per_listing(tmp_path: Path) -> None:
    """With slurmctld down each squeue waits out its MessageTimeout (9 s on 22.05): the
    partition's listing fell back to the JSON one, which waited as long again, and a CI
    run's outage was not seen within 60 s. A listing Slurm refuses still falls back."""
    calls = tmp_path / "calls"
    tool = tmp_path / "squeue"
    tool.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                    'echo "slurm_load_jobs error: Unable to contact slurm controller '
                    '(connect failure)" >&2\nexit 1\n')
    tool.chmod(0o755)
    cli = CliBackend(env={"PATH": str(tmp_path)}, check_conf=False)
    with pytest.raises(SlurmUnanswered, match="Unable to contact"):
        cli.list_jobs("shockwave")
    assert len(calls.read_text().splitlines()) == 1
    tool.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                    'case "$*" in *--json*) echo \'{"jobs": []}\';; '
                    '*) echo "squeue: error: Invalid field" >&2; exit 1;; esac\n')
    calls.unlink()
    assert cli.list_jobs("shockwave") == []
    assert [ln.split()[0] for ln in calls.read_text().splitlines()] == ["-h", "--json"]


def test_a_controller_gone_after_the_listing_is_asked_one_detail(tmp_path: Path) -> None:
    """Each new job's detail is a call of its own (up to 20): one unanswered is the
    listing's failure, not a job "ended since" and 19 more waits of 9 s or more."""
    from slurm_shockwave.slurm.cli_backend import _FIELDS
    rows = "\\n".join("|".join([str(j), "PENDING", *["1"] * (len(_FIELDS) - 2)])
                      for j in (11, 12, 13))
    calls = tmp_path / "calls"
    (tmp_path / "squeue").write_text(f"#!/bin/sh\nprintf '{rows}\\n'\n")
    (tmp_path / "scontrol").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2\nexit 1\n')
    for tool in ("squeue", "scontrol"):
        (tmp_path / tool).chmod(0o755)
    cli = CliBackend(env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, check_conf=False)
    with pytest.raises(SlurmUnanswered):
        cli.list_jobs("shockwave")
    assert len(calls.read_text().splitlines()) == 1
