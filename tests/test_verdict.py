import pytest

from preflight.config import Instance, Threshold
from preflight.measurement import Measurement, interval, not_applicable, unmeasurable
from preflight.verdict import (Attempt, Outcome, Result, against_baseline, exit_code, judge, judge_against_fleet,
                               near_miss, record_attempts, requirement)
from tests.helpers import judged


def instance(check="storage", thresholds=(), required=True, **options):
    return Instance("data", check, {"path": "/data", **options}, tuple(thresholds), 60, 1, required, "t.yaml:1:1")


def seq_read(low=None, high=None, severity="fail"):
    return Threshold("seq_read", low, high, severity, "t.yaml:3:5")


def test_pass_fail_and_warn_follow_the_threshold():
    measured = Outcome((Measurement("seq_read", samples=(945.0, 950.0, 955.0), unit="MB/s", subject="dataset"),))
    [passed] = judge(instance(thresholds=[seq_read(low=900.0)]), measured)
    [failed] = judge(instance(thresholds=[seq_read(low=1000.0)]), measured)
    [warned] = judge(instance(thresholds=[seq_read(low=1000.0, severity="warn")]), measured)
    [capped] = judge(instance(thresholds=[seq_read(high=920.0)]), measured)
    assert (passed.verdict, failed.verdict, warned.verdict, capped.verdict) == ("pass", "fail", "warn", "fail")
    assert failed.value == 950.0  # the median of the samples is what is compared
    assert failed.message == "measured 950 MB/s, required >= 1 GB/s"
    assert capped.message == "measured 950 MB/s, required <= 920 MB/s"
    assert failed.samples == (945.0, 950.0, 955.0)
    assert failed.where == "t.yaml:3:5"
    assert exit_code([passed, warned]) == 0
    assert exit_code([passed, failed]) == 1


def test_unmeasurable_metric_with_a_threshold_fails_or_skips_when_not_required():
    outcome = Outcome((unmeasurable("seq_read", "/data does not exist", "MB/s"),))
    [failed] = judge(instance(thresholds=[seq_read(low=1.0)]), outcome)
    [skipped] = judge(instance(thresholds=[seq_read(low=1.0)], required=False), outcome)
    assert failed.verdict == "fail"
    assert failed.message == "could not measure: /data does not exist; required >= 1 MB/s"
    assert skipped.verdict == "skip"
    assert exit_code([skipped]) == 0


def test_a_metric_the_check_never_reported_fails():
    [result] = judge(instance(thresholds=[seq_read(low=1.0)]), Outcome(()))
    assert result.verdict == "fail"
    assert "reported no value" in result.message


def test_an_errored_check_is_an_error_per_threshold_and_gates():
    results = judge(instance(thresholds=[seq_read(low=1.0)]), Outcome(error="killed by SIGSEGV"))
    assert [(r.id, r.verdict) for r in results] == [("data.seq_read", "error")]
    assert results[0].message == "storage check did not finish: killed by SIGSEGV"
    assert exit_code(results) == 1


def test_versions_compare_numerically_not_as_text_or_float():
    def driver(version, minimum):
        outcome = Outcome((Measurement("driver_version", version, "version"),))
        threshold = Threshold("driver_version", minimum, None, "fail", "t.yaml:2:3")
        return judge(instance("cuda", [threshold]), outcome)[0].verdict

    assert driver("535.104.05", "535.104") == "pass"
    assert driver("535.54.03", "535.104") == "fail"  # 54 < 104, though "535.54" > "535.104" as text
    assert driver("550.10", "535.104") == "pass"


def test_measured_metrics_without_threshold_are_info_and_never_gate():
    outcome = Outcome((Measurement("seq_read", samples=(1.0, 1.0, 1.0), unit="MB/s", subject="dataset"),))
    [info] = judge(instance(), outcome)
    assert info.verdict == "info"
    assert exit_code([info]) == 0


def test_per_device_measurements_are_judged_one_by_one():
    outcome = Outcome((Measurement("h2d_pinned", 24.1, "GB/s", device="cuda:0"),
                       Measurement("h2d_pinned", 6.2, "GB/s", device="cuda:1")))
    threshold = Threshold("h2d_pinned", 20.0, None, "fail", "t.yaml:9:5")
    results = judge(Instance("transfer", "transfer", {"size": 1}, (threshold,), 60, 1, True, ""), outcome)
    assert [(r.id, r.verdict) for r in results] == [
        ("transfer.h2d_pinned[cuda:0]", "pass"), ("transfer.h2d_pinned[cuda:1]", "fail")]


def test_shm_hint_names_the_fix_with_the_numbers():
    outcome = Outcome((Measurement("size", 0.0625, "GiB"),))
    threshold = Threshold("size", 8.0, None, "fail", "t.yaml:4:5")
    [result] = judge(Instance("shm", "shm", {"path": "/dev/shm", "allocate": 1}, (threshold,), 60, 1, True, ""),
                     outcome)
    assert result.hint.startswith("/dev/shm has 64 MiB, >= 8 GiB is needed: start the container with "
                                  "--shm-size=8g")


@pytest.mark.parametrize("required, size", [(64.0, "64"), (63.5, "64"), (0.5, "1"), (8.0, "8")])
def test_the_shm_fix_names_the_size_the_threshold_asks_for_rounded_up_to_whole_gib(required, size):
    """Issue 33 case 3: the fix said --shm-size=8g whatever the threshold, even when 64 GiB was required."""
    outcome = Outcome((Measurement("size", 0.0625, "GiB"),))
    threshold = Threshold("size", required, None, "fail", "t.yaml:4:5")
    [result] = judge(Instance("shm", "shm", {"path": "/dev/shm", "allocate": 1}, (threshold,), 60, 1, True, ""),
                     outcome)
    assert f"start the container with --shm-size={size}g, or in Kubernetes mount an emptyDir with medium: " \
           f"Memory and sizeLimit: {size}Gi at /dev/shm" in result.hint


def test_a_metric_the_hardware_lacks_is_skipped_even_when_required(tmp_path):
    results = judged(tmp_path, "cuda", 'ecc_mode: {match: "on"}',
                       [not_applicable("ecc_mode", "this GPU does not have it", "text", "cuda:0")])
    result = results["cuda.ecc_mode[cuda:0]"]
    assert (result.verdict, result.message, result.value) == ("skip", "not applicable: this GPU does not have it", None)


def test_an_unmeasurable_metric_still_fails_when_required(tmp_path):
    results = judged(tmp_path, "cuda", 'ecc_mode: {match: "on"}',
                       [unmeasurable("ecc_mode", "GPU is lost", "text", "cuda:0")])
    assert results["cuda.ecc_mode[cuda:0]"].verdict == "fail"


def test_match_searches_the_text_and_reports_the_pattern(tmp_path):
    gate = 'name: {match: "H100|H200"}'
    passed = judged(tmp_path, "cuda", gate, [Measurement("name", "NVIDIA H100 80GB HBM3", "text", "cuda:0")])
    failed = judged(tmp_path, "cuda", gate, [Measurement("name", "NVIDIA A100-SXM4-80GB", "text", "cuda:1")])
    assert passed["cuda.name[cuda:0]"].verdict == "pass"
    assert failed["cuda.name[cuda:1]"].message == "measured NVIDIA A100-SXM4-80GB, required matches /H100|H200/"
    assert failed["cuda.name[cuda:1]"].threshold == {"match": "H100|H200"}


def test_applicable_survives_the_worker_round_trip():
    original = not_applicable("remapped_rows_failed", "pre-Ampere GPU", "", "cuda:0")
    assert Measurement.from_dict(original.to_dict()) == original


def test_lower_is_better_metrics_are_flagged_above_the_inverse_ratio() -> None:
    # a latency is lower-is-better: 2.5x the median is over 1/0.5 = 2
    slow = Result("storage", "storage", "rand_read_p99", "pass", "m", device="nvme0", value=2.5, unit="ms")
    judged = judge_against_fleet(slow, median=1.0, nodes=4, ratio=0.5, severity="fail")
    assert judged.verdict == "fail" and judged.threshold == {"max": 2.0} and judged.device == "nvme0"
    fine = judge_against_fleet(slow, median=2.0, nodes=4, ratio=0.5, severity="fail")
    assert fine.verdict == "pass" and fine.value == 1.25 and fine.hint == ""


@pytest.mark.parametrize("metric, value, median", [("read_only", 0, 1.0), ("free_space", 8.0, 8.0),
                                                   ("seq_read", 0.0, 0.0)])
def test_facts_and_a_zero_median_are_never_judged_against_the_fleet(metric, value, median) -> None:
    result = Result("storage", "storage", metric, "info", "m", value=value)
    with pytest.raises(ValueError, match="cannot be compared with a fleet median"):
        judge_against_fleet(result, median=median, nodes=2, ratio=0.5, severity="fail")


def test_higher_is_better_metrics_are_flagged_below_the_ratio() -> None:
    result = Result("storage", "storage", "seq_read", "pass", "m", value=100.0, unit="MB/s")
    judged = judge_against_fleet(result, median=400.0, nodes=3, ratio=0.5, severity="warn")
    assert judged.verdict == "warn" and judged.value == 0.25 and judged.metric == "seq_read.vs_fleet_median"
    assert judged.required == ">= 0.5x the fleet median"


def test_a_cache_bound_value_that_meets_its_minimum_is_a_warning():
    m = Measurement("seq_read", 9000.0, "MB/s", cache_bound=True, reason="tmpfs is RAM", subject="dataset")
    [result] = judge(instance(thresholds=[seq_read(low=1000.0)]), Outcome((m,)))
    assert result.verdict == "warn"
    assert "cache-bound" in result.message and "tmpfs is RAM" in result.message
    assert exit_code([result]) == 0  # a warning, not a gate failure: but never a silent pass


def test_a_cache_bound_value_below_its_minimum_still_fails():
    m = Measurement("seq_read", 10.0, "MB/s", cache_bound=True, subject="dataset")
    [result] = judge(instance(thresholds=[seq_read(low=1000.0)]), Outcome((m,)))
    assert result.verdict == "fail"


def test_the_measurements_own_hint_replaces_the_metrics_static_hint():
    hinted = Measurement("seq_read", 10.0, "MB/s", hint="pack them into shards", subject="dataset")
    [result] = judge(instance(thresholds=[seq_read(low=500.0)]), Outcome((hinted,)))
    assert result.verdict == "fail" and result.hint == "pack them into shards"
    [plain] = judge(instance(thresholds=[seq_read(low=500.0)]), Outcome((Measurement("seq_read", 10.0, "MB/s", subject="dataset"),)))
    assert plain.hint.startswith("/data reads at 10 MB/s")


def test_an_unmeasurable_metric_under_a_warn_threshold_warns_and_does_not_gate():
    outcome = Outcome((unmeasurable("seq_read", "/data does not exist", "MB/s"),))
    [result] = judge(instance(thresholds=[seq_read(low=1.0, severity="warn")]), outcome)
    assert result.verdict == "warn"
    assert exit_code([result]) == 0


@pytest.mark.parametrize("value, low, high, verdict", [
    (1000.0, 1000.0, None, "pass"),  # exactly at min: the bound is inclusive
    (999.999, 1000.0, None, "fail"),
    (1000.0, None, 1000.0, "pass"),  # exactly at max
    (1000.001, None, 1000.0, "fail"),
    (500.0, 500.0, 2000.0, "pass"),
    (2000.0, 500.0, 2000.0, "pass"),
    (2000.5, 500.0, 2000.0, "fail"),
    (499.5, 500.0, 2000.0, "fail"),
])
def test_both_bounds_are_inclusive_and_a_hair_past_either_fails(value, low, high, verdict):
    [result] = judge(instance(thresholds=[seq_read(low=low, high=high)]),
                     Outcome((Measurement("seq_read", value, "MB/s", subject="dataset"),)))
    assert result.verdict == verdict
    assert result.threshold == {key: bound for key, bound in (("min", low), ("max", high)) if bound is not None}


@pytest.mark.parametrize("value, verdict", [("535.104.05", "pass"), ("535.104", "pass"), ("535.103.99", "fail"),
                                            ("550", "pass")])
def test_a_version_exactly_at_its_minimum_passes(value, verdict):
    threshold = Threshold("driver_version", "535.104", None, "fail", "t.yaml:2:3")
    [result] = judge(instance("cuda", [threshold]), Outcome((Measurement("driver_version", value, "version"),)))
    assert result.verdict == verdict


def test_a_bound_made_relative_to_the_baseline_is_said_beside_an_absolute_one():
    # `{min: 90% of baseline, max: 2 GB/s}` before its baseline is applied (a crashed check, a device the
    # baseline lacks): the words must name both bounds, not drop the relative one.
    mixed = Threshold("seq_read", None, 2000.0, "fail", "t.yaml:3:5", relative={"min": 0.9},
                      baseline={"data.seq_read[nvme0]": 1000.0})
    [crashed] = judge(instance(thresholds=[mixed]), Outcome(error="killed by SIGKILL"))
    [missing] = judge(instance(thresholds=[mixed]), Outcome((Measurement("seq_read", 950.0, "MB/s", "nvme1", subject="dataset"),)))
    assert crashed.required == missing.required == "between 90% of baseline and 2 GB/s"


def full_measurement(value=400.0):
    """A seq_read on one device with every field a result carries over set to a distinct value."""
    return Measurement("seq_read", value, "MB/s", device="nvme0", samples=(380.0, 400.0, 420.0),
                       method="O_DIRECT, 1 MiB blocks", reason="page cache dropped", warnings=("short run",),
                       runs=(390.0, 400.0, 410.0), note="on scratch data: ./ holds 3 files", subject="dataset")


def test_a_judged_result_carries_every_field_of_its_measurement_and_threshold():
    [failed] = judge(instance(thresholds=[seq_read(low=1000.0)]), Outcome((full_measurement(),), duration_s=2.5))
    assert failed == Result(
        "data", "storage", "seq_read", "fail",
        "measured 400 MB/s, required >= 1 GB/s (page cache dropped); on scratch data: ./ holds 3 files",
        device="nvme0", value=400.0, unit="MB/s", threshold={"min": 1000.0},
        hint="/data reads at 400 MB/s: use a faster volume class or a local NVMe cache",
        samples=(380.0, 400.0, 420.0), duration_s=2.5, method="O_DIRECT, 1 MiB blocks", where="t.yaml:3:5",
        required=">= 1 GB/s", warnings=("short run",), runs=(390.0, 400.0, 410.0),
        note="on scratch data: ./ holds 3 files", subject="dataset", interval=interval((380.0, 400.0, 420.0), 400.0))


def test_a_pass_has_no_hint():
    [passed] = judge(instance(thresholds=[seq_read(low=300.0)]), Outcome((full_measurement(),)))
    assert (passed.verdict, passed.hint) == ("pass", "")
    assert passed.message == ("measured 400 MB/s, required >= 300 MB/s (page cache dropped); "
                              "on scratch data: ./ holds 3 files")


def test_a_miss_on_a_metric_without_a_static_hint_has_none():
    # rand_read_p99 declares no hint: nothing is made up
    threshold = Threshold("rand_read_p99", None, 5.0, "fail", "t.yaml:4:5")
    [result] = judge(instance(thresholds=[threshold]), Outcome((Measurement("rand_read_p99", 7.5, "ms", subject="dataset"),)))
    assert (result.verdict, result.message, result.hint) == ("fail", "measured 7.5 ms, required <= 5 ms", "")


def test_decimal_fractions_compare_as_numbers_not_as_version_parts():
    # as version parts 0.3 would be (0, 3) < (0, 25); as numbers 0.3 ms is over 0.25 ms
    threshold = Threshold("rand_read_p99", None, 0.25, "fail", "t.yaml:4:5")
    [result] = judge(instance(thresholds=[threshold]), Outcome((Measurement("rand_read_p99", 0.3, "ms", subject="dataset"),)))
    assert result.verdict == "fail"


def test_a_metric_the_check_never_reported_says_so_and_what_was_required():
    [result] = judge(instance(thresholds=[seq_read(low=1.0)]), Outcome(()))
    assert result.message == "could not measure: the check reported no value for this metric; required >= 1 MB/s"


def test_an_info_result_carries_every_field_of_its_measurement():
    [info] = judge(instance(), Outcome((full_measurement(),), duration_s=2.5))
    assert info == Result(
        "data", "storage", "seq_read", "info", "measured 400 MB/s (no threshold); on scratch data: ./ holds 3 files",
        device="nvme0", value=400.0, unit="MB/s", samples=(380.0, 400.0, 420.0), duration_s=2.5,
        method="O_DIRECT, 1 MiB blocks", warnings=("short run",), runs=(390.0, 400.0, 410.0),
        note="on scratch data: ./ holds 3 files", subject="dataset", interval=interval((380.0, 400.0, 420.0), 400.0))
    [plain] = judge(instance(), Outcome((Measurement("seq_read", 2080.44, "MB/s", subject="dataset"),)))
    assert plain.message == "measured 2.08 GB/s (no threshold)"


def test_a_crashed_check_without_thresholds_is_one_error_located_at_the_instance():
    results = judge(instance(), Outcome(error="timed out after 120s", duration_s=120.0))
    assert results == [Result("data", "storage", "", "error", "storage check did not finish: timed out after 120s",
                              duration_s=120.0, where="t.yaml:1:1")]


def test_a_crashed_check_is_an_error_per_threshold_with_its_bound_unit_and_place():
    p99 = Threshold("rand_read_p99", None, 5.0, "warn", "t.yaml:4:5")
    results = judge(instance(thresholds=[seq_read(low=1000.0), p99]), Outcome(error="killed by SIGSEGV",
                                                                                duration_s=7.0))
    message = "storage check did not finish: killed by SIGSEGV"
    assert results == [
        Result("data", "storage", "seq_read", "error", message, unit="MB/s", duration_s=7.0,
               threshold={"min": 1000.0}, where="t.yaml:3:5", required=">= 1 GB/s"),
        Result("data", "storage", "rand_read_p99", "error", message, unit="ms", duration_s=7.0,
               threshold={"max": 5.0}, where="t.yaml:4:5", required="<= 5 ms"),
    ]


def test_a_cache_bound_pass_says_why_and_names_the_mount_to_leave():
    m = Measurement("seq_read", 9000.0, "MB/s", cache_bound=True, reason="tmpfs is RAM", subject="dataset")
    [result] = judge(instance(thresholds=[seq_read(low=1000.0)]), Outcome((m,)))
    assert result.message == ("measured 9 GB/s, required >= 1 GB/s (tmpfs is RAM); "
                              "cache-bound: not a device figure, so it cannot pass")
    assert result.hint == "measure a path on the real dataset volume, not /data"


def test_a_cache_bound_pass_without_a_path_option_names_this_mount():
    no_path = Instance("data", "storage", {}, (seq_read(low=1000.0),), 60, 1, True, "t.yaml:1:1")
    [result] = judge(no_path, Outcome((Measurement("seq_read", 9000.0, "MB/s", cache_bound=True, subject="dataset"),)))
    assert result.hint == "measure a path on the real dataset volume, not this mount"


def test_a_cache_bound_pass_keeps_the_measurements_own_hint():
    m = Measurement("seq_read", 9000.0, "MB/s", cache_bound=True, hint="drop caches as root first", subject="dataset")
    [result] = judge(instance(thresholds=[seq_read(low=1000.0)]), Outcome((m,)))
    assert (result.verdict, result.hint) == ("warn", "drop caches as root first")


def relative(fractions, baseline, low=None, high=None):
    """A seq_read threshold with ``N% of baseline`` bounds (``fractions``) and the saved ``baseline`` values."""
    return Threshold("seq_read", low, high, "fail", "t.yaml:3:5", relative=fractions, baseline=baseline)


@pytest.mark.parametrize("threshold, words", [
    (relative({"min": 0.9}, {}), ">= 90% of baseline"),
    (relative({"max": 1.5}, {}), "<= 150% of baseline"),
    (relative({"min": 0.9, "max": 1.5}, {}), "between 90% of baseline and 150% of baseline"),
    (relative({"max": 1.5}, {}, low=100.0), "between 100 MB/s and 150% of baseline"),
    (relative({"min": 0.9}, {}, low=900.0), ">= 900 MB/s"),  # made absolute by against_baseline
])
def test_a_relative_bound_is_said_as_its_percentage_of_the_baseline(threshold, words):
    assert requirement(threshold, "MB/s") == words


def test_against_baseline_scales_the_fraction_by_this_results_baseline_value():
    threshold = relative({"min": 0.9, "max": 1.5}, {"data.seq_read[nvme0]": 200.0, "data.seq_read[nvme1]": 400.0})
    absolute = against_baseline(threshold, "data.seq_read[nvme1]")
    assert (absolute.min, absolute.max) == (360.0, 600.0)
    assert against_baseline(threshold, "data.seq_read[nvme2]") is None  # not in the baseline
    plain = seq_read(low=1.0)
    assert against_baseline(plain, "data.seq_read") is plain


def test_a_baseline_bound_is_judged_against_this_results_own_baseline_value():
    threshold = relative({"min": 0.9}, {"data.seq_read": 1000.0, "data.seq_read[nvme0]": 5000.0})
    [result] = judge(instance(thresholds=[threshold]), Outcome((Measurement("seq_read", 950.0, "MB/s", subject="dataset"),)))
    assert (result.verdict, result.threshold) == ("pass", {"min": 900.0})
    assert result.message == "measured 950 MB/s, required >= 900 MB/s (90% of baseline 1 GB/s)"
    assert result.required == ">= 900 MB/s (90% of baseline 1 GB/s)"


def test_a_per_device_baseline_bound_names_both_fractions_and_the_devices_baseline():
    threshold = relative({"min": 0.9, "max": 1.5}, {"data.seq_read": 5000.0, "data.seq_read[nvme0]": 1000.0})
    [result] = judge(instance(thresholds=[threshold]),
                     Outcome((Measurement("seq_read", 1600.0, "MB/s", device="nvme0", subject="dataset"),)))
    assert (result.verdict, result.threshold) == ("fail", {"min": 900.0, "max": 1500.0})
    assert result.message == ("measured 1.6 GB/s, required between 900 MB/s and 1.5 GB/s "
                              "(90% and 150% of baseline 1 GB/s)")


def test_a_device_the_baseline_lacks_is_an_error_that_keeps_what_was_measured():
    threshold = relative({"min": 0.9}, {"data.seq_read[nvme0]": 1000.0})
    m = Measurement("seq_read", device="nvme1", samples=(940.0, 950.0, 960.0), unit="MB/s", method="O_DIRECT")
    [result] = judge(instance(thresholds=[threshold]), Outcome((m,), duration_s=2.5))
    assert result == Result(
        "data", "storage", "seq_read", "error",
        "the baseline has no value for data.seq_read[nvme1]: save a baseline on a run that measured it",
        device="nvme1", value=950.0, unit="MB/s", samples=(940.0, 950.0, 960.0), duration_s=2.5, method="O_DIRECT",
        where="t.yaml:3:5", required=">= 90% of baseline", interval=interval((940.0, 950.0, 960.0), 950.0))


def missed(value, verdict="fail", metric="seq_read", **bounds):
    """A judged seq_read with ``value`` against ``bounds`` (min=, max=, match=)."""
    return Result("data", "storage", metric, verdict, "m", value=value, unit="MB/s", threshold=bounds)


@pytest.mark.parametrize("value, bounds, near", [
    (90.0, {"min": 100.0}, True),
    (75.0, {"min": 100.0}, True),  # exactly the margin below min: still retried
    (74.9, {"min": 100.0}, False),
    (110.0, {"max": 100.0}, True),
    (125.0, {"max": 100.0}, True),  # exactly the margin above max
    (125.1, {"max": 100.0}, False),
    (150.0, {"max": 100.0}, False),
    (90.0, {"min": 100.0, "max": 200.0}, True),
    (240.0, {"min": 100.0, "max": 200.0}, True),
    (260.0, {"min": 100.0, "max": 200.0}, False),
])
def test_a_miss_is_near_within_the_margin_of_the_bound_it_missed(value, bounds, near):
    # margin 0.25: min 100 re-measures down to 75, max 100 up to 125 (binary-exact, so the bound is the bound)
    assert near_miss([missed(value, **bounds)], 0.25) is near


def test_the_docstring_example_95_is_retried_against_min_100_and_80_is_not():
    assert near_miss([missed(95.0, min=100.0)], 0.1) is True
    assert near_miss([missed(80.0, min=100.0)], 0.1) is False


def test_a_warn_miss_is_retried_like_a_fail():
    assert near_miss([missed(90.0, "warn", min=100.0)], 0.25) is True


def test_nothing_missed_is_never_a_near_miss():
    assert near_miss([], 0.25) is False
    assert near_miss([missed(150.0, "pass", min=100.0)], 0.25) is False


def test_passes_beside_a_near_miss_do_not_stop_the_retry():
    assert near_miss([missed(500.0, "pass", min=100.0), missed(90.0, metric="seq_write", min=100.0)], 0.25) is True


def test_one_clear_miss_among_near_ones_is_not_retried():
    assert near_miss([missed(90.0, min=100.0), missed(10.0, metric="seq_write", min=100.0)], 0.25) is False


@pytest.mark.parametrize("result", [
    missed(None, min=100.0),  # could not measure: not noise
    missed("NVIDIA A100", match="H100"),  # a text is right or wrong
    missed(100.0, "warn", min=100.0),  # cache-bound at its min: met the bound, nothing to re-measure
    missed(100.0, "warn", max=100.0),  # cache-bound at its max
    Result("data", "storage", "seq_read", "error", "storage check did not finish: timed out", value=None),
])
def test_an_unmeasured_text_cache_bound_or_crashed_result_is_never_a_near_miss(result):
    assert near_miss([result], 0.25) is False


def test_earlier_attempts_are_attached_to_the_same_result_oldest_first():
    final = [Result("data", "storage", "seq_read", "pass", "measured 1.2 GB/s, required >= 1 GB/s", device="nvme0",
                    value=1200.0, unit="MB/s"),
             Result("data", "storage", "seq_write", "pass", "measured 2 GB/s, required >= 1 GB/s", value=2000.0,
                    unit="MB/s")]
    earlier = [[Result("data", "storage", "seq_read", "fail", "x", device="nvme0", value=950.0, unit="MB/s",
                       samples=(940.0, 950.0, 960.0))],
               [Result("data", "storage", "seq_read", "warn", "y", device="nvme0", value=990.0, unit="MB/s")]]
    read, write = record_attempts(final, earlier)
    assert read.attempts == (Attempt(950.0, "fail", (940.0, 950.0, 960.0)), Attempt(990.0, "warn", ()))
    assert read.message == ("measured 1.2 GB/s, required >= 1 GB/s; after 2 retries: "
                            "earlier 950 MB/s (fail), 990 MB/s (warn)")
    assert read.value == 1200.0 and read.verdict == "pass"
    assert write == final[1]  # never retried: unchanged


def test_one_earlier_attempt_is_one_retry():
    final = [Result("data", "storage", "seq_read", "fail", "measured 800 MB/s, required >= 1 GB/s", value=800.0,
                    unit="MB/s")]
    earlier = [[Result("data", "storage", "seq_read", "fail", "x", value=1500.0, unit="MB/s")]]
    [read] = record_attempts(final, earlier)
    assert read.message == "measured 800 MB/s, required >= 1 GB/s; after 1 retry: earlier 1.5 GB/s (fail)"
    assert read.attempts == (Attempt(1500.0, "fail", ()),)


STRAGGLER_HINT = ("this node is the straggler: drain it from the job and check its storage "
                  "(compare `preflight run --only storage` with a healthy node)")


def test_a_straggler_below_the_fleet_ratio_is_flagged_with_the_numbers_and_the_fix():
    result = Result("storage", "storage", "seq_read", "pass", "m", device="nvme0", value=100.0, unit="MB/s",
                    duration_s=3.0)
    judged = judge_against_fleet(result, median=400.0, nodes=3, ratio=0.5, severity="warn")
    assert judged == Result(
        "storage", "storage", "seq_read.vs_fleet_median", "warn",
        "seq_read 100 MB/s is 0.25x the fleet median 400 MB/s over 3 nodes, required >= 0.5x the fleet median: "
        "flagged as a straggler",
        device="nvme0", value=0.25, threshold={"min": 0.5}, hint=STRAGGLER_HINT, duration_s=0.0,
        required=">= 0.5x the fleet median")


def test_a_node_exactly_at_the_fleet_ratio_passes():
    result = Result("storage", "storage", "seq_read", "pass", "m", value=2000.0, unit="MB/s")
    judged = judge_against_fleet(result, median=4000.0, nodes=8, ratio=0.5, severity="fail")
    assert (judged.verdict, judged.hint) == ("pass", "")
    assert judged.message == ("seq_read 2 GB/s is 0.50x the fleet median 4 GB/s over 8 nodes, "
                              "required >= 0.5x the fleet median")


def test_a_lower_is_better_node_exactly_at_the_inverse_ratio_passes():
    result = Result("storage", "storage", "rand_read_p99", "pass", "m", device="nvme0", value=2.0, unit="ms")
    judged = judge_against_fleet(result, median=1.0, nodes=4, ratio=0.5, severity="fail")
    assert judged == Result(
        "storage", "storage", "rand_read_p99.vs_fleet_median", "pass",
        "rand_read_p99 2 ms is 2.00x the fleet median 1 ms over 4 nodes, required <= 2x the fleet median",
        device="nvme0", value=2.0, threshold={"max": 2.0}, required="<= 2x the fleet median")


def test_a_lower_is_better_straggler_says_at_most_and_is_flagged():
    result = Result("storage", "storage", "rand_read_p99", "pass", "m", value=2.5, unit="ms")
    judged = judge_against_fleet(result, median=1.0, nodes=4, ratio=0.5, severity="fail")
    assert judged.message == ("rand_read_p99 2.5 ms is 2.50x the fleet median 1 ms over 4 nodes, "
                              "required <= 2x the fleet median: flagged as a straggler")
    assert judged.hint == STRAGGLER_HINT


def test_only_a_performance_metric_with_a_positive_median_is_compared_and_the_error_says_so():
    result = Result("storage", "storage", "free_space", "info", "m", device="nvme0", value=8.0)
    with pytest.raises(ValueError) as error:
        judge_against_fleet(result, median=8.0, nodes=2, ratio=0.5, severity="fail")
    assert str(error.value) == ("storage.free_space[nvme0] cannot be compared with a fleet median of 8.0: "
                                "only a performance metric with a median above 0 can")


@pytest.mark.parametrize("subject, verdict", [
    ("dataset", "pass"), ("job_dataset", "pass"), ("scratch_on_dataset_fs", "pass"),
    ("scratch_elsewhere", "fail"), ("synthetic", "fail"), ("no_dataset", "fail"), ("", "fail"),
])
def test_only_the_datasets_own_figure_passes_a_dataset_threshold(subject, verdict):
    """Issue 21: 498 MB/s against {min: 200 MB/s} passes only when it was measured on the dataset."""
    m = Measurement("seq_read", 498.0, "MB/s", subject=subject)
    [result] = judge(instance(thresholds=[seq_read(low=200.0)]), Outcome((m,)))
    [warned] = judge(instance(thresholds=[seq_read(low=200.0, severity="warn")]), Outcome((m,)))
    assert (result.verdict, result.subject) == (verdict, subject)
    assert warned.verdict == ("pass" if verdict == "pass" else "warn")
    if verdict == "fail":
        assert result.message.endswith(": not the dataset, so it cannot pass")
        assert "point data.path at the dataset's own files" in result.hint
        # Measured on no dataset named, the config's mistake: exit 2, never a node out of rotation (issue 35)
        assert exit_code([result]) == (2 if subject == "no_dataset" else 1)


def test_a_figure_not_about_data_needs_no_subject():
    """/dev/shm's size or a GPU's driver is no dataset figure: judged as before, with no subject."""
    outcome = Outcome((Measurement("size", 8.0, "GiB"),))
    [result] = judge(instance("shm", [Threshold("size", 1.0, None, "fail", "t.yaml:2:3")]), outcome)
    assert (result.verdict, result.subject) == ("pass", "")


def test_a_miss_on_scratch_elsewhere_fails_with_the_checks_own_hint_and_says_it_was_not_the_dataset():
    """A figure that misses its minimum still says what it was measured on: "161 MB/s, required 200" read as
    the dataset's when no dataset was named (the working directory was measured)."""
    m = Measurement("seq_read", 20.0, "MB/s", subject="scratch_elsewhere", hint="the scratch hint")
    [result] = judge(instance(thresholds=[seq_read(low=200.0)]), Outcome((m,)))
    assert (result.verdict, result.hint) == ("fail", "the scratch hint")
    assert result.message == ("measured 20 MB/s, required >= 200 MB/s; measured on scratch data on another "
                              "filesystem or device than the dataset's: not the dataset")
    unnamed = Measurement("seq_read", 20.0, "MB/s", subject="no_dataset", hint="name it")
    [result] = judge(instance(thresholds=[seq_read(low=200.0)]), Outcome((unnamed,)))
    assert (result.verdict, result.hint) == ("fail", "name it")
    assert result.message == ("measured 20 MB/s, required >= 200 MB/s; measured on no dataset named (the working "
                              "directory): not the dataset")


def test_a_slow_jobs_dataset_points_at_the_volume_first_only_when_storage_missed_too():
    from preflight.verdict import storage_first

    loader = Result("dataloader", "dataloader", "throughput", "fail", "measured 300 samples/s", value=300.0,
                    unit="samples/s", hint="the job's Dataset delivers 300 samples/s: its own code ...",
                    subject="job_dataset")
    fast = Result("storage", "storage", "small_files", "pass", "ok", value=9432.0, unit="files/s",
                  required=">= 500 files/s")
    assert storage_first([fast, loader]) == [fast, loader]  # storage measured fast: the Dataset's code it is
    slow = Result("storage", "storage", "small_files", "fail", "slow", value=120.0, unit="files/s",
                  required=">= 500 files/s")
    facts = Result("storage", "storage", "free_space", "fail", "full", value=0.1, unit="GiB")  # no rate: no cause
    assert storage_first([facts, loader]) == [facts, loader]
    moved = storage_first([slow, loader])
    assert moved[0] == slow and moved[1].verdict == "fail" and moved[1].value == 300.0
    assert moved[1].hint.startswith("storage on this node missed too (storage.small_files 120 files/s "
                                    "(required >= 500 files/s)): fix the volume first")


def test_a_flag_is_said_yes_or_no_in_its_message(tmp_path):
    results = judged(tmp_path, "storage", "read_only: {min: 1}", [Measurement("read_only", 0.0, "")])
    assert results["storage.read_only"].message.startswith("measured no, required >= 1")
    info = judged(tmp_path, "storage", "path: .", [Measurement("read_only", 1.0, "")])
    assert info["storage.read_only"].message == "measured yes (no threshold)"


def test_a_synthetic_figure_above_its_minimum_is_told_to_measure_the_dataset_not_to_raise_num_workers():
    """A new user's trial: `synthetic: true` at 1,053 >= 1,000 samples/s failed, as it must, with the check's advice
    for a slow loader ("raise num_workers if CPUs are idle"), which cannot make it pass."""
    m = Measurement("seq_read", 498.0, "MB/s", subject="synthetic", hint="raise num_workers if CPUs are idle")
    [result] = judge(instance(thresholds=[seq_read(low=200.0)]), Outcome((m,)))
    assert result.verdict == "fail" and result.message.endswith("not the dataset, so it cannot pass")
    assert result.hint.startswith("point data.path at the dataset's own files")


# Issue 44: a figure whose interval straddles its threshold at max_duration is decided on its estimate and says
# `marginal`; the instance's `marginal:` setting says what that does to the exit code.
STRADDLING = Measurement("seq_read", samples=(900.0, 950.0, 1000.0, 1050.0, 1100.0), unit="MB/s", subject="dataset")


@pytest.mark.parametrize("setting, verdict, code", [("warn", "warn", 0), ("fail", "fail", 1), ("pass", "pass", 0)])
def test_a_straddling_figure_is_marginal_and_its_setting_decides_the_exit_code(setting, verdict, code):
    judged_by = instance(thresholds=[seq_read(low=1020.0)])._replace(marginal=setting)
    [result] = judge(judged_by, Outcome((STRADDLING,)))
    assert (result.verdict, exit_code([result])) == (verdict, code)
    assert result.interval == (900.0, 1100.0)  # five samples: the median's interval is their range
    assert result.marginal == "the 90% interval 900 MB/s to 1.1 GB/s straddles the threshold"
    assert result.message == ("measured 1 GB/s, required >= 1.02 GB/s (marginal: the 90% interval 900 MB/s to 1.1 GB/s "
                              "straddles the threshold: on its estimate it misses)")


def test_a_figure_whose_interval_clears_the_threshold_is_decided_on_either_side():
    [far_below] = judge(instance(thresholds=[seq_read(low=1200.0)]), Outcome((STRADDLING,)))
    [far_above] = judge(instance(thresholds=[seq_read(low=800.0)]), Outcome((STRADDLING,)))
    assert (far_below.verdict, far_below.marginal) == ("fail", "")
    assert (far_above.verdict, far_above.marginal) == ("pass", "")


def test_a_warn_severity_never_fails_on_a_marginal_figure_even_when_told_to_fail():
    judged_by = instance(thresholds=[seq_read(low=1020.0, severity="warn")])._replace(marginal="fail")
    [result] = judge(judged_by, Outcome((STRADDLING,)))
    assert result.verdict == "warn" and result.marginal


@pytest.mark.parametrize("value, minimum, marginal", [(5077.0, 1.0, False), (5077.0, 2000.0, True),
                                                      (5077.0, 16000.0, False)])
def test_a_short_or_single_sample_figure_is_decided_only_beyond_three_times_its_value(value, minimum, marginal):
    from preflight.measurement import SHORT

    short = Measurement("seq_read", samples=(value,), unit="MB/s", subject="dataset",
                        warnings=(f"{SHORT}1 sample of 100 files in 12 ms",))
    [result] = judge(instance(thresholds=[seq_read(low=minimum)]), Outcome((short,)))
    assert bool(result.marginal) is marginal
    if marginal:
        assert result.marginal == "its samples spanned under 0.5 s and the threshold is within 3x of it"


def test_a_value_given_without_samples_and_a_relative_bound_are_never_marginal():
    [given] = judge(instance(thresholds=[seq_read(low=1000.0)]), Outcome((Measurement("seq_read", 1000.0, "MB/s",
                                                                                       subject="dataset"),)))
    assert given.verdict == "pass" and not given.marginal and given.interval is None


# A rate whose samples all come from one run (the DataLoader's pools) carries the spread between runs as a floor of
# its interval: busy, pools that agreed within ±5 % decided a 1.0x threshold both ways in runs of one node.
TIGHT = Measurement("seq_read", samples=(990.0, 1000.0, 1000.0, 1010.0, 1000.0), unit="MB/s", subject="dataset",
                    floor=0.17)


@pytest.mark.parametrize("minimum, verdict, marginal", [(1100.0, "warn", True), (900.0, "warn", True),
                                                        (1200.0, "fail", False), (820.0, "pass", False)])
def test_a_figure_s_floor_widens_its_interval_and_marks_a_threshold_inside_it_marginal(minimum, verdict, marginal):
    [result] = judge(instance(thresholds=[seq_read(low=minimum)]), Outcome((TIGHT,)))
    assert result.interval == (830.0, 1170.0)  # the samples' own range is 990 to 1010
    assert (result.verdict, bool(result.marginal)) == (verdict, marginal)
    if marginal:
        assert result.marginal == ("the 90% interval 830 MB/s to 1.17 GB/s (at least ±17%: where one node's runs "
                                   "fall 99 times in 100, a spread one run's samples cannot show) straddles the "
                                   "threshold")


def test_the_floor_survives_the_worker_round_trip_and_shrinks_over_repeated_runs():
    from preflight.measurement import combine

    assert Measurement.from_dict(TIGHT.to_dict()).floor == 0.17
    four = combine([TIGHT] * 4)
    assert four.floor == pytest.approx(0.085) and four.interval == pytest.approx((915.0, 1085.0))
