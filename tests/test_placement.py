from dataclasses import replace

from slurm_shockwave.engine.diff import diff
from slurm_shockwave.engine.placement import place
from slurm_shockwave.model.job import Job
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import ActionKind, Plan
from tests.builders import a_job, a_view


def test_running_jobs_keep_their_gpus() -> None:
    runner = a_job(1, gpus=2, running=True, slots=("n1:0", "n1:1"))
    newcomer = a_job(2, gpus=2)
    view = a_view(newcomer, runner, gpus=8, gpus_per_node=4)
    placed = place(view, Plan((2, 1)))
    assert placed.slots[1] == ("n1:0", "n1:1")
    assert len(placed.slots[2]) == 2 and len({s.split(":")[0] for s in placed.slots[2]}) == 1


def test_best_fit_packs_small_jobs_and_keeps_whole_nodes_free() -> None:
    view = a_view(a_job(1, gpus=1), a_job(2, gpus=1), a_job(3, gpus=4), gpus=8, gpus_per_node=4)
    placed = place(view, Plan((1, 2, 3)))
    nodes = {j: {s.split(":")[0] for s in placed.slots[j]} for j in (1, 2, 3)}
    assert nodes[1] == nodes[2] and nodes[3].isdisjoint(nodes[1])


def test_large_jobs_take_whole_nodes_and_fragmentation_shows() -> None:
    small = a_job(1, gpus=1, running=True, slots=("n0:0",))
    big = a_job(2, gpus=8)
    filler = a_job(3, gpus=2)
    view = a_view(small, big, filler, gpus=8, gpus_per_node=4)
    placed = place(view, Plan((1, 2, 3)))
    assert 2 not in placed.slots  # needs two whole nodes, n0 is partly used
    assert 3 in placed.slots      # backfilled into what the big job could not use
    view2 = a_view(big, gpus=8, gpus_per_node=4)
    assert sorted({s.split(":")[0] for s in place(view2, Plan((2,))).slots[2]}) == ["n0", "n1"]


def test_a_wide_job_holds_its_nodes_whole_running_as_starting() -> None:
    """An 8-GPU job on nodes of 6 takes two whole nodes; found by a review: running, it
    kept only its own 8 slots, so a job placed beside it got the 4 it left, which had
    idled in its first round. One rule, whether it starts or stays (live, Slurm holds
    2 x 6 for it)."""
    wide = a_job(1, gpus=8)
    small = a_job(2, gpus=4)
    starting = place(a_view(wide, small, gpus=12, gpus_per_node=6), Plan((1, 2)))
    running = replace(wide, phase=Phase.RUNNING, gpu_slots=starting.slots[1])
    staying = place(a_view(running, small, gpus=12, gpus_per_node=6), Plan((1, 2)))
    assert staying.slots[1] == starting.slots[1]
    assert 2 not in starting.slots and 2 not in staying.slots


def test_fragmented_job_is_reported() -> None:
    view = a_view(a_job(1, gpus=3), a_job(2, gpus=3), a_job(3, gpus=2), gpus=8, gpus_per_node=4)
    placed = place(view, Plan((1, 2, 3)))
    assert placed.fragmented == {3}
    assert sum(len(s) for s in placed.slots.values()) == 6


def test_capacity_and_order_in_pool_mode() -> None:
    view = a_view(a_job(1, gpus=2), a_job(2, gpus=2), a_job(3, gpus=1), gpus=4)
    placed = place(view, Plan((3, 1, 2)))
    assert set(placed.slots) == {3, 1}


def test_diff_orders_preemptions_before_starts() -> None:
    old = a_job(1, gpus=4, running=True, slots=("pool:0", "pool:1", "pool:2", "pool:3"))
    new = a_job(2, gpus=4)
    view = a_view(old, new, gpus=4)
    actions = diff(view, place(view, Plan((2,))))
    assert [a.kind for a in actions] == [ActionKind.PREEMPT, ActionKind.START]
    kept = diff(view, place(view, Plan((1,))))
    assert [a.kind for a in kept] == [ActionKind.KEEP]


def test_backfilled_running_jobs_keep_their_gpus() -> None:
    """A wide job that cannot fit takes the selection's room; the running jobs behind it
    are backfilled and must stay where they run: best fit alone moves n1's job onto n0
    (the roomier fit), a migration, i.e. a checkpoint signal every round (seen live)."""
    kept = a_job(1, gpus=1, running=True, slots=("n0:0",))
    wide = a_job(2, gpus=6)
    on_n1 = a_job(3, gpus=2, running=True, slots=("n1:0", "n1:1"))
    on_n0 = a_job(4, gpus=2, running=True, slots=("n0:2", "n0:3"))
    view = a_view(kept, wide, on_n1, on_n0, gpus=8, gpus_per_node=4)
    placed = place(view, Plan((1, 2, 3, 4)))
    assert placed.fragmented == {2}
    assert placed.slots[3] == ("n1:0", "n1:1") and placed.slots[4] == ("n0:2", "n0:3")
    assert {a.kind for a in diff(view, placed)} == {ActionKind.KEEP}


def test_a_wide_job_gets_a_node_cleared_when_small_jobs_can_move() -> None:
    """Two 1-GPU jobs on different nodes leave no whole node for a 4-GPU job although 6
    GPUs are free; ranked above them, it gets a node: one of them moves (else the wide
    job waits for a drain)."""
    a = a_job(1, gpus=1, running=True, slots=("n0:0",))
    b = a_job(2, gpus=1, running=True, slots=("n1:0",))
    wide = a_job(3, gpus=4)
    view = a_view(a, b, wide, gpus=8, gpus_per_node=4)
    placed = place(view, Plan((3, 1, 2)))  # the policy ranks the wide job first
    assert not placed.fragmented and set(placed.slots) == {1, 2, 3}
    nodes = {j: {s.split(":")[0] for s in placed.slots[j]} for j in (1, 2, 3)}
    assert nodes[1] == nodes[2] and nodes[3].isdisjoint(nodes[1])
    assert [a.kind for a in diff(view, placed)].count(ActionKind.PREEMPT) == 1  # one move


def test_clearing_never_drops_a_job_placed_before() -> None:
    """With no room elsewhere the running job stays and the wide one waits."""
    a = a_job(1, gpus=3, running=True, slots=("n0:0", "n0:1", "n0:2"))
    b = a_job(2, gpus=3, running=True, slots=("n1:0", "n1:1", "n1:2"))
    wide = a_job(3, gpus=2)
    view = a_view(a, b, wide, gpus=8, gpus_per_node=4)
    placed = place(view, Plan((1, 2, 3)))
    assert placed.slots[1] == a.gpu_slots and placed.slots[2] == b.gpu_slots
    assert placed.fragmented == {3}


def test_clearing_never_moves_a_job_ranked_above_the_wide_one() -> None:
    """FIFO puts running jobs first: a waiting wide job must not move them (FIFO never
    preempts), so it waits for a node to drain."""
    a = a_job(1, gpus=1, running=True, slots=("n0:0",))
    b = a_job(2, gpus=1, running=True, slots=("n1:0",))
    wide = a_job(3, gpus=4)
    view = a_view(a, b, wide, gpus=8, gpus_per_node=4)
    placed = place(view, Plan((1, 2, 3)))
    assert placed.slots[1] == ("n0:0",) and placed.slots[2] == ("n1:0",)
    assert placed.fragmented == {3}
    assert ActionKind.PREEMPT not in {a.kind for a in diff(view, placed)}


def test_a_job_the_plan_lets_move_others_gets_a_node_cleared_of_jobs_ranked_above() -> None:
    """Plan.moves_for (Shockwave's critical path): the same wide job gets a node; the
    jobs ranked above it move, and both still run."""
    a = a_job(1, gpus=1, running=True, slots=("n0:0",))
    b = a_job(2, gpus=1, running=True, slots=("n1:0",))
    wide = a_job(3, gpus=4)
    view = a_view(a, b, wide, gpus=8, gpus_per_node=4)
    placed = place(view, Plan((1, 2, 3), moves_for=frozenset({3})))
    assert not placed.fragmented and set(placed.slots) == {1, 2, 3}
    assert [a.kind for a in diff(view, placed)].count(ActionKind.PREEMPT) == 1  # one move
    # the fill step between rounds moves nobody
    from slurm_shockwave.engine.fill import fill_plan

    assert place(view, fill_plan(view, Plan((1, 2, 3), moves_for=frozenset({3})))
                 ).fragmented == {3}


def test_an_elastic_job_left_out_at_its_planned_count_takes_a_smaller_one() -> None:
    """Two 3-GPU jobs on two 4-GPU nodes leave a GPU on each: a grown count of 2 fits
    nowhere, so the elastic job (range 1-4) runs on 1 instead of waiting; a running one
    planned wider keeps its own GPU; a fixed job is still left out."""
    fixed = (a_job(1, gpus=3, running=True, slots=("n0:0", "n0:1", "n0:2")),
             a_job(2, gpus=3, running=True, slots=("n1:0", "n1:1", "n1:2")))
    elastic = a_job(3, gpus=1)
    elastic = replace(elastic, spec=replace(elastic.spec, gpus_range=(1, 4)))
    placed = place(a_view(*fixed, elastic, gpus=8, gpus_per_node=4), Plan((1, 2, 3), gpus={3: 2}))
    assert len(placed.slots[3]) == 1 and not placed.fragmented
    running = replace(elastic, gpu_slots=("n1:3",))
    placed = place(a_view(*fixed, running, gpus=8, gpus_per_node=4), Plan((1, 2, 3), gpus={3: 2}))
    assert placed.slots[3] == ("n1:3",)
    wide = a_job(3, gpus=2)
    placed = place(a_view(*fixed, wide, gpus=8, gpus_per_node=4), Plan((1, 2, 3)))
    assert 3 not in placed.slots and placed.fragmented == {3}
    # a policy that chooses no counts (a fixed baseline; FIFO models Slurm alone) leaves an
    # elastic job at its request, as Slurm would
    asked2 = replace(wide, spec=replace(wide.spec, gpus_range=(1, 4)))
    placed = place(a_view(*fixed, asked2, gpus=8, gpus_per_node=4), Plan((1, 2, 3)))
    assert 3 not in placed.slots and placed.fragmented == {3}


def test_idle_gpus_let_a_left_out_job_move_jobs_ranked_above_it() -> None:
    """Plan.avoid_idle (Shockwave): two 2-GPU jobs on different nodes leave 4 GPUs idle
    but no whole node for the 4-GPU job ranked after them; one of them moves and all three
    run. Idle GPUs beside a job fragmentation leaves out recur on the live-sized traces
    simulated with the live costs (docs/evaluation.md, "GPUs that would idle")."""
    a = a_job(1, gpus=2, running=True, slots=("n0:0", "n0:1"))
    b = a_job(2, gpus=2, running=True, slots=("n1:0", "n1:1"))
    wide = a_job(3, gpus=4)
    view = a_view(a, b, wide, gpus=8, gpus_per_node=4)
    placed = place(view, Plan((1, 2, 3), avoid_idle=True))
    assert not placed.fragmented and set(placed.slots) == {1, 2, 3}
    nodes = {j: {s.split(":")[0] for s in placed.slots[j]} for j in (1, 2, 3)}
    assert nodes[1] == nodes[2] and nodes[3].isdisjoint(nodes[1])
    assert [a.kind for a in diff(view, placed)].count(ActionKind.PREEMPT) == 1  # one move
    assert placed.moved_for in ({1: 3}, {2: 3})  # the moved job's reason names job 3
    # without it (every baseline) the wide job waits; a fill step moves nobody
    from slurm_shockwave.engine.fill import fill_plan

    assert place(view, Plan((1, 2, 3))).fragmented == {3}
    assert place(view, fill_plan(view, Plan((1, 2, 3), avoid_idle=True))).fragmented == {3}


def test_idle_moves_never_move_a_job_the_plan_pins() -> None:
    """``moves_for`` jobs (the critical path: the makespan waits on them) are not moved
    for a job the idle GPUs could hold; another job on the other node still may be."""
    a = a_job(1, gpus=2, running=True, slots=("n0:0", "n0:1"))
    b = a_job(2, gpus=2, running=True, slots=("n1:0", "n1:1"))
    wide = a_job(3, gpus=4)
    view = a_view(a, b, wide, gpus=8, gpus_per_node=4)
    both = place(view, Plan((1, 2, 3), moves_for=frozenset({1, 2}), avoid_idle=True))
    assert both.fragmented == {3} and both.slots[1] == a.gpu_slots and both.slots[2] == b.gpu_slots
    one = place(view, Plan((1, 2, 3), moves_for=frozenset({1}), avoid_idle=True))
    assert one.slots[1] == a.gpu_slots and not one.fragmented and set(one.slots) == {1, 2, 3}


def test_idle_moves_need_the_gpus_to_idle() -> None:
    """When a job ranked after the wide one backfills the free GPUs, nothing idles and
    nothing moves."""
    a = a_job(1, gpus=1, running=True, slots=("n0:0",))
    b = a_job(2, gpus=1, running=True, slots=("n1:0",))
    wide = a_job(3, gpus=4)
    filler = a_job(4, gpus=3)
    view = a_view(a, b, wide, filler, gpus=8, gpus_per_node=4)
    placed = place(view, Plan((1, 2, 3, 4), avoid_idle=True))
    assert placed.fragmented == {3} and 4 in placed.slots
    assert placed.slots[1] == a.gpu_slots and placed.slots[2] == b.gpu_slots


def test_a_moved_job_names_the_job_that_took_its_node() -> None:
    """Three nodes are cleared for three 4-GPU jobs but best fit places two of them there
    and job 6 still waits: a moved job names a job that started on its node, never one
    that waits (found by review of Placement.moved_for)."""
    running = [a_job(i, running=True, slots=(f"n{i - 1}:0",)) for i in (1, 2, 3)]
    wide = [a_job(i, gpus=4) for i in (4, 5, 6)]
    view = a_view(*running, *wide, gpus=16, gpus_per_node=4)
    placed = place(view, Plan((4, 5, 6, 1, 2, 3)))
    assert placed.moved_for and set(placed.moved_for.values()) <= set(placed.slots)
    for moved, taker in placed.moved_for.items():
        old_node = view.by_id()[moved].gpu_slots[0].split(":")[0]
        assert any(s.split(":")[0] == old_node for s in placed.slots[taker])


def test_a_running_job_keeps_its_gpus_rather_than_idle_part_of_them() -> None:
    """The plan leaves out a running 4-GPU job (say at its lease's end) for a waiting
    2-GPU one that fits only on its GPUs: stopping it would idle two of them for the
    round, so under avoid_idle it keeps them and the start waits. A start protected by
    the plan (its critical path) or one that would use every GPU still takes them, and
    FIFO-style plans are unchanged."""
    other = a_job(1, gpus=4, running=True, slots=("n0:0", "n0:1", "n0:2", "n0:3"))
    wide = a_job(2, gpus=4, running=True, slots=("n1:0", "n1:1", "n1:2", "n1:3"))
    small = a_job(3, gpus=2)
    view = a_view(other, wide, small, gpus=8, gpus_per_node=4)
    plan = Plan((1, 3, 2), avoid_idle=True)  # job 2 does not fit after 1 and 3
    placed = place(view, plan)
    assert placed.slots[2] == wide.gpu_slots and 3 not in placed.slots
    assert {a.kind for a in diff(view, placed)} == {ActionKind.KEEP}
    assert 3 in place(view, replace(plan, moves_for=frozenset({3}))).slots
    assert 2 not in place(view, Plan((1, 3, 2))).slots
    full = a_view(other, wide, a_job(3, gpus=4), gpus=8, gpus_per_node=4)
    assert 3 in place(full, plan).slots  # uses all four: nothing would idle


def test_a_start_further_behind_than_the_running_job_is_not_held_back() -> None:
    """Plan.rho: a start more behind its fair finish time than the running job it would
    displace takes its GPUs (found by review: else a job the plan ranks first could wait
    as long as one it ranks last runs); a checkpointing job is not kept (its requeue is
    under way: keeping it cancelled the checkpoint live and held the released job)."""
    other = a_job(1, gpus=4, running=True, slots=("n0:0", "n0:1", "n0:2", "n0:3"))
    wide = a_job(2, gpus=4, running=True, slots=("n1:0", "n1:1", "n1:2", "n1:3"))
    small = a_job(3, gpus=2)
    view = a_view(other, wide, small, gpus=8, gpus_per_node=4)
    assert 3 not in place(view, Plan((1, 3, 2), avoid_idle=True, rho={2: 2.0, 3: 1.5})).slots
    assert 3 in place(view, Plan((1, 3, 2), avoid_idle=True, rho={2: 1.5, 3: 2.0})).slots
    stopping = replace(wide, phase=Phase.CHECKPOINTING)
    view = a_view(other, stopping, small, gpus=8, gpus_per_node=4)
    assert 3 in place(view, Plan((1, 3, 2), avoid_idle=True)).slots


def test_a_start_held_back_takes_free_gpus_elsewhere() -> None:
    """Found by review: a start a kept job holds back takes free GPUs on another node
    where it fits, in the plan's order, rather than waiting beside them."""
    kept = a_job(1, gpus=8, running=True, slots=tuple(f"n{n}:{i}" for n in (0, 1)
                                                     for i in range(4)))
    four, one = a_job(2, gpus=4), a_job(3, gpus=1)
    view = a_view(kept, four, one, gpus=12, gpus_per_node=4)
    placed = place(view, Plan((2, 3, 1), avoid_idle=True))
    assert placed.slots[1] == kept.gpu_slots
    assert {s.split(":")[0] for s in placed.slots[2]} == {"n2"}


def _nodes_of(slots: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in slots:
        out[s.split(":")[0]] = out.get(s.split(":")[0], 0) + 1
    return out


def test_a_fixed_multi_node_job_is_placed_as_slurm_spreads_it() -> None:
    """``-N 2 --gres=gpu:4`` (8 GPUs, nodes=2) runs as 4 + 4 in Slurm; found by a
    review: placement put it as 8 on one node of 8, so the plan gave out 4 GPUs of
    each of two nodes the job would hold. It takes 4 on each of two nodes (best fit),
    not the nodes whole: running, the 4 left on each go to other jobs."""
    spread = replace(a_job(1, gpus=8), spec=replace(a_job(1, gpus=8).spec, nodes=2))
    quad, pair = a_job(2, gpus=4), a_job(3, gpus=2)
    placed = place(a_view(spread, quad, pair, gpus=16, gpus_per_node=8), Plan((1, 2, 3)))
    assert sorted(_nodes_of(placed.slots[1]).values()) == [4, 4]
    assert set(placed.slots) == {1, 2, 3} and not placed.fragmented
    running = replace(spread, phase=Phase.RUNNING, gpu_slots=placed.slots[1])
    again = place(a_view(running, quad, pair, gpus=16, gpus_per_node=8), Plan((1, 2, 3)))
    assert again.slots[1] == placed.slots[1] and set(again.slots) == {1, 2, 3}
    # with a busy node it waits for two nodes with room, rather than take one whole
    busy = a_job(4, gpus=6, running=True, slots=tuple(f"n0:{i}" for i in range(6)))
    one = place(a_view(spread, busy, gpus=16, gpus_per_node=8), Plan((4, 1)))
    assert 1 in one.fragmented and 1 not in one.slots


def _elastic(job_id: int, gpus: int) -> Job:
    job = a_job(job_id, gpus=gpus)
    return replace(job, spec=replace(job.spec, gpus_range=(1, 2 * gpus)))


def test_an_elastic_job_wider_than_a_node_takes_whole_nodes_that_split_it_evenly() -> None:
    """The service sets an elastic job's count per node, the same on each: 16 GPUs on
    free nodes of 6, 8 and 8 (another partition holds 2 of the first) go as 8 + 8, not
    6 + 8 + 2 (whole nodes by name until they held enough), which the world refused
    before Slurm was asked, and the job waited beside free GPUs."""
    from slurm_shockwave.model.cluster import GpuNode
    view = replace(a_view(_elastic(1, 16), gpus=16),
                   nodes=(GpuNode("a", 6, (2, 3, 4, 5, 6, 7)), GpuNode("b", 8),
                          GpuNode("c", 8)))
    assert _nodes_of(place(view, Plan((1,))).slots[1]) == {"b": 8, "c": 8}
    twelve = replace(view, jobs=(_elastic(1, 12),))
    assert sorted(_nodes_of(place(twelve, Plan((1,))).slots[1]).values()) == [6, 6]


def test_a_fixed_job_wider_than_a_node_is_placed_as_slurm_spreads_it() -> None:
    """Found by a review: the even split applied to fixed jobs too, which Slurm spreads
    unevenly (``--gpus=5`` on nodes of 4: 4 + 1). A 5-GPU job on four idle nodes of 4
    was never placed (it waited for ever beside 16 free GPUs; the simulator hit its
    round limit), and an 11-GPU job took 11 whole nodes of 8."""
    five = place(a_view(a_job(1, gpus=5), gpus=16, gpus_per_node=4), Plan((1,)))
    assert 1 not in five.fragmented and sorted(_nodes_of(five.slots[1]).values()) == [1, 4]
    eleven = place(a_view(a_job(1, gpus=11), gpus=128, gpus_per_node=8), Plan((1,)))
    assert sorted(_nodes_of(eleven.slots[1]).values()) == [3, 8]


def test_a_job_left_out_is_not_kept_on_a_node_a_wide_job_holds_whole() -> None:
    """Found by a red-team of the simulator: a fixed 4-GPU job on nodes of 3 holds both
    nodes whole (3 + 1, the other 2 GPUs of the second held idle with it), but a running
    1-GPU job the plan left out was kept on that second node under ``avoid_idle``: two
    jobs on a node the simulator gives one of them whole."""
    small = a_job(2, gpus=1, running=True, slots=("n1:2",))
    wide = a_job(1, gpus=4)
    placed = place(a_view(wide, small, gpus=6, gpus_per_node=3), Plan((1,), avoid_idle=True))
    assert sorted(placed.slots[1]) == ["n0:0", "n0:1", "n0:2", "n1:0"]
    assert 2 not in placed.slots
