"""Leases, finishing jobs and the critical path (policies/shockwave/commitments.py)."""

from dataclasses import replace

from slurm_shockwave.model.job import AdaptationMode, Job, JobProgress, JobSpec
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import ReasonCode
from slurm_shockwave.policies.shockwave.commitments import (
    critical_path,
    finishing,
    lease_rounds,
    leased,
    run_places,
    run_starts,
)
from slurm_shockwave.policies.shockwave.estimates import estimate
from slurm_shockwave.policies.shockwave.policy import Shockwave
from tests.builders import a_job, a_view


def test_lease_holds_the_restart_cost_within_its_share_of_the_run() -> None:
    assert lease_rounds(20.0, 0.1, 120.0) == 2    # 20 s of 240 s is 8.3%
    assert lease_rounds(50.0, 0.1, 120.0) == 5    # the live cost at time scale 30
    assert lease_rounds(24.0, 0.1, 120.0) == 2    # exactly 10%: no extra round
    assert lease_rounds(50.0, 0.0, 120.0) == 1 and lease_rounds(0.0, 0.1, 120.0) == 1


def test_a_run_starts_one_round_before_it_is_first_seen_and_keeps_its_start() -> None:
    jobs = [a_job(1, running=True), a_job(2)]
    starts = run_starts(jobs, {}, round_index=7)
    assert starts == {"1": 6}
    assert run_starts(jobs, starts, round_index=9) == {"1": 6}
    assert leased(jobs, starts, 7, lease=2) == [1] and leased(jobs, starts, 8, lease=2) == []


def test_a_job_moved_or_resized_since_the_last_round_began_a_new_run() -> None:
    """A running job on other GPUs than the last round recorded (``run_places``) was
    moved or resized, a checkpoint and a restart: its run began one round ago, so its
    lease holds again. Found in the simulator on s0_40x16 with the live costs: a job
    moved for an 8-GPU one kept its old start, had no lease, and was stopped for another
    two rounds later (live too, when the move ends before the next round looks).
    A job whose GPUs are not known (a fill step's start) keeps its start."""
    here = a_job(1, gpus=2, running=True, slots=("n0:0", "n0:1"))
    starts = run_starts([here], {"1": 2}, round_index=9)
    places = run_places([here], starts)
    assert starts == {"1": 2} and places == {"1": ["n0:0", "n0:1"]}
    assert run_starts([here], starts, 10, places=places) == {"1": 2}  # still there
    assert run_starts([replace(here, gpu_slots=("n0:1", "n0:0"))], starts, 10,
                      places=places) == {"1": 2}  # the same GPUs, in another order
    moved = replace(here, gpu_slots=("n1:0", "n1:1"))
    assert run_starts([moved], starts, 10, places=places) == {"1": 9}
    assert leased([moved], {"1": 9}, 10, lease=3) == [1]
    assert run_places([replace(here, gpu_slots=())], starts) == {}


def test_shockwave_keeps_a_moved_job_for_its_lease() -> None:
    """The policy's memory carries where each started job ran (``run_places``), and a
    job seen elsewhere in the next round is leased again."""
    old = a_job(1, gpus=2, epochs=50, epochs_done=1, running=True, slots=("n0:0", "n0:1"))
    view = a_view(old, a_job(2, gpus=2, epochs=50), gpus=2, gpus_per_node=2, now_s=240.0)
    policy = Shockwave.from_mapping({"critical_frac": 0})
    first = policy.plan(view, {"run_start": {"1": -50}})
    assert first.memory["run_places"] == {"1": ["n0:0", "n0:1"]}
    assert first.memory["run_start"] == {"1": -50}
    moved = a_view(replace(old, gpu_slots=("n0:1", "n0:0")), a_job(2, gpus=2, epochs=50),
                   gpus=2, gpus_per_node=2, now_s=240.0)
    assert policy.plan(moved, first.memory).memory["run_start"] == {"1": -50}
    elsewhere = replace(moved, nodes=(*moved.nodes, replace(moved.nodes[0], name="n9")),
                        jobs=(replace(old, gpu_slots=("n9:0", "n9:1")), moved.jobs[1]))
    again = policy.plan(elsewhere, first.memory)
    assert again.memory["run_start"] == {"1": elsewhere.round_index - 1}
    assert again.plan.order[0] == 1


def test_the_critical_path_is_the_job_whose_remaining_time_is_the_bound() -> None:
    rem, gpus = {1: 5000.0, 2: 1000.0, 3: 900.0}, {1: 1, 2: 4, 3: 4}
    assert critical_path(rem, gpus, capacity=8, frac=0.95) == [1]
    # when the work bound dominates, nobody alone is critical
    assert critical_path({1: 1000.0, 2: 1000.0}, {1: 8, 2: 8}, capacity=8, frac=0.95) == []
    assert critical_path(rem, gpus, capacity=8, frac=0.0) == []


def test_a_leased_job_keeps_running_over_the_plan_and_says_why() -> None:
    """A job started last round keeps its GPUs although a newcomer could take them."""
    old = a_job(1, gpus=4, epochs=50, epochs_done=1, running=True)
    new = a_job(2, gpus=4, epochs=50)
    view = a_view(old, new, gpus=4, now_s=240.0)
    policy = Shockwave.from_mapping({"critical_frac": 0})
    planned = policy.plan(view, {"run_start": {"1": -1}})
    assert planned.plan.order[0] == 1
    assert planned.plan.reasons[1].code in (ReasonCode.KEPT_RUNNING, ReasonCode.SCHEDULED)
    later = policy.plan(view, {**planned.memory, "run_start": {"1": -50}})
    assert later.memory["run_start"] == {"1": -50}


def test_the_critical_path_may_move_running_jobs_to_find_room() -> None:
    """The critical path's jobs, and only they, are the plan's ``moves_for``: a wide
    critical job that fragmentation leaves out gets a node cleared of jobs ranked above
    it (the makespan waits on it: simulated with the live costs, s0_32x32's 8-GPU job
    waited 8 rounds for one)."""
    long = a_job(1, gpus=4, epochs=500)
    small = [a_job(i, gpus=1, epochs=5, epochs_done=1, running=True, slots=(f"n{i - 2}:0",))
             for i in (2, 3)]
    view = a_view(long, *small, gpus=8, gpus_per_node=4)
    plan = Shockwave().plan(view, {}).plan
    assert plan.moves_for == frozenset({1})
    assert plan.avoid_idle  # and any job may have idle GPUs filled (engine/placement.py)


def test_the_critical_path_reads_the_most_a_job_may_still_take() -> None:
    """A GNS job at its first batch size is predicted to speed up (its posterior spreads
    its epochs over every doubling), but may never do so: at 100 s an epoch it may take
    10,000 s, twice the static job's 5,000. The critical path is that job, not the one
    the predictions make longest (docs/planner.md, step 8)."""
    table = ((16, 100.0), (32, 50.0), (64, 25.0), (128, 12.5), (256, 6.25))
    gns = Job(JobSpec(1, "ResNet-18", 16, 1, AdaptationMode.GNS, 0.0, 100),
              JobProgress(epochs_done=0, bs=16, epoch_s=100.0, epoch_s_by_bs=table),
              Phase.PENDING)
    static = a_job(2, epochs=50, epoch_s=100.0)
    predicted = {1: estimate(gns).remaining_s, 2: estimate(static).remaining_s}
    assert critical_path(predicted, {1: 1, 2: 1}, capacity=8, frac=0.95) == [2]
    planned = Shockwave().plan(a_view(gns, static, gpus=8), {}).plan
    assert planned.moves_for == frozenset({1})


def test_a_leased_job_the_round_also_plans_still_goes_ahead_of_it() -> None:
    """The window's round ranks a job it finishes first (shortest first), ahead of a
    leased job it also plans; the lease must still hold. Left at its place in the round,
    the leased job lost its GPUs to any job ranked above it that needed them (a gang on
    a fragmented node): 52 restarts of 40 jobs on s0_40x16 simulated with the live costs,
    45 with the lease held (docs/planner.md, step 8)."""
    leased_job = a_job(1, gpus=1, epochs=500, epochs_done=1, running=True)
    short = a_job(2, gpus=1, epochs=2)
    view = a_view(leased_job, short, gpus=8)
    policy = Shockwave.from_mapping({"critical_frac": 0})
    planned = policy.plan(view, {"run_start": {"1": 0}})
    window = planned.memory["plan"]["rounds"][0]
    assert set(window) >= {1, 2} and window.index(2) < window.index(1)
    assert planned.plan.order[:2] == (1, 2)
    assert planned.plan.reasons[1].detail.startswith("lease of")


def test_a_job_with_less_than_a_lease_left_is_finishing() -> None:
    """Without fill steps a job ending mid-round would idle its GPUs to the round's end,
    so only jobs with more than a round left count; with no lease, none."""
    jobs = [a_job(1, running=True), a_job(2, running=True), a_job(3, running=True), a_job(4)]
    most = {1: 100.0, 2: 500.0, 3: 900.0, 4: 50.0}
    assert finishing(jobs, most, lease=5, round_s=120.0, fills=True) == [1, 2]
    assert finishing(jobs, most, lease=5, round_s=120.0, fills=False) == [2]
    assert finishing(jobs, most, lease=1, round_s=120.0, fills=True) == []
    assert finishing(jobs, {**most, 1: 0.0}, lease=5, round_s=120.0, fills=True) == [1, 2]


def test_the_critical_path_waits_for_a_job_about_to_finish() -> None:
    """Seen on s0_40x16 simulated with the live costs: an 8-GPU job with 155 s left was
    stopped for a 4-GPU critical-path job, waited 1,900 s for a free node and finished
    last. Within its lease it now keeps its GPUs; with half a round left and no fill
    steps it does not (its GPUs would idle until the round's end)."""
    ending = a_job(1, gpus=8, epochs=100, epochs_done=98.45, running=True)  # 155 s left
    long = a_job(2, gpus=4, epochs=300)
    view = replace(a_view(ending, long, gpus=8), restart_cost_s=50.0, fills=True)
    policy = Shockwave.from_mapping({})
    plan = policy.plan(view, {"run_start": {"1": -20}}).plan
    assert plan.order[0] == 1 and plan.order.index(2) > 0
    assert plan.reasons[1].detail.startswith("finishes within its lease")
    assert policy.plan(replace(view, fills=False), {"run_start": {"1": -20}}).plan.order[0] == 1
    nearly = a_job(1, gpus=8, epochs=100, epochs_done=99.5, running=True)  # 50 s left
    view = replace(view, jobs=(nearly, long), fills=False)
    assert policy.plan(view, {"run_start": {"1": -20}}).plan.order[0] == 2


def test_a_job_in_its_requeue_delay_counts_for_the_critical_path_but_is_not_planned() -> None:
    """Seen live on s0_40x16: two 4-GPU jobs in their requeue delay were out of the view
    when a round put the 8-GPU job on the critical path and started it; back five seconds
    later, they were the path, and the round their return called stopped it again. A job
    in its requeue delay (``ClusterView.returning``) now counts for the path: a shorter
    job is not put on it, and the returning job itself is not in the plan."""
    wide = a_job(1, gpus=8, epochs=100)
    back = a_job(2, gpus=4, epochs=130)
    view = a_view(wide, a_job(3, gpus=4, epochs=5), gpus=16)
    policy = Shockwave.from_mapping({})
    alone = policy.plan(view, {}).plan
    assert alone.moves_for == frozenset({1}) and alone.reasons[1].detail == "critical path"
    plan = policy.plan(replace(view, returning=(back,)), {}).plan
    assert plan.moves_for == frozenset() and 2 not in plan.order
    assert plan.reasons[1].detail != "critical path"
