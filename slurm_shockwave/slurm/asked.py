"""What an elastic job was submitted with, and giving it back: the service resizes a
pending elastic job's GRES and node range, which Slurm keeps; a job leaving the service
(``shockwave handback``, or moved to another partition by its owner) gets its request
back, or it waits for, and is billed for, the count the plan last gave it."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_shockwave.slurm.hints import Hint, asked_gpus, asked_max_nodes, asked_min_nodes
from slurm_shockwave.slurm.job_gpus import set_gpus
from slurm_shockwave.slurm.listing import hint_text, read_hint
from slurm_shockwave.slurm.protocol import SlurmBackend, SlurmError, SlurmJob


@dataclass(frozen=True)
class Asked:
    """What an elastic job was submitted with (job_submit.lua's stamp): its GPUs and its
    node range, ``most`` 0 where it set no most, None where the stamp does not say (one
    written before it gave the range)."""
    gpus: int
    fewest: int
    most: int | None

    def most_for(self, job: SlurmJob, nodes_in_partition: int) -> int:
        """The most nodes to give it back: the one it asked; with none, per node its
        fewest (a range lets Slurm give it as many nodes as are free, each with its
        count: ``--gres=gpu:2`` with ``numnodes=1-4`` ran 2 on each of 4 idle nodes), per
        job the partition's nodes (Slurm packs such a job onto as few as hold it:
        ``--gpus=4`` ran on one, ``--gpus=12`` on two of 8; measured on 22.05).
        ``scontrol`` cannot clear a most. An older stamp's per-job most: the listed one
        where it holds the fewest (the stamp cannot say it was not asked)."""
        if self.most:
            return self.most
        if not job.asks_per_job:
            return self.fewest
        if self.most is None and job.max_nodes >= self.fewest:
            return job.max_nodes
        return max(nodes_in_partition, self.fewest)

    def differs(self, job: SlurmJob, nodes_in_partition: int) -> bool:
        """Whether the job may no longer hold these GPUs or this node range (the
        service's resizes set ``numnodes=K-K``). A pending job's listed node count is
        Slurm's estimate (``-N 1-2 --gres=gpu:4`` lists 2-2 as submitted, measured on
        22.05), so where it is above a range's fewest the range is taken as changed
        and set again: it is the job's own request (a review: a ``-N 1-2`` job the
        service pinned to 2-2 kept it)."""
        if job.state == "PENDING" and job.restart_count > 0:
            # listed with its last run's node count until it runs again (the service's
            # resize onto 2 nodes reads as 1: tests/test_slurm_contract.py): set again
            return True
        count = max(job.node_count, 1)
        if job.gpus != (self.gpus if job.asks_per_job else self.gpus // self.fewest * count):
            return True  # per node, its count on each of the nodes it has
        most = self.most_for(job, nodes_in_partition)
        if job.state != "PENDING":  # running: where it runs, Slurm keeps if it requeues
            return not self.fewest <= count <= most
        if self.most is None and job.asks_per_job:
            return False  # an older stamp's range is not known: its GPUs only
        listed = job.max_nodes
        if most == self.fewest:  # exactly its fewest
            return count != self.fewest or listed not in (0, self.fewest)
        if not self.most:  # per job, no most: unpinned, or handed back before
            return 0 < listed < nodes_in_partition
        return listed != most or count > self.fewest


def asked_request(job: SlurmJob) -> Asked | None:
    """What an elastic job was submitted with; None for a fixed job, whose count the
    service never changes, or one without the stamp."""
    hint = read_hint(hint_text(job))
    gpus = asked_gpus(job.admin_comment)
    if not isinstance(hint, Hint) or hint.gpus_range is None or gpus is None:
        return None
    return Asked(gpus, asked_min_nodes(job.admin_comment) or 1,
                 asked_max_nodes(job.admin_comment))


def restore_request(backend: SlurmBackend, job: SlurmJob, asked: Asked,
                    nodes_in_partition: int) -> bool:
    """Give a pending elastic job the GPUs and node range it asked for, where the
    service's resizes left others (a red-team: handed back, a 2-GPU job waited for, and
    was billed for, the 8 on two nodes the plan last gave it). A range with no most is
    given a most (``Asked.most_for``): pinned to its fewest, a ``--gpus=12`` job on
    nodes of 8 never ran (BadConstraints, measured on 22.05: before, the hand-back gave
    every elastic job exactly its fewest nodes, a ``-N 1-2`` job too). Whether it did."""
    if not asked.differs(job, nodes_in_partition):
        return False
    if not job.asks_per_job and asked.gpus % asked.fewest:
        raise SlurmError(f"{asked.gpus} GPUs do not split evenly over the {asked.fewest} "
                         "nodes asked")
    set_gpus(backend, job, asked.gpus, asked.fewest,
             max_nodes=asked.most_for(job, nodes_in_partition))
    return True
