"""One report per node from a fleet run: node-local results, fleet results, fleet comparisons.

Rank 0 receives one ``Contribution`` per rank. Each node's local rank 0 brings its node's
``RunReport`` (node-local checks and host facts, built on that node); rank 0 adds the
fleet checks' results (a per-rank result goes to the node of its rank, a fleet-wide one
to rank 0's node) and, for every performance metric (a measured rate or latency:
``Metric.is_performance``) measured on two or more nodes, a comparison with the fleet
median (``verdict.judge_against_fleet``). Facts (flags, counts, sizes, versions) are never
compared, nor is a metric whose fleet median is 0: no ratio to it means anything.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import NamedTuple, Sequence

from preflight.checks import CHECKS
from preflight.checks.base import scope
from preflight.config import FleetSettings
from preflight.report import RunReport
from preflight.verdict import Result, judge_against_fleet

_COMPARABLE = ("pass", "fail", "warn", "info")


class Contribution(NamedTuple):
    rank: int
    node_rank: int
    host: str
    node_report: RunReport | None  # only from each node's local rank 0


def merge(contributions: Sequence[Contribution], fleet_results: Sequence[Result], settings: FleetSettings,
          world_size: int) -> list[RunReport]:
    """Per-node reports, ordered by node rank, each with ``node_rank``/``ranks`` facts."""
    node_of = {c.rank: c.node_rank for c in contributions}
    reports = {c.node_rank: c.node_report for c in contributions if c.node_report is not None}
    placed: dict[int, list[Result]] = {node: [] for node in reports}
    for result in fleet_results:
        rank = int(result.device[4:]) if result.device and result.device.startswith("rank") else 0
        placed.setdefault(node_of.get(rank, node_of[0]), []).append(result)
    merged = []
    for node in sorted(reports):
        report = reports[node]
        ranks = sorted(rank for rank, n in node_of.items() if n == node)
        facts = {**report.facts, "node_rank": str(node), "ranks": ",".join(map(str, ranks)),
                 "world_size": str(world_size)}
        results = (*report.results, *placed.get(node, ()))
        merged.append(dataclasses.replace(report, results=results, facts=facts))
    return _with_comparisons(merged, settings)


def _with_comparisons(reports: list[RunReport], settings: FleetSettings) -> list[RunReport]:
    by_metric: dict[tuple[str, str], list[tuple[int, Result]]] = {}
    for index, report in enumerate(reports):
        for result in report.results:
            if _comparable(result):
                by_metric.setdefault((result.instance, result.metric), []).append((index, result))
    added: dict[int, list[Result]] = {}
    for entries in by_metric.values():
        nodes = len({index for index, _ in entries})
        if nodes < 2:
            continue
        median = statistics.median(float(result.value) for _, result in entries)  # type: ignore[arg-type]
        if median <= 0:  # nothing measured on most nodes: each node's absolute threshold says it
            continue
        for index, result in entries:
            judged = judge_against_fleet(result, median, nodes, settings.median_ratio, settings.severity)
            added.setdefault(index, []).append(judged)
    return [dataclasses.replace(report, results=(*report.results, *added.get(index, ())))
            for index, report in enumerate(reports)]


def _comparable(result: Result) -> bool:
    check = CHECKS.get(result.check)
    if check is None or scope(check) == "fleet" or result.verdict not in _COMPARABLE:
        return False
    metric = result.declared
    return (metric is not None and metric.is_performance
            and isinstance(result.value, (int, float)) and not isinstance(result.value, bool))


def partial(own: RunReport | None, error: Result, world_size: int, node_rank: int) -> list[RunReport]:
    """What rank 0 can still report when the fleet broke: its own node, plus the fleet's error."""
    if own is None:
        return []
    facts = {**own.facts, "node_rank": str(node_rank), "world_size": str(world_size)}
    return [dataclasses.replace(own, results=(*own.results, error), facts=facts)]


def flatten(reports: Sequence[RunReport]) -> RunReport:
    """The whole fleet as one report, for the one-report integrations (CI summary, termination message).

    Each result's device is prefixed with its node (``storage.seq_read[node1]``,
    ``cuda.temperature[node1/cuda:0]``), so ids stay unique and name the node to drain.
    """
    results = [result for report in reports for result in on_node(report)]
    first = reports[0]
    hosts = ", ".join(dict.fromkeys(report.host for report in reports))
    return dataclasses.replace(first, host=f"{len(reports)} node{'s' if len(reports) != 1 else ''} ({hosts})", results=tuple(results))


def on_node(report: RunReport) -> tuple[Result, ...]:
    """``report``'s results with its node in each device: ``seq_read`` on node 1 becomes
    ``seq_read[node1]``, ``temperature[cuda:0]`` becomes ``temperature[node1/cuda:0]``."""
    node = f"node{report.facts.get('node_rank', '?')}"
    return tuple(dataclasses.replace(r, device=f"{node}/{r.device}" if r.device else node) for r in report.results)
