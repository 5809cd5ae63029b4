"""The round's view of what jobs reported: read from the store once per round, never
from the HTTP thread directly (it only writes reports into the store)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from slurm_shockwave.model.job import JobProgress
from slurm_shockwave.model.report import ProgressReport
from slurm_shockwave.prediction.observed import acknowledged, observed_progress
from slurm_shockwave.slurm.hints import Hint
from slurm_shockwave.slurm.protocol import SlurmJob
from slurm_shockwave.slurm.world import ProgressFn

ReadReports = Callable[[int], Mapping[int, Iterable[ProgressReport]]]
"""Reports with an id above the given one, by job (the store's ``reports``)."""


class ReportFeed:
    """Caches every report of the jobs still around; each round adds the new ones."""

    def __init__(self, read: ReadReports, table: ProgressFn) -> None:
        self.read = read
        self.table = table
        self.reports: dict[int, list[ProgressReport]] = {}
        self.last_id = 0

    def refresh(self) -> int:
        """Read the reports that arrived since the last call; how many arrived."""
        new = 0
        for jid, reports in self.read(self.last_id).items():
            for r in reports:
                self.reports.setdefault(jid, []).append(r)
                self.last_id = max(self.last_id, r.report_id)
                new += 1
        return new

    def keep_only(self, job_ids: Iterable[int]) -> None:
        """Forget the reports of jobs no longer around (no I/O)."""
        wanted = set(job_ids)
        self.reports = {j: r for j, r in self.reports.items() if j in wanted}

    def progress(self, job: SlurmJob, hint: Hint) -> JobProgress:
        return observed_progress(self.table(job, hint), self.reports.get(job.job_id, ()))

    def acked(self, job_id: int, since_s: float) -> bool:
        return acknowledged(self.reports.get(job_id, ()), since_s)
