"""Quantities with units: the one place that turns ``"1.5 GB/s"`` into a number.

Decimal prefixes (kB, MB, GB, TB) are powers of 1000 and binary prefixes (KiB, MiB,
GiB, TiB) powers of 1024, as IEC 80000-13 defines them. Parsing is strict: a bare
number where a dimension is expected, an unknown unit, or a unit of another dimension
(a size where a bandwidth is expected) is an error, never a silent conversion.
"""

from __future__ import annotations

import enum
import math
import re
from typing import NamedTuple


class Dimension(enum.Enum):
    """What a quantity measures; a threshold must have its metric's dimension."""

    SIZE = "size"
    BANDWIDTH = "bandwidth"
    IOPS = "IOPS"
    SAMPLE_RATE = "sample rate"
    FILE_RATE = "file rate"
    DURATION = "duration"
    PERCENT = "percentage"
    COUNT = "count"
    TEMPERATURE = "temperature"
    POWER = "power"


class Unit(NamedTuple):
    symbol: str
    dimension: Dimension
    factor: float  # multiply a value in this unit by factor to get the base unit


# Every unit a config may write; a literal table, so each factor is read where it is defined.
UNITS: dict[str, Unit] = {unit.symbol: unit for unit in (
    Unit("B", Dimension.SIZE, 1), Unit("B/s", Dimension.BANDWIDTH, 1),
    Unit("kB", Dimension.SIZE, 1e3), Unit("kB/s", Dimension.BANDWIDTH, 1e3),
    Unit("KiB", Dimension.SIZE, 2.0**10), Unit("KiB/s", Dimension.BANDWIDTH, 2.0**10),
    Unit("MB", Dimension.SIZE, 1e6), Unit("MB/s", Dimension.BANDWIDTH, 1e6),
    Unit("MiB", Dimension.SIZE, 2.0**20), Unit("MiB/s", Dimension.BANDWIDTH, 2.0**20),
    Unit("GB", Dimension.SIZE, 1e9), Unit("GB/s", Dimension.BANDWIDTH, 1e9),
    Unit("GiB", Dimension.SIZE, 2.0**30), Unit("GiB/s", Dimension.BANDWIDTH, 2.0**30),
    Unit("TB", Dimension.SIZE, 1e12), Unit("TB/s", Dimension.BANDWIDTH, 1e12),
    Unit("TiB", Dimension.SIZE, 2.0**40), Unit("TiB/s", Dimension.BANDWIDTH, 2.0**40),
    Unit("IOPS", Dimension.IOPS, 1),
    Unit("samples/s", Dimension.SAMPLE_RATE, 1),
    Unit("files/s", Dimension.FILE_RATE, 1),
    Unit("ns", Dimension.DURATION, 1e-9),
    Unit("us", Dimension.DURATION, 1e-6),
    Unit("ms", Dimension.DURATION, 1e-3),
    Unit("s", Dimension.DURATION, 1),
    Unit("min", Dimension.DURATION, 60),
    Unit("h", Dimension.DURATION, 3600),
    Unit("%", Dimension.PERCENT, 1),
    Unit("C", Dimension.TEMPERATURE, 1),
    Unit("W", Dimension.POWER, 1),
    Unit("", Dimension.COUNT, 1),
)}

# Spellings people write that are ambiguous or wrong; each maps to the fix we suggest.
_MISSPELLINGS = {
    "KB": "kB (1000 B) or KiB (1024 B)",
    "Kb": "kB or KiB",
    "k": "a unit: kB, KiB, IOPS, samples/s, ...",
    "K": "a unit: kB, KiB, IOPS, samples/s, ...",
    "GBps": "GB/s",
    "MBps": "MB/s",
    "Gbps": "GB/s (bytes; preflight does not take bits)",
    "sec": "s",
    "°C": "C",
    "iops": "IOPS",
    "img/s": "samples/s",
}

_QUANTITY = re.compile(r"^\s*(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>\S.*?)?\s*$")


class UnitError(ValueError):
    """A quantity that cannot be read as the expected dimension; the message names the fix."""


def example(dimension: Dimension) -> str:
    """A quantity of ``dimension`` as a user would write it, for error messages."""
    return {
        Dimension.SIZE: "8 GiB",
        Dimension.BANDWIDTH: "1.5 GB/s",
        Dimension.IOPS: "20000 IOPS",
        Dimension.SAMPLE_RATE: "1000 samples/s",
        Dimension.FILE_RATE: "500 files/s",
        Dimension.DURATION: "30s",
        Dimension.PERCENT: "90 %",
        Dimension.COUNT: "1",
        Dimension.TEMPERATURE: "85 C",
        Dimension.POWER: "300 W",
    }[dimension]


def parse_quantity(text: object, dimension: Dimension) -> float:
    """Parse ``text`` as a quantity of ``dimension`` and return it in the base unit.

    Base units: bytes, bytes/s, IOPS, samples/s, files/s, seconds, percent, count,
    degrees Celsius, watts. A COUNT may be a bare number (int or float); every other
    dimension needs its unit.

    Raises:
        UnitError: wrong type, unknown unit, a unit of another dimension, or a value
            that is not a finite number.
    """
    if isinstance(text, bool):
        raise UnitError(f"expected {with_article(dimension.value)} like `{example(dimension)}`, found boolean {text}")
    if isinstance(text, (int, float)):
        if dimension is not Dimension.COUNT:
            raise UnitError(
                f"expected {with_article(dimension.value)} with its unit like `{example(dimension)}`, found bare number {text}"
            )
        try:
            return _finite(float(text), text)
        except OverflowError:
            raise UnitError(f"{text!r:.40} is too large to be {with_article(dimension.value)}") from None
    if not isinstance(text, str):
        raise UnitError(f"expected {with_article(dimension.value)} like `{example(dimension)}`, found {type(text).__name__}")
    match = _QUANTITY.match(text)
    if not match:
        raise UnitError(f"expected {with_article(dimension.value)} like `{example(dimension)}`, found {text!r}")
    symbol = match["unit"] or ""
    if not symbol and dimension is not Dimension.COUNT:
        raise UnitError(
            f"expected {with_article(dimension.value)} with its unit like `{example(dimension)}`, found bare number {text!r}"
        )
    unit = UNITS.get(symbol)
    if unit is None:
        hint = _MISSPELLINGS.get(symbol)
        fix = f"write {hint}" if hint else f"write it like `{example(dimension)}`"
        raise UnitError(f"unknown unit {symbol!r} in {text!r}: {fix}")
    if unit.dimension is not dimension:
        raise UnitError(
            f"{text!r} is {with_article(unit.dimension.value)}, but {with_article(dimension.value)} is expected here "
            f"(like `{example(dimension)}`)"
        )
    return _finite(float(match["number"]) * unit.factor, text)


def _finite(value: float, original: object) -> float:
    if not math.isfinite(value):
        raise UnitError(f"{original!r} is not a finite number")
    return value


def convert(value: float, from_symbol: str, to_symbol: str) -> float:
    """Convert ``value`` between two units of one dimension (``convert(1, "GB/s", "MB/s") == 1000``)."""
    source, target = UNITS[from_symbol], UNITS[to_symbol]
    if source.dimension is not target.dimension:
        raise UnitError(f"cannot convert {from_symbol} to {to_symbol}")
    return value * source.factor / target.factor


def to_unit(base_value: float, symbol: str) -> float:
    """A value in the base unit expressed in ``symbol`` (``to_unit(2e9, "GB/s") == 2.0``)."""
    return base_value / UNITS[symbol].factor


def format_value(value: float | str | None, symbol: str = "") -> str:
    """A value for people: four significant figures at most, thousands kept whole, and a size or
    bandwidth in the prefix a person would say (``readable``): ``64 MiB``, not ``0.0625 GiB``.

    Display only: a report's ``value`` stays in the metric's canonical unit.

    >>> format_value(2080.44, "MB/s")
    '2.08 GB/s'
    >>> format_value(0.0625, "GiB")
    '64 MiB'
    >>> format_value(0.012346, "ms")
    '0.01235 ms'
    """
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    value, symbol = readable(value, symbol)
    if value != 0 and abs(value) < 1000:
        digits = max(0, 3 - int(math.floor(math.log10(abs(value)))))
        text = f"{value:.{digits}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    else:
        text = f"{value:.0f}"
    return f"{text} {symbol}".strip() if symbol != "%" else f"{text}%"


# Prefix families, smallest first; a size or bandwidth moves only within its own family, so a
# binary figure stays binary (64 MiB) and a decimal one decimal (993.6 kB). Bytes count as binary.
_FAMILIES = ((("B", "kB", "MB", "GB", "TB"), 1000.0), (("B", "KiB", "MiB", "GiB", "TiB"), 1024.0))


def readable(value: float, symbol: str) -> tuple[float, str]:
    """``value`` in ``symbol`` re-expressed with the prefix that puts it in [1, 1000) (1024 for binary).

    ``readable(0.0625, "GiB") == (64.0, "MiB")``, ``readable(4070, "MB/s") == (4.07, "GB/s")``;
    other units, zero and non-finite values come back unchanged, as does a value beyond the
    largest or smallest prefix. Rounded to four significant figures once scaled up, so 1023.99 MiB is 1 GiB
    and 0.015625 GiB is 16 MiB (rounded before scaling, it read 15.99 MiB).
    """
    per_second = symbol.endswith("/s")
    prefix = symbol[:-2] if per_second else symbol
    families = [f for f in _FAMILIES if prefix in f[0]]
    if not families or value == 0 or not math.isfinite(value):
        return value, symbol
    names, step = families[-1] if prefix == "B" else families[0]
    index = names.index(prefix)
    while abs(float(f"{value:.4g}")) < 1 and index > 0:
        value, index = value * step, index - 1
    value = float(f"{value:.4g}")
    while abs(float(f"{value:.4g}")) >= step and index < len(names) - 1:
        value, index = value / step, index + 1
    return value, names[index] + ("/s" if per_second else "")


# Letters whose names start with a vowel sound: "an MB/s" (em-bee), "an NVMe", "an HTTP", but "a GB/s".
_VOWEL_LETTERS = set("AEFHILMNORSX")
# Words whose spelling misleads: "a unit", "a user", "a one-line fix", "an hour", "an honest".
_CONSONANT_SOUND = ("one", "once", "uni", "use", "usa", "usi", "usu", "uti", "ubi", "uint", "eu", "ewe", "uran", "ure")
_VOWEL_SOUND = ("hour", "honest", "honor", "honour", "heir")


def with_article(phrase: str) -> str:
    """``phrase`` after "a" or "an", chosen by how its first word is read aloud.

    A number is read as a number (an 8 MiB copy, an 11 GB file, an 18x18 matmul, a 100 ms
    window); an acronym or unit symbol letter by letter (an IOPS, an MB/s, a GiB, a CPU);
    a word by its spelling, with the usual exceptions (a unit, a user, an hour).
    """
    word = phrase.lstrip("`'\"(")
    if not word:
        return f"a {phrase}"
    if word[0].isdigit():
        vowel = _number_starts_with_vowel(re.match(r"[\d,]*", word).group().replace(",", ""))  # type: ignore[union-attr]
    elif _is_acronym(word):
        vowel = word[0].upper() in _VOWEL_LETTERS
    else:
        lower = word.lower()
        vowel = (lower[0] in "aeiou" and not lower.startswith(_CONSONANT_SOUND)) or lower.startswith(_VOWEL_SOUND)
    return f"{'an' if vowel else 'a'} {phrase}"


def _number_starts_with_vowel(digits: str) -> bool:
    """Eight, eighteen, eighty, eleven (thousand, million): the numbers read with a leading vowel."""
    digits = digits.lstrip("0") or "0"
    if digits[0] == "8":
        return True
    lead = digits[: len(digits) % 3 or 3]  # the group read first: "11" of 11,000; "110" of 110,000
    return lead in ("11", "18")


def _is_acronym(word: str) -> bool:
    """IOPS, MB/s, GiB, NVMe, H100: read letter by letter (two capitals among the first three characters,
    or one capital and no lowercase letter after it)."""
    head = re.match(r"[A-Za-z0-9]+", word)
    token = head.group() if head else word
    if not token[0].isupper():
        return False
    return len(token) == 1 or sum(c.isupper() for c in token[:3]) >= 2 or token[1:2].isdigit()
