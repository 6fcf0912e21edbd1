"""``preflight list``: every check, its options with defaults and its metrics with units.

Generated from the checks' own tables (the registry in ``preflight.checks``); the check reference
in docs/configuration.md is ``preflight list --markdown``, and a test keeps the two identical.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from preflight.checks import CHECKS
from preflight.checks.base import Check, Metric, Option, duration_help
from preflight.checks.option_kinds import shown
from preflight.errors import UsageError, suggest
from preflight.report.console import terminal_width, wrap

_DIRECTION = {True: "higher is better", False: "lower is better", None: "text"}


def render(width: int | None = None, checks: Sequence[str] = ()) -> str:
    """Every check (or those ``checks`` names): its help, then each option (name, kind, default) and metric (name,
    unit, direction) on an aligned line with its help wrapped beneath, every line within ``width`` (by default the
    terminal's, else 80).

    Raises:
        UsageError: a name in ``checks`` is no check; the message suggests the closest.
    """
    width = width or terminal_width()
    columns = Columns.of(CHECKS.values())
    lines: list[str] = []
    for name, check in chosen(checks).items():
        lines += wrap(f"{name}: {check.HELP}", width, "", "  ")
        lines += wrap(f"duration: {duration_help(check)}", width, "  ", "    ")
        if check.OPTIONS:
            lines.append("  parameters:")
            lines += [line for option in check.OPTIONS for line in option_lines(option, columns, width, "    ")]
        lines.append("  metrics:")
        lines += [line for metric in check.METRICS for line in metric_lines(metric, columns, width, "    ")]
        lines.append("")
    return "\n".join(lines)


class Columns(NamedTuple):
    """Widths that line up every check's options and metrics, whatever the longest name."""

    option: int
    kind: int
    default: int
    metric: int
    unit: int

    @classmethod
    def of(cls, checks: Iterable[Check]) -> Columns:
        checks = list(checks)
        options = [option for check in checks for option in check.OPTIONS]
        metrics = [metric for check in checks for metric in check.METRICS]
        return cls(max(len(o.name) for o in options), max(len(shown(o)) for o in options),
                   max(len(_default(o)) for o in options), max(len(m.name) for m in metrics),
                   max(len(unit_name(m)) for m in metrics))


def option_lines(option: Option, columns: Columns, width: int, indent: str) -> list[str]:
    """``name  kind  default D``, then the help beneath (``list`` and ``explain``)."""
    head = (f"{indent}{option.name:<{columns.option}}  {shown(option):<{columns.kind}}  "
            f"default {_default(option)}")
    return wrap(head, width, "", indent + "  ") + wrap(option.help, width, indent + "    ", indent + "    ")


def metric_lines(metric: Metric, columns: Columns, width: int, indent: str) -> list[str]:
    """``name  unit  direction``, then the help (what is measured, and how) beneath (``list`` and ``explain``)."""
    head = f"{indent}{metric.name:<{columns.metric}}  {unit_name(metric):<{columns.unit}}  {direction(metric)}"
    return wrap(head, width, "", indent + "  ") + wrap(metric.help, width, indent + "    ", indent + "    ")


def chosen(names: Sequence[str]) -> dict[str, Check]:
    """The checks ``names`` names, in the registry's order; all of them when it is empty.

    Raises:
        UsageError: a name is no check: ``list dataloder: no such check: did you mean `dataloader`?``.
    """
    for name in names:
        if name not in CHECKS:
            raise UsageError(f"list {name}: no such check{suggest(name, CHECKS)} (`preflight list` shows them all; "
                             f"an instance of your file is listed under its check)")
    return {name: check for name, check in CHECKS.items() if not names or name in names}


def render_markdown(checks: Sequence[str] = ()) -> str:
    """The check reference of docs/configuration.md: one section per check, a table of parameters and of metrics."""
    lines: list[str] = []
    for name, check in chosen(checks).items():
        lines += [f"#### `{name}`", "", check.HELP[0].upper() + check.HELP[1:] + ".", "",
                  f"`duration`: {_escape(duration_help(check))}.", ""]
        if check.OPTIONS:
            lines += ["| parameter | kind | default | meaning |", "| --- | --- | --- | --- |"]
            lines += [f"| `{o.name}` | {shown(o, markdown=True)} | `{_default(o)}` | {_escape(o.help)} |"
                      for o in check.OPTIONS]
            lines.append("")
        lines += ["| metric | unit | direction | what and how |", "| --- | --- | --- | --- |"]
        lines += [f"| `{m.name}` | {unit_name(m)} | {direction(m)} | {_escape(m.help)} |" for m in check.METRICS]
        lines.append("")
    return "\n".join(lines)


def _default(option: Option) -> str:
    if option.default in ("", [], {}):
        return "(none)"
    return str(option.default).lower() if isinstance(option.default, bool) else str(option.default)


def unit_name(metric: Metric) -> str:
    """The unit column: ``yes/no`` for a flag (measured as 1 or 0, judged as ``{min: 1}``), ``ratio`` for a
    dimensionless quotient (``Metric.ratio``), ``count`` for any other bare number."""
    return "yes/no" if metric.flag else "ratio" if metric.ratio else metric.unit or "count"


def direction(metric: Metric) -> str:
    direction = "not ordered" if metric.higher_is_better is None and not metric.is_text else \
        _DIRECTION[metric.higher_is_better]
    return direction + (", per device" if metric.per_device else "")


def _escape(text: str) -> str:
    return text.replace("|", "\\|")
