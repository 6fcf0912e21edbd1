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


def _units() -> dict[str, Unit]:
    table: list[Unit] = [Unit("B", Dimension.SIZE, 1), Unit("B/s", Dimension.BANDWIDTH, 1)]
    for i, (decimal, binary) in enumerate((("kB", "KiB"), ("MB", "MiB"), ("GB", "GiB"), ("TB", "TiB")), 1):
        for symbol, factor in ((decimal, 1000.0**i), (binary, 1024.0**i)):
            table.append(Unit(symbol, Dimension.SIZE, factor))
            table.append(Unit(symbol + "/s", Dimension.BANDWIDTH, factor))
    table += [
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
    ]
    return {unit.symbol: unit for unit in table}


UNITS: dict[str, Unit] = _units()

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
        raise UnitError(f"expected a {dimension.value} like `{example(dimension)}`, found boolean {text}")
    if isinstance(text, (int, float)):
        if dimension is not Dimension.COUNT:
            raise UnitError(
                f"expected a {dimension.value} with its unit like `{example(dimension)}`, found bare number {text}"
            )
        try:
            return _finite(float(text), text)
        except OverflowError:
            raise UnitError(f"{text!r:.40} is too large to be a {dimension.value}") from None
    if not isinstance(text, str):
        raise UnitError(f"expected a {dimension.value} like `{example(dimension)}`, found {type(text).__name__}")
    match = _QUANTITY.match(text)
    if not match:
        raise UnitError(f"expected a {dimension.value} like `{example(dimension)}`, found {text!r}")
    symbol = match["unit"] or ""
    if not symbol and dimension is not Dimension.COUNT:
        raise UnitError(
            f"expected a {dimension.value} with its unit like `{example(dimension)}`, found bare number {text!r}"
        )
    unit = UNITS.get(symbol)
    if unit is None:
        hint = _MISSPELLINGS.get(symbol)
        fix = f"write {hint}" if hint else f"write it like `{example(dimension)}`"
        raise UnitError(f"unknown unit {symbol!r} in {text!r}: {fix}")
    if unit.dimension is not dimension:
        raise UnitError(
            f"{text!r} is a {unit.dimension.value}, but a {dimension.value} is expected here "
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
    """A value for people: four significant figures at most, thousands kept whole.

    >>> format_value(2080.44, "MB/s")
    '2080 MB/s'
    >>> format_value(0.012346, "ms")
    '0.01235 ms'
    """
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if value != 0 and abs(value) < 1000:
        digits = max(0, 3 - int(math.floor(math.log10(abs(value)))))
        text = f"{value:.{digits}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    else:
        text = f"{value:.0f}"
    return f"{text} {symbol}".strip() if symbol != "%" else f"{text}%"
