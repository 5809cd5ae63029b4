"""Batch-size trajectories of adaptive jobs: Accordion and GNS
(../shared/reference/shockwave/NOTES.md §3.4).

Both return the batch size of every epoch. They follow the per-epoch profiles of the
Shockwave artefact, which the tests check against every job of the reference traces.
"""

from __future__ import annotations

from slurm_shockwave.model.job import AdaptationMode
from slurm_shockwave.workloads.catalog import model_info

# Epochs at which a GNS job doubles its batch size, per (model, initial bs, GPUs).
# Our own compact table, read off the per-epoch profiles derived from the Shockwave
# artefact's hard-coded GNS pattern (shared/reference/shockwave/profiles/*), and for
# ResNet-50's late doublings (epochs 81-221, which no reference trace's job reaches)
# off the artefact's pattern itself (scheduler/utils.py get_gns_bs_pattern). Doublings
# past the model's maximum batch size change nothing and are left out. Combinations not
# listed never double.
GNS_DOUBLING_EPOCHS: dict[tuple[str, int, int], tuple[int, ...]] = {
    ("LM", 5, 1): (31, 41, 61, 71),
    ("LM", 5, 2): (31, 51, 61, 71),
    ("LM", 5, 4): (11, 31, 71, 91),
    ("LM", 10, 1): (11, 21, 41),
    ("LM", 10, 2): (11, 31, 41),
    ("LM", 10, 4): (11, 31, 61),
    ("LM", 20, 1): (11, 41),
    ("LM", 20, 2): (31, 41),
    ("LM", 20, 4): (11, 61),
    ("LM", 40, 1): (11,),
    ("LM", 40, 2): (11,),
    ("LM", 40, 4): (61,),
    ("Recommendation", 512, 1): (21, 41, 71, 91),
    ("Recommendation", 1024, 1): (21, 51, 91),
    ("Recommendation", 2048, 1): (21, 41),
    ("Recommendation", 4096, 1): (41,),
    ("ResNet-18", 32, 1): (21, 31, 51),
    ("ResNet-18", 32, 2): (11, 21, 41),
    ("ResNet-18", 32, 4): (21, 31, 61),
    ("ResNet-18", 64, 1): (11, 31),
    ("ResNet-18", 64, 2): (21, 41),
    ("ResNet-18", 64, 4): (11, 61),
    ("ResNet-18", 128, 1): (11,),
    ("ResNet-18", 128, 2): (41,),
    ("ResNet-18", 128, 4): (11,),
    ("ResNet-50", 32, 2): (101, 111),
    ("ResNet-50", 32, 4): (131, 221),
    ("ResNet-50", 64, 1): (101,),
    ("ResNet-50", 64, 2): (81,),
    ("ResNet-50", 64, 4): (191,),
}


def _accordion_critical(model: str, init_bs: int, epoch: int) -> bool:
    """Accordion's critical regimes: epochs that must train at the small batch size."""
    if model == "ResNet-18":
        first = 20 if init_bs == 256 else 10
        return epoch < first or 150 <= epoch < 160 or 250 <= epoch < 260
    if model == "ResNet-50":
        return epoch % 30 < 10
    if model == "LM":
        return epoch < 10
    if model == "Recommendation":
        first = {512: 30, 1024: 30, 2048: 40}.get(init_bs, 10)
        return epoch < first or 60 <= epoch < 70 or 80 <= epoch < 90
    return True  # Transformer: never leaves its initial batch size


def accordion_schedule(model: str, init_bs: int, num_epochs: int) -> list[int]:
    """Small batch in critical regimes and in the first 30% of epochs, the maximum elsewhere."""
    big = model_info(model).max_bs
    # epoch <= 0.3 E, in floating point, as the artefact compares (E=1040 keeps 313 epochs)
    warmup = 0.3 * num_epochs
    return [init_bs if (e <= warmup or _accordion_critical(model, init_bs, e)) else big
            for e in range(num_epochs)]


def gns_schedule(model: str, init_bs: int, gpus: int, num_epochs: int) -> list[int]:
    """Double at fixed epochs up to the model maximum.

    The artefact's profile puts the last epoch back at the initial batch size once the
    job has doubled at least twice; we keep that quirk so exclusive runtimes match.
    """
    cap = model_info(model).max_bs
    starts = GNS_DOUBLING_EPOCHS.get((model, init_bs, gpus), ())
    schedule = []
    for e in range(num_epochs):
        doublings = sum(1 for s in starts if e >= s)
        schedule.append(min(cap, init_bs * 2 ** doublings))
    if num_epochs and schedule[-1] >= 4 * init_bs:
        schedule[-1] = init_bs
    return schedule


def bs_schedule(mode: AdaptationMode, model: str, init_bs: int, gpus: int,
                num_epochs: int) -> list[int]:
    if mode == AdaptationMode.ACCORDION:
        return accordion_schedule(model, init_bs, num_epochs)
    if mode == AdaptationMode.GNS:
        return gns_schedule(model, init_bs, gpus, num_epochs)
    return [init_bs] * num_epochs
