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
