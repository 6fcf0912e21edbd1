"""The console table: one line per result with dot leaders, then failures with their fixes.

Colour only on a terminal and never when ``NO_COLOR`` is set (no-color.org).
"""

from __future__ import annotations

import os
from typing import TextIO

from preflight.report import RunReport
from preflight.units import format_value
from preflight.verdict import Result

WIDTH = 46
_COLOURS = {"pass": "32", "info": "2", "skip": "33", "warn": "33", "fail": "31", "error": "31;1"}
_PLURAL = {"fail": "failed", "error": "error", "warn": "warnings", "pass": "passed", "skip": "skipped", "info": "info"}


def use_colour(stream: TextIO, choice: str = "auto") -> bool:
    """``always``/``never``, or ``auto``: a terminal and no ``NO_COLOR`` in the environment."""
    if choice != "auto":
        return choice == "always"
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def render(report: RunReport, colour: bool = False) -> str:
    """The whole table as text, ending with the ``== 1 failed, 12 passed in 41.2s ==`` line."""
    paint = _painter(colour)
    where = report.host
    if "node_rank" in report.facts:  # a fleet run: which node and ranks this table is
        where += f" (node {report.facts['node_rank']}, ranks {report.facts.get('ranks', '?')})"
    lines = [f"preflight on {where} · {report.config_path}"]
    results = list(report.results)
    for index, result in enumerate(results):
        lines.append(_row(result, paint))
        following = results[index + 1] if index + 1 < len(results) else None
        if result.note and not (following and following.note == result.note and following.instance == result.instance):
            lines.append(_note(results, index))
    misses = [r for r in report.results if r.verdict in ("fail", "error", "warn")]
    if misses:
        lines += ["", "what to fix:"]
        for ids, message, hint in _fixes(misses):
            lines.append(f"  {ids}: {message}")
            if hint:
                lines.append(f"    fix: {hint}")
    counts = report.counts()
    summary = ", ".join(f"{counts[v]} {_PLURAL[v]}" for v in _PLURAL if counts.get(v))
    verdict = "fail" if report.exit_code else "pass"
    lines.append(paint(verdict, f"== {summary or 'nothing run'} in {report.duration_s:.1f}s =="))
    return "\n".join(lines) + "\n"


def _fixes(misses: list[Result]) -> list[tuple[str, str, str]]:
    """(ids, message, hint) per miss; unmeasured metrics that share one reason share one line.

    Without a GPU a dozen metrics fail for the same reason; saying it once keeps the fix readable.
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
    return fixes


def _row(result: Result, paint: object) -> str:
    label = f"{result.id} ".ljust(WIDTH, ".")
    measured = format_value(result.value, "" if result.unit in ("version", "text") else result.unit)
    if result.value is None:
        measured = "not run" if result.verdict == "error" else "not measured"
    verdict = paint(result.verdict, f"{result.verdict.upper():<5}")  # type: ignore[operator]
    return f"{label} {verdict} {measured:>16}  {result.required:<20} {result.duration_s:5.1f}s"



def _note(results: list[Result], last: int) -> str:
    """The note under the last of the rows that share it, naming them when there are several."""
    first = last
    while first > 0 and (results[first - 1].note, results[first - 1].instance) == (results[last].note,
                                                                                   results[last].instance):
        first -= 1
    shared = results[first:last + 1]
    names = ", ".join(r.metric + (f"[{r.device}]" if r.device else "") for r in shared)
    return f"    └ {names + ': ' if len(shared) > 1 else ''}{results[last].note}"


def _painter(colour: bool):  # type: ignore[no-untyped-def]
    def paint(verdict: str, text: str) -> str:
        return f"\033[{_COLOURS[verdict]}m{text}\033[0m" if colour else text

    return paint
