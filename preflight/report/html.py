"""The HTML report (``--html PATH``): one self-contained page a person reads to decide about a node.

Report layer. Inline CSS and SVG only, under a Content-Security-Policy that forbids fetching (a slip shows as a
console error); one row per result (``tr.result``, ``data-id``), a fleet's grid from ``heatmap``. docs/reports.md.
"""

from __future__ import annotations

from html import escape
from typing import Iterable, Mapping, Sequence

from preflight.report import RunReport, tally, write_atomic
from preflight.report.console import grouped_fixes, run_note, skip_reason
from preflight.report.heatmap import fleet_body
from preflight.report.page import MISSES, badge, banner, measured_text, page
from preflight.report.svg import Axis, bar, numbers_of, scale_note, strip
from preflight.units import format_value
from preflight.verdict import Result


def render(reports: Sequence[RunReport], world_size: int | None = None) -> str:
    """The page for one node's report, or, with ``world_size``, for a fleet's per-node reports."""
    if world_size is not None:
        failed = any(r.exit_code for r in reports) or not reports
        hosts = f"{len(reports)} node{'s' if len(reports) != 1 else ''}, {world_size} ranks"
        title = f"preflight {'FAILED' if failed else 'PASSED'} on {hosts}"
        counts: dict[str, int] = {}
        for report in reports:
            for verdict, count in report.counts().items():
                counts[verdict] = counts.get(verdict, 0) + count
        first = reports[0] if reports else None
        head = banner(failed, hosts, first, tally(counts), max((r.duration_s for r in reports), default=0.0))
        return page(title, head, fleet_body(reports))
    report = reports[0]
    where = report.host
    head = banner(bool(report.exit_code), where, report, tally(report.counts()), report.duration_s)
    waited, results = run_note(list(report.results))  # said once, not under every check's rows (issue 35)
    body = _facts(report.facts) + (f'<p class="note">{escape(waited)}</p>' if waited else "") + _fixes(results) + \
        "".join(_check_block(instance, rows) for instance, rows in by_instance(results))
    return page(f"preflight {'FAILED' if report.exit_code else 'PASSED'} on {where}", head, body)


def render_config_error(config_path: str, message: str, facts: Mapping[str, str], started: str) -> str:
    """The page of a run whose config could not be loaded: the error, nothing measured (exit code 2)."""
    head = (f'<header class="verdict fail"><div class="wrap"><h1 id="verdict">preflight could not start</h1>'
            f'<p>{escape(facts.get("hostname", ""))} · {escape(started)} · {escape(config_path)}</p></div></header>')
    body = f'<p class="fix" id="error">{escape(message)}</p><p>Nothing was measured (exit code 2).</p>'
    return page("preflight could not start", head, body)


def write(path: str, reports: Sequence[RunReport], world_size: int | None = None) -> None:
    """Render and replace ``path`` atomically; raises UsageError if it cannot be written."""
    write_atomic(path, render(reports, world_size).encode())


def by_instance(results: Iterable[Result]) -> list[tuple[str, list[Result]]]:
    """Results grouped by check instance, in the order the run reported them."""
    groups: dict[str, list[Result]] = {}
    for result in results:
        groups.setdefault(result.instance, []).append(result)
    return list(groups.items())


def _facts(facts: Mapping[str, str]) -> str:
    shown = [(k, facts[k]) for k in ("gpu", "driver", "cuda", "torch", "python", "platform", "preflight",
                                     "config_sha256") if facts.get(k)]
    return '<dl class="facts">' + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in shown) + "</dl>"


def _fixes(results: Sequence[Result]) -> str:
    """Every miss with its fix, as the console's "what to fix" groups them (one line for a shared reason)."""
    misses = [r for r in results if r.verdict in MISSES]
    if not misses:
        return ""
    items = []
    for ids, message, hint in grouped_fixes(misses):
        links = ", ".join(f'<a href="#r-{escape(i)}">{escape(i)}</a>' for i in ids.split(", "))
        items.append(f"<li>{links}: {escape(message)}" + (f'<br><span class="fix">fix: {escape(hint)}</span>'
                                                          if hint else "") + "</li>")
    return (f'<h2 id="what-to-fix">What to fix <small>{len(misses)} result{"s" if len(misses) != 1 else ""}'
            f'</small></h2><ul class="fixes">{"".join(items)}</ul>')


# The same column widths in every check's table, so values and bars line up down the page.
_COLUMNS = ('<colgroup><col style="width:230px"><col style="width:60px"><col style="width:150px">'
            '<col style="width:170px"><col></colgroup>')


def _check_block(instance: str, results: list[Result]) -> str:
    check = results[0].check
    duration = max(r.duration_s for r in results)
    kind = f"check {escape(check)} · " if check != instance else ""
    subjects = "".join(badge(s) for s in dict.fromkeys(r.subject for r in results if r.subject))
    rows = []
    previous: Result | None = None
    for result in results:
        rows.append(_row(result, previous))
        previous = result
    return (f'<section class="check" id="c-{escape(instance)}"><h2>{escape(instance)} <small>{kind}'
            f'{duration:.1f} s{" · measured on" if subjects else ""}</small>{subjects}</h2>'
            f'<table class="results">{_COLUMNS}<tbody>{"".join(rows)}</tbody></table></section>')


def _row(result: Result, previous: Result | None) -> str:
    name = result.metric + (f"[{result.device}]" if result.device else "") if result.metric else result.instance
    measured = measured_text(result)
    subject = badge(result.subject) if result.subject else ""
    row = (f'<tr class="result {result.verdict}" id="r-{escape(result.id)}" data-id="{escape(result.id)}" '
           f'data-verdict="{result.verdict}"><th scope="row">{escape(name)}</th>'
           f'<td class="v {result.verdict}">{result.verdict.upper()}</td>'
           f'<td class="num">{escape(measured)}{subject}</td><td>{escape(result.required)}</td>'
           f'<td class="viz">{_drawing(result, measured)}</td></tr>')
    return row + _details(result, previous)


def _drawing(result: Result, measured: str) -> str:
    """The bar and strip of a value judged against a bound, or sampled; a lone fact (a count, a flag) gets none."""
    numbers = numbers_of(result.value, result.threshold, result.samples)
    value = result.value if isinstance(result.value, (int, float)) and not isinstance(result.value, bool) else None
    bounded = any(isinstance(b, (int, float)) for k, b in (result.threshold or {}).items() if k in ("min", "max"))
    flag = result.declared is not None and result.declared.flag
    drawn = (value is not None or result.samples) and (bounded or result.samples) and not flag
    axis = Axis.fit(numbers) if numbers and drawn else None
    if axis is None:
        return ""
    against = f" against {result.required}" if result.required else ""
    drawing = bar(axis, value, result.threshold, result.verdict, f"{measured}{against}")
    if result.samples:
        drawing += strip(axis, result.samples, f"{len(result.samples)} samples")
    return drawing + f'<span class="scale">{escape(scale_note(axis, result.unit))}' + (
        f" · {len(result.samples)} sample{'s' if len(result.samples) != 1 else ''}" if result.samples else "") + (
        f" · 90% interval {format_value(result.interval[0], result.unit)} to "
        f"{format_value(result.interval[1], result.unit)}" if result.interval else "") + "</span>"


def _same_reason(result: Result, previous: Result | None) -> bool:
    """Both unmeasured for one reason (no GPU: a dozen rows): the row above said it."""
    def reason(r: Result) -> str:
        return r.message.split("; required ", 1)[0] if r.value is None and not r.hint else ""

    return previous is not None and reason(result) != "" and reason(result) == reason(previous)


def _details(result: Result, previous: Result | None) -> str:
    """The note, warnings, method and fix under a row, and why a miss missed or a skipped row was skipped; a note,
    method or reason for no value that the row above showed is not repeated."""
    lines = []
    if result.note and not (previous and previous.note == result.note):
        lines.append(f"<p>{escape(result.note)}</p>")
    if result.verdict in (*MISSES, "skip") and not _same_reason(result, previous):
        lines.append(f"<p>{escape(skip_reason(result) or result.message)}</p>")
        if result.hint:
            lines.append(f'<p class="fix">fix: {escape(result.hint)}</p>')
    lines += [f'<p class="warning">⚠ {escape(w)}</p>' for w in result.warnings]
    if result.method and not (previous and previous.method == result.method):
        lines.append(f'<p class="method">method: {escape(result.method)}</p>')
    return f'<tr class="more"><td></td><td colspan="4">{"".join(lines)}</td></tr>' if lines else ""
