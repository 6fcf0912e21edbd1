"""The console table: one line per result with dot leaders, then failures with their fixes.

Every line fits the width: the terminal's when stdout is one, else 80 columns (a CI log, a
pipe). Columns are as wide as their longest cell: an id too long for its column goes on a
line of its own above its row, a requirement too long for its column wraps inside it, the
duration column is shown only when every id fits beside it, and notes and fixes wrap with
a hanging indent. Colour only on a terminal and never when ``NO_COLOR`` is set (no-color.org).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import textwrap
from itertools import zip_longest
from typing import Callable, NamedTuple, TextIO

from preflight.host import node_lock
from preflight.measurement import DATASET_SUBJECTS, SUBJECTS
from preflight.report import RunReport, shown_interval, shown_value, tally
from preflight.units import UNITS
from preflight.verdict import Result

DEFAULT_WIDTH = 80  # when stdout is not a terminal
MIN_WIDTH = 40  # narrower terminals get 40-column lines
_VERDICT = 5  # "ERROR"
_MEASURED_MAX = 19  # "5077 samples/s ±12%"; a longer value wraps, or spans the requirement column when it has none
_REQUIRED_MIN = 14  # ">= 1000 files/s": the requirement column never shrinks below this for long ids
_COLOURS = {"pass": "32", "info": "2", "skip": "33", "warn": "33", "fail": "31", "error": "31;1"}

Paint = Callable[[str, str], str]
# Spaces a line must not break at: after ">=" and "<=", and between a number and its unit ("4.07 GB/s").
_UNIT_SYMBOLS = "|".join(re.escape(s) for s in sorted(UNITS, key=len, reverse=True) if s)
_GLUED = re.compile(rf"(?<=[<>]=) |(?<=\d) (?=(?:{_UNIT_SYMBOLS})(?![\w/]))")
_GLUE = "\x00"  # stands for a glued space while wrapping; never in a report's text


def use_colour(stream: TextIO, choice: str = "auto") -> bool:
    """``always``/``never``, or ``auto``: a terminal and no ``NO_COLOR`` in the environment."""
    if choice != "auto":
        return choice == "always"
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def terminal_width(stream: TextIO | None = None) -> int:
    """The columns to fit: the terminal's (``shutil.get_terminal_size``) when ``stream`` is one, else 80."""
    stream = stream or sys.stdout
    if hasattr(stream, "isatty") and stream.isatty():
        return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)
    return DEFAULT_WIDTH


def render(report: RunReport, colour: bool = False, width: int | None = None) -> str:
    """The whole table as text, ending with the ``== 1 failed, 12 passed in 41.2s ==`` line.

    ``width``: the columns every line fits in (at least 40); by default ``terminal_width()``.
    """
    width = max(MIN_WIDTH, width or terminal_width())
    paint = _painter(colour)
    where = report.host
    if "node_rank" in report.facts:  # a fleet run: which node and ranks this table is
        where += f" (node {report.facts['node_rank']}, ranks {report.facts.get('ranks', '?')})"
    lines = wrap(f"preflight on {where} · {report.config_path}", width, "", "  ")
    waited, results = run_note(list(report.results))
    lines += wrap(waited, width, "  ", "  ") if waited else []
    # A check's duration is the whole check's: said on its first row, not repeated on every metric of it.
    cells = [_Cells.of(result, first=index == 0 or results[index - 1].instance != result.instance)
             for index, result in enumerate(results)]
    columns = _Columns.fit(cells, width)
    for index, result in enumerate(results):
        lines += _row(cells[index], columns, width, paint)
        lines += _notes(results, index, width)
    misses = [r for r in report.results if r.verdict in ("fail", "error", "warn")]
    if misses:
        lines += ["", "what to fix:"]
        for ids, message, hint in grouped_fixes(misses):
            lines += wrap(f"{ids}: {message}", width, "  ", "    ")
            if hint:
                lines += wrap(hint, width, "    fix: ", "         ")
    summary = tally(report.counts())
    verdict = "fail" if report.exit_code else "pass"
    lines += [paint(verdict, line) for line in
              wrap(f"== {summary or 'nothing run'} in {report.duration_s:.1f}s ==", width, "", "   ")]
    return "\n".join(lines) + "\n"


def grouped_fixes(misses: list[Result]) -> list[tuple[str, str, str]]:
    """(ids, message, hint) per miss; unmeasured metrics that share one reason share one line, and
    misses in a row that share one fix show it once, after the last of them.

    Without a GPU a dozen metrics fail for the same reason, and with no dataset named every dataset
    row has the same fix; saying each once keeps the fix readable.
    """
    groups: dict[str, list[Result]] = {}  # in order of first appearance
    for result in misses:
        shared = result.value is None and not result.hint and result.message.startswith("could not measure: ")
        key = result.message.split("; required ", 1)[0] if shared else result.id
        groups.setdefault(key, []).append(result)
    fixes = []
    for key, members in groups.items():
        if len(members) == 1:
            fixes.append((members[0].id, members[0].message, members[0].hint))
        else:
            fixes.append((", ".join(r.id for r in members), key, ""))
    return [(ids, message, "" if later and later[2] == hint else hint)
            for (ids, message, hint), later in zip(fixes, [*fixes[1:], None])]


class _Cells(NamedTuple):
    """One result's row as text, before it is laid out."""

    id: str
    verdict: str
    measured: str
    required: str
    duration: str

    @classmethod
    def of(cls, result: Result, first: bool = True) -> _Cells:
        """``first``: the first row of its check instance, the one that shows the check's duration."""
        measured = " ".join(filter(None, (shown_value(result), shown_interval(result))))
        if result.value is None:
            measured = "not run" if result.verdict == "error" else "not measured"
        return cls(result.id, result.verdict, measured, result.required, f"{result.duration_s:.1f}s" if first else "")


class _Columns(NamedTuple):
    """Widths of the label (id and dot leaders), measured, required and duration columns; duration 0: not shown."""

    label: int
    measured: int
    required: int
    duration: int

    @classmethod
    def fit(cls, rows: list[_Cells], width: int) -> _Columns:
        """The widths that fit ``width`` with the fewest extra lines (ids on lines of their own, wrapped
        requirements); among those, the duration column when it costs no line, then the widest requirement."""
        measured = max([len(row.measured) for row in rows if len(row.measured) <= _MEASURED_MAX] + [1])
        natural = max([len(row.required) for row in rows] + [0])
        duration = max([len(row.duration) for row in rows] + [0])
        longest_id = max([len(row.id) for row in rows] + [0])
        fixed = 1 + _VERDICT + 1 + measured + 2  # " VERDICT measured  "
        best: tuple[tuple[int, bool, int], _Columns] | None = None
        for shown in (duration, 0):
            for required in range(min(natural, _REQUIRED_MIN), natural + 1):
                label = width - fixed - required - (1 + shown if shown else 0)
                if label < 0:
                    continue
                columns = cls(min(label, longest_id + 4), measured, required, shown)
                key = (columns._extra_lines(rows, width), not shown, -required)
                if best is None or key < best[0]:
                    best = (key, columns)
        assert best is not None, f"no layout fits {width} columns"  # cannot happen from MIN_WIDTH up
        chosen = best[1]
        # A long text with no requirement spans the measured and requirement columns: widen the latter into
        # what the line has left, so `ext4 at / (/dev/vda, rw,relatime)` stays on one line when it can.
        span = chosen.measured + 2 + chosen.required
        longest_text = max([len(row.measured) for row in rows if not row.required] + [0])
        used = chosen.label + 1 + _VERDICT + 1 + span + (1 + chosen.duration if chosen.duration else 0)
        return chosen._replace(required=chosen.required + max(0, min(width - used, longest_text - span)))

    def _extra_lines(self, rows: list[_Cells], width: int) -> int:
        """Lines beyond one per row: ids moved above their row, requirements wrapped in their column."""
        extra = 0
        for row in rows:
            if len(row.id) + 2 > self.label:
                extra += -(-len(row.id) // width)
            if len(row.required) > self.required:
                extra += len(wrap(row.required, self.required)) - 1
        return extra


def _row(cells: _Cells, columns: _Columns, width: int, paint: Paint) -> list[str]:
    """The row's lines: the id alone first when it does not fit its column, then the values, wrapped in theirs."""
    lines = []
    if len(cells.id) + 2 <= columns.label:
        label = f"{cells.id} ".ljust(columns.label, ".")
    else:
        lines += wrap(cells.id, width, "", "")
        label = "  " + "." * (columns.label - 2) if columns.label >= 4 else " " * columns.label
    span = columns.measured + 2 + columns.required
    required = [part.ljust(columns.required) for part in wrap(cells.required, columns.required)] \
        if cells.required else []
    if len(cells.measured) > columns.measured:  # a long text: it spans the value columns, its requirement below
        values = [part.ljust(span) for part in wrap(cells.measured, span)]
        values += [" " * (columns.measured + 2) + part for part in required]
    else:
        values = [f"{m or '':>{columns.measured}}  {r or ''}".ljust(span)
                  for m, r in zip_longest([cells.measured], required)]
    verdict = paint(cells.verdict, f"{cells.verdict.upper():<{_VERDICT}}")
    duration = f" {cells.duration:>{columns.duration}}" if columns.duration else ""
    lines.append(f"{label} {verdict} {values[0]}{duration}".rstrip())
    indent = " " * (columns.label + 1 + _VERDICT + 1)
    lines += [(indent + value).rstrip() for value in values[1:]]
    return lines


def run_note(results: list[Result]) -> tuple[str, list[Result]]:
    """The note every result of the run starts with, when the run waited for the node's measuring lock
    (``node_lock.Wait.note``), and the results without it: the table says it once, above its rows, not under
    each group of them (issue 35). ("", results) when the run did not wait."""
    first = results[0].note.split("; ", 1)[0] if results else ""
    if not first.startswith(node_lock.WAITED) or any(not r.note.startswith(first) for r in results):
        return "", results
    return first, [dataclasses.replace(r, note=r.note[len(first):].removeprefix("; ")) for r in results]


def table_note(result: Result) -> str:
    """What the table says under ``result``'s row: why it was skipped (``skip_reason``), what it was measured on when
    that is not the dataset (``Result.subject``), then its note, then its warnings ("noisy: interquartile range is
    23% of the median")."""
    shown = "" if result.subject in ("", *DATASET_SUBJECTS) else f"measured on {SUBJECTS[result.subject]}"
    note = f"{shown}: {result.note}" if shown and result.note else shown or result.note
    marginal = f"marginal: {result.marginal}" if result.marginal else ""
    return "; ".join(part for part in (skip_reason(result), marginal, note, *result.warnings) if part)


def skip_reason(result: Result) -> str:
    """Why a ``skip`` row was skipped, in one line: its message without the requirement its row already shows
    ("not applicable: the files loader's batches hold sample counts, ..."); "" for any other verdict. A skipped row
    neither passes nor fails, so "what to fix" never lists it: without this line the reader cannot see why (issue 35).
    """
    if result.verdict != "skip":
        return ""
    return result.message.split("; required ", 1)[0] or "skipped without a reason (a bug: please report it)"


def _notes(results: list[Result], last: int, width: int) -> list[str]:
    """What is said under row ``last``: each part of its note (``table_note``, parts joined by "; ") that no later row
    of its instance shares, naming the rows that share it when there are several; parts shared by the same rows are
    one line, in their order.

    A part is said once per instance, under the last row that carries it, even where its rows are not next to each
    other or carry it beside other parts: the dataloader's pass note was printed three times, above and below
    `pids_available` (a fact row without it), after the skipped `shm_headroom` and again with the "short" caveat of
    its throughput rows (issue 35)."""
    instance = results[last].instance
    rows = [(index, r) for index, r in enumerate(results) if r.instance == instance]
    parts = {index: _parts(table_note(r)) for index, r in rows}
    lines: dict[tuple[int, ...], list[str]] = {}  # the rows that share them -> parts, in order
    for part in parts[last]:
        if any(part in parts[index] for index, _ in rows if index > last):
            continue
        lines.setdefault(tuple(index for index, _ in rows if part in parts[index]), []).append(part)
    said = []
    for sharing, shared in lines.items():
        names = ", ".join(results[i].metric + (f"[{results[i].device}]" if results[i].device else "") for i in sharing)
        said += wrap(f"{names + ': ' if len(sharing) > 1 else ''}{'; '.join(shared)}", width, "    └ ", "      ")
    return said


def _parts(note: str) -> list[str]:
    return [part for part in note.split("; ") if part] if note else []


def wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """``text`` in lines of at most ``width``, after ``first`` and then ``rest``; words longer than a line are cut.

    Hyphens are no break points (``--gpus`` and ``--shm-size=8g`` stay whole), nor are the spaces in
    ``>= 10 GB/s`` (``_GLUED``).
    """
    lines = textwrap.wrap(_GLUED.sub(_GLUE, text.replace(_GLUE, " ")), width, initial_indent=first,
                          subsequent_indent=rest, break_long_words=True, break_on_hyphens=False)
    return [line.replace(_GLUE, " ") for line in lines] or [first.rstrip()]


def _painter(colour: bool) -> Paint:
    def paint(verdict: str, text: str) -> str:
        return f"\033[{_COLOURS[verdict]}m{text}\033[0m" if colour else text

    return paint
