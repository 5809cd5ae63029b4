"""Intention-revealing builders for tests."""

from __future__ import annotations

from slurm_shockwave.model.cluster import ClusterView, GpuNode
from slurm_shockwave.model.job import AdaptationMode, Job, JobProgress, JobSpec
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.throughputs import ThroughputTable
from slurm_shockwave.sim.inputs import Workload, build_workload
from slurm_shockwave.sim.trace import TraceJob


def a_job(job_id: int = 0, *, gpus: int = 1, epochs: int = 10, epochs_done: float = 0.0,
          epoch_s: float = 100.0, arrival_s: float = 0.0, running: bool = False,
          slots: tuple[str, ...] = (), run_s: float = 0.0, attained_gpu_s: float | None = None,
          model: str = "ResNet-18", bs: int = 32, weight: float = 1.0) -> Job:
    spec = JobSpec(job_id, model, bs, gpus, AdaptationMode.STATIC, arrival_s, epochs, weight)
    progress = JobProgress(epochs_done=epochs_done, bs=bs, epoch_s=epoch_s, run_s=run_s,
                           attained_gpu_s=run_s * gpus if attained_gpu_s is None
                           else attained_gpu_s)
    if running and not slots:
        slots = tuple(f"pool:{job_id * 100 + i}" for i in range(gpus))
    return Job(spec, progress, Phase.RUNNING if running else Phase.PENDING,
               slots if running else ())


def a_view(*jobs: Job, gpus: int = 4, gpus_per_node: int | None = None, now_s: float = 0.0,
           round_s: float = 120.0) -> ClusterView:
    if gpus_per_node is None:
        nodes: tuple[GpuNode, ...] = (GpuNode("pool", gpus),)
    else:
        nodes = tuple(GpuNode(f"n{i}", gpus_per_node) for i in range(gpus // gpus_per_node))
    return ClusterView(now_s=now_s, round_index=0, round_s=round_s, nodes=nodes, jobs=jobs,
                       num_jobs_total=len(jobs))


def a_table(rate: float = 10.0) -> ThroughputTable:
    """Every catalogue model and batch size at ``rate`` steps/s on 1..8 GPUs."""
    from slurm_shockwave.workloads.catalog import MODELS

    rates = {}
    for m in MODELS.values():
        for bs in {*m.batch_sizes, m.max_bs}:
            for g in (1, 2, 4, 8):
                rates[(m.name, bs, g)] = rate * g
    return ThroughputTable(rates, "test-table")


def a_workload(*specs: JobSpec, table: ThroughputTable | None = None) -> Workload:
    jobs = [TraceJob(s, 1) for s in specs]
    return build_workload(jobs, table or a_table(), source="test")


def a_spec(job_id: int = 0, *, gpus: int = 1, epochs: int = 10, arrival_s: float = 0.0,
           model: str = "Transformer", bs: int = 16,
           mode: AdaptationMode = AdaptationMode.STATIC) -> JobSpec:
    return JobSpec(job_id, model, bs, gpus, mode, arrival_s, epochs)


class WallLikeClock:
    """A settable clock for live-world tests: starts at 1000 s, moved by hand (``t``)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t
