"""docs/admin.md, run as written: its install steps in a fresh Debian 12 container (the
bare base image, not the project's) that runs a two-node Slurm of its own with nothing of
slurm-shockwave in it; then `shockwave doctor` must pass and the service must plan a
round that starts a held job.

The steps are the guide's own code blocks, taken from docs/admin.md at test time, with
only what a container without systemd needs changed: the checkout's path (SRC), systemd's
restart of slurmctld and its start of the service (the unit's own ExecStart, run in the
background), and the round length set short in the settings the guide says to edit.
Marker ``container`` (tests/containers.py says when it runs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.containers import BASE, CA, REPO, need_podman, podman
from tests.live_cluster import WARNED_ON_TEST_CLUSTERS

pytestmark = pytest.mark.container

# A site's Slurm before slurm-shockwave: two nodes of 4 fake GPUs on one host (one slurmd
# per node, as docker-slurm/start.sh does), its own partition, jobs run.
SITE = r"""
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq slurmctld slurmd slurm-client munge lua5.1 >/dev/null
mkdir -p /run/munge /var/spool/slurm/ctld /var/spool/slurm/n1 /var/spool/slurm/n2 /dev/fakegpu
chown munge:munge /run/munge
su -s /bin/sh munge -c "munged --pid-file=/run/munge/munged.pid"
for g in 0 1 2 3; do mknod /dev/fakegpu/nvidia$g c 1 3; done
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=site
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurm/ctld
SlurmdSpoolDir=/var/spool/slurm/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurmctld.log
SlurmdLogFile=/var/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
TreeWidth=65533
NodeName=n1 NodeHostname=n1 NodeAddr=127.0.0.1 Port=6901 CPUs=4 Gres=gpu:4 State=UNKNOWN
NodeName=n2 NodeHostname=n2 NodeAddr=127.0.0.1 Port=6902 CPUs=4 Gres=gpu:4 State=UNKNOWN
PartitionName=batch Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
CONF
echo "NodeName=n[1-2] Name=gpu File=/dev/fakegpu/nvidia[0-3]" > /etc/slurm/gres.conf
slurmctld
slurmd -N n1
slurmd -N n2
idle() {
  for _ in $(seq 60); do
    [ "$(sinfo -h -N -o %t | sort -u | tr '\n' ' ')" = "idle " ] && return 0; sleep 1
  done
  sinfo -N; tail -5 /var/log/slurmctld.log; return 1
}
idle
echo "== the site runs jobs: $(srun -p batch -N 2 hostname | sort | tr '\n' ' ')"
cp -a /repo /srv/slurm-shockwave
"""
RESTART_SLURMCTLD = ("kill $(cat /run/slurmctld.pid); "
                     "while [ -e /run/slurmctld.pid ]; do sleep 0.2; done; slurmctld; idle")
AFTER = r"""
for _ in $(seq 60); do [ -s /var/lib/slurm-shockwave/heartbeat ] && break; sleep 1; done
echo "== doctor"
shockwave doctor --config /etc/slurm-shockwave/shockwave.yaml
echo "== a held job, started by the service's round"
jid=$(sbatch --parsable -p shockwave --gres=gpu:2 -o /dev/null \
      --comment "model=lm bs=10 epochs=3" --wrap "sleep 300")
for _ in $(seq 120); do
  state=$(squeue -h -j "$jid" -o %T)
  [ "$state" = RUNNING ] && break; sleep 1
done
squeue -j "$jid" -o "%i %P %T %r %b %N"
tail -5 /var/log/shockwave.log
[ "$state" = RUNNING ]
echo "== ROUND PLANNED: job $jid running"
"""


def _sections(text: str) -> dict[str, list[str]]:
    """The fenced blocks of each numbered section ("## 4. ..." -> key "4")."""
    out: dict[str, list[str]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        number = part.split(".", 1)[0].strip()
        out[number] = re.findall(r"^```[a-z]*\n(.*?)^```", part, flags=re.M | re.S)
    return out


def merge_conf(lines: str, conf: str = "/etc/slurm/slurm.conf") -> str:
    """Shell that merges slurm.conf lines as the guide asks: a key the file already sets
    is replaced, the rest appended (NodeName and PartitionName lines are added)."""
    keys = sorted({line.split("=", 1)[0] for line in lines.splitlines()
                   if "=" in line and not line.startswith(("#", "NodeName", "PartitionName"))})
    drops = "".join(f" -e '/^{k}=/d'" for k in keys)
    return f"sed -i{drops} {conf}\ncat >> {conf} <<'CONF'\n{lines}CONF"


def guide_script(guide: str, unit: str) -> str:
    """The guide's steps for the slurmctld host, as one shell script for the container."""
    s = _sections(guide)
    package, settings, conf, scripts, start = s["1"][0], s["2"][0], s["3"][0], s["4"], s["5"][0]
    assert "SRC=/path/to/slurm-shockwave" in package, "admin.md step 1 no longer sets SRC"
    package = package.replace("SRC=/path/to/slurm-shockwave", "SRC=/srv/slurm-shockwave")
    assert "<your GPU nodes>" in conf, "admin.md step 3 no longer names the nodes so"
    conf = conf.replace("<your GPU nodes>", "n[1-2]")
    restart = next(b for b in scripts if "systemctl restart slurmctld" in b)
    restart = restart.replace("systemctl restart slurmctld", RESTART_SLURMCTLD)
    exec_start = re.search(r"^ExecStart=(.*)$", unit, flags=re.M)
    assert exec_start and "systemctl enable --now slurm-shockwave" in start
    serve = f"nohup {exec_start.group(1)} > /var/log/shockwave.log 2>&1 &"
    return "\n".join([
        SITE,
        "echo '== admin.md 1: the package'", package,
        "echo '== admin.md 2: the settings'", settings,
        # the guide says to edit them; a round short enough for the test, and longer than
        # cred_expire + 1 s (doctor warns otherwise)
        "sed -i '/^slurm:/,/^service:/ s/^  round_s: .*/  round_s: 15/' "
        "/etc/slurm-shockwave/shockwave.yaml",
        "echo '== admin.md 3: slurm.conf'", merge_conf(conf),
        "echo '== admin.md 4: the plugin scripts'", scripts[0], restart,
        "echo '== admin.md 5: the service (the unit file ExecStart)'", serve,
        AFTER])


def test_guide_script_is_taken_from_the_guide() -> None:
    """Without containers: the guide still has the blocks the container test runs."""
    guide = REPO / "docs" / "admin.md"
    if not guide.exists():
        pytest.skip("docs/admin.md not in this checkout")
    script = guide_script(guide.read_text(), (REPO / "etc/slurm-shockwave.service").read_text())
    assert "pip install" in script and "install-scripts" in script and "nohup" in script


def test_the_admin_guide_installs_on_a_fresh_debian(tmp_path: Path) -> None:
    need_podman()
    guide = REPO / "docs" / "admin.md"
    if not guide.exists():
        pytest.skip("docs/admin.md not in this checkout")
    script = tmp_path / "guide.sh"
    script.write_text(guide_script(guide.read_text(),
                                   (REPO / "etc/slurm-shockwave.service").read_text()))
    ca = ["-v", f"{CA}:/etc/ssl/certs/host-ca.crt:ro", "-e",
          "PIP_CERT=/etc/ssl/certs/host-ca.crt"] if Path(CA).is_file() else []
    run = podman("run", "--rm", "--cap-add=MKNOD", "-v", f"{REPO}:/repo:ro",
                 "-v", f"{script}:/guide.sh:ro", *ca, BASE, "bash", "/guide.sh",
                 timeout_s=1500)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    verdict = re.search(r"^(\d+) checks: (\d+) ok, (\d+) warn, (\d+) failed$", run.stdout, re.M)
    # doctor: all ok but the site's proctrack/linuxproc above (no cgroups in the container)
    assert verdict and (int(verdict.group(1)) - int(verdict.group(2)), verdict.group(3)) \
        == (len(WARNED_ON_TEST_CLUSTERS), str(len(WARNED_ON_TEST_CLUSTERS))), out[-3000:]
    for name, what in WARNED_ON_TEST_CLUSTERS.items():
        assert f"[warn] {name}: is {what}" in run.stdout, out[-3000:]
    assert "== ROUND PLANNED" in run.stdout, out[-3000:]
