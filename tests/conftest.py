"""The one helper every check test goes through: options parsed as the config parses them."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from preflight.checks.base import Budget
from preflight.config import coerce_option
from preflight.measurement import Measurement
from preflight.yaml_source import Located


def run_check(check: ModuleType, duration_s: float = 1.0, **options: Any) -> dict[str, Measurement]:
    """Run ``check.measure`` with its defaults overridden by ``options`` (written as in YAML).

    Returns the measurements by metric name; every option goes through ``coerce_option``,
    so a test's ``step_time="50ms"`` is parsed exactly as thresholds.yaml's would be.
    """
    known = {option.name: option for option in check.OPTIONS}
    unknown = set(options) - set(known)
    assert not unknown, f"not options of {check.NAME}: {unknown}"
    parsed = {
        name: coerce_option(option, Located(options[name], "test") if name in options else None, name)
        for name, option in known.items()
    }
    return {m.metric: m for m in check.measure(parsed, Budget(duration_s, 120.0))}


@pytest.fixture
def check_runner():
    return run_check
