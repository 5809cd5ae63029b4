"""The simulation's hot paths, sped up for the 900-job trace, decide exactly as the plain
versions they replaced: same packing, same placement, same simulated outcomes."""

import random

import pytest

from slurm_shockwave.engine import placement
from slurm_shockwave.policies.registry import make_policy
from slurm_shockwave.policies.shockwave import schedule
from slurm_shockwave.sim.generate import TraceShape, generate
from slurm_shockwave.sim.inputs import build_workload
from slurm_shockwave.sim.run import simulate
from slurm_shockwave.workloads.bundled import bundled_table


def plain_first_run(free: list[int], width: int, need: int) -> int | None:
    return next((s for s in range(len(free) - need + 1)
                 if all(free[t] >= width for t in range(s, s + need))), None)


def plain_take_exact(self: placement._FreeSlots, slots: tuple[str, ...],
                     whole: bool = True) -> bool:
    by_node: dict[str, list[str]] = {}
    for s in slots:
        by_node.setdefault(s.rsplit(":", 1)[0], []).append(s)
    for node, wanted in by_node.items():
        have = self.free.get(node)
        if have is None or any(s not in have for s in wanted):
            return False
    for node, wanted in by_node.items():
        self.free[node] = [s for s in self.free[node] if s not in wanted]
    self.total -= len(slots)
    return True


def test_first_run_matches_the_plain_scan() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        free = [rng.randint(0, 8) for _ in range(rng.randint(1, 20))]
        width, need = rng.randint(1, 8), rng.randint(1, len(free))
        assert schedule._first_run(free, width, need) == plain_first_run(free, width, need)


def _outcomes(policy: str, gpus_per_node: int | None) -> list[tuple[int, float, int]]:
    table = bundled_table("wisr")
    jobs = generate(TraceShape(num_jobs=30, mean_gap_s=60, max_h=1.5), table, seed=5)
    result = simulate(build_workload(jobs, table, source="t"), make_policy(policy), gpus=16,
                      gpus_per_node=gpus_per_node)
    return [(o.job_id, o.finish_s, o.rounds_run) for o in result.outcomes]


@pytest.mark.parametrize(("policy", "per_node"), [("shockwave", None), ("shockwave", 4),
                                                  ("gavel", 4)])
def test_simulation_identical_to_the_plain_paths(monkeypatch: pytest.MonkeyPatch,
                                                 policy: str, per_node: int | None) -> None:
    fast = _outcomes(policy, per_node)
    monkeypatch.setattr(schedule, "_first_run", plain_first_run)
    monkeypatch.setattr(placement._FreeSlots, "take_exact", plain_take_exact)
    assert _outcomes(policy, per_node) == fast
