"""The DataLoader loop's arithmetic on a scripted loader and a fake clock: warm-up, windows, pools.

No torch here: a loader is any iterable, and its batches are ``(samples, bytes)`` pairs, as
``sizes_or_tensor`` reads preflight's own. Every batch advances the fake clock by a fixed step,
so each window's rate has one right value.
"""

from __future__ import annotations

import itertools

import pytest

from preflight.io.dataset import Spent

from preflight.checks.base import Budget
from preflight.loading.loop import (MIN_WINDOW_S, WARMUP_BATCHES_PER_WORKER, BatchPuller, EmptyLoader, Taken,
                                              Window, pooled, windows)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Scripted:
    """An endless loader: ``warmup`` batches of a million samples, then ``samples`` per batch, each ``step_s`` long."""

    def __init__(self, clock: Clock, warmup: int, samples: int = 10, nbytes: int = 1_000_000, step_s: float = 0.01):
        self.clock, self.warmup, self.samples, self.nbytes, self.step_s = clock, warmup, samples, nbytes, step_s
        self.served = 0

    def __iter__(self):
        for index in itertools.count():
            self.clock.now += self.step_s
            self.served += 1
            yield (1_000_000, 0) if index < self.warmup else (self.samples, self.nbytes)


def test_warm_up_batches_never_land_in_a_window():
    clock = Clock()
    workers = 3
    loader = Scripted(clock, warmup=workers * WARMUP_BATCHES_PER_WORKER, step_s=1 / 64)  # exact in binary
    taken = windows(BatchPuller(loader, clock=clock), workers, Budget(2.59375, 60.0), min_windows=3)
    assert WARMUP_BATCHES_PER_WORKER == 2  # a worker prefetches 2 batches by default (prefetch_factor)
    assert len(taken) >= 3
    # 10 samples and 1 MB per 1/64 s: exactly 640 samples/s and 64 MB/s in every window
    assert all(w.samples_per_s == 640.0 and w.mb_per_s == 64.0 for w in taken)
    assert all(w.utilization_pct == 100.0 for w in taken)  # no emulated step: AU is not measured
    # the 6 warm-up steps (6/64 s) come out of the duration: an eighth of the 2.5 s left is 0.3125 s, 20 steps,
    # and a window ends on a whole round of the 3 workers' batches: 21 steps
    assert loader.served == 6 + 21 * len(taken)


def test_a_window_ends_on_the_step_that_crosses_its_length_and_reports_utilization():
    clock = Clock()
    loader = Scripted(clock, warmup=0, samples=4, nbytes=400, step_s=0.25)
    window = BatchPuller(loader, clock=clock).window(1.0)
    assert window == Window(4 * 4 / 1.0, 4 * 400 / 1.0 / 1e6, 100.0, seconds=1.0)
    assert loader.served == 4


class Bunched(Scripted):
    """``workers`` workers reading at one pace: each round, their batches arrive together, every ``step_s`` x workers."""

    def __init__(self, clock: Clock, workers: int, samples: int, step_s: float):
        super().__init__(clock, warmup=0, samples=samples, step_s=step_s)
        self.workers = workers

    def __iter__(self):
        for index in itertools.count():
            if index % self.workers == 0:  # the round's first batch waits for all of them; the rest are ready
                self.clock.now += self.step_s * self.workers
            self.served += 1
            yield self.samples, self.nbytes


def test_windows_end_on_a_whole_round_of_the_workers_so_bunched_batches_are_not_cut_off():
    """Issue 32 case 5: 2 workers behind an 88 MB/s throttle deliver their batches in pairs. Windows of 0.1 s began
    after a pair and ended at the next pair's first batch, missing one batch of their time: 0.82x the throttle's
    rate in every pool. Ending each window on a whole round of the workers' batches makes the rate exact."""
    clock = Clock()
    loader = Bunched(clock, workers=2, samples=64, step_s=0.08125)  # a batch of 64 per worker every 0.1625 s
    taken = windows(BatchPuller(loader, clock=clock), 2, Budget(1.0, 60.0), min_windows=3)
    assert len(taken) >= 3
    assert all(w.samples_per_s == pytest.approx(64 / 0.08125) for w in taken)  # 787.7 samples/s, every window
    assert all(w.seconds == pytest.approx(2 * 0.08125 * round(w.seconds / (2 * 0.08125))) for w in taken)


def test_an_emulated_step_time_counts_as_compute_in_the_utilization(monkeypatch):
    clock = Clock()
    loader = Scripted(clock, warmup=0, samples=1, step_s=0.1)
    puller = BatchPuller(loader, step_time_s=0.1, clock=clock)
    monkeypatch.setattr("preflight.loading.loop.time.sleep", lambda s: setattr(clock, "now", clock.now + s))
    window = puller.window(1.0)
    # each step: 0.1 s waiting for the batch + 0.1 s of emulated compute; 5 steps reach 1.0 s
    assert window.utilization_pct == pytest.approx(50.0)
    assert window.samples_per_s == pytest.approx(5.0)


def test_an_epoch_that_ends_ends_the_pass_and_an_empty_one_is_an_error():
    """Issue 32: the loader is never restarted: a second epoch would read the same samples again, from a cache."""
    batches = [(2, 20), (3, 30)]
    puller = BatchPuller(batches)
    assert [puller._next() for _ in range(2)] == [(2, 20), (3, 30)]
    with pytest.raises(Spent, match="ended after 2 batches"):
        puller._next()
    assert puller.spent and puller.epochs_ended == 1
    with pytest.raises(EmptyLoader, match="yields no batch"):
        BatchPuller([])._next()


def test_a_window_the_pass_ends_in_holds_the_steps_it_had_and_windows_stop_there():
    clock = Clock()
    puller = BatchPuller([(4, 40)] * 10, count=lambda batch: (clock.advance(0.5), batch)[1], clock=clock)
    taken = windows(puller, 1, Budget(60.0, 120.0), min_windows=2)
    # 2 warm-up batches, then windows of 60/8 s: the 8 batches left (4 s) end the pass inside the first one
    assert [round(w.samples_per_s, 6) for w in taken] == [8.0] and puller.spent
    assert taken.stopped.startswith("the pass over the data ended after 10 batches")


def test_a_pass_inside_the_warm_up_is_measured_whole_its_start_included():
    clock = Clock()
    puller = BatchPuller([(4, 40)] * 3, count=lambda batch: (clock.advance(0.5), batch)[1], clock=clock)
    taken = windows(puller, 4, Budget(60.0, 120.0))  # a warm-up of 8 batches; the pass holds 3
    assert [round(w.samples_per_s, 6) for w in taken] == [8.0]  # 12 samples in 1.5 s
    assert "inside the warm-up: the rate includes the workers' start" in taken.stopped


def test_a_pass_that_ends_exactly_with_the_warm_up_is_measured_whole_not_an_empty_window_list():
    """The pass's end met by the first window after the warm-up: no window at all must not be a division by zero
    (seen once under load in CI, where the storage check's share left the loader exactly its warm-up)."""
    clock = Clock()
    puller = BatchPuller([(4, 40)] * 2, count=lambda batch: (clock.advance(0.5), batch)[1], clock=clock)
    taken = windows(puller, 1, Budget(60.0, 120.0))  # a warm-up of 2 batches; the pass holds exactly 2
    assert [round(w.samples_per_s, 6) for w in taken] == [8.0]  # 8 samples in 1 s
    assert "at the end of the warm-up: the rate includes the workers' start" in taken.stopped


def test_finish_epoch_reads_to_the_epochs_end_through_count_or_stops_at_the_time():
    counted = []
    puller = BatchPuller([(0, 1), (0, 2), (0, 3), (0, 4)], count=lambda batch: counted.append(batch) or batch)
    puller._next()
    assert puller.epochs_ended == 0
    assert puller.finish_epoch(60.0) is True
    assert counted == [(0, 1), (0, 2), (0, 3), (0, 4)] and puller.epochs_ended == 1  # never restarted
    clock = Clock()
    endless = BatchPuller(Scripted(clock, warmup=0, step_s=0.5), clock=clock)
    assert endless.finish_epoch(2.0) is False and endless.epochs_ended == 0
    assert clock.now == pytest.approx(2.0)  # four 0.5 s batches, then the time was up


def test_pools_report_the_mean_of_their_rates_not_the_median():
    rates = iter([100.0, 100.0, 400.0])  # median 100, mean 200
    started, shares = [], []

    def start_pool():
        started.append(BatchPuller([]))
        return started[-1]

    def take(puller, share, min_windows):
        shares.append((share, min_windows))
        rate = next(rates)
        taken = Taken([Window(rate, rate / 10, 100.0), Window(rate, rate / 10, 100.0)])
        taken.stopped = f"stopped at {rate}"
        return taken

    pools = pooled(start_pool, take, Budget(3.0, 60.0), 3, clock=Clock())
    assert pools.rate == 200.0 and pools.mb_rate == 20.0
    assert pools.rates == (100.0, 100.0, 400.0) and pools.mb_rates == (10.0, 10.0, 40.0)
    assert pools.stopped == "stopped at 400.0" and pools.last is started[-1] and len(started) == 3
    assert shares == [(Budget(1.0, 60.0), 2)] * 3  # an equal share each (starting took no time), at least 2 windows
    assert pools.method == ", mean of 3 fresh worker pools" and pools.shortfall() == ""


def test_pools_and_windows_are_weighed_by_their_time_as_total_samples_over_total_time():
    """A mean of window rates runs high where windows differ in length (1 s at 100 and 3 s at 300 samples/s is 1,000
    samples in 4 s: 250, not 200), and a short pool weighs as much as a long one."""
    times = iter([(1.0, 3.0), (4.0,)])

    def take(puller, share, min_windows):
        spans = next(times)
        return Taken([Window(100.0 * s, 10.0 * s, 100.0, s) for s in spans])

    pools = pooled(lambda: BatchPuller([]), take, Budget(3.0, 60.0), 2, clock=Clock())
    assert pools.rates == (250.0,  400.0) and pools.seconds == (4.0, 4.0)
    assert pools.rate == 325.0 and pools.mb_rate == 32.5  # (1,000 + 1,600 samples) / 8 s


@pytest.mark.parametrize("inside_warm_up", [True, False])
def test_a_later_pool_that_the_pass_ends_before_its_second_window_is_the_pass_s_tail_and_is_not_counted(inside_warm_up):
    """Issue 32 case 5, behind an 88 MB/s throttle: the pass's last batch read by a fresh pool inside its warm-up (its
    workers' start included) came in at 1,627 samples/s, and in its first window (batches read ahead in the warm-up,
    delivered at once) at 12,485, beside pools at 500-800: the job's epoch starts its workers once."""
    started = []

    def start_pool():
        started.append(BatchPuller([]))
        started[-1].samples_total = 64 * len(started)
        return started[-1]

    def take(puller, share, min_windows):
        if len(started) < 3:
            return Taken([Window(800.0, 80.0, 100.0, 0.5)])
        puller.spent = True
        tail = Taken([Window(1627.0, 162.7, 100.0, 0.1)])
        tail.whole_pass, tail.stopped = inside_warm_up, "the pass over the data ended after 5 batches"
        return tail

    pools = pooled(start_pool, take, Budget(4.0, 60.0), 8, clock=Clock())
    assert len(started) == 3 and pools.rates == (800.0, 800.0) and pools.rate == 800.0
    assert pools.tail == 192 and pools.stopped == "the pass over the data ended, 192 samples into a fresh pool"
    assert pools.method == (", mean of 2 fresh worker pools continuing one pass over the data (it ended before 8); the "
                            "pass's last 192 samples, read by a fresh pool before its second window, not counted")


def test_a_pools_rate_is_the_mean_of_its_windows_and_one_pool_takes_five():
    shares = []

    def take(puller, share, min_windows):
        shares.append(min_windows)
        return Taken([Window(10.0, 1.0, 100.0), Window(30.0, 2.0, 100.0), Window(20.0, 6.0, 100.0)])

    pools = pooled(lambda: BatchPuller([]), take, Budget(3.0, 60.0), 1, clock=Clock())
    assert (pools.rates, pools.mb_rates) == ((20.0,), (3.0,))
    assert shares == [5] and pools.method == ""
    pooled(lambda: BatchPuller([]), take, Budget(3.0, 60.0), 2, clock=Clock())
    assert shares[-1] == 3  # ceil(5 / 2)


def test_windows_by_default_are_an_eighth_of_the_duration_and_at_least_five_at_a_3_percent_target():
    clock = Clock()
    loader = Scripted(clock, warmup=2, step_s=1 / 64)
    taken = windows(BatchPuller(loader, clock=clock), 1, Budget(8.0, 60.0))
    # steady rates stop sampling on spread once half the budget (4 s, 4 windows of 8 s / 8) has passed,
    # but never before the fifth window; a window of 1 s is 64 steps of 1/64 s
    assert taken.stopped == "spread 0.0% <= 3% after 5 samples"
    assert len(taken) == 5 and loader.served == 2 + 5 * 64
    assert clock.now == 2 / 64 + 5.0


def test_windows_sample_on_samples_per_second_not_megabytes():
    # bytes per window are steady but samples alternate 10 and 30 per batch, window by window:
    # sampled on samples/s the spread never falls to 3%, so the budget ends it
    clock = Clock()

    class Alternating(Scripted):
        def __iter__(self):
            for index in itertools.count():
                self.clock.now += self.step_s
                self.served += 1
                yield (10 if (index // 32) % 2 == 0 else 30, self.nbytes)

    loader = Alternating(clock, warmup=0, step_s=1 / 64)
    taken = windows(BatchPuller(loader, clock=clock), 0, Budget(4.0, 60.0), min_windows=3)
    assert [w.samples_per_s for w in taken[:2]] == [640.0, 1920.0] and {w.mb_per_s for w in taken} == {64.0}
    assert taken.stopped.startswith("time budget 4s spent after")


def test_utilization_is_capped_at_100_percent_when_the_clock_counts_less_than_the_emulated_steps(monkeypatch):
    clock = Clock()
    loader = Scripted(clock, warmup=0, samples=1, step_s=0.0)
    puller = BatchPuller(loader, step_time_s=0.1, clock=clock)
    # a coarse clock that sees only half of each emulated step: computed AU 200%, reported 100%
    monkeypatch.setattr("preflight.loading.loop.time.sleep", lambda s: setattr(clock, "now", clock.now + s / 2))
    assert puller.window(1.0).utilization_pct == 100.0


def test_an_empty_loader_says_its_dataset_is_empty():
    with pytest.raises(EmptyLoader) as caught:
        BatchPuller([])._next()
    assert str(caught.value) == "the DataLoader yields no batch: the dataset is empty"


def test_each_pool_is_measured_on_its_own_fresh_puller():
    started, measured = [], []

    def start_pool():
        started.append(BatchPuller([]))
        return started[-1]

    def take(puller, share, min_windows):
        measured.append(puller)
        return Taken([Window(1.0, 1.0, 100.0)])

    pooled(start_pool, take, Budget(2.0, 60.0), 2, clock=Clock())
    assert measured == started and measured[0] is not measured[1]


def test_the_warm_up_comes_out_of_the_duration_not_on_top_of_it():
    clock = Clock()

    def uneven():  # 2 warm-up steps, then 10, 30 and 50 samples in turn: a spread that never stops sampling early
        for index in itertools.count():
            clock.now += 0.25
            yield (1_000_000, 0) if index < 2 else ((10, 30, 50)[(index - 2) % 3], 0)

    taken = windows(BatchPuller(uneven(), clock=clock), 1, Budget(2.0, 60.0), min_windows=3)
    # the warm-up took 0.5 s of the 2 s; 1.5 s left: windows of max(0.1, 1.5 / 8) s, one 0.25 s step each
    assert [w.samples_per_s for w in taken] == [40.0, 120.0, 200.0] * 2
    assert clock.now == 2.0  # warm-up and windows together ended on the duration, not 0.5 s past it


def test_a_pools_start_comes_out_of_its_share_of_the_duration():
    clock = Clock()
    shares = []

    def start_pool():  # a DataLoader's workers take 0.125 s to start
        clock.now += 0.125
        return BatchPuller([], clock=clock)

    def take(puller, share, min_windows):
        shares.append(share.duration_s)
        clock.now += share.duration_s
        return Taken([Window(10.0, 1.0, 100.0)])

    pools = pooled(start_pool, take, Budget(3.0, 60.0), 8, clock=clock)
    assert shares == [0.25] * 8  # 3 s / 8 pools = 0.375 s each, less its 0.125 s start
    assert clock.now == 3.0 and len(pools.rates) == 8 and pools.shortfall() == ""


def test_pools_that_cost_more_than_their_share_are_left_out_and_the_method_and_a_warning_say_so():
    clock = Clock()

    def start_pool():  # each pool's start alone takes longer than its 0.375 s share of 3 s
        clock.now += 0.5
        return BatchPuller([], clock=clock)

    def take(puller, share, min_windows):
        assert share.duration_s == 0.0  # nothing is left of its share ...
        clock.now += min_windows * MIN_WINDOW_S  # ... and its windows still take their floor
        return Taken([Window(10.0, 1.0, 100.0)] * min_windows)

    pools = pooled(start_pool, take, Budget(3.0, 60.0), 8, clock=clock)
    # a pool takes 0.7 s; another after the fifth (3.5 s) would end at 4.2 s, past 1.25 x 3 s
    assert len(pools.rates) == 5 and pools.asked == 8 and clock.now == pytest.approx(3.5)
    assert pools.method == ", mean of 5 of 8 fresh worker pools"
    assert pools.shortfall() == ("5 of 8 worker pools fit in the duration (a pool took up to 0.70s to start, warm up "
                                 "and measure): raise duration to 6s to measure them all, or set worker_pools: 5")


def test_the_duration_a_shortfall_names_holds_every_pool_with_the_phases_that_share_it():
    """Issue 35: "6 of 8 worker pools fit in the duration: raise duration" persisted after raising duration with
    worker_sweep, which takes half of it. The advice names a duration that works, counting the phases; measured
    again with that duration's share, every pool fits (a fake clock: the same costs, only the duration changed)."""
    clock = Clock()

    def start_pool():  # a pool's start: 0.5 s whatever its share
        clock.now += 0.5
        return BatchPuller([], clock=clock)

    def take(puller, share, min_windows):  # its windows: what is left of its share, at least their floor
        clock.now += max(share.duration_s, min_windows * MIN_WINDOW_S)
        return Taken([Window(10.0, 1.0, 100.0)] * min_windows)

    phases = ["the loader", "worker_sweep"]
    short = pooled(start_pool, take, Budget(6.0 / 2, 60.0), 8, clock=clock)  # duration 6 s, half of it the loader's
    advice = short.shortfall(phases)
    assert advice == ("5 of 8 worker pools fit in the duration (a pool took up to 0.70s to start, warm up and "
                      "measure): raise duration to 12s (split between the loader, worker_sweep) to measure them "
                      "all, or set worker_pools: 5")
    duration = float(advice.split("raise duration to ", 1)[1].split("s ", 1)[0])
    followed = pooled(start_pool, take, Budget(duration / len(phases), 60.0), 8, clock=clock)
    assert len(followed.rates) == 8 and followed.shortfall(phases) == ""
    fewer = pooled(start_pool, take, Budget(6.0 / 2, 60.0), 5, clock=clock)  # or the pools that fit
    assert len(fewer.rates) == 5 and fewer.shortfall(phases) == ""


def test_no_pool_starts_once_the_pass_has_handed_out_its_last_index():
    """Issue 32, the founding table at 88 MB/s: a pool closed at its slot's end had been sent the pass's last indices
    (its prefetch), and the next fresh pool's sampler began a second pass: '2 passes over the 3000 samples', 3,400-3,600
    files' worth read through the throttle. Once the sampler has handed out every index, the last pool delivers the rest."""
    started, handed = [], []

    def start_pool():
        started.append(BatchPuller([]))
        return started[-1]

    def take(puller, share, min_windows):
        handed.append(len(started) == 2)  # the second pool's windows take the pass's last indices
        return Taken([Window(100.0, 10.0, 100.0)])

    pools = pooled(start_pool, take, Budget(4.0, 60.0), 8, clock=Clock(), handed_out=lambda: handed[-1])
    assert len(started) == 2 and pools.last is started[-1] and pools.spent
    assert pools.method == ", mean of 2 fresh worker pools continuing one pass over the data (it ended before 8)"
    assert pools.shortfall() == ""  # a pass handed out is no shortfall of the duration


@pytest.mark.parametrize("left, pools_started", [(1500, 1), (5000, 2)])
def test_a_pass_that_would_end_within_the_duration_is_read_to_its_end_by_the_first_pool(left, pools_started):
    """Issue 32 case 5: behind a 286 MB/s throttle, fresh pools cut a 1.2 s pass into windows of a tenth of a second,
    each after a pause of the device, and read 1.1-1.3x what a plain DataLoader's epoch read. Where the first pool's
    rate says the rest of the pass ends within the duration (1,500 samples at 1,000/s in the 3.5 s left), that pool
    reads it to its end, as the job's one loader does; where it would not (5,000), fresh pools go on."""
    clock, started, calls = Clock(), [], []

    def start_pool():
        started.append(BatchPuller([]))
        return started[-1]

    def take(puller, share, min_windows):
        calls.append((len(started), share.duration_s, min_windows))
        clock.advance(0.5)
        return Taken([Window(1000.0, 100.0, 100.0, 0.5)])

    pools = pooled(start_pool, take, Budget(4.0, 60.0), 8, clock=clock, left_in_pass=lambda: left)
    assert len(started) >= pools_started
    if pools_started == 1:
        assert len(started) == 1 and calls[1] == (1, 3.5, 10**9)  # the same pool, the rest of the duration
        assert pools.rates == (1000.0,) and pools.seconds == (1.0,) and pools.shortfall() == ""
        assert pools.method == (", one worker pool reading on for the duration (at its first windows' rate the pass "
                                "would have ended within it)")  # this fake's pass never ends
    else:
        assert [c[0] for c in calls[:2]] == [1, 2]  # a fresh pool for the second slot


def test_a_pool_read_on_does_not_warm_up_again():
    clock = Clock()
    loader = Scripted(clock, warmup=4, step_s=1 / 64)
    puller = BatchPuller(loader, clock=clock)
    windows(puller, 2, Budget(1.0, 60.0), min_windows=2)
    served = loader.served
    more = windows(puller, 2, Budget(1.0, 60.0), min_windows=2)
    assert all(w.samples_per_s == 640.0 for w in more)  # no warm-up batch of a million samples in a window
    assert loader.served - served == sum(round(w.seconds * 64) for w in more)  # every step served is in a window


def test_windows_that_span_under_half_a_second_in_all_warn_short_and_name_the_dataset_that_would_span_it():
    from preflight.checks.dataloader.measuring import _short
    from preflight.loading.loop import Pools

    quick = Pools(rates=(5800.0,), mb_rates=(646.7,), stopped="", last=None, seconds=(0.15,))  # type: ignore[arg-type]
    warning = _short(quick, files=[None] * 1000, halves=False)
    assert warning.startswith("short: the windows of 1 worker pool in 150 ms;")
    # 5,800 samples/s x 0.5 s
    assert warning.endswith("a pass over 2,900 files or more would span 0.5 s (this check's pass is over 1,000)")
    halved = _short(quick, files=[None] * 1000, halves=True)  # each phase reads half: twice the files for 0.5 s
    assert halved.endswith("a pass over 5,800 files or more would span 0.5 s (this check's pass is over 500)")
    two = Pools(rates=(5000.0, 6000.0), mb_rates=(1.0, 1.0), stopped="", last=None,  # type: ignore[arg-type]
                seconds=(0.2, 0.29))
    assert _short(two, files=None, halves=False).startswith("short: the windows of 2 worker pools in 490 ms;")
    long_enough = quick._replace(seconds=(0.3, 0.2))
    assert _short(long_enough, files=[None] * 1000, halves=False) == ""  # 0.5 s in all: not short


def test_windows_are_contiguous_so_what_runs_between_them_is_counted_as_the_workers_time():
    """The memory reading after each window (``memory.Watched``) took time the workers went on reading in; left out
    of every window, a 1.2 s pass behind 286 MB/s read 1.11x what a plain loop timed end to end (issue 32 case 5)."""
    clock = Clock()

    class ReadsBetween(BatchPuller):
        def window(self, seconds):
            taken = super().window(seconds)
            clock.advance(0.25)  # as Watched reads the loader's smaps_rollup after each window
            return taken

    loader = Scripted(clock, warmup=2, step_s=1 / 64)
    taken = windows(ReadsBetween(loader, clock=clock), 1, Budget(4.0, 60.0), min_windows=3)
    warm_up_end = 2 / 64
    assert len(taken) >= 3
    # every window starts where the last ended: together they span from the warm-up's end to the last one's end
    assert sum(w.seconds for w in taken) == pytest.approx(clock.now - 0.25 - warm_up_end)
    assert all(w.samples_per_s < 640.0 for w in taken[1:])  # each later window holds the 0.25 s before it


class AtTimes:
    """One pass whose batches of ``samples`` (and 1,000 bytes per sample) arrive at the given clock times."""

    def __init__(self, clock: Clock, times, samples: int = 64):
        self.clock, self.times, self.samples = clock, list(times), samples

    def __iter__(self):
        for at in self.times:
            self.clock.now = max(self.clock.now, at)
            yield self.samples, self.samples * 1000


def throttled_pass(burst_batches: int, steps: int):
    """Batch times of a 2-worker pass behind a cgroup blk-throttle, as traced behind 286 MB/s (issue 32 case 5): the
    4 warm-up batches and ``burst_batches`` more within the first 80 ms (the throttle's allowance while the workers
    started), then the rate in 100 ms slices: 4 batches a slice, in pairs 18 ms apart, for ``steps`` slices."""
    times = [0.008 * i for i in range(4 + burst_batches)]
    for step in range(1, steps + 1):
        at = 0.08 + 0.1 * step
        times += [at, at, at + 0.018, at + 0.018]
    return times


def one_pool(loader, clock):
    """``pooled`` with one pool reading ``loader`` to its end in windows of a 4 s duration."""
    return pooled(lambda: BatchPuller(loader, clock=clock), lambda puller, share, least: windows(puller, 2, share, least),
                  Budget(4.0, 60.0), 1, clock=clock)


def test_a_throttle_s_burst_at_the_pass_s_start_is_not_read_as_its_rate():
    """Issue 32 case 5: behind 286 MB/s the gate's 1.2 s pass read 1.10-1.12x the setting, its windows' count over
    their time taking in the 6 batches the throttle let through while the workers started; its steady rate is 4
    batches (256 samples) a 100 ms slice: 2,560 samples/s."""
    clock = Clock()
    pools = one_pool(AtTimes(clock, throttled_pass(burst_batches=6, steps=10)), clock)
    counted = (6 + 40) * 64 / (1.098 - 0.024)  # the batches after the warm-up's 4th (at 0.024 s), over their time
    assert counted / 2560 > 1.05  # what the windows' count over their time reads
    assert pools.rate == pytest.approx(2560, rel=0.02)  # what the gate reads: the slope of the slices
    assert pools.mb_rate == pytest.approx(2.56, rel=0.02)  # 1,000 bytes a sample
    assert pools.burst > 0.03
    assert pools.method.endswith(f"; samples/s as the least-squares slope of samples delivered against time, "
                                 f"{pools.burst:.0%} below their count over the time: the device served a burst at "
                                 f"the pass's start or end that its steady rate does not hold")


def test_a_steady_loader_s_rate_is_its_count_over_its_time_and_no_burst_is_named():
    clock = Clock()
    pools = one_pool(AtTimes(clock, [0.01 * i for i in range(1, 201)]), clock)  # 64 samples every 10 ms
    assert pools.rate == pytest.approx(6400.0) and pools.burst == pytest.approx(0.0, abs=1e-9)
    assert pools.method == ""  # one pool over the pass, nothing to name


def test_a_stall_at_the_windows_start_is_counted_not_fitted_away():
    """A line through the count against time takes a stall at either end for an offset, as it takes a burst: 0.5 s
    without a batch after the warm-up, then 64 samples every 10 ms, has the slope 6,400 samples/s. The job waited
    that half second, and the count over the time (the lower) stands."""
    clock = Clock()
    warm_up = [0.01 * i for i in range(1, 5)]  # the 4th batch (2 workers x 2) at 0.04 s
    pools = one_pool(AtTimes(clock, warm_up + [0.54 + 0.01 * i for i in range(100)]), clock)
    assert pools.rate == pytest.approx(100 * 64 / (1.53 - 0.04)) and pools.burst == 0.0


def test_a_pass_that_slows_at_its_end_is_read_at_its_slope_below_its_count():
    """80 batches every 10 ms, then 20 every 50 ms: 3,491 samples/s counted over the time, a line through the count
    3,320. Each moment weighs alike in the fit, so the slow second, the rate a longer pass would go on at, weighs
    more than in the count, whose fast batches carry it."""
    clock = Clock()
    fast = [0.01 * i for i in range(1, 81)]
    pools = one_pool(AtTimes(clock, fast + [0.8 + 0.05 * i for i in range(1, 21)]), clock)
    counted = 96 * 64 / (1.8 - 0.04)  # after the warm-up's 4th batch, at 0.04 s
    assert pools.rate == pytest.approx(3320, rel=0.01) and pools.rate < counted


def test_a_pool_read_on_counts_the_time_between_its_two_readings_of_windows():
    """The first pool's windows in its slot, then read on to the pass's end: what ran between the two (the read-on's
    decision) was time the workers went on reading in, and a window that began after it took in their batches in
    no time (a gap of 6-8 ms in a 1.2 s pass behind 286 MB/s)."""
    clock = Clock()
    times = [0.01 * i for i in range(1, 301)]  # 64 samples every 10 ms, 3 s in all

    def handed_out():
        clock.advance(0.004)  # each call: the time the decisions between the takes cost
        return False

    pools = pooled(lambda: BatchPuller(AtTimes(clock, times), clock=clock),
                   lambda puller, share, least: windows(puller, 2, share, least), Budget(4.0, 60.0), 8, clock=clock,
                   handed_out=handed_out, left_in_pass=lambda: 64 * 200)
    assert pools.read_on and len(pools.rates) == 1
    assert pools.seconds[0] == pytest.approx(3.0 - 0.04)  # from the warm-up's end to the pass's, no gap left out
    assert pools.rate == pytest.approx(6400.0, rel=0.01)


def test_a_first_pool_whose_sampler_handed_out_the_pass_s_last_index_reads_on_to_its_end():
    """A 0.6 s pass behind 286 MB/s: by the end of the first pool's slot its sampler had handed out every index, so
    no pool followed and the first stopped there, its workers' last batches never read (0.94 of the dataset went
    through the throttle) and 0.4 s of the pass measured. What is left is its prefetch: it reads on to the end."""
    clock, calls = Clock(), []

    def take(puller, share, min_windows):
        calls.append((share.duration_s, min_windows))
        clock.advance(0.5)
        return Taken([Window(1000.0, 100.0, 100.0, 0.5)])

    pools = pooled(lambda: BatchPuller([]), take, Budget(4.0, 60.0), 8, clock=clock, handed_out=lambda: True,
                   left_in_pass=lambda: 0)
    assert calls == [(0.5, 2), (3.5, 10**9)]  # its slot, then the rest of the duration
    assert pools.read_on and pools.rates == (1000.0,) and pools.seconds == (1.0,)


def test_a_long_pass_keeps_a_bounded_record_of_its_deliveries_and_the_same_rate(monkeypatch):
    """Batches of one sample, one a millisecond, for 2.5 s (the windows' spread ends them): past MAX_DELIVERIES
    records (256 here) every second one is dropped and the stride doubles, so the main process, whose memory the
    loader's projection reads, does not grow with the pass; the rate stays exact."""
    monkeypatch.setattr("preflight.loading.loop.MAX_DELIVERIES", 256)
    clock = Clock()
    pools = one_pool(AtTimes(clock, [0.001 * i for i in range(1, 20_001)], samples=1), clock)
    puller = pools.last
    assert puller.batches > 2000 and len(puller.deliveries) <= 257 and puller.stride >= 8
    assert puller.deliveries[0].samples == 4  # the windows' start, after the warm-up's 4 batches, is kept
    assert pools.rate == pytest.approx(1000.0, rel=1e-3) and pools.burst < 1e-3


# Issue 44: with a threshold, pools are the unit a sequential verdict adds: past the pools asked for while their
# rates' interval straddles it, and never past max_duration.
def _pools_at(rates, minimum, pools=4, duration=2.0, longest=6.0):
    clock, rates = Clock(), iter(rates)

    def start_pool():
        clock.now += 0.1  # the workers' start
        return BatchPuller([], clock=clock)

    def take(puller, share, min_windows):
        clock.now += share.duration_s
        rate = next(rates)
        return Taken([Window(rate, rate / 10, 100.0, share.duration_s)])

    budget = Budget(duration, 60.0, bounds={"throughput": (minimum, None)}, max_duration_s=longest)
    taken = pooled(start_pool, take, budget, pools, clock=clock, decided=budget.decider("throughput"))
    return taken, clock.now


def test_pools_far_from_the_threshold_stop_at_the_pools_asked_for_inside_the_duration():
    taken, spent = _pools_at(itertools.cycle([1000.0, 1010.0, 990.0]), minimum=100.0)
    assert len(taken.rates) == 4 and spent == pytest.approx(2.0)


def test_pools_straddling_the_threshold_go_on_to_max_duration_and_no_further():
    taken, spent = _pools_at(itertools.cycle([900.0, 1100.0]), minimum=1000.0)
    assert len(taken.rates) == 12 and spent == pytest.approx(6.0)  # 0.5 s a pool: as many as max_duration holds
    assert taken.shortfall() == ""  # more pools than asked: nothing for the user to raise


def test_pools_that_do_not_fit_the_duration_extend_while_undecided_instead_of_warning():
    """A pool costing more than its share was left out with a warning to raise duration (issue 44's new user: "1 of 8
    worker pools fit"); undecided, the pools go on into max_duration."""
    clock = Clock()

    def start_pool():
        clock.now += 0.5  # longer than its 0.25 s share of 2 s
        return BatchPuller([], clock=clock)

    rates = itertools.cycle([280.0, 320.0])

    def take(puller, share, min_windows):
        clock.now += 0.25
        rate = next(rates)
        return Taken([Window(rate, rate / 10, 100.0, 0.25)])

    budget = Budget(2.0, 60.0, bounds={"throughput": (300.0, None)}, max_duration_s=6.0)
    taken = pooled(start_pool, take, budget, 8, clock=clock, decided=budget.decider("throughput"))
    assert len(taken.rates) == 8 and clock.now == pytest.approx(6.0)  # without a threshold: 3 pools and a warning
    clock.now = 0.0
    plain = pooled(start_pool, take, Budget(2.0, 60.0), 8, clock=clock)
    assert len(plain.rates) == 3 and plain.shortfall().startswith("3 of 8 worker pools fit in the duration")
