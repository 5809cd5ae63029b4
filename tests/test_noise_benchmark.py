"""The prediction-noise benchmark (benchmarks/noise.py) reports every baseline, each
run once: none reads the predictions the noise is applied to."""

from collections import Counter
from typing import Any

import pytest

from benchmarks import noise
from benchmarks.noise import GAVEL_KEYS, KEYS, NOISY, measure, sweep
from benchmarks.scale import BASELINES
from slurm_shockwave.policies.shockwave import estimates
from tests.builders import a_spec, a_workload

# short and long jobs arriving together on too few GPUs: the order matters
WORKLOAD = a_workload(*(a_spec(i, epochs=2 + 5 * (i % 3), arrival_s=60.0 * i)
                        for i in range(8)))
GPUS = 2


def _outcome(policy: str) -> dict[str, Any]:
    return {k: v for k, v in measure(WORKLOAD, GPUS, policy).items() if k != "wall_s"}


def test_no_baseline_takes_the_noisy_predictions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wildly wrong predictions (a third of the truth for half the jobs, three times it
    for the others) change Shockwave's schedule and not one baseline's."""
    assert not set(BASELINES) & set(NOISY)
    before = {p: _outcome(p) for p in (*BASELINES, "shockwave")}
    monkeypatch.setattr(estimates, "noise_factor",
                        lambda seed, job_id, error: 1 / 3 if job_id % 2 else 3.0)
    assert {p: _outcome(p) for p in BASELINES} == {p: before[p] for p in BASELINES}
    assert _outcome("shockwave") != before["shockwave"]


def test_every_baseline_runs_once_beside_each_error_level(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs: Counter[str] = Counter()
    simulate = noise.simulate

    def counted(workload: Any, policy: Any, **kw: Any) -> Any:
        runs[policy.name] += 1
        return simulate(workload, policy, **kw)

    monkeypatch.setattr(noise, "simulate", counted)
    out = sweep(WORKLOAD, GPUS, "shockwave", [0.0, 0.5], seed=1)
    assert runs == Counter({"shockwave": 2, **dict.fromkeys(BASELINES, 1)})
    assert len(out["baselines"]) == 9 and set(out["baselines"]) == set(BASELINES)
    assert all(set(r) == set(KEYS) for r in out["baselines"].values())
    # the keys of before the baselines were added, unchanged
    assert [r["error"] for r in out["noise"]] == [0.0, 0.5]
    assert all(set(r) == {"error", *KEYS} for r in out["noise"])
    assert out["gavel"] == {k: out["baselines"]["gavel"][k] for k in GAVEL_KEYS}
    assert "run once" in out["baselines_runs"]
