"""The shared helper that judges a check's measurements against thresholds written as YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from preflight import config
from preflight.measurement import Measurement
from preflight.verdict import Outcome, Result, judge


def instance(tmp_path: Path, check: str, body: str) -> config.Instance:
    """The one instance of ``check`` configured by the YAML ``body`` (indented under the check)."""
    path = tmp_path / "thresholds.yaml"
    indented = "".join(f"    {line}\n" for line in body.strip().splitlines())
    path.write_text(f"version: 1\nchecks:\n  {check}:\n{indented}")
    return config.load(str(path), environ={}).instances[0]


def verdicts(tmp_path: Path, check: str, body: str, measurements: Sequence[Measurement]) -> dict[str, Result]:
    """Judged results keyed by id (``cuda.ecc_mode[cuda:0]``)."""
    results = judge(instance(tmp_path, check, body), Outcome(tuple(measurements)))
    return {result.id: result for result in results}


def by_id(measurements: Sequence[Measurement]) -> dict[str, Measurement]:
    """Measurements keyed like results' ids without the instance: ``ecc_mode[cuda:0]``."""
    return {f"{m.metric}[{m.device}]" if m.device else m.metric: m for m in measurements}
