"""Judge measurements against thresholds: the only module that says pass or fail.

Rules (DESIGN.md "Measuring honestly"):
- a metric with a threshold that could not be measured fails (``required: false``: skip);
- a metric the target does not have (``Measurement.applicable`` false: no ECC on this GPU)
  is skipped with its reason, whatever ``required`` says: it neither passes nor fails;
- a miss is ``fail``, or ``warn`` where the threshold says ``severity: warn``;
- a check that crashed or timed out is an ``error`` for each of its thresholds; one stopped by a mistake of
  the config's or the job's code (``Outcome.config_error``) too, marked so: the run then exits 2, not 1;
- a measured metric without a threshold is reported as ``info`` and never gates;
- a cache-bound value (memory, not the device) that meets its threshold is a ``warn``,
  never a silent pass;
- a dataset threshold (``Metric.about_data``) passes only on a figure measured on the dataset
  (``Measurement.subject`` in ``DATASET_SUBJECTS``): scratch elsewhere, synthetic samples or no
  dataset named meet it and still fail (or warn, with ``severity: warn``), saying what was measured.
The gate's exit code is computed here, in ``exit_code``, and nowhere else.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping, Sequence

from preflight.checks import CHECKS, metric_of
from preflight.checks.base import Metric
from preflight.config import Instance, Threshold
from preflight.errors import EXIT_USAGE
from preflight.measurement import DATASET_SUBJECTS, MIN_SPAN_S, ROUGH_FACTOR, SUBJECTS, Measurement, clears
from preflight.units import format_value

Verdict = Literal["pass", "fail", "warn", "error", "skip", "info"]
GATING: tuple[Verdict, ...] = ("fail", "error")

REREAD_HINT = ("{instance} had only files this run already read: point {instance}.path at more of the dataset "
               "(the first pass must outlast the measuring), or lower duration, or run {instance} alone (--only)")
NOT_THE_DATASET_HINT = ("point {instance}.path at the dataset's own files on the job's volume (DATA_DIR=/data with "
                        "the bundled thresholds.yaml, or --set {instance}.path=/data)")

EXIT_OK, EXIT_GATE_FAILED = 0, 1  # EXIT_USAGE (2) is errors': the CLI's boundary returns it, and ``exit_code``


@dataclass(frozen=True)
class Outcome:
    """What the runner got back for one instance: measurements, or an error and no measurements."""

    measurements: tuple[Measurement, ...] = ()
    error: str = ""  # "timed out after 120s", "killed by SIGSEGV", "ValueError: ..."
    duration_s: float = 0.0
    config_error: bool = False  # ``error`` is the config's or the job's code's mistake (errors.ConfigMistake)


@dataclass(frozen=True)
class Attempt:
    """An earlier measurement of a result that missed within ``retry_margin`` and was re-measured."""

    value: float | str | None
    verdict: Verdict
    samples: tuple[float, ...]


MEASURED = ("device", "value", "samples", "method", "stopped", "warnings", "runs", "note", "subject", "cache_bound",
            "interval")


@dataclass(frozen=True)
class Result:
    """One judged (or reported) metric on one target; the unit every report renders, whole without its
    ``Measurement`` (a report read back, a fleet's gathered rows): ``Result.of`` alone copies its ``MEASURED``."""

    instance: str
    check: str
    metric: str
    verdict: Verdict
    message: str
    device: str | None = None
    value: float | str | None = None
    unit: str = ""
    threshold: Mapping[str, float | str] | None = None
    hint: str = ""
    samples: tuple[float, ...] = ()
    duration_s: float = 0.0
    method: str = ""
    where: str = ""  # FILE:LINE:COL of the threshold, for CI annotations
    required: str = ""  # the threshold in words (">= 1 GB/s")
    warnings: tuple[str, ...] = field(default=())
    runs: tuple[float, ...] = ()  # with `repeats`: each run's value (the median of these is `value`)
    attempts: tuple[Attempt, ...] = ()  # with `retries`: the earlier measurements that missed narrowly
    note: str = ""  # where the value came from, when a reader must know ("on scratch data: ...")
    subject: str = ""  # what was measured: a key of measurement.SUBJECTS, "" for a metric not about data
    stopped: str = ""  # why sampling stopped ("spread 2% <= 3% after 5 samples", "the pass over the data ended ...")
    # an ``error`` that is the config's or the job's code's mistake, no fault of the node's (``exit_code``)
    config_error: bool = False
    cache_bound: bool = False  # the value may come from memory, not the device (``Measurement.cache_bound``)
    interval: tuple[float, float] | None = None  # the value's 90 % interval (``measurement.interval``)
    # why the interval still straddled the threshold at max_duration (or the figure was short), "" where it did not:
    # judged on its estimate, its verdict the instance's ``marginal`` setting's
    marginal: str = ""

    @classmethod
    def of(cls, instance: Instance, m: Measurement, verdict: Verdict, message: str, unit: str, duration_s: float,
           **judged: Any) -> Result:
        """``m`` as ``instance`` reports it, with what judging it added (``judged``: threshold, hint, ...)."""
        return cls(instance.name, instance.check, m.metric, verdict, message, unit=unit, duration_s=duration_s,
                   **{name: getattr(m, name) for name in MEASURED}, **judged)

    @property
    def id(self) -> str:
        base = f"{self.instance}.{self.metric}" if self.metric else self.instance
        return f"{base}[{self.device}]" if self.device else base

    @property
    def declared(self) -> Metric | None:
        """The metric's row in its check's table; None for no metric (a crash, a fleet comparison)."""
        return metric_of(self.check, self.metric)


def judge(instance: Instance, outcome: Outcome) -> list[Result]:
    """Results for one instance, thresholds first in the check's metric order."""
    metrics = {metric.name: metric for metric in CHECKS[instance.check].METRICS}
    thresholds = {threshold.metric: threshold for threshold in instance.thresholds}
    if outcome.error:
        return _errors(instance, outcome, thresholds)
    by_metric: dict[str, list[Measurement]] = {}
    for measurement in outcome.measurements:
        by_metric.setdefault(measurement.metric, []).append(measurement)
    results: list[Result] = []
    for name, metric in metrics.items():
        measured = by_metric.get(name, [])
        threshold = thresholds.get(name)
        if threshold is None:
            results += [_info(instance, metric, m, outcome.duration_s) for m in measured if m.measured]
            continue
        if not measured:
            measured = [Measurement(name, None, metric.unit, reason="the check reported no value for this metric")]
        results += [_judge_one(instance, metric, threshold, m, outcome.duration_s) for m in measured]
    return results


def near_miss(results: Sequence[Result], margin: float) -> bool:
    """True when some result missed its threshold and every miss is within ``margin`` of its bound.

    ``margin`` is a fraction: 0.1 re-measures 95 MB/s against ``min: 100 MB/s`` but not 80.
    A crash, a timeout or an unmeasurable metric is never retried (it is not noise), nor is
    a version or a clear miss: retries absorb measurement noise, never a broken node.
    """
    misses = [r for r in results if r.verdict in ("fail", "warn")]
    return bool(misses) and all(_within_margin(r, margin) for r in misses)


def record_attempts(final: Sequence[Result], earlier: Sequence[Sequence[Result]]) -> list[Result]:
    """``final`` with each result's earlier attempts (same id) attached, oldest first."""
    by_id: dict[str, list[Attempt]] = {}
    for attempt in earlier:
        for r in attempt:
            by_id.setdefault(r.id, []).append(Attempt(r.value, r.verdict, r.samples))
    out = []
    for r in final:
        attempts = tuple(by_id.get(r.id, ()))
        if attempts:
            shown = ", ".join(format_value(a.value, r.unit) + f" ({a.verdict})" for a in attempts)
            retries = f"{len(attempts)} {'retry' if len(attempts) == 1 else 'retries'}"
            r = replace(r, attempts=attempts, message=f"{r.message}; after {retries}: earlier {shown}")
        out.append(r)
    return out


def _within_margin(result: Result, margin: float) -> bool:
    if not isinstance(result.value, (int, float)) or not result.threshold:
        return False
    low, high = result.threshold.get("min"), result.threshold.get("max")
    if isinstance(low, (int, float)) and result.value < low:
        return result.value >= low * (1 - margin)
    if isinstance(high, (int, float)) and result.value > high:
        return result.value <= high * (1 + margin)
    return False


def exit_code(results: Sequence[Result]) -> int:
    """0 when nothing failed or errored (warnings allowed); 1 when the gate failed on the node; 2 (``EXIT_USAGE``)
    when every result that failed is a mistake of the config's or the job's code (``Result.config_error``: a dataset
    directory that does not exist, a factory that cannot be imported or raises), so that no such mistake takes a
    node out of rotation (a Slurm drain, a Kubernetes taint; issue 35). A node fault beside one still fails the gate:
    that row is the node's whatever the config says elsewhere."""
    gating = [result for result in results if result.verdict in GATING]
    if any(not result.config_error for result in gating):
        return EXIT_GATE_FAILED
    return EXIT_USAGE if gating else EXIT_OK


def requirement(threshold: Threshold, unit: str) -> str:
    """The threshold in words: ``>= 1 GB/s``, ``<= 85 C``, ``between 1 GiB and 2 GiB``, ``matches /H100/``,
    ``>= 90% of baseline``, ``between 90% of baseline and 2 GB/s``."""
    if threshold.match is not None:
        return f"matches /{threshold.match}/"
    if threshold.relative:  # a bound not yet made absolute (``against_baseline``) is said as a fraction
        words = {key: f"{fraction:.0%} of baseline" for key, fraction in threshold.relative.items()}
        threshold = threshold._replace(min=words.get("min") if threshold.min is None else threshold.min,
                                       max=words.get("max") if threshold.max is None else threshold.max)
    low, high = (format_value(b, unit) if isinstance(b, float) else b for b in (threshold.min, threshold.max))
    if threshold.min is not None and threshold.max is not None:
        return f"between {low} and {high}"
    return f">= {low}" if threshold.min is not None else f"<= {high}"


def against_baseline(threshold: Threshold, result_id: str) -> Threshold | None:
    """``threshold`` with its ``N% of baseline`` bounds made absolute for ``result_id``.

    Unchanged when it has no relative bound; None when the baseline has no value for
    ``result_id`` (a device that was not there when the baseline was saved).
    """
    if not threshold.relative:
        return threshold
    base = threshold.baseline.get(result_id)
    if base is None:
        return None
    return threshold._replace(**{key: fraction * base for key, fraction in threshold.relative.items()})


def _judge_one(instance: Instance, metric: Metric, threshold: Threshold, m: Measurement,
               duration_s: float) -> Result:
    result_id = f"{instance.name}.{metric.name}" + (f"[{m.device}]" if m.device else "")
    absolute = against_baseline(threshold, result_id)
    if absolute is None:
        return Result.of(instance, m, "error", f"the baseline has no value for {result_id}: save a baseline on a run "
                         f"that measured it", metric.unit, duration_s, where=threshold.where,
                         required=requirement(threshold, metric.unit))
    required = requirement(absolute, metric.unit if not metric.is_version else "")
    if threshold.relative:
        shown = " and ".join(f"{fraction:.0%}" for fraction in threshold.relative.values())
        required += f" ({shown} of baseline {format_value(threshold.baseline[result_id], metric.unit)})"
    threshold = absolute
    common: dict[str, Any] = dict(unit=metric.unit, duration_s=duration_s, threshold=_bounds(threshold),
                                  where=threshold.where, required=required)
    if not m.measured and not m.applicable:
        return Result.of(instance, m, "skip", f"not applicable: {m.reason}", **common)
    if not m.measured:
        # A warn-severity threshold never blocks: unmeasured, it warns too (a fail one fails, DESIGN.md).
        verdict: Verdict = threshold.severity if instance.required else "skip"
        message = f"could not measure: {m.reason}; required {required}"
        # No metric hint here: it names the fix for a bad value ("replace the GPU"), and nothing was
        # measured; the reason says what stopped the measurement and how to fix that.
        return Result.of(instance, m, verdict, message, **common)
    measured = said(m.value, metric, "" if metric.is_version else metric.unit)
    ok = _within(m.value, threshold, metric)
    verdict = "pass" if ok else threshold.severity
    message = f"measured {measured}, required {required}"
    undecided = _undecided(metric, threshold, m)
    if undecided:
        message += f" (marginal: {undecided}: on its estimate it {'passes' if ok else 'misses'})"
        verdict = _MARGINAL_VERDICT[instance.marginal] if threshold.severity == "fail" else (
            "pass" if instance.marginal == "pass" else "warn")
    if m.reason:
        message += f" ({m.reason})"
    if m.note:
        message += f"; {m.note}"
    hint = "" if ok else (m.hint or _hint(metric, instance, measured, required, threshold))
    if metric.about_data and m.subject not in DATASET_SUBJECTS:
        # Said on a figure that misses its minimum too: the reader must not take it for the dataset's.
        if m.subject == "reread":
            message += f"; measured on {SUBJECTS['reread']}"
        else:
            message += f"; measured on {SUBJECTS.get(m.subject, SUBJECTS['unverified'])}: not the dataset"
        if ok:
            verdict = threshold.severity
            message += ", so it cannot pass"
            # On synthetic samples the check's hint is its advice for a figure too low (raise num_workers...),
            # beside the point for one that fails only for what it measured (a new user's trial); the other
            # subjects' hints say where the dataset or the scratch data should be.
            said_for_subject = "" if m.subject == "synthetic" else m.hint
            hint = said_for_subject or (REREAD_HINT if m.subject == "reread" else NOT_THE_DATASET_HINT).format(
                instance=instance.name)
    elif ok and m.cache_bound:
        verdict = "warn"
        message += "; cache-bound: not a device figure, so it cannot pass"
        hint = m.hint or f"measure a path on the real dataset volume, not {instance.options.get('path', 'this mount')}"
    # A figure of the working directory, measured because the config named no dataset, judges the config, not the
    # node: like a path that does not exist (issue 35), its failure exits 2 and takes no node out of rotation.
    config_error = m.subject == "no_dataset" and verdict in GATING
    return Result.of(instance, m, verdict, message, hint=hint, config_error=config_error, marginal=undecided,
                     **common)


_MARGINAL_VERDICT: dict[str, Verdict] = {"warn": "warn", "fail": "fail", "pass": "pass"}


def _undecided(metric: Metric, threshold: Threshold, m: Measurement) -> str:
    """Why a measured rate or latency is not decided by its threshold, "" where it is: its 90 % interval straddles a
    bound, or, with one sample or samples spanning under ``MIN_SPAN_S`` (a throttle's start-up burst read 25x its
    rate; issue 44), the bound lies within ``ROUGH_FACTOR`` of it (``measurement.band``). A figure given without
    samples, and counts, facts and texts, are exact: always decided."""
    # a share of a rate (throughput_vs_required, in %) carries the rate's run-to-run floor: judged as the rate is
    if ((not metric.is_performance and not m.floor) or threshold.match is not None or threshold.relative
            or not isinstance(m.value, (int, float)) or not m.samples):  # no samples: a figure given as measured
        return ""
    bounds = tuple(b if isinstance(b, (int, float)) else None for b in (threshold.min, threshold.max))
    if clears(bounds, m.band):
        return ""
    if m.short:
        return f"its samples spanned under {MIN_SPAN_S:g} s and the threshold is within {ROUGH_FACTOR:g}x of it"
    if m.interval is None:
        return f"one sample, and the threshold is within {ROUGH_FACTOR:g}x of it"
    floor = (f" (at least ±{m.floor:.0%}: where one node's runs fall 99 times in 100, a spread one run's samples "
             f"cannot show)"
             if m.floor else "")
    return (f"the 90% interval {format_value(m.interval[0], metric.unit)} to {format_value(m.interval[1], metric.unit)}"
            f"{floor} straddles the threshold")


def said(value: float | str | None, metric: Metric | None, unit: str) -> str:
    """A value as people read it, in messages and reports: ``yes``/``no`` for a flag (``Metric.flag``), a version
    or a name as it is, else ``format_value``'s words (``-`` for none)."""
    if metric is not None and metric.flag and isinstance(value, (int, float)):
        return "yes" if value else "no"
    return format_value(value, "" if unit in ("version", "text") else unit)


def _within(value: float | str | None, threshold: Threshold, metric: Metric) -> bool:
    def key(v: float | str) -> Any:
        return tuple(int(p) for p in str(v).split(".") if p.isdigit()) if metric.is_version else float(v)

    if threshold.match is not None:
        return re.search(threshold.match, str(value)) is not None
    if threshold.min is not None and key(value) < key(threshold.min):  # type: ignore[arg-type]
        return False
    return not (threshold.max is not None and key(value) > key(threshold.max))  # type: ignore[arg-type]


def _hint(metric: Metric, instance: Instance, measured: str, required: str, threshold: Threshold) -> str:
    """The metric's hint with ``{measured}``, ``{required}``, ``{required_up}`` and the instance's options filled in.

    ``required_up`` is the bound missed, rounded up to a whole number of the metric's unit (``64`` for
    ``min: 63.5 GiB``, ``1`` for ``min: 500 MiB`` in GiB), so a fix can name the size the threshold asks for
    (``--shm-size=64g``) rather than a fixed one.
    """
    if not metric.hint:
        return ""
    bound = threshold.min if threshold.min is not None else threshold.max
    up = str(max(1, math.ceil(bound - 1e-9))) if isinstance(bound, (int, float)) else required
    return metric.hint.format(measured=measured, required=required, required_up=up, **instance.options)


def _info(instance: Instance, metric: Metric, m: Measurement, duration_s: float) -> Result:
    text = said(m.value, metric, m.unit)
    message = f"measured {text} (no threshold)" + (f"; {m.note}" if m.note else "")
    return Result.of(instance, m, "info", message, m.unit, duration_s)


def _errors(instance: Instance, outcome: Outcome, thresholds: Mapping[str, Threshold]) -> list[Result]:
    # a config's mistake is its one line as `validate` says it (FILE:LINE:COL first); the node's, what stopped the check
    message = outcome.error if outcome.config_error else f"{instance.check} check did not finish: {outcome.error}"
    mistake = outcome.config_error
    if not thresholds:
        return [Result(instance.name, instance.check, "", "error", message, duration_s=outcome.duration_s,
                       where=instance.where, config_error=mistake)]
    units = {metric.name: metric.unit for metric in CHECKS[instance.check].METRICS}
    return [
        Result(instance.name, instance.check, name, "error", message, unit=units[name], duration_s=outcome.duration_s,
               threshold=_bounds(t), where=t.where, required=requirement(t, units[name]), config_error=mistake)
        for name, t in thresholds.items()
    ]


def _bounds(threshold: Threshold) -> dict[str, float | str]:
    bounds = (("min", threshold.min), ("max", threshold.max), ("match", threshold.match))
    return {key: value for key, value in bounds if value is not None}


def storage_first(results: Sequence[Result]) -> list[Result]:
    """``results`` with the fix of a slow job's Dataset pointing at the volume when the storage check missed too.

    A ``dataloader`` throughput measured through the job's own Dataset (subject ``job_dataset``)
    says to profile that code; but when a ``storage`` figure of the same run missed its threshold,
    the volume is slow as well and comes first. Nothing else changes: no verdict, no value.
    """
    slow = [r for r in results if r.check == "storage" and r.verdict in ("fail", "warn") and r.value is not None
            and r.declared is not None and r.declared.is_performance]
    if not slow:
        return list(results)
    said = ", ".join(f"{r.id} {format_value(r.value, r.unit)} (required {r.required})" for r in slow[:2])
    first = (f"storage on this node missed too ({said}): fix the volume first (its fix above), then profile the "
             f"Dataset's own code if the loader is still slow")
    return [replace(r, hint=first) if r.check == "dataloader" and r.metric == "throughput"
            and r.subject == "job_dataset" and r.verdict in ("fail", "warn") else r for r in results]


def judge_against_fleet(result: Result, median: float, nodes: int, ratio: float, severity: str) -> Result:
    """Compare one node's measured ``result`` with the fleet ``median`` of the same metric.

    The value is ``result.value / median``; it passes while at least ``ratio`` (at most
    ``1 / ratio`` for a lower-is-better metric), else gets ``severity``, even when the
    node meets the absolute threshold: a straggler drags every rank of a synchronous job.
    Only a performance metric (``Metric.is_performance``) with a ``median`` above 0 is judged
    so (``report.merge`` chooses them); anything else is a ValueError.
    """
    metric = result.declared
    if metric is None or not metric.is_performance or median <= 0:
        raise ValueError(f"{result.id} cannot be compared with a fleet median of {median}: "
                         f"only a performance metric with a median above 0 can")
    higher = metric.higher_is_better
    relative = float(result.value) / median  # type: ignore[arg-type]
    ok = relative >= ratio if higher else relative <= 1 / ratio
    bound = ratio if higher else 1 / ratio
    required = f"{'>=' if higher else '<='} {bound:g}x the fleet median"
    measured = format_value(result.value, result.unit)
    message = (f"{result.metric} {measured} is {relative:.2f}x the fleet median {format_value(median, result.unit)} "
               f"over {nodes} nodes, required {required}")
    hint = "" if ok else ("this node is the straggler: drain it from the job and check its "
                          f"{result.instance} (compare `preflight run --only {result.instance}` with a healthy node)")
    return Result(result.instance, result.check, f"{result.metric}.vs_fleet_median", "pass" if ok else severity,  # type: ignore[arg-type]
                  message + ("" if ok else ": flagged as a straggler"), device=result.device, value=relative,
                  threshold={"min": bound} if higher else {"max": bound}, hint=hint, duration_s=0.0,
                  required=required)
