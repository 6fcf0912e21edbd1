"""The JSON report (schema 1): its shape and what each key holds are documented once, in docs/reports.md ("JSON").

A change that removes or renames a key bumps ``SCHEMA``. A config that could not be loaded still
writes the file (``render_config_error``), so a pipeline never reads an earlier run's verdict.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Mapping, Sequence

from preflight.errors import EXIT_USAGE
from preflight.report import RunReport
from preflight.report.merge import on_node
from preflight.verdict import GATING, Result

VERDICTS = ("pass", "fail", "warn", "error", "skip", "info")

SCHEMA = 1


def to_dict(report: RunReport) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "host": report.host,
        "started": timestamp(report),
        "duration_s": round(report.duration_s, 3),
        "exit_code": report.exit_code,
        "counts": counts(report.results),
        "failed": [r.id for r in report.results if r.verdict in GATING],
        "config": {"path": report.config_path, "sha256": report.config_digest},
        "facts": dict(report.facts),
        "error": None,
        "results": [
            {
                "id": r.id,
                "check": r.check,
                "instance": r.instance,
                "metric": r.metric,
                "device": r.device,
                "value": r.value,
                "unit": r.unit,
                "verdict": r.verdict,
                "threshold": dict(r.threshold) if r.threshold else None,
                "message": r.message,
                "hint": r.hint,
                "note": r.note,
                "subject": r.subject or None,
                "cache_bound": r.cache_bound,
                "samples": list(r.samples),
                "interval": list(r.interval) if r.interval else None,
                "marginal": r.marginal or None,
                "runs": list(r.runs),
                "attempts": [{"value": a.value, "verdict": a.verdict, "samples": list(a.samples)}
                             for a in r.attempts],
                "method": r.method,
                "stopped": r.stopped,
                "warnings": list(r.warnings),
                "where": r.where,
                "duration_s": round(r.duration_s, 3),
            }
            for r in report.results
        ],
    }


def counts(results: Sequence[Result]) -> dict[str, int]:
    """How many results of each verdict, every verdict present (0 when none): ``{"pass": 9, "fail": 2, ...}``."""
    return {verdict: sum(r.verdict == verdict for r in results) for verdict in VERDICTS}


def timestamp(report: RunReport) -> str:
    """When the run started, as UTC ISO 8601 (``2026-11-29T15:00:00Z``)."""
    return iso(report.started)


def iso(started: datetime) -> str:
    return started.strftime("%Y-%m-%dT%H:%M:%SZ")


def render(report: RunReport) -> str:
    return json.dumps(to_dict(report), indent=2, ensure_ascii=False) + "\n"


def render_fleet(reports: Sequence[RunReport], world_size: int) -> str:
    """A fleet run's report: ``{"schema": 1, "kind": "fleet", "world_size", "exit_code", "hosts": [...]}``.

    Each entry of ``hosts`` is one node's single-host report (the shape above), its
    ``facts`` carrying ``node_rank``, ``ranks`` and ``world_size``.
    """
    codes = [report.exit_code for report in reports]
    every = [result for report in reports for result in on_node(report)]
    document = {
        "schema": SCHEMA,
        "kind": "fleet",
        "world_size": world_size,
        "exit_code": max(codes) if codes else 1,
        "counts": counts(every),
        "failed": [r.id for r in every if r.verdict in GATING],
        "error": None,
        "hosts": [to_dict(report) for report in reports],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def render_config_error(config_path: str, message: str, facts: Mapping[str, str], started: datetime,
                        world_size: int | None = None) -> str:
    """The report of a run whose config could not be loaded: ``exit_code`` 2, ``error`` the
    one-line message the CLI prints, ``results`` empty (nothing was measured).

    For a fleet rank (``world_size``) it has the fleet shape with an empty ``hosts``: the
    fleet never formed.
    """
    if world_size is not None:
        document: dict[str, Any] = {"schema": SCHEMA, "kind": "fleet", "world_size": world_size,
                                    "exit_code": EXIT_USAGE, "counts": counts(()), "failed": [], "error": message,
                                    "hosts": []}
    else:
        document = {"schema": SCHEMA, "host": facts.get("hostname", ""), "started": iso(started), "duration_s": 0.0,
                    "exit_code": EXIT_USAGE, "counts": counts(()), "failed": [],
                    "config": {"path": config_path, "sha256": ""}, "facts": dict(facts), "error": message,
                    "results": []}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
