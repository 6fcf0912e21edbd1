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

import math
import os
import re
from typing import Mapping, NamedTuple, Sequence

from preflight.checks.base import Metric
from preflight.errors import ConfigError, UsageError
from preflight.units import UNITS, convert, with_article
from preflight.yaml_source import Located

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


def relative_bound(metric: Metric, node: Located) -> float | None:
    """The fraction of a ``N% of baseline`` bound (0.9), None for an absolute bound.

    Raises:
        ConfigError: the bound mentions the baseline but is not written that way, or the
            metric is a version or a text, which have no proportion.
    """
    fraction = relative_fraction(node.value)
    if fraction is None and isinstance(node.value, str) and "baseline" in node.value:
        raise ConfigError(node.where, f"`{metric.name}`: write a baseline bound like `90% of baseline`, "
                          f"found {node.value!r}")
    if fraction is not None and (metric.is_version or metric.is_text):
        raise ConfigError(node.where, f"`{metric.name}` is {with_article(metric.unit)}: it takes no baseline bound")
    return fraction


class Source:
    """Where ``N% of baseline`` bounds look: ``--baseline FILE``, else the config's ``baseline:`` key.

    The file is read only when a threshold refers to it, so a config naming a baseline
    that does not exist yet can still run with ``--save-baseline`` to create it.
    """

    def __init__(self, config_path: str, flag: str | None, root: Located) -> None:
        self.path, self.where = flag, "--baseline"
        key = root.value.get("baseline") if isinstance(root.value, dict) else None
        if flag is None and key is not None:
            if not isinstance(key.value, str) or not key.value:
                raise ConfigError(key.where, f"`baseline` must be a file path, found {key.value!r}")
            self.path, self.where = os.path.join(os.path.dirname(config_path), key.value), key.where
        self.loaded: Baseline | None = None

    def values_for(self, metric: Metric, instance: str, node: Located) -> dict[str, float]:
        """The baseline values of ``instance.metric`` by result id, in the metric's unit.

        Raises:
            ConfigError: no baseline given, none of its values is for this metric, or
                they are of another dimension. UsageError: the file cannot be read.
        """
        prefix = f"{instance}.{metric.name}"
        if self.path is None:
            raise ConfigError(node.where, f"`{prefix}` is relative to a baseline, but none is given: pass "
                              f"--baseline FILE or add `baseline: FILE` at the top level (save one with "
                              f"`preflight run --save-baseline FILE`)")
        if self.loaded is None:
            try:
                self.loaded = load(self.path)
            except UsageError as error:  # said where the baseline was named: the flag or the key's line
                raise ConfigError(self.where, str(error)) from None
        values = {}
        for key, (value, unit) in self.loaded.values.items():
            if key != prefix and not key.startswith(prefix + "["):
                continue
            if UNITS[unit].dimension is not UNITS[metric.unit].dimension:
                raise ConfigError(node.where, f"`{prefix}`: baseline {self.path} holds {unit}, not "
                                  f"{with_article(UNITS[metric.unit].dimension.value)}: save the baseline again")
            values[key] = convert(value, unit, metric.unit)
        if not values:
            raise ConfigError(node.where, f"`{prefix}`: baseline {self.path} has no value for it: save a "
                              f"baseline from a run that measures `{prefix}`")
        return values


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
    import json  # json only where a baseline is written or read: `validate` of most files needs neither

    return json.dumps(to_dict(results, host, created, config_sha256), indent=2, sort_keys=True) + "\n"


def load(path: str) -> Baseline:
    """Read a baseline file.

    Raises:
        UsageError: unreadable, not JSON, not a preflight baseline, or a malformed entry;
            the message names the file and the fix.
    """
    import json

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
