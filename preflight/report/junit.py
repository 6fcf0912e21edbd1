"""JUnit XML: built with the junit-xml package, fixed here where that package goes wrong (report layer).

Fixed for junit-10.xsd (Jenkins xUnit), GitLab and GitHub: no ``disabled`` attribute, 3-decimal times, clean text
(``clean``), a repeated classname + name given ``#2``, UTF-8 written atomically. Mapping: docs/reports.md.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime
from typing import Iterable, Mapping

import junit_xml

from preflight.report import RunReport, write_atomic
from preflight.report.merge import on_node
from preflight.measurement import SUBJECTS
from preflight.verdict import Result

MAX_TEXT = 16_000  # characters per message or body; CI views truncate long before this
MAX_ATTRIBUTE = 2_000  # characters per attribute (message, property value)
ESSENTIAL_FACTS = ("hostname", "gpu", "driver", "torch", "cuda", "config_sha256")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
# XML 1.0 Char production minus what we strip: C0 controls other than \t \n \r, surrogates, U+FFFE/U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_ELEMENT_TYPE = {"fail": "ThresholdNotMet", "error": "CheckError"}


def clean(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` made safe for any XML reader: decoded as UTF-8 with U+FFFD, ANSI codes removed, characters XML 1.0
    cannot hold as U+FFFD, at most ``limit`` characters (``... [N more]`` when cut)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    result = _NOT_XML.sub("\ufffd", _ANSI.sub("", str(text)))
    if len(result) <= limit:
        return result
    marker = f"... [{len(result) - limit + 30} more characters]"
    return result[: limit - len(marker)] + marker


def render(reports: Iterable[RunReport], fleet: bool = False) -> bytes:
    """The XML document (UTF-8 bytes) for one host's report, or each node's of a ``fleet`` run."""
    reports = list(reports)
    seen: dict[tuple[str, str], int] = {}  # across suites: CI systems key cases by the whole file
    suites = [_suite(report, fleet, seen) for report in reports]
    root = _fixed(suites)
    for suite, report in zip(root.iter("testsuite"), reports):
        suite.set("time", _seconds(report.duration_s))  # wall clock: a check's metrics share its run's time
    root.set("time", _seconds(sum(report.duration_s for report in reports)))
    return _serialise(root)


def render_config_error(config_path: str, message: str, facts: Mapping[str, str], started: datetime) -> bytes:
    """A document with one ``<error type="ConfigError">`` testcase; ``message`` is the CLI's one-line error
    (``FILE:LINE:COL: ...``)."""
    case = junit_xml.TestCase("config", classname="preflight.config", elapsed_sec=0.0)
    body = "\n".join((message, f"config: {config_path}", _essentials(facts)))
    case.add_error_info(clean(message, MAX_ATTRIBUTE) or "invalid config", clean(body), "ConfigError")
    suite = junit_xml.TestSuite("preflight", [case], hostname=clean(facts.get("hostname", ""), 200),
                                timestamp=started.strftime("%Y-%m-%dT%H:%M:%S"), properties=_properties(facts))
    return _serialise(_fixed([suite]))


def write(path: str, reports: Iterable[RunReport], fleet: bool = False) -> None:
    """Render and write atomically; raises UsageError if ``path`` cannot be written."""
    write_atomic(path, render(reports, fleet))


def _fixed(suites: list[junit_xml.TestSuite]) -> ET.Element:
    document = junit_xml.to_xml_report_string(suites, prettyprint=False, encoding="utf-8")
    root = ET.fromstring(document)
    for element in root.iter():
        element.attrib.pop("disabled", None)
        if element.tag in ("testsuite", "testcase", "testsuites"):
            element.set("time", _seconds(float(element.get("time") or 0)))
    return root


def _serialise(root: ET.Element) -> bytes:
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.3f}"


def _suite(report: RunReport, fleet: bool, seen: dict[tuple[str, str], int]) -> junit_xml.TestSuite:
    judged = [result for result in (on_node(report) if fleet else report.results) if result.verdict != "info"]
    cases = []
    for result in judged:
        case = _case(result, report)
        key = (case.classname, case.name)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            case.name = f"{case.name} #{seen[key]}"
        cases.append(case)
    return junit_xml.TestSuite(
        "preflight",
        cases,
        hostname=clean(report.host, 200),
        timestamp=report.started.strftime("%Y-%m-%dT%H:%M:%S"),
        properties=_properties(report.facts),
    )


def _properties(facts: Mapping[str, str]) -> dict[str, str]:
    return {clean(key, 200): clean(value, MAX_ATTRIBUTE) for key, value in facts.items()}


def _case(result: Result, report: RunReport) -> junit_xml.TestCase:
    name = result.metric or "check"
    if result.device:
        name += f"[{result.device}]"
    case = junit_xml.TestCase(
        clean(name, 500),
        classname=clean(f"preflight.{result.instance}", 500),
        elapsed_sec=result.duration_s,
        stdout=clean(_details(result)),
    )
    text = result.message or f"{result.id}: {result.verdict} without a message (a bug: please report it)"
    message = clean(text, MAX_ATTRIBUTE)
    body = clean("\n".join(line for line in (text, _fix(result), _where(result), _essentials(report.facts)) if line))
    if result.verdict == "fail":
        case.add_failure_info(message, body, _ELEMENT_TYPE["fail"])
    elif result.verdict == "error":
        case.add_error_info(message, body, _ELEMENT_TYPE["error"])
    elif result.verdict == "skip":
        case.add_skipped_info(message, body)
    return case


def _fix(result: Result) -> str:
    return f"fix: {result.hint}" if result.hint else ""


def _where(result: Result) -> str:
    return f"threshold: {result.where}" if result.where else ""


def _details(result: Result) -> str:
    lines = [f"{result.verdict}: {result.message}"]
    if result.subject:  # a testcase has no <properties> in junit-10.xsd: what was measured goes in system-out
        lines.append(f"subject: {result.subject} ({SUBJECTS[result.subject]})")
    if result.method:
        lines.append(f"method: {result.method}")
    if result.samples:
        lines.append(f"samples ({result.unit}): " + ", ".join(f"{s:.4g}" for s in result.samples))
    if result.interval:
        lines.append(f"90% interval ({result.unit}): {result.interval[0]:.4g} to {result.interval[1]:.4g}")
    if result.runs:
        lines.append(f"runs ({result.unit}, median judged): " + ", ".join(f"{v:.4g}" for v in result.runs))
    for number, attempt in enumerate(result.attempts, 1):
        samples = ", ".join(f"{s:.4g}" for s in attempt.samples)
        lines.append(f"attempt {number} ({attempt.verdict}, re-measured): {attempt.value} {result.unit}; "
                     f"samples: {samples}")
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


def _essentials(facts: Mapping[str, str]) -> str:
    return "host: " + ", ".join(f"{key} {facts[key]}" for key in ESSENTIAL_FACTS if facts.get(key))
