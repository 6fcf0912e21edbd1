"""The model check's measuring: build the model, warm up, time windows of steps on each device.

Imported by ``model.measure`` when the check runs (see the package's docstring for the method); the step and its
timing are ``training``'s.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from preflight.checks import usercode
from preflight.checks.base import Budget, UserCodeError
from preflight.host import gpu
from preflight.measurement import Measurement, unmeasurable
from preflight.training import build
from preflight.training.step import Window
from preflight.training.timed import describe, failing_step, new_step, timed, unsupported, user_step

UNITS = {"samples_per_s": "samples/s", "step_time_p50": "ms", "step_time_p99": "ms"}


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Every metric on every visible CUDA device, else on the CPU (each row's note says so); none when torch
    counts GPUs it cannot open (``TorchView.unopened``)."""
    view = gpu.TorchCuda().view()
    if view.unopened:  # GPUs the job's torch counts but cannot open: a CPU figure would stand in for them
        return unmeasurable_rows(view.reason, None)
    devices = [f"cuda:{d.index}" for d in view.devices] or ["cpu"]
    note = "" if view.devices else f"measured on the CPU: {view.reason}"
    results: list[Measurement] = []
    with usercode.on_path(options["python_path"]):
        for device in devices:
            results += [dataclasses.replace(m, note=note) if note and m.measured else m
                        for m in _device(options, budget, device)]
    return results


def _device(options: Mapping[str, Any], budget: Budget, device: str) -> list[Measurement]:
    reason = unsupported(options, device)
    if reason:
        return unmeasurable_rows(reason, device)
    try:
        model = build.build(options)
    except build.Unavailable as error:
        return unmeasurable_rows(str(error), device)
    except UserCodeError as error:
        raise usercode.UserCodeRaised(f"model.{error.option}: {error}") from None
    with user_step(options, device):
        with failing_step(options, device) as failed:
            step = new_step(model, options, device)
            windows, stopped = timed(step, device, budget)
        if failed:
            return unmeasurable_rows(failed[0], device)
    return step_rows(windows, stopped, device, describe(options, device))


def step_rows(windows: Sequence[Window], stopped: str, device: str, method: str,
              names: tuple[str, str, str] = ("samples_per_s", "step_time_p50", "step_time_p99")) -> list[Measurement]:
    """samples/s (median of windows) and the step time p50 and p99 over every timed step, under ``names``.

    The percentiles' samples are the windows' own percentiles, so the report shows their spread.
    """
    steps = [s for w in windows for s in w.step_ms]
    rate, p50, p99 = names
    return [
        Measurement(rate, samples=tuple(w.samples_per_s for w in windows), unit="samples/s", device=device,
                    method=method, stopped=stopped),
        Measurement(p50, percentile(steps, 50), "ms", device=device, method=f"{method}, {len(steps)} steps",
                    samples=tuple(percentile(list(w.step_ms), 50) for w in windows), stopped=stopped),
        Measurement(p99, percentile(steps, 99), "ms", device=device, method=f"{method}, {len(steps)} steps",
                    samples=tuple(percentile(list(w.step_ms), 99) for w in windows), stopped=stopped),
    ]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolated linearly between ranks (numpy.percentile's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def unmeasurable_rows(reason: str, device: str | None,
                      names: Sequence[str] = ("samples_per_s", "step_time_p50", "step_time_p99")) -> list[Measurement]:
    """Each metric of ``names`` unmeasurable on ``device`` for ``reason``."""
    return [unmeasurable(name, reason, UNITS.get(name, "samples/s"), device) for name in names]


