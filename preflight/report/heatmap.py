"""Report layer: a fleet's HTML body, the grid of nodes x metrics coloured by margin, then each metric across nodes.

A cell takes the worse of its ``margin`` to the threshold and to the fleet median (``<metric>.vs_fleet_median``): a
straggler is coloured and outlined; each cell's title carries its value, requirement and margins.
"""

from __future__ import annotations

import math
import statistics
from html import escape
from typing import NamedTuple, Sequence

from preflight.report import RunReport
from preflight.report.page import MISSES, measured_text
from preflight.report.svg import Axis, bar, numbers_of, scale_note, strip
from preflight.units import format_value
from preflight.verdict import Result

FLEET_SUFFIX = ".vs_fleet_median"
_RED, _GREEN, _AMBER, _GREY, _WHITE = (198, 40, 40), (46, 125, 50), (239, 143, 0), (189, 189, 189), (255, 255, 255)
_RANK = {"error": 4, "fail": 3, "warn": 2, "pass": 1, "info": 0, "skip": 0}


class Cell(NamedTuple):
    """One node's result for one metric, with its fleet comparison when the run made one."""

    result: Result
    versus_fleet: Result | None

    @property
    def verdict(self) -> str:
        verdicts = [self.result.verdict] + ([self.versus_fleet.verdict] if self.versus_fleet else [])
        return max(verdicts, key=lambda v: _RANK.get(v, 0))

    @property
    def margin(self) -> float | None:
        margins = [m for m in (margin(self.result), margin(self.versus_fleet) if self.versus_fleet else None)
                   if m is not None]
        return min(margins) if margins else None

    @property
    def straggler(self) -> bool:
        return self.versus_fleet is not None and self.versus_fleet.verdict in MISSES


def margin(result: Result) -> float | None:
    """How far ``result``'s value is inside its numeric threshold, relative to the bound; None without one.
    ``min: 100``: 150 gives +0.5, 80 gives -0.2 (``max`` alike); a bound of 0 gives +1 met, -1 missed."""
    value = result.value
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not result.threshold:
        return None
    margins = []
    low, high = result.threshold.get("min"), result.threshold.get("max")
    if isinstance(low, (int, float)):
        margins.append(value / low - 1 if low else (1.0 if value >= 0 else -1.0))
    if isinstance(high, (int, float)):
        margins.append(1 - value / high if high else (1.0 if value <= 0 else -1.0))
    return min(margins) if margins else None


def colour(cell: Cell) -> str:
    """The cell's fill: red for a miss (deeper the further short), amber a warning, green for room (deeper the
    more), grey when nothing numeric was judged."""
    room = cell.margin
    if cell.verdict in ("fail", "error"):
        return _blend(_RED, 0.55 + 0.45 * min(1.0, abs(room) if room is not None else 1.0))
    if cell.verdict == "warn":
        return _blend(_AMBER, 0.75)
    if room is None or cell.verdict not in ("pass", "info"):
        return _blend(_GREY, 0.6)
    return _blend(_GREEN, 0.2 + 0.8 * min(1.0, max(0.0, room)))


def _blend(rgb: tuple[int, int, int], strength: float) -> str:
    mixed = (round(w + (c - w) * strength) for c, w in zip(rgb, _WHITE))
    return "#" + "".join(f"{part:02x}" for part in mixed)


def node_name(report: RunReport) -> str:
    """``node3``: the node as fleet ids name it (``report.merge.on_node``)."""
    return f"node{report.facts.get('node_rank', '?')}"


def cells_of(report: RunReport) -> dict[str, Cell]:
    """The node's cells by result id: every result with a numeric threshold or a fleet comparison, or a miss."""
    compared = {r.id.replace(FLEET_SUFFIX, "", 1): r for r in report.results if r.metric.endswith(FLEET_SUFFIX)}
    cells = {}
    for result in report.results:
        if result.metric.endswith(FLEET_SUFFIX):
            continue
        if margin(result) is not None or result.id in compared or result.verdict in MISSES:
            cells[result.id] = Cell(result, compared.get(result.id))
    return cells


def fleet_body(reports: Sequence[RunReport]) -> str:
    """The grid, its legend, and one row per metric across the fleet."""
    nodes = [(node_name(report), report, cells_of(report)) for report in reports]
    columns = list(dict.fromkeys(metric for _, _, cells in nodes for metric in cells))
    head = "".join(f'<th scope="col">{escape(c)}</th>' for c in columns)
    rows = []
    for name, report, cells in nodes:
        row = "".join(_grid_cell(name, cells.get(column)) for column in columns)
        rows.append(f'<tr data-node="{escape(name)}"><th scope="row" title="{escape(_node_facts(report))}">'
                    f'{escape(name)} {escape(report.host)}</th>{row}</tr>')
    legend = ('<p class="legend">margin to the threshold (and to the fleet median where stragglers are judged):'
              f'<span style="background:{_blend(_RED, 1)}"></span>miss<span style="background:{_blend(_AMBER, .75)}">'
              f'</span>warning<span style="background:{_blend(_GREEN, .2)}"></span>just met'
              f'<span style="background:{_blend(_GREEN, 1)}"></span>twice the bound'
              f'<span style="background:{_blend(_GREY, .6)}"></span>nothing to judge'
              '<span style="outline:2px solid #111;outline-offset:-2px"></span>straggler (vs the fleet median)</p>')
    grid = (f'<h2 id="grid">Nodes x metrics <small>{len(nodes)} nodes, {len(columns)} metrics</small></h2>{legend}'
            f'<table class="grid"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    across = "".join(_across(column, [(name, cells[column]) for name, _, cells in nodes if column in cells])
                     for column in columns)
    return grid + f'<h2 id="metrics">Each metric across the fleet</h2><table><tbody>{across}</tbody></table>'


def _node_facts(report: RunReport) -> str:
    facts = report.facts
    parts = [f"ranks {facts['ranks']}" if facts.get("ranks") else ""]
    parts += [f"{key} {facts[key]}" for key in ("gpu", "driver", "torch") if facts.get(key)]
    return f"{report.host}: " + ", ".join(p for p in parts if p)


def _grid_cell(node: str, cell: Cell | None) -> str:
    if cell is None:
        return '<td class="none" title="not in this node\'s report"></td>'
    title = f"{node} {cell.result.id}: {cell.result.verdict} · {measured_text(cell.result)}"
    if cell.result.required:
        title += f", required {cell.result.required}"
    room = margin(cell.result)
    if room is not None:
        title += f", margin {room:+.0%}"
    if cell.versus_fleet is not None:
        title += f" · {cell.versus_fleet.message}"
    straggler = ' class="straggler"' if cell.straggler else ""
    return f'<td{straggler} data-verdict="{cell.verdict}" style="background:{colour(cell)}" title="{escape(title)}"></td>'


def _across(column: str, cells: list[tuple[str, Cell]]) -> str:
    """One metric's row: its nodes' values as a strip against the threshold, the median as the bar, the misses named."""
    first = cells[0][1].result
    verdict = max((cell.verdict for _, cell in cells), key=lambda v: _RANK.get(v, 0))
    values = [float(c.result.value) for _, c in cells
              if isinstance(c.result.value, (int, float)) and not isinstance(c.result.value, bool)]
    median = statistics.median(values) if values else None
    drawing = ""
    axis = Axis.fit(numbers_of(median, first.threshold, values)) if values else None
    if axis is not None and median is not None and math.isfinite(median):
        label = f"fleet median {format_value(median, first.unit)}" + (f" against {first.required}" if first.required else "")
        drawing = (bar(axis, median, first.threshold, verdict, label) + strip(axis, values, f"{len(values)} nodes")
                   + f'<span class="scale">{escape(scale_note(axis, first.unit))} · bar: the median, dots: each node'
                   f'</span>')
    missed = [(name, cell) for name, cell in cells if cell.verdict in MISSES]
    summary = f"median {format_value(median, first.unit)}" if median is not None else ""
    details = "".join(f'<p><b>{escape(name)}</b> {escape(cell.result.message)}'
                      + (f' · {escape(cell.versus_fleet.message)}' if cell.straggler and cell.versus_fleet else "")
                      + "</p>" for name, cell in missed[:20])
    if len(missed) > 20:
        details += f"<p>and {len(missed) - 20} more nodes</p>"
    fix = next((cell.result.hint or (cell.versus_fleet.hint if cell.versus_fleet else "")
                for _, cell in missed if cell.result.hint or cell.versus_fleet), "")
    if fix:
        details += f'<p class="fix">fix: {escape(fix)}</p>'
    return (f'<tr class="result {verdict}" data-id="{escape(column)}" data-verdict="{verdict}"><th scope="row">'
            f'{escape(column)}</th><td class="v {verdict}">{len(missed)} of {len(cells)} missed</td>'
            f'<td class="num">{escape(summary)}</td><td>{escape(first.required)}</td><td class="viz">{drawing}</td></tr>'
            + (f'<tr class="more"><td></td><td colspan="4">{details}</td></tr>' if details else ""))
