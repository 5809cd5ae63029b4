"""A job's own reports change what the planner believes (prediction/observed.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_shockwave.model.job import AdaptationMode, Job, JobProgress, JobSpec
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.report import ProgressReport, ReportKind
from slurm_shockwave.policies.shockwave.estimates import estimate
from slurm_shockwave.prediction.observed import (
    acknowledged,
    advanced,
    measured_rates,
    merged_rates,
    observed_elastic,
    observed_progress,
)
from slurm_shockwave.workloads.scaling import relative_rates

TABLE = JobProgress(bs=32, epoch_s=100.0, epoch_s_by_bs=((32, 100.0), (64, 60.0)))


def rep(epoch: float, at: float, bs: int = 32, restart: int = 0,
        kind: ReportKind = ReportKind.PROGRESS) -> ProgressReport:
    return ProgressReport(1, kind, at, epoch=epoch, batch_size=bs, restart_count=restart)


def test_no_reports_keep_the_table_guess() -> None:
    assert observed_progress(TABLE, []) == TABLE


def test_epochs_batch_sizes_and_history_come_from_the_reports() -> None:
    p = observed_progress(TABLE, [rep(1, 10), rep(2, 20), rep(3, 28, bs=64), rep(4, 34, 64)])
    assert p.epochs_done == 4 and p.bs == 64
    assert p.bs_history == ((32, 2), (64, 2))
    assert p.epoch_s == 6.0  # measured between the last two reports at bs 64


def test_a_requeued_job_resumes_from_its_checkpoint() -> None:
    p = observed_progress(TABLE, [rep(1, 10), rep(2, 20), rep(3, 30), rep(2, 100, restart=1)])
    assert p.epochs_done == 2
    assert p.epoch_s == 10.0  # no time measured across the restart


def test_measured_epoch_times_calibrate_the_estimate() -> None:
    spec = JobSpec(1, "ResNet-18", 32, 1, AdaptationMode.STATIC, 0.0, 10)
    table = observed_progress(TABLE, [rep(1, 100), rep(2, 200)])  # as the table says
    seen = observed_progress(TABLE, [rep(1, 10), rep(2, 20)])  # 10 s, not 100 s
    before = estimate(Job(spec, table, Phase.RUNNING))
    after = estimate(Job(spec, seen, Phase.RUNNING))
    assert abs(after.remaining_s - before.remaining_s / 10) < 1e-6


def test_an_unknown_model_is_estimated_from_its_own_reports() -> None:
    prior = JobProgress(bs=16, epoch_s=600.0, epoch_s_by_bs=((16, 600.0),))
    spec = JobSpec(1, "my-gpt", 16, 2, AdaptationMode.STATIC, 0.0, 10)
    seen = observed_progress(prior, [rep(1, 50, bs=16), rep(2, 80, bs=16)])
    guessed = estimate(Job(spec, observed_progress(prior, [rep(1, 600, bs=16),
                                                           rep(2, 1200, bs=16)]),
                           Phase.RUNNING))
    assert abs(estimate(Job(spec, seen, Phase.RUNNING)).epoch_s * 20 - guessed.epoch_s) < 1e-6


def test_an_acknowledgement_counts_only_after_the_signal() -> None:
    ack = [rep(0, 50, kind=ReportKind.CHECKPOINTED)]
    assert acknowledged(ack, since_s=40, run=0) and not acknowledged(ack, since_s=60, run=0)


def test_reports_after_a_checkpoint_acknowledgement_time_no_epoch() -> None:
    """Seen live (t32, job 8): stopping, the job reports the partial epoch it saved,
    acknowledges, and reports it again; 0.01 s for 0.00005 epochs read as 220 s an epoch.
    Its epochs done are the last report's; its epoch time the training's."""
    ack = ReportKind.CHECKPOINTED
    reports = [rep(56, 16.45), rep(60, 17.58), rep(0, 17.59, kind=ack),
               rep(60.0159168, 17.59), rep(0, 17.595, kind=ack), rep(60.0159697, 17.60)]
    p = observed_progress(TABLE, reports)
    assert p.epochs_done == 60.0159697 and p.epoch_s == pytest.approx(1.13 / 4)
    # the next run times its epochs again
    later = [*reports, rep(60.0159697, 34.1, restart=1), rep(64, 35.89, restart=1),
             rep(68, 37.02, restart=1)]
    assert observed_progress(TABLE, later).epoch_s == pytest.approx(1.13 / 4)
    # a job the plan keeps trains on after its acknowledgement: timed again
    kept = [*reports, rep(64, 17.60 + 4 * 0.5)]
    assert observed_progress(TABLE, kept).epoch_s == pytest.approx(2.0 / (64 - 60.0159697))


def test_epochs_redone_after_a_resume_are_not_counted_twice() -> None:
    p = observed_progress(TABLE, [rep(1, 10), rep(2, 20), rep(3, 30), rep(2, 100, restart=1),
                                  rep(3, 110, restart=1), rep(4, 120, restart=1)])
    assert p.bs_history == ((32, 4),) and p.epochs_done == 4


def test_an_earlier_runs_report_after_the_next_runs_is_not_its_progress() -> None:
    """A user walkthrough: a script that ignored the checkpoint signal died, and its
    child, lost by Slurm's proctrack/linuxproc, trained on beside the requeued run and
    reported epoch 8 while that run was at 4. The newest run's latest report is the
    job's progress, its batch size too; an earlier run's spool flushed before it counts
    as before."""
    stray = [rep(1, 10), rep(2, 20), rep(1, 100, restart=1), rep(5, 105, bs=64),
             rep(2, 110, restart=1), rep(8, 115, bs=64)]
    p = observed_progress(TABLE, stray)
    assert p.epochs_done == 2 and p.bs == 32 and p.bs_history == ((32, 2),)
    # the newest run gave its batch size once, then epochs only (a review: its size and
    # history followed the stray's)
    quiet = [ProgressReport(1, ReportKind.PROGRESS, at, epoch=e, restart_count=run,
                            batch_size=bs)
             for e, at, run, bs in ((1, 10, 0, 32), (2, 20, 0, 32), (2, 100, 1, 32),
                                    (5, 105, 0, 64), (3, 110, 1, None), (8, 115, 0, 64))]
    p = observed_progress(TABLE, quiet)
    assert (p.epochs_done, p.bs, p.bs_history) == (3, 32, ((32, 3),))
    flushed = [rep(1, 10), rep(2, 20), rep(3, 25), rep(2.5, 100, restart=1)]
    assert observed_progress(TABLE, flushed).epochs_done == 2.5


def test_a_runs_start_up_is_not_an_epoch_time_once_one_was_measured() -> None:
    # measured 10 s/epoch; requeued at 3.5, the restart reports at start, restores for
    # 40 s, then trains: the interval 3.5 -> 4 is 45 s, not 90 s an epoch
    reports = [rep(1, 10), rep(2, 20), rep(3, 30), rep(3.5, 200, restart=1),
               rep(4, 245, restart=1)]
    assert observed_progress(TABLE, reports).epoch_s == 10.0
    assert observed_progress(TABLE, [*reports, rep(5, 257, restart=1)]).epoch_s == 12.0


def test_an_elastic_jobs_own_reports_give_its_rate_at_each_count_it_ran_on() -> None:
    # run 0 on 2 GPUs: 10 s an epoch; run 1 on 4 GPUs: 6 s (after a 40 s restore)
    reports = [rep(0, 0), rep(1, 10), rep(2, 20), rep(3, 30), rep(3, 35, restart=1),
               rep(4, 81, restart=1), rep(5, 87, restart=1), rep(6, 93, restart=1)]
    # relative to the count of the latest measurement (4)
    assert measured_rates(reports, {0: 2, 1: 4}) == {4: 1.0, 2: pytest.approx(0.6)}
    # only the restore interval on 4 GPUs: not a rate; 2 GPUs is the only count measured
    assert measured_rates([*reports[:5], rep(4, 81, restart=1)], {0: 2, 1: 4}) == {2: 1.0}
    # the epoch time at bs 32 is the 4-GPU run's; before that run's second interval, the
    # 2-GPU run's converted to 4 (a run's first interval does not replace an earlier
    # measurement); with no run's count known, the latest as it is
    guess = replace(TABLE, rate_by_gpus=((2, 1.0), (4, 1.6)))
    assert observed_elastic(guess, reports, {0: 2, 1: 4}, 4).epoch_s == pytest.approx(6.0)
    assert observed_elastic(guess, reports[:6], {0: 2, 1: 4}, 4).epoch_s == pytest.approx(
        10.0 * 1.0 / 1.6)
    assert observed_elastic(guess, reports, {}, 4).epoch_s == pytest.approx(6.0)


def test_the_median_ratio_over_the_batch_sizes_both_counts_measured() -> None:
    on2 = [rep(0, 0, bs=32), rep(1, 10, bs=32), rep(2, 20, bs=32), rep(2, 20, bs=64),
           rep(3, 26, bs=64), rep(3, 26, bs=128), rep(4, 30, bs=128)]
    on4 = [rep(4, 40, bs=32, restart=1), rep(4.5, 50, bs=32, restart=1),
           rep(5.5, 55, bs=32, restart=1), rep(5.5, 55, bs=64, restart=1),
           rep(6.5, 59, bs=64, restart=1), rep(6.5, 59, bs=128, restart=1),
           rep(7.5, 61, bs=128, restart=1)]
    # ratios of 2-GPU to 4-GPU throughput: 5/10, 4/6, 2/4 -> median 0.5
    assert measured_rates(on2 + on4, {0: 2, 1: 4}) == {4: 1.0, 2: pytest.approx(0.5)}


def test_counts_not_run_on_take_the_tables_or_the_priors_ratio_to_the_nearest_measured(
        ) -> None:
    prior = relative_rates({4: 1.0}, [1, 2, 4, 8], 4)  # what the table gives an unknown model
    measured = {4: 1.0, 2: 0.5}  # measured: halving to 2 GPUs halves it (the prior says /1.6)
    rates = merged_rates(prior, measured, current=4)
    assert rates[4] == 1.0 and rates[2] == 0.5
    assert rates[1] == pytest.approx(0.5 / 1.6)  # from 2, the nearest measured, by the prior
    assert rates[8] == pytest.approx(1.6)  # from 4
    assert merged_rates(prior, {4: 1.0}, current=4) == prior  # one count: nothing to compare
    # a job now pending at 8 GPUs (its GRES changed), measured on 2 and 4: relative to 8
    prior8 = relative_rates({8: 1.0}, [1, 2, 4, 8], 8)
    at8 = merged_rates(prior8, {4: 2.0, 2: 1.0}, current=8)
    assert at8[8] == 1.0 and at8[4] == pytest.approx(1 / 1.6)
    assert at8[2] == pytest.approx(0.5 / 1.6)  # the measured 2:4 ratio survives


def _at(at_s: float, epoch: float, restart: int) -> ProgressReport:
    return ProgressReport(1, ReportKind.PROGRESS, at_s, epoch, None, restart_count=restart)


def test_an_elastic_jobs_epoch_time_comes_from_the_count_it_was_measured_on() -> None:
    """One pass over an elastic job's reports gives its progress, its rates per count and
    the count its epoch time was measured on. Reports without a batch size are at the
    job's own (the guess's) batch size."""
    guess = JobProgress(bs=32, epoch_s=100.0, epoch_s_by_bs=((32, 100.0), (64, 60.0)),
                        rate_by_gpus=((1, 1.0), (2, 1.8), (4, 3.0)))
    on_two = [_at(10, 1, 0), _at(55.5, 2, 0), _at(101, 3, 0)]  # 45.5 s an epoch on 2 GPUs
    resized = observed_elastic(guess, [*on_two, _at(200, 3, 1)], {0: 2, 1: 4}, 4)
    # nothing measured on 4 GPUs yet: 45.5 s converted by the rates 1.8 -> 3.0
    assert resized.epochs_done == 3 and resized.bs == 32
    assert resized.epoch_s == pytest.approx(45.5 * 1.8 / 3.0)
    measured = observed_elastic(
        guess, [*on_two, _at(200, 3, 1), _at(230, 4, 1), _at(250, 5, 1), _at(270, 6, 1)],
        {0: 2, 1: 4}, 4)
    rates = dict(measured.rate_by_gpus)
    assert measured.epoch_s == pytest.approx(20.0)  # measured on the count it runs on
    assert rates[4] / rates[2] == pytest.approx(45.5 / 20.0)  # both counts its own


def test_a_runs_first_interval_only_lowers_the_tables_epoch_time() -> None:
    """The first interval of a run holds its start-up (restore, loading): an upper bound
    on the epoch time, never a reason to raise the table's. Seen live: a 10-epoch job
    preempted 0.25 epochs in read 4.7 s an epoch for 2.0 (its 0.67 s restore inside
    1.17 s), 2.3 times its length, and waited 80 rounds for it."""
    table = JobProgress(bs=5, epoch_s=2.0, epoch_s_by_bs=((5, 2.0),))
    start = [_at(714.92, 0.0, 0), _at(716.09, 0.2504, 0)]
    assert observed_progress(table, start).epoch_s == pytest.approx(2.0)
    slow_table = replace(table, epoch_s=10.0, epoch_s_by_bs=((5, 10.0),))
    assert observed_progress(slow_table, start).epoch_s == pytest.approx(1.17 / 0.2504,
                                                                         rel=1e-3)
    # less a start-up of at most the restart cost (live: the restore and half of Slurm's
    # scheduling pass), it bounds the epoch time from below, and the table stands
    assert observed_progress(table, start, startup_s=1.0).epoch_s == pytest.approx(2.0)
    # an interval of the run that holds no start-up is the measurement, either way
    on = [*start, _at(718.09, 1.2504, 0)]
    assert observed_progress(table, on).epoch_s == pytest.approx(2.0)
    assert observed_progress(slow_table, on).epoch_s == pytest.approx(2.0)


def test_an_elastic_runs_first_interval_is_compared_with_the_table_on_its_own_count() -> None:
    """A first interval measured on 4 GPUs bounds the 4-GPU epoch time: it may only lower
    the table's time there, and converted to the count the job holds now it may not
    raise the table's time at that count."""
    at_one = JobProgress(bs=32, epoch_s=80.0, epoch_s_by_bs=((32, 80.0),),
                         rate_by_gpus=((1, 1.0), (2, 1.8), (4, 3.0)))  # table on 4: 26.7 s
    slow_start = [_at(0, 0, 0), _at(30, 1, 0)]  # 30 s on 4 GPUs: start-up inside
    assert observed_elastic(at_one, slow_start, {0: 4}, 1).epoch_s == pytest.approx(80.0)
    fast_start = [_at(0, 0, 0), _at(20, 1, 0)]  # 20 s on 4: below the table, so it counts
    assert observed_elastic(at_one, fast_start, {0: 4}, 1).epoch_s == pytest.approx(60.0)
    # with a start-up of at most 1 s, at least 29 s an epoch on 4: 87 s on 1
    assert observed_elastic(at_one, slow_start, {0: 4}, 1,
                            startup_s=1.0).epoch_s == pytest.approx(87.0)


def test_runs_too_short_for_a_second_report_still_raise_a_table_that_is_too_fast() -> None:
    """A user walkthrough: a job preempted every few rounds, one report at its start and
    one an epoch later in each run, had only first intervals, which could only lower
    the table's time: on GPUs three times slower than the table (a site's own, beside
    the bundled V100 table) it was planned at the table's 100 s an epoch for ever. Less
    a start-up of at most the restart cost, each run's interval says at least 280 s."""
    runs = [rep(0, 0), rep(1, 340), rep(1, 1000, restart=1), rep(2, 1340, restart=1)]
    assert observed_progress(TABLE, runs).epoch_s == 100.0  # no bound from below
    assert observed_progress(TABLE, runs, startup_s=60.0).epoch_s == pytest.approx(280.0)
    # a start-up that may be as long as the interval says nothing
    assert observed_progress(TABLE, runs, startup_s=400.0).epoch_s == 100.0
    # a table too slow is still lowered to the interval itself, start-up and all
    assert observed_progress(replace(TABLE, epoch_s_by_bs=((32, 500.0),), epoch_s=500.0),
                             runs, startup_s=60.0).epoch_s == pytest.approx(340.0)


def test_a_first_interval_replaces_a_prior_as_it_would_not_a_table() -> None:
    """A model the table does not know is planned from a prior (its time limit over its
    epochs, or 600 s): the job's own first interval, start-up and all, is better than that
    and replaces it even when longer."""
    prior = JobProgress(bs=16, epoch_s=600.0, epoch_s_by_bs=((16, 600.0),),
                        epoch_s_is_prior=True)
    start = [rep(0, 0, bs=16), rep(1, 1800, bs=16)]
    assert observed_progress(prior, start).epoch_s == pytest.approx(1800.0)
    table = replace(prior, epoch_s_is_prior=False)
    assert observed_progress(table, start).epoch_s == pytest.approx(600.0)
    assert observed_progress(table, start, startup_s=60.0).epoch_s == pytest.approx(1740.0)


def test_a_running_job_reads_forward_from_its_latest_report_up_to_the_next_epoch() -> None:
    """Between its reports (one an epoch) a running job is not standing still: 30 s after
    epoch 3 at 100 s an epoch it has done 3.3, never past epoch 4 without a report, nor
    past its last epoch."""
    reports = [rep(1, 100), rep(2, 200), rep(3, 300)]
    seen = observed_progress(TABLE, reports)
    assert advanced(seen, reports, 0, 330.0, epochs=10).epochs_done == pytest.approx(3.3)
    assert advanced(seen, reports, 0, 900.0, epochs=10).epochs_done == 4.0
    partial = [*reports, rep(3.75, 310)]  # a partial epoch saved at a checkpoint, trained on
    assert advanced(observed_progress(TABLE, partial), partial, 0, 900.0,
                    epochs=10).epochs_done == 4.0
    assert advanced(seen, reports, 0, 900.0, epochs=3).epochs_done == 3.0
    assert advanced(seen, reports, 0, 300.0, epochs=10) == seen  # no time since


def test_nothing_is_read_forward_before_a_runs_first_report_or_after_an_ack() -> None:
    """A requeued run's restore is no progress, and a job that acknowledged its checkpoint
    stops at what it saved."""
    reports = [rep(1, 100), rep(2, 200)]
    seen = observed_progress(TABLE, reports)
    assert advanced(seen, reports, 1, 900.0, epochs=10) == seen  # run 1 has not reported
    acked = [*reports, rep(2.5, 250), ProgressReport(1, ReportKind.CHECKPOINTED, 251.0)]
    seen = observed_progress(TABLE, acked)
    assert advanced(seen, acked, 0, 900.0, epochs=10) == seen
    assert advanced(replace(seen, epoch_s=0.0), reports, 0, 900.0, epochs=10).epoch_s == 0.0
    # found by review: a stopping job reports its saved epoch again after the ack
    again = [*acked, rep(2.5, 251.01)]
    seen = observed_progress(TABLE, again)
    assert advanced(seen, again, 0, 900.0, epochs=10).epochs_done == 2.5
    # kept after its ack, it trains on: read forward again from its next report
    trained = [*again, rep(3, 300)]
    seen = observed_progress(TABLE, trained)
    assert advanced(seen, trained, 0, 330.0, epochs=10).epochs_done == pytest.approx(
        3 + 30 / seen.epoch_s)


def test_an_epoch_a_hair_under_a_whole_number_is_that_epochs_end() -> None:
    """Found by review: 2.9999999999 (float accumulation) would leave 1e-10 to read."""
    reports = [rep(2.9999999999, 300)]
    seen = observed_progress(TABLE, reports)
    assert advanced(seen, reports, 0, 350.0, epochs=10).epochs_done == pytest.approx(3.5)


def test_a_report_without_a_batch_size_is_at_the_last_one_reported() -> None:
    """The batch size is optional in a report: a job that reports it once (at a GNS
    doubling) and then epochs only trains at that size. Found by a review: from the
    second report without one it read as the job's first size again, its history and
    epoch times went to that size, and calibration scaled a right table by 0.6."""
    table = JobProgress(bs=32, epoch_s=100.0, epoch_s_by_bs=((32, 100.0), (64, 60.0)))

    def report(epoch: int, at_s: float, bs: int | None = None) -> ProgressReport:
        return ProgressReport(1, ReportKind.PROGRESS, at_s, epoch=epoch, batch_size=bs)

    sparse = [report(1, 100, 32), report(2, 200), report(3, 260, 64), report(4, 320),
              report(5, 380)]
    full = [report(1, 100, 32), report(2, 200, 32), report(3, 260, 64), report(4, 320, 64),
            report(5, 380, 64)]
    got, want = observed_progress(table, sparse), observed_progress(table, full)
    assert (got.bs, got.epoch_s, got.bs_history) == (want.bs, want.epoch_s, want.bs_history)
    assert got.bs == 64 and got.bs_history == ((32, 2), (64, 3))
    assert dict(got.epoch_s_by_bs) == {32: 100.0, 64: 60.0}


def test_reports_a_hair_apart_give_no_infinite_epoch() -> None:
    """Found by a review: a job's owner reported epochs 0, 5e-324 and 1e-323 (legal
    values): seconds per epoch came out infinite, and so did the remaining time, which
    no round could write to the store (every round failed, after a restart too)."""
    import math

    spec = JobSpec(1, "ResNet-18", 32, 1, AdaptationMode.STATIC, 0.0, 10)
    seen = observed_progress(TABLE, [rep(0.0, 10), rep(5e-324, 20), rep(1e-323, 30)])
    assert math.isfinite(seen.epoch_s)
    assert math.isfinite(estimate(Job(spec, seen, Phase.RUNNING)).remaining_s)
