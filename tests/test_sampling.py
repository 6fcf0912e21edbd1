from preflight.sampling import sample


class FakeClock:
    """Time that advances only when a sample is taken (each takes `step` seconds)."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        return self.now

    def measure(self):
        self.now += self.step
        return 100.0


def test_steady_samples_still_span_half_the_budget_before_stopping():
    clock = FakeClock(step=0.1)
    taken = sample(clock.measure, budget_s=4.0, clock=clock)
    assert taken.stopped.startswith("spread 0.0% <= 5%")
    assert clock.now >= 2.0 and len(taken.values) >= 19  # not 3 samples in 0.3 s


def test_min_time_can_be_zero_for_the_old_early_stop():
    clock = FakeClock(step=0.1)
    taken = sample(clock.measure, budget_s=4.0, min_time_s=0, clock=clock)
    assert len(taken.values) == 3


def test_the_budget_still_ends_a_noisy_target():
    values = iter([100.0, 50.0] * 100)
    clock = FakeClock(step=0.5)

    def noisy():
        clock.measure()
        return next(values)

    taken = sample(noisy, budget_s=4.0, clock=clock)
    assert taken.stopped.startswith("time budget 4s spent")
    assert clock.now <= 4.0 + 0.5


class Scripted(FakeClock):
    """A FakeClock whose samples come from a list, each taking `step` seconds; counts the calls."""

    def __init__(self, step, values):
        super().__init__(step)
        self.values, self.calls = iter(values), 0

    def measure(self):
        self.now += self.step
        self.calls += 1
        return next(self.values)


def test_warm_up_results_are_discarded_and_each_warm_up_call_is_made():
    clock = Scripted(0.25, [1.0, 2.0, 100.0, 100.0, 100.0])
    taken = sample(clock.measure, budget_s=4.0, warmup=2, min_time_s=0, clock=clock)
    assert taken.values == (100.0, 100.0, 100.0) and clock.calls == 5


def test_the_default_minimum_time_is_half_the_budget_reached_exactly():
    # step 1/4 s (exact in binary); after 1 warm-up sample k ends at (k + 1) / 4 s: 2.0 s at k = 7
    clock = Scripted(0.25, [100.0] * 50)
    taken = sample(clock.measure, budget_s=4.0, clock=clock)
    assert taken == (tuple([100.0] * 7), "spread 0.0% <= 5% after 7 samples")
    assert clock.now == 2.0


def test_a_spread_exactly_at_the_target_stops_after_the_minimum_samples():
    clock = Scripted(0.25, [90.0, 110.0, 100.0, 100.0])  # quartiles 95 and 105 around median 100: exactly 10%
    taken = sample(clock.measure, budget_s=60.0, warmup=0, target_spread=0.10, min_time_s=0, clock=clock)
    assert taken == ((90.0, 110.0, 100.0), "spread 10.0% <= 10% after 3 samples")


def test_no_spread_test_before_the_minimum_sample_count():
    clock = Scripted(0.25, [100.0] * 10)
    taken = sample(clock.measure, budget_s=60.0, warmup=0, min_samples=5, min_time_s=0, clock=clock)
    assert taken.stopped == "spread 0.0% <= 5% after 5 samples"


def test_max_samples_ends_a_noisy_target_with_its_spread():
    clock = Scripted(0.25, [100.0, 50.0] * 10)  # sorted 50 50 100 100: quartiles 50 and 100, median 75
    taken = sample(clock.measure, budget_s=60.0, warmup=0, max_samples=4, clock=clock)
    assert taken == ((100.0, 50.0, 100.0, 50.0), "max 4 samples taken (spread 66.7%)")


def test_sampling_stops_when_the_next_sample_would_overrun_not_when_it_would_just_fit():
    # step 1/2 s; after the warm-up sample k ends at (k + 1) / 2 s; sample 7 ends at 4.0 s, so an 8th
    # would end at 4.5 s > 4 s: stop at 7 (the 7th, which ends exactly at the budget, is still taken).
    # The warm-up takes the first 100, so the samples are four 50s and three 100s: median 50,
    # inclusive quartiles 50 and 100, spread 100%
    clock = Scripted(0.5, [100.0, 50.0] * 20)
    taken = sample(clock.measure, budget_s=4.0, clock=clock)
    assert taken.stopped == "time budget 4s spent after 7 samples (spread 100.0%)"
    assert len(taken.values) == 7 and clock.now == 4.0


def test_at_most_fifty_samples_by_default():
    clock = Scripted(0.001, [100.0, 50.0] * 40)
    taken = sample(clock.measure, budget_s=60.0, warmup=0, clock=clock)
    assert len(taken.values) == 50 and taken.stopped.startswith("max 50 samples taken")


def test_time_is_measured_from_the_start_not_from_the_clocks_zero():
    # a monotonic clock's zero is arbitrary: the same two runs as above, on a clock that reads 1000 s at the start
    steady = Scripted(0.25, [100.0] * 50)
    steady.now = 1000.0
    assert sample(steady.measure, budget_s=4.0, clock=steady).stopped == "spread 0.0% <= 5% after 7 samples"
    noisy = Scripted(0.5, [100.0, 50.0] * 20)
    noisy.now = 1000.0
    assert sample(noisy.measure, budget_s=4.0, clock=noisy).stopped == "time budget 4s spent after 7 samples (spread 100.0%)"


def test_a_figure_sampled_over_under_half_a_second_warns_short_and_names_the_fix():
    from preflight.sampling import MIN_SPAN_S, SHORT, files_for_span, short_warning

    assert MIN_SPAN_S == 0.5 and short_warning("3 samples of 300 files", 0.75) == ""  # three 0.25 s windows: long
    assert short_warning("2 samples of 90 files", MIN_SPAN_S) == ""
    warning = short_warning("1 sample of 100 files", 0.0116, "a dataset of about 43104 files gives it 0.5 s")
    assert warning == ("short: 1 sample of 100 files in 12 ms; under 0.5 s the scheduler sets such a figure as much as "
                       "the device, so it is rough and `preflight diff` does not compare it: a dataset of about 43104 "
                       "files gives it 0.5 s") and warning.startswith(SHORT)
    # 100 files in 11.6 ms is 8621 files/s; a part that reads a tenth of a dataset spans 0.5 s from 43,104 files
    assert files_for_span(100 / 0.0116, 0.1) == 43104 and files_for_span(8000.0, 1.0) == 4000


# Issue 44: a sequential verdict. With a threshold (``Budget.decider``), a figure whose 90 % interval clears it stops
# at the duration (the minimum); one whose interval straddles it is measured on, up to max_duration.
def _decider(minimum):
    from preflight.checks.base import Budget

    return Budget(4.0, 60.0, bounds={"seq_read": (minimum, None)}, max_duration_s=12.0).decider("seq_read")


def test_a_figure_far_from_its_threshold_stops_at_the_duration():
    clock = Scripted(0.25, [100.0, 101.0, 99.0, 100.5, 99.5] * 20)
    taken = sample(clock.measure, budget_s=4.0, decided=_decider(10.0), max_s=12.0, clock=clock)
    assert taken.stopped.startswith("decided after ") and "the interval clears the threshold" in taken.stopped
    assert clock.now == 4.0  # the warm-up, then samples until the next would end past the duration: never past it
    assert len(taken.values) == 15


def test_a_figure_straddling_its_threshold_is_measured_up_to_max_duration_and_says_undecided():
    clock = Scripted(0.25, [90.0, 110.0] * 100)  # median 100, interval 90-110: straddles 100 forever
    taken = sample(clock.measure, budget_s=4.0, decided=_decider(100.0), max_s=12.0, clock=clock)
    assert taken.stopped == f"max_duration 12s spent after {len(taken.values)} samples (undecided)"
    assert 4.0 < clock.now <= 12.0 and len(taken.values) == 47  # 0.25 s each: the next would end past 12 s


def test_a_straddling_figure_that_settles_stops_as_soon_as_it_is_decided():
    clock = Scripted(0.25, [90.0, 110.0, 90.0, 110.0] + [80.0] * 100)  # then the rate falls clear of 100
    taken = sample(clock.measure, budget_s=4.0, decided=_decider(100.0), max_s=12.0, clock=clock)
    assert taken.stopped.startswith("decided after ")
    assert 4.0 <= clock.now < 12.0 and max(taken.values[-3:]) == 80.0


def test_without_a_threshold_the_old_rule_ends_at_the_duration():
    clock = Scripted(0.25, [90.0, 110.0] * 100)
    taken = sample(clock.measure, budget_s=4.0, max_s=12.0, clock=clock)  # no decider: max_s is never used
    assert taken.stopped.startswith("time budget 4s spent") and clock.now <= 4.0


def test_an_undecided_reader_that_spent_its_share_takes_another_of_the_pass():
    """Small files read whole: a share of the dataset is spent in one sample; undecided, the reader takes more of the
    first pass (``more``) instead of stopping on one sample, a throttle's start-up burst (issue 44)."""
    from preflight.io.dataset import Spent

    clock = FakeClock(0.2)
    shares = [[300.0], [30.0, 30.0], [31.0, 29.0, 30.0], [30.0, 30.0]]  # a burst, then the throttle's rate
    current = list(shares.pop(0))

    def read():
        clock.now += 0.2
        if not current:
            raise Spent("each of its files read once")
        return current.pop(0)

    def more():
        if not shares:
            return False
        current.extend(shares.pop(0))
        return True

    taken = sample(read, budget_s=1.0, warmup=0, decided=_decider(100.0), max_s=3.0, more=more, clock=clock)
    assert taken.values == (300.0, 30.0, 30.0, 31.0, 29.0, 30.0, 30.0, 30.0)  # every share read, not the burst alone
    # from 8 samples the median's interval is the 2nd lowest to the 2nd highest (29-31): the burst no longer widens it
    assert taken.stopped.startswith("decided after 8 samples")
