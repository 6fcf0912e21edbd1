"""``preflight explain CHECK`` or ``CHECK.METRIC``: what it measures, how, and its options and metrics.

Generated from the check module's docstring and its OPTIONS/METRICS tables, like ``list``, and
printed as plain text: the docstrings' reStructuredText markup (double backticks, roles, link
targets) is taken out and their paragraphs are wrapped to the terminal.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from preflight.checks import CHECKS
from preflight.checks.base import Check, Metric, duration_help
from preflight.commands.list_checks import Columns, metric_lines, option_lines, unit_name
from preflight import config
from preflight.config import Config, Instance, Threshold
from preflight.errors import UsageError, suggest
from preflight.report.console import terminal_width, wrap
from preflight.units import UNITS, example


def render(name: str, width: int | None = None, loaded: Config | None = None) -> str:
    """The explanation of a check (``storage``) or of one of its metrics (``storage.seq_read``, also
    ``cuda.temperature[cuda:0]`` as a report names it), every line within ``width``.

    With ``loaded`` (the thresholds file the run read), an instance's name is accepted as the report prints it
    (``wds.throughput_vs_required`` for ``wds: {check: dataloader}``), and the thresholds shown are the file's
    own lines, not an example (issue 35).

    Raises:
        UsageError: not a registered check or an instance of ``loaded``, or not a metric of it; the message
            suggests the closest.
    """
    width = width or terminal_width()
    head, _, metric_name = re.sub(r"\[[^\]]*\]$", "", name).partition(".")
    instances = {i.name: i for i in loaded.instances} if loaded else {}
    if head in instances:
        check_name, chosen = instances[head].check, [instances[head]]
    elif head in CHECKS:
        check_name, chosen = head, [i for i in instances.values() if i.check == head]
    else:
        known = {**dict.fromkeys(CHECKS), **instances}
        read = f", nor an instance of {loaded.path}" if loaded else ""
        raise UsageError(f"unknown check `{head}`{read}{suggest(head, known)} (`preflight list` shows the checks; "
                         f"`preflight explain {name} -c FILE` reads the instances of the file the run read)")
    check = CHECKS[check_name]
    if not metric_name:
        return _check(check_name, check, width, _thresholds(loaded, chosen, check.METRICS))
    metrics = {metric.name: metric for metric in check.METRICS}
    if metric_name not in metrics:
        raise UsageError(f"`{head}` has no metric `{metric_name}`{suggest(metric_name, metrics)} "
                         f"(`preflight explain {head}` lists them)")
    return _metric(check_name, check, metrics[metric_name], width,
                   _thresholds(loaded, chosen, [metrics[metric_name]]))


def read_config(explicit: str | None, overrides: list[str] | tuple[str, ...] = ()) -> Config | None:
    """The thresholds file ``run`` would read (``-c FILE``, else ./thresholds.yaml, else the bundled gate), for
    its instance names and its own thresholds; None when the file ``run`` would find by itself cannot be read
    (explaining a check needs no file).

    Raises:
        UsageError: ``explicit`` (``-c FILE``) is not a valid thresholds file: the config error, one line.
    """
    path = config.resolve_path(explicit)
    try:
        return config.load(path, overrides)
    except UsageError:
        if explicit or overrides:
            raise
        return None


def _thresholds(loaded: Config | None, chosen: list[Instance], metrics: list[Metric]) -> list[str]:
    """The "in thresholds.yaml" lines: each chosen instance's own threshold lines, as the file has them, or an
    example when no file was read or none of its instances of the check judges these metrics."""
    wanted = {metric.name for metric in metrics}
    lines: list[str] = []
    for instance in chosen:
        own = [t for t in instance.thresholds if t.metric in wanted]
        if own:
            lines.append(f"  {instance.name}:" + (f"  # check: {instance.check}" if instance.name != instance.check
                                                   else ""))
            lines += [f"    {_line(threshold)}" for threshold in own]
    if lines:
        return [f"in {loaded.path}:" if loaded else "", *lines]
    example = [_threshold(metric) for metric in metrics if not metric.is_text][:3] or [_threshold(metrics[0])]
    where = ", whose instances set none of these; for example" if chosen else \
        f" ({loaded.path} has no instance of this check); for example" if loaded else ""
    return [f"in thresholds.yaml{where}:", "  checks:", "    " + (chosen[0].name if chosen else "{check}") + ":",
            *example]


def _line(threshold: Threshold) -> str:
    """``throughput_vs_required: {min: 100 %}``: the threshold's line in its file (``--set`` shows as set)."""
    path, line, _ = threshold.where.rsplit(":", 2)
    try:
        text = Path(path).read_text().splitlines()[int(line) - 1].strip()
    except (OSError, ValueError, IndexError):
        text = ""
    if text.startswith(f"{threshold.metric}:"):
        return f"{text}  (line {line})" if "#" not in text else f"{text.split(' #', 1)[0].rstrip()}  (line {line})"
    bounds = {k: v for k, v in (("min", threshold.min), ("max", threshold.max), ("match", threshold.match))
              if v is not None}
    return f"{threshold.metric}: {bounds}  (set by {threshold.where})"


def _check(name: str, check: Check, width: int, thresholds: list[str]) -> str:
    columns = Columns.of([check])
    lines = wrap(f"{name}: {check.HELP}", width, "", "  ") + [""] + _docstring(check, width) + [""]
    lines += wrap(f"duration (the check's measuring time): {duration_help(check)}", width, "", "  ") + [""]
    if check.OPTIONS:
        lines.append("parameters (name, kind, default):")
        lines += [line for option in check.OPTIONS for line in option_lines(option, columns, width, "  ")]
        lines.append("")
    lines.append("metrics (name, unit, direction):")
    lines += [line for metric in check.METRICS for line in metric_lines(metric, columns, width, "  ")]
    hints = [(metric.name, metric.hint) for metric in check.METRICS if metric.hint]
    if hints:
        lines += ["", "fixes suggested on a miss:"]
        lines += [line for metric, hint in hints for line in wrap(f"{metric}: {_fields(hint)}", width, "  ", "    ")]
    lines += ["", *_named(thresholds, name)]
    lines += ["", f"`preflight explain {name}.METRIC` explains one metric."]
    return "\n".join(lines).rstrip() + "\n"


def _metric(name: str, check: Check, metric: Metric, width: int, thresholds: list[str]) -> str:
    """What one metric measures, its unit and direction, the check's method and source, and its fix."""
    label = f"{name}.{metric.name}"
    lines = wrap(f"{label}: {metric.help}", width, "", "  ") + [""]
    unit = unit_name(metric)
    if not (metric.is_text or metric.is_version or metric.unit == ""):
        dimension = UNITS[metric.unit].dimension
        unit += f" (a threshold may use any {dimension.value} unit, like {example(dimension)})"
    facts = [("unit", unit), ("direction", _direction(metric))]
    if metric.per_device:
        facts.append(("per device", f"one result per GPU, named like {label}[cuda:0]"))
    facts.append(("method", " ".join(_plain(_summary(check)).split())))
    if metric.hint:
        facts.append(("fix on a miss", _fields(metric.hint)))
    for key, text in facts:
        lines += wrap(text, width, f"  {key + ':':<15}", " " * 17)
    lines += ["", *_named(thresholds, name), "", f"`preflight explain {name}` explains the whole check."]
    return "\n".join(lines) + "\n"


def _named(thresholds: list[str], check: str) -> list[str]:
    """The threshold lines with the example's placeholder instance named after the check."""
    return [line.replace("{check}:", f"{check}:") for line in thresholds]


def _direction(metric: Metric) -> str:
    if metric.is_text:
        return "none: a text, judged by a regular expression (`match`)"
    return {True: "higher is better (a threshold is a `min`)", False: "lower is better (a threshold is a `max`)",
            None: "not ordered"}[metric.higher_is_better]


def _summary(check: Check) -> str:
    """The docstring's first line and its ``Method:`` paragraph, if it has one: how the check measures, and whose
    method it follows."""
    paragraphs = inspect.cleandoc(check.__doc__ or "").split("\n\n")
    method = [p for p in paragraphs[1:] if p.startswith("Method:")]
    return "\n".join(paragraphs[:1] + [p.removeprefix("Method:").strip() for p in method[:1]])


def _docstring(check: Check, width: int) -> list[str]:
    """The check's docstring as plain text: markup taken out, paragraphs rewrapped, indented blocks kept as they are."""
    lines: list[str] = []
    for paragraph in _plain(inspect.cleandoc(check.__doc__ or "")).split("\n\n"):
        if paragraph.startswith(" "):  # a literal block (a formula): its line breaks are its meaning
            lines += paragraph.splitlines()
        else:
            lines += wrap(" ".join(paragraph.split()), width)
        lines.append("")
    return lines[:-1]


_ROLE = re.compile(r":[\w:.-]+:`~?(?:[^`<]*<)?([^`>]+)>?`")  # :func:`x`, :class:`~a.B` -> B, :ref:`text <target>`
_LINK = re.compile(r"`([^`<]+?)\s*<([^>]+)>`_{1,2}")  # `text <https://...>`_
_LITERAL = re.compile(r"``([^`]+)``")
# preflight's own modules and records, which a docstring names for its maintainers ("(``usercode.blame``)",
# "(``dataset_walk.too_few``: ...)"): a reader of `explain` cannot use them, so they are left out.
_PACKAGE = Path(__file__).resolve().parent.parent
_INTERNAL = {p.stem for p in _PACKAGE.rglob("*.py")} | {p.name for p in _PACKAGE.rglob("*") if p.is_dir()} | {
    "preflight", "Measurement", "Metric", "Result", "Budget", "Stats", "Walk", "Instance", "Outcome", "Check"}
_REFERENCE = r"``((?:{names})(?:\.\w+)+)``".format(names="|".join(sorted(_INTERNAL - {"__init__", "__pycache__"})))
_ALONE = re.compile(rf"\s*\({_REFERENCE}\)")  # " (``usercode.blame``)" -> ""
_LEADING = re.compile(rf"\({_REFERENCE}[:;,]\s*")  # "(``dataset_walk.too_few``: a few" -> "(a few"


def _plain(text: str) -> str:
    """reStructuredText to plain text: ``x`` and :role:`x` become x, `text <url>`_ becomes text (url),
    and a ``::`` ending a paragraph becomes ``:``; a parenthesised reference to preflight's own code goes."""
    text = _LEADING.sub(lambda m: m.group(0) if _public(m.group(1)) else "(",
                        _ALONE.sub(lambda m: m.group(0) if _public(m.group(1)) else "", text))
    text = _LINK.sub(r"\1 (\2)", text)
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if "~" in m.group(0) else m.group(1), text)
    text = _LITERAL.sub(r"\1", text)
    return re.sub(r"(\S)::$", r"\1:", text, flags=re.MULTILINE)


def _public(name: str) -> bool:
    """A result id a user reads in reports (``cuda.clock_throttle``), though its check shares a module's name."""
    check, _, rest = name.partition(".")
    return check in CHECKS and rest in {item.name for item in (*CHECKS[check].METRICS, *CHECKS[check].OPTIONS)}


FIELDS = {"measured": "the figure measured", "path": "the path", "required": "the threshold"}


def _fields(hint: str) -> str:
    """A hint template for reading: its fields in words, ``{path} reads at {measured}`` as "the path reads at the
    figure measured" (a new user read ``<path> reads at <measured>`` as placeholders left unfilled)."""
    return re.sub(r"\{(\w+)\}", lambda field: FIELDS.get(field.group(1), f"the {field.group(1)}"), hint)


def _threshold(metric: Metric) -> str:
    """The metric's line in a thresholds.yaml example: a bound on the side its direction says."""
    bound = "match: H100" if metric.is_text else \
        f"{'max' if metric.higher_is_better is False else 'min'}: {_example(metric)}"
    return f"      {metric.name}: {{{bound}}}"


def _example(metric: Metric) -> str:
    if metric.is_version:
        return {"driver_version": '"535.104"', "cuda_driver_version": '"12.4"'}.get(metric.name, '"8.0"')
    return example(UNITS[metric.unit].dimension)
