"""``preflight list``: every check, its options with defaults and its metrics with units.

Generated from the checks' own tables (the registry in ``preflight.checks``); the README's
check reference is ``preflight list --markdown``, and a test keeps the two identical.
"""

from __future__ import annotations

from preflight.checks import CHECKS
from preflight.checks.base import Metric, Option
from preflight.units import Dimension, example

_DIRECTION = {True: "higher is better", False: "lower is better", None: "text"}


def render() -> str:
    lines: list[str] = []
    for name, check in CHECKS.items():
        lines.append(f"{name}: {check.HELP}")
        if check.OPTIONS:
            lines.append("  parameters:")
            lines += [f"    {option_line(option)}" for option in check.OPTIONS]
        lines.append("  metrics:")
        lines += [f"    {metric_line(metric)}" for metric in check.METRICS]
        lines.append("")
    return "\n".join(lines)


def option_line(option: Option) -> str:
    """``name  kind  default D  help`` on one line (``list`` and ``explain``)."""
    return f"{option.name:<16} {_kind(option, plain=True):<12} default {_default(option):<10} {option.help}"


def metric_line(metric: Metric) -> str:
    """``name  unit  direction: help`` on one line (``list`` and ``explain``)."""
    return f"{metric.name:<20} {_unit(metric):<10} {_direction(metric)}: {metric.help}"


def render_markdown() -> str:
    """The README's check reference: one section per check, a table of parameters and of metrics."""
    lines: list[str] = []
    for name, check in CHECKS.items():
        lines += [f"#### `{name}`", "", check.HELP[0].upper() + check.HELP[1:] + ".", ""]
        if check.OPTIONS:
            lines += ["| parameter | kind | default | meaning |", "| --- | --- | --- | --- |"]
            lines += [f"| `{o.name}` | {_kind(o)} | `{_default(o)}` | {_escape(o.help)} |" for o in check.OPTIONS]
            lines.append("")
        lines += ["| metric | unit | direction | what and how |", "| --- | --- | --- | --- |"]
        lines += [f"| `{m.name}` | {_unit(m)} | {_direction(m)} | {_escape(m.help)} |" for m in check.METRICS]
        lines.append("")
    return "\n".join(lines)


def _kind(option: Option, plain: bool = False) -> str:
    if isinstance(option.kind, Dimension):
        if plain:
            return option.kind.value
        return f"{option.kind.value} (`{example(option.kind)}`)" if option.kind is not Dimension.COUNT else "number"
    if option.kind == "choice":
        return " \\| ".join(option.choices)
    return {"int_or_auto": "int or auto"}.get(option.kind, option.kind)


def _default(option: Option) -> str:
    if option.default == "":
        return "(none)"
    return str(option.default).lower() if isinstance(option.default, bool) else str(option.default)


def _unit(metric: Metric) -> str:
    return metric.unit or "count"


def _direction(metric: Metric) -> str:
    direction = "not ordered" if metric.higher_is_better is None and not metric.is_text else \
        _DIRECTION[metric.higher_is_better]
    return direction + (", per device" if metric.per_device else "")


def _escape(text: str) -> str:
    return text.replace("|", "\\|")
