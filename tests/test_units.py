import math

import pytest

from preflight.units import Dimension, UnitError, convert, format_value, parse_quantity


@pytest.mark.parametrize(
    "text, dimension, expected",
    [
        ("1.5 GB/s", Dimension.BANDWIDTH, 1.5e9),
        ("1 GiB/s", Dimension.BANDWIDTH, 2**30),
        ("8 GiB", Dimension.SIZE, 8 * 2**30),
        ("8GB", Dimension.SIZE, 8e9),
        ("4 KiB", Dimension.SIZE, 4096),
        ("20000 IOPS", Dimension.IOPS, 20000),
        ("1000 samples/s", Dimension.SAMPLE_RATE, 1000),
        ("30s", Dimension.DURATION, 30),
        ("250 ms", Dimension.DURATION, 0.25),
        ("2 min", Dimension.DURATION, 120),
        ("90 %", Dimension.PERCENT, 90),
        ("1e3", Dimension.COUNT, 1000),
        (3, Dimension.COUNT, 3),
    ],
)
def test_parses_quantities_into_base_units(text, dimension, expected):
    assert parse_quantity(text, dimension) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text, dimension, fragment",
    [
        ("8 GiB", Dimension.BANDWIDTH, "is a size, but a bandwidth is expected"),
        (1000, Dimension.BANDWIDTH, "found bare number 1000"),
        ("1000", Dimension.BANDWIDTH, "found bare number '1000'"),
        ("1 k", Dimension.SIZE, "unknown unit 'k'"),
        ("10 KB", Dimension.SIZE, "kB (1000 B) or KiB (1024 B)"),
        ("fast", Dimension.BANDWIDTH, "expected a bandwidth like `1.5 GB/s`"),
        (True, Dimension.COUNT, "found boolean"),
        ("1e999 GB/s", Dimension.BANDWIDTH, "not a finite number"),
        ([1], Dimension.SIZE, "found list"),
    ],
)
def test_rejects_what_is_not_the_expected_dimension(text, dimension, fragment):
    with pytest.raises(UnitError) as error:
        parse_quantity(text, dimension)
    assert fragment in str(error.value)


def test_bare_number_without_unit_is_an_error_unless_a_count():
    with pytest.raises(UnitError):
        parse_quantity("1000", Dimension.BANDWIDTH)
    assert parse_quantity("1000", Dimension.COUNT) == 1000


def test_convert_between_decimal_and_binary_prefixes():
    assert convert(1, "GB/s", "MB/s") == 1000
    assert convert(1, "GiB", "MiB") == 1024
    assert math.isclose(convert(1, "GiB", "GB"), 1.073741824)
    with pytest.raises(UnitError):
        convert(1, "GiB", "GB/s")


@pytest.mark.parametrize(
    "value, unit, text",
    [(2080.44, "MB/s", "2080 MB/s"), (0.012346, "ms", "0.01235 ms"), (23.54057, "GiB", "23.54 GiB"),
     (0.0, "", "0"), (None, "MB/s", "-"), ("H100", "text", "H100"), (95.0, "%", "95%"), (1.0, "GiB", "1 GiB")],
)
def test_format_value_keeps_four_significant_figures(value, unit, text):
    assert format_value(value, unit) == text
