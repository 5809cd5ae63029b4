"""Each baseline's own rule, on small hand-checkable views."""

import pytest

from slurm_shockwave.model.errors import InputError
from slurm_shockwave.policies.registry import POLICIES, make_policy
from slurm_shockwave.policies.stretch_edf import Active, least_stretch, reachable
from tests.builders import a_job, a_view


def order(name: str, *jobs, gpus: int = 4, now_s: float = 0.0, memory=None, **config):
    view = a_view(*jobs, gpus=gpus, now_s=now_s)
    return make_policy(name, config or None).plan(view, memory or {}).plan.order


def test_registry_names() -> None:
    assert list(POLICIES) == ["fifo", "srtf", "las", "gavel", "themis", "allox", "ossp", "mst",
                              "gandiva_fair", "shockwave", "elastic_greedy", "stretch_edf"]
    with pytest.raises(InputError, match="unknown policy 'nope'"):
        make_policy("nope")


def test_bad_policy_config_names_the_field() -> None:
    with pytest.raises(InputError) as err:
        make_policy("allox", {"alpha": 2.0})
    assert err.value.field == "allox.alpha"
    with pytest.raises(InputError) as err:
        make_policy("las", {"thresholds": [1]})
    assert err.value.field == "las.thresholds"


def test_fifo_never_preempts() -> None:
    late_runner = a_job(2, arrival_s=50, running=True)
    assert order("fifo", a_job(1, arrival_s=0), late_runner) == (2, 1)


def test_srtf_prefers_least_remaining_work() -> None:
    long = a_job(1, epochs=10, epoch_s=100, running=True)
    short = a_job(2, epochs=10, epochs_done=9, epoch_s=100, arrival_s=5)
    assert order("srtf", long, short) == (2, 1)


def test_las_queues_by_attained_service_then_arrival() -> None:
    veteran = a_job(1, arrival_s=0, run_s=4000)          # 4000 GPU-s: second queue
    newcomer = a_job(2, arrival_s=100)
    older_new = a_job(3, arrival_s=50, run_s=100)
    assert order("las", veteran, newcomer, older_new) == (3, 2, 1)
    assert order("las", veteran, newcomer, queue_thresholds_gpu_s=[5000.0]) == (1, 2)


def test_gavel_shares_equally_and_rotates_by_deficit() -> None:
    jobs = [a_job(i, gpus=1) for i in range(8)]
    view = a_view(*jobs, gpus=4)
    planned = make_policy("gavel").plan(view, {})
    assert planned.memory["credit_s"] == {str(i): pytest.approx(60.0) for i in range(8)}
    # after jobs 0-3 ran a round, they are behind the others
    ran = [a_job(i, gpus=1, run_s=120.0 if i < 4 else 0.0) for i in range(8)]
    again = make_policy("gavel").plan(a_view(*ran, gpus=4), planned.memory).plan.order
    assert set(again[:4]) == {4, 5, 6, 7}


def test_a_job_out_of_one_rounds_view_keeps_its_credit() -> None:
    """Three one-GPU jobs on one GPU, each allotted a third; job 1 is out of round 10's
    view (a requeue delay longer than a round). Found by a review: its credit was rebuilt
    from the view alone, so it came back owing its whole past run and waited six rounds;
    it now runs its third of the rounds."""
    policy = make_policy("gandiva_fair")
    run = {0: 0.0, 1: 0.0, 2: 0.0}
    memory: dict[str, object] = {}
    ran = []
    for r in range(30):
        jobs = [a_job(j, run_s=run[j], epochs=10_000) for j in (0, 1, 2)
                if not (r == 10 and j == 1)]
        planned = policy.plan(a_view(*jobs, gpus=1, now_s=r * 120.0), memory)
        memory = dict(planned.memory)
        run[planned.plan.order[0]] += 120.0
        ran.append(planned.plan.order[0])
    assert [ran.count(j) for j in (0, 1, 2)] == [10, 10, 10]
    assert max(len(run) for run in "".join(map(str, ran)).split("1")) <= 3  # no long wait


def test_a_memory_from_before_the_credit_was_kept_keeps_its_credits() -> None:
    """A service upgraded mid-run reads a memory without "seen": its credits stand."""
    planned = make_policy("gandiva_fair").plan(a_view(a_job(1), gpus=1),
                                               {"credit_s": {"1": 500.0, "7": 90.0}})
    assert planned.memory["credit_s"] == {"1": 620.0, "7": 90.0}


def test_gandiva_fair_ignores_gpu_count() -> None:
    jobs = [a_job(0, gpus=4), a_job(1, gpus=1)]
    planned = make_policy("gandiva_fair").plan(a_view(*jobs, gpus=4), {})
    assert planned.memory["credit_s"] == {"0": pytest.approx(120.0), "1": pytest.approx(120.0)}


def test_ossp_favours_the_longest_job() -> None:
    jobs = [a_job(0, epochs=100), a_job(1, epochs=1), a_job(2, epochs=1)]
    assert order("ossp", *jobs, gpus=1)[0] == 0


def test_mst_prefers_more_steps_per_gpu() -> None:
    slow = a_job(0, epoch_s=1000.0)
    fast = a_job(1, epoch_s=10.0)
    assert order("mst", slow, fast, gpus=1)[0] == 1


def test_themis_helps_the_job_furthest_behind() -> None:
    waited = a_job(0, arrival_s=0.0, epochs=10, epoch_s=100)
    fresh = a_job(1, arrival_s=900.0, epochs=10, epoch_s=100)
    assert order("themis", waited, fresh, gpus=1, now_s=1000.0)[0] == 0


def test_themis_owes_a_job_preempted_often_no_less() -> None:
    """Two jobs alike in arrival, work done and work left; one was restarted thirty times,
    so it has run longer (its restores). Found by a review: t_iso was taken from the time
    run, so that job's denominator grew and it got the smaller share."""
    once = a_job(0, epochs=20, epochs_done=10, epoch_s=100, run_s=1_020)
    often = a_job(1, epochs=20, epochs_done=10, epoch_s=100, run_s=1_600)
    planned = make_policy("themis").plan(a_view(once, often, gpus=1, now_s=5_000.0), {})
    shares = {jid: float(r.detail.split("=")[1]) for jid, r in planned.plan.reasons.items()}
    assert shares[0] == pytest.approx(shares[1])


def test_allox_is_non_preemptive_and_bounded_to_the_oldest() -> None:
    runner = a_job(0, gpus=2, running=True, epochs=1000)
    waiting = [a_job(i, arrival_s=i, epochs=100 - i) for i in range(1, 11)]
    plan_order = order("allox", runner, *waiting, gpus=4)
    assert plan_order[0] == 0
    # 2 free GPUs and 10 waiting: candidates are the oldest max(0.2*10, 2) = 2
    assert set(plan_order[1:]) == {1, 2}
    assert plan_order[1:] == (2, 1)  # shortest processing time first


def test_stretch_edf_runs_the_earliest_deadline_arrival_plus_stretch_times_size() -> None:
    # sizes 1,000 s and 200 s (10 and 2 epochs of 100 s): with stretch 2 the deadlines are
    # 0 + 2,000 and 900 + 400, so the short late job goes first; with stretch 0.5 they
    # are 500 and 1,000, so the early long one does
    long, short = a_job(1, epochs=10), a_job(2, epochs=2, arrival_s=900)
    assert order("stretch_edf", long, short, gpus=1, now_s=900, critical_frac=0,
                 stretch=2.0) == (2, 1)
    assert order("stretch_edf", long, short, gpus=1, now_s=900, critical_frac=0,
                 stretch=0.5) == (1, 2)
    # auto: the least stretch that keeps both deadlines in reach is 2.1 (below)
    assert order("stretch_edf", long, short, gpus=1, now_s=900, critical_frac=0) == (2, 1)


def test_the_least_stretch_keeps_every_deadline_in_reach_and_no_less_would() -> None:
    # one GPU at t=900: a 1,000 s job that came at 0 and a 200 s one that came at 900.
    # Short first: the long one ends at 2,100 = 0 + S x 1,000, so S = 2.1; any less and
    # the GPU-work due by the long job's deadline does not fit before it.
    jobs = [Active(0.0, 1000.0, 1000.0, 1), Active(900.0, 200.0, 200.0, 1)]
    s = least_stretch(jobs, 900.0, 1)
    assert 2.1 <= s <= 2.1 * 1.001
    assert reachable(jobs, 900.0, 1, 2.1) and not reachable(jobs, 900.0, 1, 2.09)
    # GPUs for all: each job's own time sets it (the long one waited 900 s: 1.9)
    assert 1.9 <= least_stretch(jobs, 900.0, 8) <= 1.9 * 1.001
    # a 4-GPU job counts four times its time against the GPU-seconds
    wide = [Active(0.0, 100.0, 100.0, 4), Active(0.0, 100.0, 100.0, 4)]
    assert 2.0 <= least_stretch(wide, 0.0, 4) <= 2.002
    assert least_stretch([], 0.0, 4) == 0.0
    # a job with nothing left, or no size, cannot be late: it does not set S for the rest
    done, empty = Active(0.0, 100.0, 0.0, 1), Active(0.0, 0.0, 0.0, 1)
    assert least_stretch([*jobs, done, empty], 900.0, 1) == least_stretch(jobs, 900.0, 1)


def test_stretch_edf_runs_the_critical_path_first() -> None:
    # one GPU: 10,000 s of work left in job 1 is the makespan's bound, whatever its deadline
    long, short = a_job(1, epochs=100, arrival_s=500), a_job(2, epochs=2)
    assert order("stretch_edf", long, short, gpus=2, now_s=500, critical_frac=0) == (2, 1)
    assert order("stretch_edf", long, short, gpus=2, now_s=500) == (1, 2)


def test_stretch_edf_refuses_a_bad_stretch() -> None:
    for bad in (0, "fast", -1.0):
        with pytest.raises(InputError) as err:
            make_policy("stretch_edf", {"stretch": bad})
        assert err.value.field == "stretch_edf.stretch"
    assert make_policy("stretch_edf", {"stretch": "auto"}).config.stretch == "auto"
    assert make_policy("stretch_edf", {"stretch": "3"}).config.stretch == 3.0


def test_allox_starts_what_alloxs_min_cost_matching_starts() -> None:
    """allox.py sorts where AlloX solves a min-cost matching of jobs to (GPU, position)
    slots, cost k x processing time + waiting time for the k-th position from the end
    (EuroSys 2020). On identical GPUs the jobs the sort starts must be the first positions
    of an optimal matching: the matching that deals the sorted jobs round-robin costs the
    optimum (found by a review: the docstring named an equivalence test that did not
    exist). The optimum may put other jobs first at equal cost (two GPUs' first positions
    can trade with a deeper slot of the same multiplier), so the cost is what is checked."""
    import random

    import numpy as np
    from scipy.optimize import linear_sum_assignment

    rng = random.Random(5)
    now = 60.0
    for _ in range(60):
        n, gpus = rng.randint(2, 9), rng.randint(1, 4)
        epochs = rng.sample(range(1, 200), n)
        jobs = [a_job(i, epochs=e, arrival_s=rng.uniform(0, 50)) for i, e in enumerate(epochs)]

        def cost_of(job, k: int) -> float:
            return k * job.remaining_s_now + (now - job.spec.arrival_s)

        cost = np.array([[cost_of(j, k) for _ in range(gpus) for k in range(1, n + 1)]
                         for j in jobs])
        rows, cols = linear_sum_assignment(cost)
        optimum = float(cost[rows, cols].sum())
        started = order("allox", *jobs, gpus=gpus, now_s=now, alpha=1.0)[:gpus]
        shortest = sorted(jobs, key=lambda j: j.remaining_s_now)
        assert started == tuple(j.job_id for j in shortest[:gpus]), (epochs, gpus)
        dealt = [shortest[g::gpus] for g in range(gpus)]  # GPU g runs these, in order
        sorted_cost = sum(cost_of(j, len(queue) - i) for queue in dealt
                          for i, j in enumerate(queue))
        assert sorted_cost == pytest.approx(optimum, rel=1e-12), (epochs, gpus)
