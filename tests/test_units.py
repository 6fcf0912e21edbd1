import math

import pytest

from preflight.units import (UNITS, Dimension, UnitError, convert, format_value, parse_quantity, readable, to_unit,
                             with_article)


PARSED = [
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
        # every factor of the table, each with a right value that no neighbouring factor gives
        ("1500 ns", Dimension.DURATION, 1.5e-6),
        ("250 us", Dimension.DURATION, 2.5e-4),
        ("2 h", Dimension.DURATION, 7200),
        ("3 TB", Dimension.SIZE, 3e12),
        ("2 TiB", Dimension.SIZE, 2 * 2**40),
        ("5 kB/s", Dimension.BANDWIDTH, 5000),
        ("3 KiB/s", Dimension.BANDWIDTH, 3072),
        ("4 MB", Dimension.SIZE, 4e6),
        ("4 MiB", Dimension.SIZE, 4 * 2**20),
        ("2 TB/s", Dimension.BANDWIDTH, 2e12),
        ("1 TiB/s", Dimension.BANDWIDTH, 2**40),
        ("512 B", Dimension.SIZE, 512),
        ("512 B/s", Dimension.BANDWIDTH, 512),
        ("500 files/s", Dimension.FILE_RATE, 500),
        ("85 C", Dimension.TEMPERATURE, 85),
        ("300 W", Dimension.POWER, 300),
        ("-1.5e-3 s", Dimension.DURATION, -0.0015),
        (".5 s", Dimension.DURATION, 0.5),
        ("  7   GB  ", Dimension.SIZE, 7e9),
        (2.5, Dimension.COUNT, 2.5),
        ("3 kB", Dimension.SIZE, 3000),
        ("250 MB/s", Dimension.BANDWIDTH, 2.5e8),
        ("2 MiB/s", Dimension.BANDWIDTH, 2 * 2**20),
]


@pytest.mark.parametrize("text, dimension, expected", PARSED)
def test_parses_quantities_into_base_units(text, dimension, expected):
    assert parse_quantity(text, dimension) == pytest.approx(expected)


def test_every_unit_of_the_table_is_parsed_above_with_a_known_value():
    from preflight.units import _QUANTITY

    parsed = {(_QUANTITY.match(text)["unit"] or "") for text, _, _ in PARSED if isinstance(text, str)}
    assert set(UNITS) - parsed == set(), "each unit needs a row in PARSED with its right value"


@pytest.mark.parametrize(
    "text, dimension, fragment",
    [
        ("8 GiB", Dimension.BANDWIDTH, "is a size, but a bandwidth is expected"),
        ("20000 IOPS", Dimension.SIZE, "'20000 IOPS' is an IOPS, but a size is expected"),
        ("8 GiB", Dimension.IOPS, "'8 GiB' is a size, but an IOPS is expected"),
        ("fast", Dimension.IOPS, "expected an IOPS like `20000 IOPS`"),
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
    [(2080.44, "MB/s", "2.08 GB/s"), (0.012346, "ms", "0.01235 ms"), (9999.4, "samples/s", "9999 samples/s"), (23.54057, "GiB", "23.54 GiB"),
     (0.0, "", "0"), (None, "MB/s", "-"), ("H100", "text", "H100"), (95.0, "%", "95%"), (1.0, "GiB", "1 GiB")],
)
def test_format_value_keeps_four_significant_figures(value, unit, text):
    assert format_value(value, unit) == text


@pytest.mark.parametrize(
    "value, unit, text",
    [(0.0625, "GiB", "64 MiB"),  # Docker's default /dev/shm, as a person says it
     (0.9936, "MB", "993.6 kB"), (4070.0, "MB/s", "4.07 GB/s"), (0.0005, "GB/s", "500 kB/s"),
     (1023.99, "MiB", "1 GiB"),  # rounded before choosing, never "1024 MiB"
     (1000.0, "MiB", "1000 MiB"), (1048576.0, "GiB", "1024 TiB"), (67108864.0, "B", "64 MiB"),
     (0.5, "B", "0.5 B"), (0.0, "GiB", "0 GiB"), (-0.5, "GiB", "-512 MiB"),
     (77143.0, "IOPS", "77143 IOPS"), (0.0625, "s", "0.0625 s"), (90.0, "%", "90%")],
)
def test_sizes_and_bandwidths_take_the_prefix_a_person_would_say(value, unit, text):
    assert format_value(value, unit) == text


def test_readable_stays_in_the_family_and_leaves_other_units_alone():
    assert readable(0.0625, "GiB") == (64.0, "MiB")
    assert readable(2500.0, "kB") == (2.5, "MB")  # decimal stays decimal
    assert readable(2048.0, "KiB/s") == (2.0, "MiB/s")  # binary stays binary
    assert readable(0.5, "ms") == (0.5, "ms") and readable(12345.0, "") == (12345.0, "")
    assert readable(float("inf"), "GB/s") == (float("inf"), "GB/s")


@pytest.mark.parametrize(
    "phrase, expected",
    [("IOPS", "an IOPS"), ("MB/s", "an MB/s"), ("GB/s", "a GB/s"), ("GiB", "a GiB"), ("NVMe drive", "an NVMe drive"),
     ("H100", "an H100"), ("CPU build", "a CPU build"), ("USB stick", "a USB stick"),
     ("size", "a size"), ("bandwidth", "a bandwidth"), ("sample rate", "a sample rate"), ("file rate", "a file rate"),
     ("duration", "a duration"), ("percentage", "a percentage"), ("count", "a count"), ("text", "a text"),
     ("version", "a version"), ("interval", "an interval"), ("overlay", "an overlay"), ("unit", "a unit"),
     ("user", "a user"), ("one-line fix", "a one-line fix"), ("hour", "an hour"), ("uint8", "a uint8"),
     ("docker", "a docker"), ("kubernetes", "a kubernetes"),
     ("8 MiB", "an 8 MiB"), ("64 MiB", "a 64 MiB"), ("8192x8192", "an 8192x8192"), ("1024x1024", "a 1024x1024"),
     ("11 GB", "an 11 GB"), ("18000 files", "an 18000 files"), ("110 ms", "a 110 ms"), ("80 s", "an 80 s"),
     ("1 GiB", "a 1 GiB"), ("0.5 s", "a 0.5 s")],
)
def test_the_article_follows_the_sound_of_the_next_word(phrase, expected):
    assert with_article(phrase) == expected


@pytest.mark.parametrize(
    "dimension, message",
    [(Dimension.SIZE, "expected a size like `8 GiB`, found 'fast'"),
     (Dimension.BANDWIDTH, "expected a bandwidth like `1.5 GB/s`, found 'fast'"),
     (Dimension.IOPS, "expected an IOPS like `20000 IOPS`, found 'fast'"),
     (Dimension.SAMPLE_RATE, "expected a sample rate like `1000 samples/s`, found 'fast'"),
     (Dimension.FILE_RATE, "expected a file rate like `500 files/s`, found 'fast'"),
     (Dimension.DURATION, "expected a duration like `30s`, found 'fast'"),
     (Dimension.PERCENT, "expected a percentage like `90 %`, found 'fast'"),
     (Dimension.COUNT, "expected a count like `1`, found 'fast'"),
     (Dimension.TEMPERATURE, "expected a temperature like `85 C`, found 'fast'"),
     (Dimension.POWER, "expected a power like `300 W`, found 'fast'")],
)
def test_a_value_that_is_no_quantity_gets_the_example_of_its_dimension(dimension, message):
    with pytest.raises(UnitError) as error:
        parse_quantity("fast", dimension)
    assert str(error.value) == message


@pytest.mark.parametrize(
    "text, dimension, message",
    [(float("inf"), Dimension.COUNT, "inf is not a finite number"),
     ("1e999 GB/s", Dimension.BANDWIDTH, "'1e999 GB/s' is not a finite number"),
     (10**400, Dimension.COUNT, "1" + "0" * 39 + " is too large to be a count"),  # the repr cut at 40 characters
     ("3 furlongs", Dimension.SIZE, "unknown unit 'furlongs' in '3 furlongs': write it like `8 GiB`"),
     ("3 GBps", Dimension.BANDWIDTH, "unknown unit 'GBps' in '3 GBps': write GB/s"),
     ("8 GiB", Dimension.DURATION, "'8 GiB' is a size, but a duration is expected here (like `30s`)")],
)
def test_the_one_line_errors_a_user_reads_are_whole(text, dimension, message):
    with pytest.raises(UnitError) as error:
        parse_quantity(text, dimension)
    assert str(error.value) == message


def test_converting_across_dimensions_names_both_units():
    with pytest.raises(UnitError) as error:
        convert(1, "GiB", "GB/s")
    assert str(error.value) == "cannot convert GiB to GB/s"


def test_to_unit_expresses_a_base_value_in_the_unit():
    assert to_unit(2e9, "GB/s") == 2.0 and to_unit(3 * 2**20, "MiB") == 3.0 and to_unit(0.25, "ms") == 250.0


def test_format_value_without_a_unit_is_the_bare_number():
    assert format_value(5.0) == "5" and format_value(1234.4) == "1234" and format_value(0.5) == "0.5"


def test_readable_moves_down_to_bytes_from_the_first_prefix():
    assert readable(0.5, "KiB") == (512.0, "B") and readable(0.5, "kB/s") == (500.0, "B/s")
    assert format_value(0.25, "kB") == "250 B"


@pytest.mark.parametrize(
    "phrase, expected",
    [("`8 GiB` copy", "an `8 GiB` copy"), ("(unit)", "a (unit)"), ('"hour" field', 'an "hour" field'),
     ("Xeon CPU", "a Xeon CPU"),  # a leading X is stripped only as quoting, never as a letter
     ("11,000 files", "an 11,000 files"), ("110,000 files", "a 110,000 files"), ("18,000,000 B", "an 18,000,000 B"),
     ("X-ray", "an X-ray"), ("U-boat", "a U-boat"),  # one capital before a hyphen: a letter's name
     ("% change", "a % change"), ("Linux host", "a Linux host"), ("Samsung drive", "a Samsung drive"),
     ("MinIO bucket", "a MinIO bucket"), ("S3fs mount", "an S3fs mount"), ("", "a ")],
)
def test_the_article_reads_quoting_commas_hyphens_and_capitals_as_a_person_does(phrase, expected):
    assert with_article(phrase) == expected


def test_leading_zeros_of_a_number_are_not_read():
    from preflight.units import _number_starts_with_vowel

    assert _number_starts_with_vowel("008") and _number_starts_with_vowel("0011")
    assert not _number_starts_with_vowel("000") and not _number_starts_with_vowel("")
