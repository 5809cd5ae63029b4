"""The models the paper's traces use, and the facts about them the simulator needs.

Sources: dataset sizes, batch-size ranges and multi-GPU support as described for Gavel's
``job_table.py`` and the Shockwave artefact (../shared/reference/shockwave/NOTES.md §3.3).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    dataset: str
    samples_per_epoch: int
    batch_sizes: tuple[int, ...]
    """Batch sizes a generated trace may start at."""
    max_bs: int
    """The largest batch size dynamic adaptation reaches."""
    multi_gpu: bool
    command: str
    workdir: str
    steps_arg: str


MODELS: dict[str, ModelInfo] = {m.name: m for m in (
    ModelInfo("ResNet-18", "cifar10", 50_000, (32, 64, 128, 256), 256, True,
              "python3 main.py --data_dir=%s/cifar10 --batch_size {bs}",
              "image_classification/cifar10", "--num_steps"),
    ModelInfo("ResNet-50", "imagenet", 100_000, (16, 32, 64), 128, True,
              "python3 main.py -j 4 -a resnet50 -b {bs} %s/imagenet/",
              "image_classification/imagenet", "--num_minibatches"),
    ModelInfo("Transformer", "multi30k", 10_000, (16, 32, 64, 128), 128, True,
              "python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size {bs} "
              "-proj_share_weight", "translation", "-step"),
    ModelInfo("LM", "wikitext2", 59_675, (5, 10, 20, 40, 80), 80, True,
              "python3 main.py --cuda --data %s/wikitext2 --batch_size {bs}",
              "language_modeling", "--steps"),
    ModelInfo("Recommendation", "ml-20m", 117_907, (512, 1024, 2048, 4096, 8192), 8192, False,
              "python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size {bs}",
              "recommendation", "-n"),
)}


def model_info(name: str) -> ModelInfo:
    """Look a model up; raises KeyError with the known names for the caller to report."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r} (known: {', '.join(sorted(MODELS))})") from None
