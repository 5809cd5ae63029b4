"""Placement and diff properties over random clusters, jobs and plans."""

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_shockwave.engine.diff import diff
from slurm_shockwave.engine.placement import place
from slurm_shockwave.model.plan import ActionKind, Plan
from tests.builders import a_job, a_view


@st.composite
def scenes(draw: st.DrawFn):
    per_node = draw(st.sampled_from([1, 2, 4, 8]))
    nodes = draw(st.integers(1, 4))
    gpus = per_node * nodes
    n = draw(st.integers(0, 10))
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=n, max_size=n))
    free = [f"n{i}:{k}" for i in range(nodes) for k in range(per_node)]
    jobs = []
    for jid, size in enumerate(sizes):
        running = draw(st.booleans()) and size <= per_node and len(free) >= size
        slots: tuple[str, ...] = ()
        if running:
            node = free[0].split(":")[0]
            same = [s for s in free if s.startswith(node + ":")]
            if len(same) >= size:
                slots = tuple(same[:size])
                free = [s for s in free if s not in slots]
            else:
                running = False
        jobs.append(a_job(jid, gpus=size, running=running, slots=slots))
    order = draw(st.permutations(list(range(n))))
    keep = draw(st.integers(0, n))
    return a_view(*jobs, gpus=gpus, gpus_per_node=per_node), Plan(tuple(order[:keep])), per_node


@settings(max_examples=300, deadline=None)
@given(scenes())
def test_placement_respects_capacity_gangs_and_plan(scene) -> None:
    view, plan, per_node = scene
    placed = place(view, plan)
    jobs = view.by_id()
    slots = [s for ss in placed.slots.values() for s in ss]
    assert len(slots) == len(set(slots)) <= view.total_gpus
    assert set(placed.slots) <= set(plan.order)  # never runs what the plan left out
    for jid, ss in placed.slots.items():
        assert len(ss) == jobs[jid].gpus
        nodes = {s.split(":")[0] for s in ss}
        assert len(nodes) == (1 if jobs[jid].gpus <= per_node else -(-jobs[jid].gpus // per_node))
    # running jobs placed again keep their GPUs when they fit where they are
    for jid, ss in placed.slots.items():
        if jobs[jid].is_running and plan.order.index(jid) == 0:
            assert ss == jobs[jid].gpu_slots
    actions = diff(view, placed)
    kinds = [a.kind for a in actions]
    assert kinds == sorted(kinds, key=[ActionKind.PREEMPT, ActionKind.KEEP,
                                       ActionKind.START].index)
