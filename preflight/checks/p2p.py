"""Peer-to-peer copy bandwidth between every ordered pair of GPUs (optional; needs 2+ GPUs).

Method: nvbandwidth's device_to_device_memcpy_write_ce: back-to-back copies of ``size``
bytes from one GPU to another on a dedicated stream of the source GPU, timed with CUDA
events, warm-up first, median of repeats; 1 GB/s = 10^9 B/s. It is a *write*: torch runs
a cross-device copy on the source GPU's stream, so the source pushes into the peer (ATen
copy_device_to_device); nvbandwidth's read test, where the destination pulls, has no torch
equivalent, and over PCIe the two can differ. Pair ``cuda:0->cuda:1`` is cuda:0 writing into
cuda:1. Peer access comes from ``torch.cuda.can_device_access_peer``
(cudaDeviceCanAccessPeer); without it copies are staged through host memory and run far
below NVLink or PCIe P2P rates.
"""

from __future__ import annotations

from typing import Any, Mapping

from preflight.host import gpu, gpu_memory
from preflight.checks.base import Budget, Metric, Option
from preflight.measurement import Measurement, not_applicable, unmeasurable
from preflight.sampling import sample
from preflight.units import Dimension, format_value, to_unit

NAME = "p2p"
HELP = "GPU-to-GPU copy bandwidth and peer access for every pair of GPUs (nvbandwidth method)"
DURATION = "split equally between the ordered pairs of GPUs"
OPTIONS = (Option("size", Dimension.SIZE, "256 MiB", "bytes per copy", minimum=1 << 20),)
METRICS = (
    Metric("p2p_access", "", True, "1 when the source GPU can access the target's memory directly "
           "(cudaDeviceCanAccessPeer)", per_device=True,
           hint="peer access is off: check nvidia-smi topo -m, ACS/IOMMU settings and the container's IPC"),
    Metric("p2p_bandwidth", "GB/s", True, "device-to-device copy bandwidth, the source GPU writing into the "
           "target, CUDA events, median (nvbandwidth device_to_device_memcpy_write_ce)", per_device=True,
           hint="compare with nvidia-smi topo -m: NVLink pairs should reach far above PCIe"),
)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure both metrics for every ordered pair of visible GPUs."""
    return measurements(options, budget, gpu.TorchCuda())


def measurements(options: Mapping[str, Any], budget: Budget, cuda: gpu.TorchCuda) -> list[Measurement]:
    """Measurements through the torch seam; pairs are named ``cuda:0->cuda:1``."""
    view = cuda.view()
    if not view.devices:
        return [unmeasurable(metric.name, view.reason, metric.unit) for metric in METRICS]
    if len(view.devices) == 1:
        return [not_applicable(metric.name, "one GPU: there is no pair to measure", metric.unit) for metric in METRICS]
    size = int(options["size"])
    pairs = [(a.index, b.index) for a in view.devices for b in view.devices if a.index != b.index]
    results = []
    for source, target in pairs:
        where = f"cuda:{source}->cuda:{target}"
        access = cuda.can_access_peer(source, target)
        results.append(Measurement("p2p_access", 1.0 if access else 0.0, "", device=where,
                                   method="cudaDeviceCanAccessPeer"))
        try:
            samples = sample(cuda.peer_timer(source, target, size), budget.duration_s / len(pairs))
        except gpu_memory.DeviceMemoryError as error:
            results.append(unmeasurable("p2p_bandwidth", f"no room for two {format_value(to_unit(size, 'MiB'), 'MiB')} "
                                        f"buffers ({str(error).strip()[:200]}): another process holds GPU memory "
                                        f"(see nvidia-smi), or lower p2p.size", "GB/s", where))
            continue
        except RuntimeError as error:
            results.append(unmeasurable("p2p_bandwidth", f"copy failed: {str(error).strip()[:200]}", "GB/s", where))
            continue
        method = (f"{format_value(to_unit(size, 'MiB'), 'MiB')} copies written by cuda:{source} on its own stream "
                  f"(memcpy_write_ce), CUDA events{'' if access else ', staged through host (no peer access)'}")
        results.append(Measurement("p2p_bandwidth", samples=samples.values, unit="GB/s", device=where,
                                   method=method, stopped=samples.stopped))
    return results
