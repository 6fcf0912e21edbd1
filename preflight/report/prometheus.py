"""Prometheus node_exporter textfile metrics (``--prometheus PATH``), written atomically (report layer).

Text format 0.0.4, replaced atomically as the textfile collector needs; names per the Prometheus naming guide
(``preflight_`` prefix, base units); a config error replaces the file too. The families: docs/reports.md.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Iterable, Mapping

from preflight.report import RunReport, write_atomic
from preflight.units import UNITS, Dimension

# Base-unit suffix and factor from the canonical unit's base (units.py) to Prometheus' base.
_BASE = {
    Dimension.SIZE: ("bytes", 1.0),
    Dimension.BANDWIDTH: ("bytes_per_second", 1.0),
    Dimension.IOPS: ("operations_per_second", 1.0),
    Dimension.SAMPLE_RATE: ("samples_per_second", 1.0),
    Dimension.FILE_RATE: ("files_per_second", 1.0),
    Dimension.DURATION: ("seconds", 1.0),
    Dimension.PERCENT: ("ratio", 0.01),
    Dimension.COUNT: ("", 1.0),
    Dimension.TEMPERATURE: ("celsius", 1.0),
    Dimension.POWER: ("watts", 1.0),
}
_VERDICTS = ("pass", "fail", "warn", "error", "skip", "info")
_INFO_FACTS = ("host", "config_sha256", "torch", "cuda", "driver", "gpu")


def metric_name(check: str, metric: str, unit: str) -> str:
    """``preflight_storage_seq_read_bytes_per_second`` for ``seq_read`` in MB/s; ``..._count`` becomes a plural and
    ``..._per_s`` drops its abbreviation, so ``promtool check metrics`` accepts the file (issue 25; docs/reports.md
    lists the former names)."""
    suffix = _BASE[UNITS[unit].dimension][0]
    if metric.endswith("_per_s") and suffix.endswith("_per_second"):
        metric, thing = metric[:-len("_per_s")], suffix[:-len("_per_second")]
        metric = "" if metric == thing else metric[:-len(thing) - 1] if metric.endswith("_" + thing) else metric
    if metric.endswith("_count"):
        metric = metric[:-len("_count")] + "s"
    return _sanitise("_".join(part for part in ("preflight", check, metric, suffix) if part))


def to_base(value: float, unit: str) -> float:
    """A value in ``unit`` (a units.UNITS symbol) in the Prometheus base unit."""
    definition = UNITS[unit]
    return value * definition.factor * _BASE[definition.dimension][1]


def render(report: RunReport) -> str:
    """The whole textfile, ending with a newline."""
    lines = _run(report.host, report.facts, report.started, report.duration_s, passed=not report.exit_code,
                 config_error=False)
    counts = report.counts()
    _family(lines, "preflight_results", "gauge", "results of the last run by verdict",
            [({"verdict": v}, counts.get(v, 0)) for v in _VERDICTS])
    values: dict[str, list[tuple[dict[str, str], float]]] = {}
    helps: dict[str, str] = {}
    met = []
    for r in report.results:
        labels = {"name": r.instance, "device": r.device or ""}
        if isinstance(r.value, (int, float)) and r.unit in UNITS:
            name = metric_name(r.check, r.metric, r.unit)
            values.setdefault(name, []).append((labels, to_base(float(r.value), r.unit)))
            helps[name] = f"{r.check} {r.metric}, measured (canonical unit {r.unit or 'count'})"
        if r.verdict in ("pass", "fail", "warn", "error"):
            met.append(({"name": r.instance, "check": r.check, "metric": r.metric, "device": r.device or ""},
                        1 if r.verdict == "pass" else 0))
    for name in sorted(values):
        _family(lines, name, "gauge", helps[name], values[name])
    _family(lines, "preflight_threshold_met", "gauge", "1 when the result met its threshold, 0 on a miss or error",
            met)
    return "\n".join(lines) + "\n"


def render_config_error(facts: Mapping[str, str], started: datetime) -> str:
    """The textfile of a run whose config could not be loaded: not passed, a config error, nothing measured."""
    lines = _run(facts.get("hostname", ""), facts, started, 0.0, passed=False, config_error=True)
    _family(lines, "preflight_results", "gauge", "results of the last run by verdict",
            [({"verdict": v}, 0) for v in _VERDICTS])
    return "\n".join(lines) + "\n"


def _run(host: str, host_facts: Mapping[str, str], started: datetime, duration_s: float, passed: bool,
         config_error: bool) -> list[str]:
    """The families every textfile starts with: what ran where, when, and whether it passed."""
    lines: list[str] = []
    facts = {"version": host_facts.get("preflight", ""), **{k: host_facts.get(k, "") for k in _INFO_FACTS}}
    facts["host"] = host
    _family(lines, "preflight_info", "gauge", "preflight build, host facts and config digest", [(facts, 1)])
    _family(lines, "preflight_last_run_timestamp_seconds", "gauge", "when the last run started (Unix time)",
            [({}, started.timestamp())])
    _family(lines, "preflight_run_duration_seconds", "gauge", "wall-clock duration of the last run",
            [({}, duration_s)])
    _family(lines, "preflight_passed", "gauge", "1 when the gate passed (exit code 0), else 0",
            [({}, 1 if passed else 0)])
    _family(lines, "preflight_config_error", "gauge",
            "1 when the last run's config could not be loaded (exit code 2, nothing measured), else 0",
            [({}, 1 if config_error else 0)])
    return lines


def write(path: str, report: RunReport) -> None:
    """Render and replace ``path`` atomically; raises UsageError if it cannot be written."""
    write_atomic(path, render(report).encode())


def _family(lines: list[str], name: str, kind: str, help_text: str,
            samples: Iterable[tuple[dict[str, str], float]]) -> None:
    lines += [f"# HELP {name} {_escape_help(help_text)}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        text = ",".join(f'{_sanitise(k)}="{_escape_label(str(v))}"' for k, v in labels.items())
        lines.append(f"{name}{{{text}}} {_number(value)}" if text else f"{name} {_number(value)}")


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _sanitise(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")
