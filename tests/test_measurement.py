"""The measurement record and its statistics, on skewed samples whose right values are known.

Skewed on purpose: on symmetric samples a median and a mean agree, so a test could not tell
which one the code took (issue 17's planted "mean for a median" survived exactly that way).
"""

import pytest

from preflight import measurement
from preflight.checks.base import Budget
from preflight.measurement import NOISY_SPREAD, Measurement, Stats, combine, not_applicable, unmeasurable
from preflight.report import noise
from preflight.sampling import sample
from tests.test_sampling import Scripted

SKEWED = (100.0, 1.0, 3.0, 2.0, 4.0)  # median 3, mean 22; inclusive quartiles 2 and 4


def test_stats_of_skewed_samples_takes_the_median_and_inclusive_quartiles():
    stats = Stats.of(SKEWED)
    assert stats == Stats(n=5, median=3.0, q1=2.0, q3=4.0, minimum=1.0, maximum=100.0, spread=(4.0 - 2.0) / 3.0)


def test_stats_of_an_even_count_interpolates_median_and_quartiles():
    stats = Stats.of((10.0, 1.0, 2.0, 3.0))  # sorted 1 2 3 10
    assert (stats.median, stats.q1, stats.q3) == (2.5, 1.75, 4.75)
    assert stats.spread == pytest.approx(3.0 / 2.5)


def test_one_sample_has_no_spread_and_a_zero_median_no_relative_spread():
    assert Stats.of((7.0,)) == Stats(1, 7.0, 7.0, 7.0, 7.0, 7.0, 0.0)
    assert Stats.of((0.0, 0.0, 0.0)).spread == 0.0


def test_a_measurement_without_a_value_takes_its_samples_median():
    m = Measurement("seq_read", unit="MB/s", samples=SKEWED)
    assert m.value == 3.0
    assert m.samples == SKEWED and all(isinstance(s, float) for s in Measurement("x", samples=(1, 2)).samples)
    assert m.stats is not None and m.stats.maximum == 100.0


def test_a_given_value_wins_over_the_samples_median():
    assert Measurement("seq_read", 42.0, "MB/s", samples=SKEWED).value == 42.0


def test_noisy_is_flagged_above_the_limit_and_not_at_it():
    # samples 100, 100+x, 100+2x: inclusive quartiles 100+x/2 and 100+1.5x, median 100+x
    at_limit = Measurement("m", samples=(90.0, 100.0, 110.0))  # spread (105-95)/100 = exactly 0.10
    assert at_limit.stats is not None and at_limit.stats.spread == pytest.approx(NOISY_SPREAD)
    assert NOISY_SPREAD == 0.10
    assert not any(w.startswith("noisy") for w in Measurement("m", samples=(95.0, 100.0, 105.0)).warnings)
    noisy = Measurement("m", samples=(80.0, 100.0, 120.0))  # spread 0.20
    assert noisy.warnings == ("noisy: interquartile range is 20% of the median over 3 samples",)


def test_the_noisy_warning_is_not_repeated_when_the_record_is_rebuilt():
    noisy = Measurement("m", samples=(80.0, 100.0, 120.0))
    again = Measurement.from_dict(noisy.to_dict())
    assert again == noisy and len(again.warnings) == 1


def test_no_value_needs_a_reason():
    with pytest.raises(ValueError, match="seq_read: a measurement without a value needs a reason"):
        Measurement("seq_read")
    assert not unmeasurable("seq_read", "no data", "MB/s").measured
    assert unmeasurable("seq_read", "no data", "MB/s", "cuda:0").device == "cuda:0"
    skipped = not_applicable("ecc_errors", "no ECC", "", "cuda:1")
    assert (skipped.applicable, skipped.measured, skipped.reason, skipped.device) == (False, False, "no ECC", "cuda:1")
    assert unmeasurable("x", "r").applicable


def test_to_dict_and_from_dict_round_trip_every_field():
    m = Measurement("rand_read", unit="IOPS", device="nvme0", samples=SKEWED, method="4 KiB", reason="caveat",
                    stopped="budget", warnings=("w",), runs=(1.0, 2.0), cache_bound=True, hint="h", note="n")
    data = m.to_dict()
    assert "stats" not in data
    assert data["samples"] == list(SKEWED) and data["warnings"][0] == "w" and data["runs"] == [1.0, 2.0]
    assert Measurement.from_dict(data) == m
    del data["runs"]  # reports written before `repeats` existed
    assert Measurement.from_dict(data).runs == ()


def test_combine_takes_the_median_of_the_runs_values_not_their_mean():
    runs = [Measurement("seq_read", v, "MB/s", samples=(v, v)) for v in (100.0, 1.0, 3.0, 2.0, 4.0)]
    combined = combine(runs)
    assert combined.value == 3.0
    assert combined.runs == (100.0, 1.0, 3.0, 2.0, 4.0)
    assert combined.samples == (100.0, 100.0, 1.0, 1.0, 3.0, 3.0, 2.0, 2.0, 4.0, 4.0)
    assert combined.stopped == "median of 5 runs"
    assert combined.warnings == ("noisy: interquartile range of the 5 runs is 67% of their median",)


def test_combine_keeps_first_unit_device_method_and_last_note_and_drops_per_run_noise_notes():
    first = Measurement("m", 10.0, "GB/s", "cuda:0", method="first", warnings=("noisy: x", "shared"), note="a")
    last = Measurement("m", 10.5, "GB/s", "cuda:0", method="last", reason="later caveat", warnings=("shared",),
                       note="b")
    combined = combine([first, last])
    assert (combined.unit, combined.device, combined.method, combined.note) == ("GB/s", "cuda:0", "first", "b")
    assert combined.reason == "later caveat"
    assert combined.warnings == ("shared",)  # spread of 10 and 10.5 is under 10%: no run-level warning
    assert combined.value == 10.25


def test_combine_fails_closed_on_an_unmeasured_run_and_takes_text_from_the_last():
    runs = [Measurement("m", 1.0), unmeasurable("m", "disk gone"), Measurement("m", 2.0)]
    assert combine(runs).reason == "run 2 of 3: disk gone" and not combine(runs).measured
    names = [Measurement("name", "A100"), Measurement("name", "H100")]
    assert combine(names).value == "H100"
    single = Measurement("m", 1.0)
    assert combine([single]) is single


def test_combine_refuses_nothing_and_mixed_metrics_or_devices():
    with pytest.raises(ValueError, match="at least one"):
        combine([])
    with pytest.raises(ValueError, match=r"several metrics: \['a', 'b'\]"):
        combine([Measurement("a", 1.0), Measurement("b", 1.0)])
    with pytest.raises(ValueError):
        combine([Measurement("a", 1.0, device="cuda:0"), Measurement("a", 1.0, device="cuda:1")])


def test_two_samples_have_interpolated_quartiles_and_a_spread():
    # inclusive quartiles of 1 and 3 lie a quarter and three quarters of the way: 1.5 and 2.5, around median 2
    assert Stats.of((3.0, 1.0)) == Stats(2, 2.0, 1.5, 2.5, 1.0, 3.0, 0.5)


def test_a_spread_exactly_at_the_noise_limit_is_not_flagged():
    at_limit = Measurement("m", samples=(90.0, 100.0, 110.0))  # spread (105 - 95) / 100: exactly 0.10
    assert at_limit.stats is not None and at_limit.stats.spread == NOISY_SPREAD
    assert at_limit.warnings == ()


def test_runs_exactly_at_the_noise_limit_are_not_flagged_and_noisy_runs_keep_other_warnings():
    at_limit = combine([Measurement("m", v, "MB/s") for v in (90.0, 100.0, 110.0)])
    assert at_limit.warnings == () and at_limit.reason == ""
    noisy = combine([Measurement("seq_read", v, "MB/s", warnings=("shared disk",)) for v in (80.0, 100.0, 120.0)])
    assert noisy.metric == "seq_read"
    assert noisy.warnings == ("shared disk", "noisy: interquartile range of the 3 runs is 20% of their median")


def test_combine_of_nothing_says_what_it_needs():
    with pytest.raises(ValueError) as error:
        combine([])
    assert str(error.value) == "combine() needs at least one measurement"


def test_unmeasured_and_not_applicable_records_keep_their_unit_and_default_to_none():
    assert unmeasurable("seq_read", "no data", "MB/s").unit == "MB/s"
    assert not_applicable("ecc_errors", "no ECC", "count").unit == "count"
    for record in (unmeasurable("m", "r"), not_applicable("m", "r")):
        assert (record.value, record.unit, record.device, record.reason) == (None, "", None, "r")


def test_the_interval_of_a_median_is_distribution_free_and_one_burst_does_not_widen_it():
    """Issue 44: a throttle's start-up burst (328 MB/s among 30 MB/s windows) widened a t interval past a 100 MB/s
    threshold; the median's order-statistic interval (Conover 3.2) from 8 samples is the 2nd lowest to 2nd highest."""
    import statistics

    from preflight.measurement import interval

    windows = (328.2, 36.4, 14.7, 31.1, 30.7, 14.6, 30.2, 14.5)
    assert interval(windows, statistics.median(windows)) == (14.6, 36.4)
    assert interval(windows[:5], statistics.median(windows[:5])) == (14.7, 328.2)  # under 8: their whole range
    low, high = interval((900.0, 1000.0, 1100.0, 1000.0), 1010.0)  # another centre (a mean over pools): t-based
    assert (low, high) == pytest.approx((1010.0 - 2.353 * 81.65 / 2, 1100.0), abs=0.01)  # within the samples' range
    skewed = (5.0, 10.0, 15.0, 3000.0)  # workers still starting in three pools: t reaches below zero
    assert interval(skewed, 757.5)[0] == 5.0
    assert interval((5.0,), 5.0) is None


# The run-to-run floors: one table (``RUN_TO_RUN``) that diff and the verdict both hold.
def test_the_verdict_floor_is_the_99_percent_half_width_of_the_runs_cv():
    # 2.576 x verdict_stability's whole-run CVs: small_files 13.5%, the DataLoader 13.4%; more windows do not narrow it.
    assert measurement.verdict_floor("storage.small_files") == pytest.approx(0.348, abs=0.001)
    assert measurement.verdict_floor("dataloader.throughput") == pytest.approx(0.345, abs=0.001)
    assert measurement.verdict_floor("storage.seq_read") == pytest.approx(0.240, abs=0.001)
    # Bimodal between runs (CV 39%): no floor, or every near miss would be a warning.
    assert measurement.verdict_floor("storage.rand_read") == 0.0
    assert noise.floor is measurement.floor and noise.RUN_TO_RUN is measurement.RUN_TO_RUN  # one table


def _decider(minimum, floor=0.0):
    budget = Budget(4.0, 60.0, bounds={"small_files": (minimum, None)}, max_duration_s=12.0)
    return budget.decider("small_files", floor=floor)


def test_a_figure_inside_its_floor_is_read_to_max_duration_and_a_figure_past_it_stops_at_duration():
    """Windows within ±1% of 100 files/s decide a 94 files/s bound at once without the floor; with the runs'
    spread (±35%) they read on to max_duration and stay undecided, however many windows they take. 60 clears it."""
    floor = measurement.verdict_floor("storage.small_files")
    steady = [100.0, 101.0, 99.0, 100.5, 99.5] * 40
    assert _decider(94.0)(steady[:3], 1.0)
    clock = Scripted(0.25, steady)
    taken = sample(clock.measure, budget_s=1.0, decided=_decider(94.0, floor), max_s=12.0, clock=clock)
    assert taken.stopped.endswith("(undecided)") and 11.0 <= clock.now <= 12.0
    assert len(taken.values) > 30  # the windows of 12 s, and still the floor's ±35%
    clock = Scripted(0.25, steady)
    taken = sample(clock.measure, budget_s=1.0, decided=_decider(60.0, floor), max_s=12.0, clock=clock)
    assert taken.stopped.startswith("decided after ") and clock.now <= 1.5
