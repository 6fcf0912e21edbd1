"""``preflight explain CHECK``: what a check measures, its method and sources, its options and metrics.

Generated from the check module's docstring and its OPTIONS/METRICS tables, like ``list``.
"""

from __future__ import annotations

import inspect

from preflight.checks import CHECKS
from preflight.checks.base import Metric
from preflight.commands.list_checks import metric_line, option_line
from preflight.config import _suggest
from preflight.errors import UsageError
from preflight.units import UNITS, example


def render(name: str) -> str:
    """The explanation as text.

    Raises:
        UsageError: ``name`` is not a registered check; the message suggests the closest.
    """
    if name not in CHECKS:
        raise UsageError(f"unknown check `{name}`{_suggest(name, CHECKS)} (`preflight list` shows them all)")
    check = CHECKS[name]
    lines = [f"{name}: {check.HELP}", "", inspect.cleandoc(check.__doc__ or ""), ""]
    if check.OPTIONS:
        lines.append("parameters (name, kind, default):")
        lines += [f"  {option_line(option)}" for option in check.OPTIONS]
        lines.append("")
    lines.append("metrics (name, unit, direction):")
    lines += [f"  {metric_line(metric)}" for metric in check.METRICS]
    hints = [(metric.name, metric.hint) for metric in check.METRICS if metric.hint]
    if hints:
        lines += ["", "fixes suggested on a miss:"] + [f"  {metric}: {hint}" for metric, hint in hints]
    lines += ["", "in thresholds.yaml:", "  checks:", f"    {name}:"]
    lines += [f"      {metric.name}: {{min: {_example(metric)}}}" for metric in check.METRICS if not metric.is_text][:3]
    return "\n".join(lines).rstrip() + "\n"


def _example(metric: Metric) -> str:
    if metric.is_version:
        return {"driver_version": '"535.104"', "cuda_driver_version": '"12.4"'}.get(metric.name, '"8.0"')
    return example(UNITS[metric.unit].dimension)
