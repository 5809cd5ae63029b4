import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_shockwave.model.errors import IllegalTransition
from slurm_shockwave.model.lifecycle import Phase, allowed_edges, can_transition, transition


def test_preemption_path_is_allowed() -> None:
    phase = Phase.PENDING
    for dst in (Phase.RUNNING, Phase.CHECKPOINTING, Phase.REQUEUED, Phase.HELD, Phase.PENDING,
                Phase.RUNNING, Phase.DONE):
        phase = transition(phase, dst)
    assert phase == Phase.DONE


@pytest.mark.parametrize(("src", "dst"), [
    (Phase.PENDING, Phase.REQUEUED),   # never ran, cannot be requeued
    (Phase.HELD, Phase.RUNNING),       # a held job must be released first
    (Phase.DONE, Phase.RUNNING),       # terminal
    (Phase.RUNNING, Phase.HELD),       # running jobs are checkpointed, not held
])
def test_illegal_edges_raise(src: Phase, dst: Phase) -> None:
    with pytest.raises(IllegalTransition, match=f"{src.value} -> {dst.value}"):
        transition(src, dst, job_id=7)


def test_terminal_phases_have_no_exit() -> None:
    edges = allowed_edges()
    assert edges[Phase.DONE] == frozenset() and edges[Phase.FAILED] == frozenset()


@given(st.lists(st.sampled_from(list(Phase)), max_size=30))
def test_random_walks_obey_the_table(steps: list[Phase]) -> None:
    phase = Phase.PENDING
    for dst in steps:
        if can_transition(phase, dst):
            phase = transition(phase, dst)
        else:
            with pytest.raises(IllegalTransition):
                transition(phase, dst)
