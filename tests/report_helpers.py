"""Helpers for report tests: every JUnit file a test writes goes through ``read_junit``."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import junitparser
import xmlschema

from preflight.report import RunReport
from preflight.verdict import Result

JUNIT_XSD = Path(__file__).parent / "schemas" / "junit-10.xsd"
_SCHEMA = xmlschema.XMLSchema10(str(JUNIT_XSD))


def read_junit(path: Path | str) -> junitparser.JUnitXml:
    """Validate ``path`` against junit-10.xsd, then parse it with junitparser (a second reader).

    Also checks what GitLab and the schema do not: UTF-8 declaration, suite counts equal to
    the testcases, a ``time`` on every testcase, unique classname + name.
    """
    data = Path(path).read_bytes()
    assert data.startswith(b'<?xml version="1.0" encoding="UTF-8"?>'), data[:60]
    data.decode("utf-8")
    _SCHEMA.validate(str(path))
    document = junitparser.JUnitXml.fromfile(str(path))
    suites = [document] if isinstance(document, junitparser.TestSuite) else list(document)
    seen = set()
    for suite in suites:
        cases = list(suite)
        assert suite.tests == len(cases)
        assert suite.failures == sum(isinstance(r, junitparser.Failure) for c in cases for r in c.result)
        assert suite.errors == sum(isinstance(r, junitparser.Error) for c in cases for r in c.result)
        assert suite.skipped == sum(isinstance(r, junitparser.Skipped) for c in cases for r in c.result)
        for case in cases:
            assert case._elem.get("time") is not None, case.name
            key = (case.classname, case.name)
            assert key not in seen, key
            seen.add(key)
            for outcome in case.result:
                if isinstance(outcome, (junitparser.Failure, junitparser.Error)):
                    assert outcome.message and outcome.text, (case.name, outcome)
    return document


def make_report(results: Sequence[Result], facts: dict[str, str] | None = None, duration_s: float = 1.25,
                config_path: str = "thresholds.yaml") -> RunReport:
    """A RunReport with fixed host facts, for report tests that must not depend on the machine."""
    base = {"hostname": "node-17", "torch": "2.4.0", "cuda": "12.4", "driver": "550.54.15",
            "gpu": "8x NVIDIA H100 80GB HBM3", "config": config_path, "config_sha256": "ab" * 32}
    base.update(facts or {})
    started = datetime(2026, 11, 29, 15, 0, 0, tzinfo=timezone.utc)
    return RunReport(base["hostname"], started, duration_s, config_path, base["config_sha256"], tuple(results), base)


def result(metric: str, verdict: str, message: str = "", instance: str = "storage", **fields) -> Result:
    """A Result with sensible defaults for report tests."""
    fields.setdefault("check", instance)
    return Result(instance=instance, metric=metric, verdict=verdict, message=message or f"{metric} {verdict}",
                  **fields)
