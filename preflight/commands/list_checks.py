"""``preflight list``: every check, its options with defaults and its metrics with units.

Generated from the checks' own tables (the registry in ``preflight.checks``).
"""

from __future__ import annotations

from preflight.checks import CHECKS
from preflight.checks.base import Metric, Option
from preflight.units import Dimension


def render() -> str:
    lines: list[str] = []
    for name, check in CHECKS.items():
        lines.append(f"{name}: {check.HELP}")
        if check.OPTIONS:
            lines.append("  parameters:")
            lines += [f"    {_option(option)}" for option in check.OPTIONS]
        lines.append("  metrics:")
        lines += [f"    {_metric(metric)}" for metric in check.METRICS]
        lines.append("")
    return "\n".join(lines)


def _option(option: Option) -> str:
    kind = option.kind.value if isinstance(option.kind, Dimension) else option.kind
    default = "(none)" if option.default == "" else option.default
    if isinstance(default, bool):
        default = str(default).lower()
    return f"{option.name:<16} {kind:<12} default {default!s:<10} {option.help}"


def _metric(metric: Metric) -> str:
    direction = {True: "higher is better", False: "lower is better", None: "text"}[metric.higher_is_better]
    unit = metric.unit or "count"
    scope = ", per device" if metric.per_device else ""
    return f"{metric.name:<20} {unit:<10} {direction}{scope}: {metric.help}"
