"""JUnit XML: built with the junit-xml package, fixed here where that package goes wrong.

What this module fixes (each breaks a consumer; the Jenkins xUnit plugin's junit-10.xsd
is the strictest reader, GitLab and GitHub reporters the most common):
- junit-xml writes a ``disabled`` attribute on ``<testsuite>``: junit-10.xsd rejects it;
- it writes times as ``%f`` (6 decimals) and drops ``time`` when it is 0: we write every
  ``time`` with 3 decimals;
- it passes control characters through as invalid character references unless told the
  encoding: we remove them (and ANSI colour codes) from every text and attribute, and cap
  each text's length, before junit-xml sees it;
- we serialise as UTF-8 with an XML declaration, and write atomically.

Mapping: one ``<testsuite name="preflight">`` per host, one ``<testcase>`` per judged
metric (classname ``preflight.<instance>``, name ``<metric>`` or ``<metric>[<device>]``);
a miss is ``<failure type="ThresholdNotMet">``, a crash or timeout ``<error>``, not
applicable ``<skipped>``; "measured X, required >= Y" is in ``message`` and in the body.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Iterable

import junit_xml

from preflight.report import RunReport, write_atomic
from preflight.verdict import Result

MAX_TEXT = 16_000  # characters per message or body; CI views truncate long before this
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
# XML 1.0 Char production minus what we strip: C0 controls other than \t \n \r, surrogates, U+FFFE/U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_FAILURE_TYPE = {"fail": "ThresholdNotMet", "error": "CheckError"}


def clean(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` made safe for any XML reader: ANSI codes and invalid characters removed, capped."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    result = _NOT_XML.sub("\ufffd", _ANSI.sub("", str(text)))
    return result if len(result) <= limit else result[: limit - 30] + f"... [{len(result) - limit + 30} more]"


def render(reports: Iterable[RunReport]) -> bytes:
    """The XML document (UTF-8 bytes) for one or more hosts' reports."""
    reports = list(reports)
    suites = [_suite(report) for report in reports]
    document = junit_xml.to_xml_report_string(suites, prettyprint=False, encoding="utf-8")
    root = ET.fromstring(document)
    for element in root.iter():
        element.attrib.pop("disabled", None)
        if element.tag in ("testsuite", "testcase"):
            element.set("time", f"{float(element.get('time') or 0):.3f}")
    for suite, report in zip(root.iter("testsuite"), reports):
        suite.set("time", f"{report.duration_s:.3f}")  # wall clock: checks' metrics share their run's time
    root.set("time", f"{sum(report.duration_s for report in reports):.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write(path: str, reports: Iterable[RunReport]) -> None:
    """Render and write atomically; raises UsageError if ``path`` cannot be written."""
    write_atomic(path, render(reports))


def _suite(report: RunReport) -> junit_xml.TestSuite:
    cases = [_case(result, report) for result in report.results if result.verdict != "info"]
    properties = {clean(key, 200): clean(value, 2000) for key, value in report.facts.items()}
    return junit_xml.TestSuite(
        "preflight",
        cases,
        hostname=clean(report.host, 200),
        timestamp=report.started.strftime("%Y-%m-%dT%H:%M:%S"),
        properties=properties,
    )


def _case(result: Result, report: RunReport) -> junit_xml.TestCase:
    name = result.metric or "check"
    if result.device:
        name += f"[{result.device}]"
    case = junit_xml.TestCase(
        clean(name, 500),
        classname=clean(f"preflight.{result.instance}", 500),
        elapsed_sec=result.duration_s,
        stdout=clean(_details(result)) or None,
    )
    message = clean(result.message, 2000)
    body = clean("\n".join(line for line in (result.message, _fix(result), _essentials(report)) if line))
    if result.verdict == "fail":
        case.add_failure_info(message, body, _FAILURE_TYPE["fail"])
    elif result.verdict == "error":
        case.add_error_info(message, body, _FAILURE_TYPE["error"])
    elif result.verdict == "skip":
        case.add_skipped_info(message, body)
    return case


def _fix(result: Result) -> str:
    return f"fix: {result.hint}" if result.hint else ""


def _details(result: Result) -> str:
    lines = [f"{result.verdict}: {result.message}"]
    if result.method:
        lines.append(f"method: {result.method}")
    if result.samples:
        lines.append(f"samples ({result.unit}): " + ", ".join(f"{s:.4g}" for s in result.samples))
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


def _essentials(report: RunReport) -> str:
    keys = ("hostname", "torch", "driver")
    return "host: " + ", ".join(f"{k} {report.facts[k]}" for k in keys if k in report.facts)

