"""Host<->device copy bandwidth per GPU: H2D and D2H, pinned and pageable memory.

Method: nvbandwidth's (NVIDIA/nvbandwidth, "host_to_device_memcpy_ce"): back-to-back
copies of ``size`` bytes on a dedicated stream timed with CUDA events, warm-up first,
median of repeats. 1 GB/s = 10^9 bytes/s, as nvbandwidth and the PCIe figures use.
RLIMIT_MEMLOCK is reported, since pinned buffers beyond it fail.
"""

from __future__ import annotations

from typing import Any, Mapping

from preflight import gpu
from preflight.checks.base import Budget, Metric, Option
from preflight.measurement import Measurement, unmeasurable
from preflight.sampling import sample
from preflight.units import Dimension, format_value, to_unit

NAME = "transfer"
HELP = "pinned and pageable H2D/D2H copy bandwidth per GPU (CUDA events, nvbandwidth method)"
OPTIONS = (Option("size", Dimension.SIZE, "256 MiB", "bytes per copy", minimum=1 << 20),)
METRICS = tuple(
    Metric(f"{direction}_{memory}", "GB/s", True,
           f"{'host-to-device' if direction == 'h2d' else 'device-to-host'} copy bandwidth from "
           f"{memory} host memory, CUDA events on a dedicated stream (nvbandwidth method)", per_device=True)
    for direction in ("h2d", "d2h") for memory in ("pinned", "pageable")
)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure every transfer metric on every visible CUDA device."""
    view = gpu.torch_view()
    if not view.devices:
        return [unmeasurable(metric.name, view.reason, metric.unit) for metric in METRICS]
    size = int(options["size"])  # gpu-only from here
    results = []
    for device in view.devices:
        for metric in METRICS:
            direction, memory = metric.name.split("_")
            results.append(_measure_one(device.index, direction, memory == "pinned", size, budget, metric.name))
    return results


def _measure_one(index: int, direction: str, pinned: bool, size: int, budget: Budget,
                 metric: str) -> Measurement:  # gpu-only
    where = f"cuda:{index}"
    try:
        samples = sample(gpu.copy_timer(index, direction, pinned, size), budget.duration_s / len(METRICS))
    except RuntimeError as error:
        return unmeasurable(metric, f"{error}", "GB/s", device=where)
    method = (f"{format_value(to_unit(size, 'MiB'), 'MiB')} copies, CUDA events, "
              f"RLIMIT_MEMLOCK {gpu.memlock_limit()}")
    return Measurement(metric, samples=samples.values, unit="GB/s", device=where, method=method,
                       stopped=samples.stopped)
