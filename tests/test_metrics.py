import pytest

from slurm_shockwave.metrics.summary import Finished, contention, rho, summarize


def test_rho_hand_worked() -> None:
    # 8 jobs on 2 GPUs: each is entitled to 1/4 of the cluster, so contention is 4.
    job = Finished(0, arrival_s=100.0, finish_s=1300.0, exclusive_s=200.0)
    assert job.jct_s == 1200.0
    assert contention(8, 2) == 4.0
    assert rho(job, 8, 2) == pytest.approx(1200.0 / 800.0)


def test_contention_never_below_one() -> None:
    assert contention(3, 16) == 1.0


def test_summary_hand_worked() -> None:
    done = [
        Finished(0, 0.0, 100.0, 100.0),   # rho 1.0
        Finished(1, 0.0, 210.0, 200.0),   # rho 1.05: not unfair (strict >)
        Finished(2, 50.0, 350.0, 200.0),  # rho 1.5
        Finished(3, 50.0, 160.0, 100.0),  # rho 1.1: unfair at 1.05, not at 1.1
    ]
    s = summarize(done, num_gpus=4, busy_gpu_s=700.0, restore_gpu_s=140.0)
    assert s.makespan_s == 350.0
    assert s.avg_jct_s == pytest.approx((100 + 210 + 300 + 110) / 4)
    assert s.worst_rho == pytest.approx(1.5)
    assert s.median_rho == pytest.approx((1.05 + 1.1) / 2)
    assert s.unfair_fraction == pytest.approx(2 / 4)
    assert s.unfair_fraction_110 == pytest.approx(1 / 4)
    assert s.utilization == pytest.approx(700.0 / (4 * 350.0))
    assert s.useful_utilization == pytest.approx(560.0 / (4 * 350.0))


def test_trace_size_sets_contention() -> None:
    done = [Finished(0, 0.0, 400.0, 100.0)]
    assert summarize(done, num_gpus=1, busy_gpu_s=0, num_jobs=4).worst_rho == pytest.approx(1.0)
    assert summarize(done, num_gpus=1, busy_gpu_s=0).worst_rho == pytest.approx(4.0)


def test_empty_summary() -> None:
    assert summarize([], num_gpus=4, busy_gpu_s=0).jobs == 0
