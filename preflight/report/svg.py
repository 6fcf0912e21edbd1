"""Report layer: a metric's value against its threshold as an inline SVG bar, and its samples as a strip.

One ``Axis`` for both: linear from 0, or whole decades past ``LOG_SPAN``; plain SVG 1.1, nothing external.
"""

from __future__ import annotations

import math
from html import escape
from typing import Mapping, NamedTuple, Sequence

from preflight.units import format_value

WIDTH = 420  # px of the drawing area
BAR_HEIGHT = 16
STRIP_HEIGHT = 10
LOG_SPAN = 10.0  # largest / smallest number drawn above which the axis is logarithmic
COLOURS = {"pass": "#2e7d32", "info": "#607d8b", "skip": "#9e9e9e", "warn": "#ef8f00", "fail": "#c62828",
           "error": "#8e0000"}
_MISS_ZONE = "#fbe3e3"  # the side of the threshold that misses
MIN_BAR = 5.0  # px: the narrowest value bar, so a value at the axis start (0 Xid lines) is seen in its colour


class Axis(NamedTuple):
    """A mapping from values to x pixels in [0, WIDTH]."""

    low: float
    high: float
    log: bool

    @classmethod
    def fit(cls, numbers: Sequence[float]) -> Axis | None:
        """An axis that shows every finite number of ``numbers``, or None when there is nothing to draw
        (no finite number, or a negative one, which no metric of preflight has)."""
        finite = [n for n in numbers if math.isfinite(n)]
        if not finite or min(finite) < 0:
            return None
        smallest, largest = min(finite), max(finite)
        if smallest > 0 and largest / smallest > LOG_SPAN:
            return cls(10 ** math.floor(math.log10(smallest)), 10 ** math.ceil(math.log10(largest)), True)
        return cls(0.0, _nice_ceiling(largest * 1.1) if largest > 0 else 1.0, False)

    def x(self, value: float) -> float:
        """``value``'s x position, clamped into the drawing."""
        if self.log:
            value = max(value, self.low)
            share = (math.log10(value) - math.log10(self.low)) / (math.log10(self.high) - math.log10(self.low))
        else:
            share = (value - self.low) / (self.high - self.low)
        return round(max(0.0, min(1.0, share)) * WIDTH, 1)

    def ticks(self) -> list[float]:
        """Where gridlines go: each decade on a log axis, five steps on a linear one."""
        if self.log:
            first, last = round(math.log10(self.low)), round(math.log10(self.high))
            return [10.0 ** power for power in range(first, last + 1)]
        return [self.high * step / 4 for step in range(5)]


def _nice_ceiling(value: float) -> float:
    """The smallest round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) at or above ``value``."""
    power = 10 ** math.floor(math.log10(value))
    return next(round(step * power, 12) for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)
                if step * power >= value * 0.9999)


def numbers_of(value: object, threshold: Mapping[str, object] | None, samples: Sequence[float]) -> list[float]:
    """The numbers a row draws: its value, its numeric bounds and its samples."""
    drawn = [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []
    drawn += [float(b) for b in (threshold or {}).values() if isinstance(b, (int, float)) and not isinstance(b, bool)]
    return drawn + [float(s) for s in samples]


def bar(axis: Axis, value: float | None, threshold: Mapping[str, object] | None, verdict: str, label: str) -> str:
    """The value as a bar from the axis' start, the threshold as a mark with the missing side shaded; ``label`` is the
    accessible title ("982 MB/s against >= 200 MB/s")."""
    parts = [f'<svg class="bar" width="{WIDTH}" height="{BAR_HEIGHT}" viewBox="0 0 {WIDTH} {BAR_HEIGHT}" '
             f'role="img"><title>{escape(label)}</title>',
             f'<rect width="{WIDTH}" height="{BAR_HEIGHT}" fill="#f3f4f6"/>']
    bounds = {k: float(v) for k, v in (threshold or {}).items()
              if k in ("min", "max") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    if "min" in bounds:
        parts.append(f'<rect width="{axis.x(bounds["min"])}" height="{BAR_HEIGHT}" fill="{_MISS_ZONE}"/>')
    if "max" in bounds:
        start = axis.x(bounds["max"])
        parts.append(f'<rect x="{start}" width="{round(WIDTH - start, 1)}" height="{BAR_HEIGHT}" fill="{_MISS_ZONE}"/>')
    parts += [f'<line x1="{axis.x(t)}" x2="{axis.x(t)}" y1="0" y2="{BAR_HEIGHT}" stroke="#d9dce1"/>'
              for t in axis.ticks()]
    if value is not None:  # at least MIN_BAR wide: a count of 0 passing its {max: 0} showed as a shaded bar only
        parts.append(f'<rect y="3" width="{max(axis.x(value), MIN_BAR)}" height="{BAR_HEIGHT - 6}" '
                     f'fill="{COLOURS.get(verdict, COLOURS["info"])}"/>')
    for bound in bounds.values():
        x = axis.x(bound)
        parts.append(f'<line x1="{x}" x2="{x}" y1="0" y2="{BAR_HEIGHT}" stroke="#111" stroke-width="2"/>')
    return "".join(parts) + "</svg>"


def strip(axis: Axis, samples: Sequence[float], label: str) -> str:
    """Each sample as a dot on ``axis``: the spread a median hides (a bimodal loader, one slow window)."""
    dots = "".join(f'<circle cx="{axis.x(s)}" cy="{STRIP_HEIGHT / 2}" r="2.5"/>' for s in samples)
    return (f'<svg class="strip" width="{WIDTH}" height="{STRIP_HEIGHT}" viewBox="0 0 {WIDTH} {STRIP_HEIGHT}" '
            f'role="img"><title>{escape(label)}</title><g fill="#1f4e79" fill-opacity="0.45">{dots}</g></svg>')


def scale_note(axis: Axis, unit: str) -> str:
    """How to read ``axis``: ``log scale, 1000 IOPS to 100000 IOPS`` or ``linear scale, 0 to 1.2 GB/s``."""
    if axis.log:
        return f"log scale, {format_value(axis.low, unit)} to {format_value(axis.high, unit)}"
    return f"linear scale, 0 to {format_value(axis.high, unit)}"
