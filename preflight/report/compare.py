"""Report layer: two runs' JSON reports side by side, metric by metric, each change judged against their noise.

Reads what ``json_report`` writes (schema 1): one node's report or a fleet's. A fleet's
results are named by node as ``report.merge.on_node`` names them (``storage.seq_read[node1]``),
so two fleets pair node by node; a single node's report set against a fleet's is paired with
each of its nodes. Two single-node reports pair by id whatever their hosts: the same node over
time, or two nodes side by side.

A change is *beyond noise* past the metric's band (``noise.band``); what is judged and in which
direction, exact counts and sizes read once (no band), *regressed* (beyond noise and past
``fail_on``) and figures *too short to compare* (``short_of``) are as docs/reports.md
("Comparing two runs") says, with the measurements behind each rule.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, NamedTuple, Sequence

from preflight.report import noise
from preflight.checks import metric_of
from preflight.errors import UsageError
from preflight.sampling import SHORT
from preflight.units import UNITS, Dimension


class Entry(NamedTuple):
    """One result of a report, as the JSON gives it."""

    id: str
    check: str
    metric: str
    value: float | str | None
    unit: str
    verdict: str
    samples: tuple[float, ...]
    threshold: Mapping[str, Any] | None  # {"min": 200.0}; None where the run gated nothing on it
    runs: tuple[float, ...] = ()  # with `repeats`: each run's figure
    warnings: tuple[str, ...] = ()  # the row's warnings ("short: 1 sample of 100 files in 12 ms; ...")
    duration_s: float = 0.0  # the check's wall time in that run


class Report(NamedTuple):
    """A loaded report: who and when, whether it is a fleet's, its results by id."""

    path: str
    label: str  # "node-17 at 2026-11-29T15:00:00Z", "fleet of 4 nodes at ..."
    fleet: bool
    entries: Mapping[str, Entry]


class Change(NamedTuple):
    """One metric in both runs."""

    id: str
    old: Entry
    new: Entry
    ratio: float | None  # new / old; None for a text, a version or an old value of 0
    band: float | None  # the relative change within noise; None when not judged
    direction: bool | None  # True: higher is better, False: lower is better, None: not judged
    short: str = ""  # a run sampled it too briefly to compare: "new: 1 sample of 100 files in 12 ms"
    exact: bool = False  # an exact count (``Metric.is_count``): no noise band, any difference is a change

    @property
    def delta(self) -> float | None:
        """new - old of an exact count; None for any other metric or a value missing in either run."""
        if not self.exact or not all(_number(e.value) for e in (self.old, self.new)):
            return None
        return float(self.new.value) - float(self.old.value)  # type: ignore[arg-type]

    @property
    def judged(self) -> bool:
        return self.band is not None and (self.ratio is not None or self.delta is not None) and not self.short

    @property
    def beyond_noise(self) -> bool:
        """Changed by more than chance moves it; for an exact count, changed at all."""
        if self.delta is not None:
            return self.judged and self.delta != 0
        return self.judged and abs(self.ratio - 1) > self.band  # type: ignore[operator]

    @property
    def worse(self) -> bool:
        """Moved the wrong way beyond noise (lower for a rate, higher for a latency or an error count)."""
        if not self.beyond_noise:
            return False
        lower = self.delta < 0 if self.delta is not None else self.ratio < 1  # type: ignore[operator]
        return lower == bool(self.direction)

    @property
    def change(self) -> float:
        """How much worse or better, as a fraction of the old value (0.25: 25%); a count that left 0 changed by
        ``inf``: more than any ``--fail-on``."""
        if self.delta is not None:
            old = abs(float(self.old.value))  # type: ignore[arg-type]
            return abs(self.delta) / old if old else (math.inf if self.delta else 0.0)
        return abs(self.ratio - 1) if self.ratio is not None else 0.0

    def regressed(self, fail_on: float) -> bool:
        """Worse beyond noise and by more than ``fail_on`` (0.1: a rate 10% lower, a latency 10% higher, 8 GPUs
        down to 7)."""
        return self.worse and self.change > fail_on

    def cannot_tell(self, fail_on: float) -> bool:
        """Within noise, but the noise is wider than ``fail_on``: a regression past it could hide in the band."""
        return self.judged and self.delta is None and not self.beyond_noise and self.band > fail_on  # type: ignore[operator]

    def times_to_tell(self, fail_on: float) -> float | None:
        """How many times its ``duration`` both runs would need for the band to narrow to ``fail_on``
        (``noise.samples_to_tell``: samples grow with the duration, the window length fixed); None where no duration
        would (its repeats disagree)."""
        metric_id = f"{self.new.check}.{self.new.metric}"
        times = [noise.samples_to_tell(metric_id, e.samples, fail_on, e.runs) for e in (self.old, self.new)]
        if None in times:
            return None
        return max(times)  # type: ignore[type-var]


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load(path: str) -> Report:
    """Read one preflight JSON report.

    Raises:
        UsageError: the file is missing or unreadable, not JSON, not a preflight report, or the
            report of a run that never started (a config error): one line naming the file and why.
    """
    try:
        with open(path, encoding="utf-8") as stream:
            document = json.load(stream)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file: give the JSON report a run wrote with --json") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read it ({getattr(error, 'strerror', None) or error})") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}:{error.lineno}:{error.colno}: not JSON ({error.msg}): give the report "
                         f"`preflight run --json` wrote") from None
    if not isinstance(document, dict) or document.get("schema") != 1 or not (
            isinstance(document.get("results"), list) or isinstance(document.get("hosts"), list)):
        raise UsageError(f"{path}: not a preflight JSON report (schema 1, with `results` or `hosts`): give the "
                         f"report `preflight run --json` wrote")
    if document.get("error"):
        raise UsageError(f"{path}: that run never started ({document['error']}): nothing to compare")
    try:
        if document.get("kind") == "fleet":
            hosts = document["hosts"]
            entries = {e.id: e for host in hosts for e in _entries(host["results"], _node(host))}
            started = hosts[0]["started"] if hosts else "?"
            return Report(path, f"fleet of {len(hosts)} nodes at {started}", True, entries)
        entries = {e.id: e for e in _entries(document["results"], None)}
        return Report(path, f"{document.get('host', '?')} at {document.get('started', '?')}", False, entries)
    except (KeyError, TypeError, ValueError) as error:
        raise UsageError(f"{path}: not a preflight JSON report: a result lacks {error}: give the report "
                         f"`preflight run --json` wrote") from None


def _node(host: Mapping[str, Any]) -> str:
    return f"node{host['facts'].get('node_rank', '?')}"


def _entries(results: Sequence[Mapping[str, Any]], node: str | None) -> list[Entry]:
    entries = []
    for r in results:
        device = r.get("device")
        if node is not None:
            device = f"{node}/{device}" if device else node
        base = f"{r['instance']}.{r['metric']}" if r["metric"] else r["instance"]
        entries.append(Entry(f"{base}[{device}]" if device else base, r["check"], r["metric"], r.get("value"),
                             r.get("unit", ""), r["verdict"], tuple(float(s) for s in r.get("samples") or ()),
                             r.get("threshold") or None, tuple(float(v) for v in r.get("runs") or ()),
                             tuple(str(w) for w in r.get("warnings") or ()), float(r.get("duration_s") or 0.0)))
    return entries


def pair(old: Report, new: Report) -> tuple[list[Change], list[str], list[str]]:
    """The metrics in both runs as changes, in the new run's order; then the ids only in the old, only in the new.

    A single node's report against a fleet's pairs each of the fleet's nodes with that one node.
    """
    old_entries, new_entries = dict(old.entries), dict(new.entries)
    if old.fleet != new.fleet:
        single, fleet = (old_entries, new_entries) if new.fleet else (new_entries, old_entries)
        expanded = {}
        for fleet_id, entry in fleet.items():
            match = single.get(_without_node(fleet_id))
            if match is not None:
                expanded[fleet_id] = match._replace(id=fleet_id)
        if new.fleet:
            old_entries = expanded
        else:
            new_entries = expanded
    changes = [change(old_entries[i], new_entries[i]) for i in new_entries if i in old_entries]
    return changes, [i for i in old_entries if i not in new_entries], [i for i in new_entries if i not in old_entries]


def _without_node(result_id: str) -> str:
    """``storage.seq_read[node1]`` -> ``storage.seq_read``; ``cuda.temperature[node1/cuda:0]`` -> ``...[cuda:0]``."""
    base, _, device = result_id.partition("[")
    device = device.rstrip("]").split("/", 1)
    return f"{base}[{device[1]}]" if len(device) == 2 else base


def change(old: Entry, new: Entry) -> Change:
    """``new`` against ``old``: the ratio, and the noise band when the metric is a judged one (0 for an exact count:
    ``exact_count``)."""
    numbers = _number(old.value) and _number(new.value)
    ratio = float(new.value) / float(old.value) if numbers and old.value else None  # type: ignore[arg-type]
    if numbers and not old.value and not new.value:
        ratio = 1.0
    exact = numbers and exact_count(new.check, new.metric)
    direction = judged_direction(new.check, new.metric, old.threshold or new.threshold)
    if direction is None or (ratio is None and not exact):
        return Change(new.id, old, new, ratio, None, None, exact=exact)
    if exact:
        return Change(new.id, old, new, ratio, 0.0, direction, exact=True)
    if read_size(new.check, new.metric) and not (old.samples or new.samples):
        return Change(new.id, old, new, ratio, 0.0, direction)  # a size read once, not sampled: no noise band
    width = noise.band(f"{new.check}.{new.metric}", old.samples, new.samples, (old.runs, new.runs))
    return Change(new.id, old, new, ratio, width, direction, short_of(old, new))


def exact_count(check: str, name: str) -> bool:
    """Whether ``check.name`` is an exact count (``Metric.is_count``: GPUs, Xid lines, unreadable files, workers, a
    flag's 1 or 0): it changed or it did not, so no noise band (issue 35: ``cuda.device_count`` 8 -> 7 was "within
    noise (±7%)"). A metric this version does not know is compared as a measured figure."""
    metric = metric_of(check, name)
    return metric is not None and metric.is_count


def read_size(check: str, name: str) -> bool:
    """Whether ``check.name`` is a size (``Dimension.SIZE``: /dev/shm's size, what it allocated, free space); one read
    once from the system, with no samples, has no noise between runs: a new user cut shm.size 20% in a report and
    ``diff --fail-on 10%`` called it "within noise (±21%)", the band of a metric never measured run to run."""
    metric = metric_of(check, name)
    unit = UNITS.get(metric.unit) if metric is not None else None
    return unit is not None and unit.dimension is Dimension.SIZE


def short_of(old: Entry, new: Entry) -> str:
    """Why either run's figure is too short to compare: "old: 1 sample of 100 files in 12 ms", from its ``short: ``
    warning (``sampling.short_warning``: its samples spanned under ``sampling.MIN_SPAN_S``); "" when neither is.
    Over a few milliseconds the scheduler sets a rate as much as the device: no floor measured on longer
    windows holds for it, and an unchanged busy node moved such a figure by -52% to +106% (issue 35)."""
    said = []
    for label, entry in (("old", old), ("new", new)):
        warning = next((w for w in entry.warnings if w.startswith(SHORT)), "")
        if warning:
            said.append(f"{label}: {warning[len(SHORT):].split(';')[0]}")
    return ", ".join(said)


def judged_direction(check: str, name: str, threshold: Mapping[str, Any] | None) -> bool | None:
    """Whether a change of ``check.name`` is judged, and which way is better: True (higher), False (lower), None
    (a fact, not judged). A performance metric is judged in its own direction; a metric the user gated
    (``threshold``) in its own direction where it has one, else in the threshold's (``min``: higher is better)."""
    metric = metric_of(check, name)
    if metric is not None and metric.is_performance:
        return metric.higher_is_better
    if not threshold or (metric is not None and (metric.is_version or metric.is_text)):
        return None
    if metric is not None and metric.higher_is_better is not None:
        return metric.higher_is_better
    if ("min" in threshold) != ("max" in threshold):
        return "min" in threshold
    return None
