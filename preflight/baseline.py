"""Baselines: every value one run measured, saved so later runs gate on regressions.

``preflight run --save-baseline FILE`` writes (atomically)::

    {"schema": 1, "kind": "preflight-baseline", "host": "node-17", "created": "2026-11-29T15:00:00Z",
     "config_sha256": "...", "values": {"storage.seq_read": {"value": 2080.4, "unit": "MB/s"}, ...}}

keyed by result id (``instance.metric`` or ``instance.metric[device]``), every numeric
value measured, judged or not. A threshold then reads ``min: 90% of baseline`` (or
``max: 110% of baseline``), with the file given by ``--baseline FILE`` or the top-level
``baseline:`` key of thresholds.yaml (relative to that file; the flag wins). This is the
regression gate of continuous-benchmarking practice (e.g. pytest-benchmark's
``--benchmark-compare-fail=min:10%``): a node class is held to what it measured when
known good, not only to an absolute floor.
"""

from __future__ import annotations

import json
import math
import re
from typing import Mapping, NamedTuple, Sequence

from preflight.errors import UsageError
from preflight.units import UNITS

SCHEMA = 1
KIND = "preflight-baseline"
_RELATIVE = re.compile(r"^\s*(?P<percent>\d+(?:\.\d*)?|\.\d+)\s*%\s*of\s+baseline\s*$")


class Baseline(NamedTuple):
    path: str
    values: Mapping[str, tuple[float, str]]  # result id -> (value, unit symbol)


def relative_fraction(text: object) -> float | None:
    """``"90% of baseline"`` -> 0.9; None when ``text`` is not written that way."""
    match = _RELATIVE.match(text) if isinstance(text, str) else None
    return float(match["percent"]) / 100 if match else None


def mentions_baseline(text: object) -> bool:
    return isinstance(text, str) and "baseline" in text


def to_dict(results: Sequence[object], host: str, created: str, config_sha256: str) -> dict[str, object]:
    """The baseline document for ``results`` (``verdict.Result``): every finite numeric value."""
    values = {
        r.id: {"value": r.value, "unit": r.unit}  # type: ignore[attr-defined]
        for r in results
        if isinstance(r.value, (int, float)) and not isinstance(r.value, bool)  # type: ignore[attr-defined]
        and math.isfinite(r.value)  # type: ignore[attr-defined]
    }
    return {"schema": SCHEMA, "kind": KIND, "host": host, "created": created, "config_sha256": config_sha256,
            "values": values}


def render(results: Sequence[object], host: str, created: str, config_sha256: str) -> str:
    return json.dumps(to_dict(results, host, created, config_sha256), indent=2, sort_keys=True) + "\n"


def load(path: str) -> Baseline:
    """Read a baseline file.

    Raises:
        UsageError: unreadable, not JSON, not a preflight baseline, or a malformed entry;
            the message names the file and the fix.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except OSError as error:
        raise UsageError(f"{path}: cannot read the baseline ({error.strerror}): "
                         f"save one with `preflight run --save-baseline {path}`") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: the baseline is not valid JSON ({error}): save it again with "
                         f"`preflight run --save-baseline {path}`") from None
    if not isinstance(document, dict) or document.get("kind") != KIND or document.get("schema") != SCHEMA:
        raise UsageError(f"{path}: not a preflight baseline (schema {SCHEMA}): save one with "
                         f"`preflight run --save-baseline {path}`")
    values: dict[str, tuple[float, str]] = {}
    entries = document.get("values")
    if not isinstance(entries, dict):
        raise UsageError(f"{path}: `values` must be an object of result ids: save the baseline again")
    for key, entry in entries.items():
        value = entry.get("value") if isinstance(entry, dict) else None
        unit = entry.get("unit") if isinstance(entry, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or unit not in UNITS:
            raise UsageError(f"{path}: entry `{key}` needs a finite `value` and a known `unit`, found {entry!r}: "
                             f"save the baseline again")
        values[key] = (float(value), unit)
    return Baseline(path, values)
