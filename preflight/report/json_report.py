"""The JSON report (schema 1), documented in the README ("JSON report").

Shape: ``{"schema": 1, "host", "started", "duration_s", "exit_code", "config",
"facts": {...}, "results": [{"id", "check", "instance", "metric", "device", "value",
"unit", "verdict", "threshold", "message", "hint", "note", "samples", "runs", "attempts",
"method", "warnings", "where", "duration_s"}]}``. ``samples`` holds every sample of the
judged measurement (of every run with ``repeats``), ``runs`` each run's value, and
``attempts`` the earlier measurements a ``retries`` re-measurement replaced, each with
its value, verdict and samples. ``value`` is in the metric's canonical ``unit``, whatever unit
the threshold was written in; a change that removes or renames a key bumps ``schema``.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from preflight.report import RunReport

SCHEMA = 1


def to_dict(report: RunReport) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "host": report.host,
        "started": timestamp(report),
        "duration_s": round(report.duration_s, 3),
        "exit_code": report.exit_code,
        "config": {"path": report.config_path, "sha256": report.config_digest},
        "facts": dict(report.facts),
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
                "samples": list(r.samples),
                "runs": list(r.runs),
                "attempts": [{"value": a.value, "verdict": a.verdict, "samples": list(a.samples)}
                             for a in r.attempts],
                "method": r.method,
                "warnings": list(r.warnings),
                "where": r.where,
                "duration_s": round(r.duration_s, 3),
            }
            for r in report.results
        ],
    }


def timestamp(report: RunReport) -> str:
    """When the run started, as UTC ISO 8601 (``2026-11-29T15:00:00Z``)."""
    return report.started.strftime("%Y-%m-%dT%H:%M:%SZ")


def render(report: RunReport) -> str:
    return json.dumps(to_dict(report), indent=2, ensure_ascii=False) + "\n"


def render_fleet(reports: Sequence[RunReport], world_size: int) -> str:
    """A fleet run's report: ``{"schema": 1, "kind": "fleet", "world_size", "exit_code", "hosts": [...]}``.

    Each entry of ``hosts`` is one node's single-host report (the shape above), its
    ``facts`` carrying ``node_rank``, ``ranks`` and ``world_size``.
    """
    codes = [report.exit_code for report in reports]
    document = {
        "schema": SCHEMA,
        "kind": "fleet",
        "world_size": world_size,
        "exit_code": max(codes) if codes else 1,
        "hosts": [to_dict(report) for report in reports],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
