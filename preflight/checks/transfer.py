"""Host<->device copy bandwidth per GPU, judged also against the PCIe link NVML reports.

Method: nvbandwidth's (NVIDIA/nvbandwidth, host_to_device_memcpy_ce and
device_to_host_memcpy_ce): back-to-back copies of ``size`` bytes on a dedicated stream
timed with CUDA events, warm-up first, median of repeats; 1 GB/s = 10^9 B/s. The link's
theoretical rate per direction is lanes x the PCI-SIG per-lane rate after line coding;
nvbandwidth measures about 80-90% of it for pinned H2D on a healthy link, less on a
downtrained link or from the far NUMA node. The GPU's NUMA node comes from sysfs, the
process's from its CPU affinity. A pinned buffer of the trainer's size is allocated on
its own, so a host memory limit is reported as one, not as a slow or broken GPU; a failed
allocation is told apart by which memory it asked for (``preflight.host.gpu_memory``). Every host
buffer is written before it is timed (``gpu.host_buffer``), and the pinned memory torch's
caching host allocator holds is handed back to the driver when the check ends, so a worker
reused for later checks does not keep it locked.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from preflight.host import gpu, gpu_memory, hostmem, nvml
from preflight.checks.base import Budget, Metric, Option
from preflight.measurement import Measurement, not_applicable, unmeasurable
from preflight.sampling import sample
from preflight.units import Dimension, format_value, to_unit, with_article

NAME = "transfer"
HELP = "pinned and pageable H2D/D2H bandwidth per GPU (nvbandwidth method), vs the PCIe link, NUMA placement"
DURATION = "split equally between the copy metrics (h2d/d2h, pinned/pageable) on each GPU: duration per GPU"
OPTIONS = (
    Option("size", Dimension.SIZE, "256 MiB", "bytes per copy", minimum=1 << 20),
    Option("pinned_size", Dimension.SIZE, "1 GiB", "pinned host memory the trainer will use (pin_memory buffers)",
           minimum=1 << 20),
)
COPY_METRICS = tuple(
    Metric(f"{direction}_{memory}", "GB/s", True,
           f"{'host-to-device' if direction == 'h2d' else 'device-to-host'} copy bandwidth from {memory} host "
           f"memory, CUDA events on a dedicated stream, median (nvbandwidth method)", per_device=True,
           hint="compare with h2d_link_efficiency and numa_local: a slow link or the far NUMA node")
    for direction in ("h2d", "d2h") for memory in ("pinned", "pageable")
)
METRICS = (
    *COPY_METRICS,
    Metric("pinned_speedup", "", True, "h2d_pinned / h2d_pageable, a ratio of two bandwidths (no unit): what "
           "pin_memory=True buys", per_device=True, ratio=True),
    Metric("link_rate", "GB/s", True, "theoretical per-direction rate of the widest, fastest link NVML reports "
           "(PCI-SIG rate per lane after 8b/10b or 128b/130b coding x lanes)", per_device=True, rated=True),
    Metric("h2d_link_efficiency", "%", True, "h2d_pinned as a share of link_rate; healthy links measure 80-90%",
           per_device=True, hint="the link is downtrained or the GPU sits on the far NUMA node: compare "
           "pcie_link_gen/width with their max and run the job on the GPU's NUMA node (numactl)"),
    Metric("numa_node", "", None, "the GPU's NUMA node (sysfs numa_node; -1: none)", per_device=True),
    Metric("numa_local", "", True, "yes (1) when every CPU this process may use is on the GPU's NUMA node, else "
           "no (0)", per_device=True, flag=True,
           hint="bind the job to the GPU's NUMA node (numactl --cpunodebind, or the kubelet's topology manager)"),
    Metric("pinned_alloc", "GiB", True, "pinned host memory torch really pinned for a pinned_size request: its "
           "caching host allocator rounds up to a power of two (torch.cuda.host_memory_stats); 0 when it failed",
           hint="pinned memory is host RAM: raise the container memory limit and memlock ulimit, or lower it", by_user=True),
)
# GB/s per lane per direction: transfer rate x line-coding efficiency / 8 (PCI-SIG base specs 1.0-6.0).
LANE_GBPS = {1: 2.5 * 8 / 10 / 8, 2: 5 * 8 / 10 / 8, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8,
             5: 32 * 128 / 130 / 8, 6: 64 * 242 / 256 / 8}


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure every transfer metric on every visible GPU."""
    return measurements(options, budget, gpu.TorchCuda(), nvml.library())


def measurements(options: Mapping[str, Any], budget: Budget, cuda: gpu.TorchCuda, lib: Any,
                 root: str = "/", environ: Mapping[str, str] | None = None) -> list[Measurement]:
    """Measurements through the seam (``cuda``: torch, ``lib``: pynvml or a fake, ``root``: sysfs, ``environ``:
    where CUDA's numbering is read when torch gives no PCI id or UUID to match NVML's GPUs by)."""
    view = cuda.view()
    if not view.devices:
        return [unmeasurable(metric.name, view.reason, metric.unit) for metric in METRICS]
    rocm = view.hip_runtime is not None
    session = nvml.Session(None, f"ROCm build (HIP {view.hip_runtime}): the link rate needs NVML") if rocm \
        else nvml.open_session(lib)
    try:
        devices = nvml.handles_by_bus(session)
        located = nvml.locate(devices, view.devices, os.environ if environ is None else environ)
        pinned_size = int(options["pinned_size"])
        pinned = _pin(cuda, pinned_size)
        results: list[Measurement] = []
        try:
            for device, found in zip(view.devices, located):
                results += _device(cuda, device, int(options["size"]), budget, (session.lib, found, rocm), root)
        finally:
            released = _release(cuda)
        return [_pinned_alloc(pinned_size, pinned, released, root), *results]
    finally:
        nvml.close(session)


def _device(cuda: gpu.TorchCuda, device: gpu.Device, size: int, budget: Budget, link: tuple[Any, ...],
            root: str) -> list[Measurement]:
    where = f"cuda:{device.index}"
    per_metric_s = budget.duration_s / len(COPY_METRICS)
    copies = {m.name: _copy(cuda, device.index, m.name, size, per_metric_s, where, root) for m in COPY_METRICS}
    results = list(copies.values())
    pinned, pageable = copies["h2d_pinned"].value, copies["h2d_pageable"].value
    if isinstance(pinned, float) and isinstance(pageable, float) and pageable > 0:
        results.append(Measurement("pinned_speedup", pinned / pageable, "", device=where, method="h2d medians"))
    else:
        results.append(unmeasurable("pinned_speedup", "needs both h2d_pinned and h2d_pageable", "", where))
    results += _link(pinned, link, where)
    return results + _numa(device.bus_id or link[1].bus_id, where, root)


def _copy(cuda: gpu.TorchCuda, index: int, metric: str, size: int, budget_s: float, where: str,
          root: str) -> Measurement:
    direction, memory = metric.split("_")
    try:
        samples = sample(cuda.copy_timer(index, direction, memory == "pinned", size), budget_s)
    except gpu_memory.PinError as error:
        return unmeasurable(metric, hostmem.pinned_failure(gpu_memory.pinned_block(size), _first_line(error), root,
                                                           requested=size), "GB/s", where)
    except gpu_memory.HostMemoryError as error:
        return unmeasurable(metric, hostmem.host_failure(size, _first_line(error), root), "GB/s", where)
    except gpu_memory.DeviceMemoryError as error:
        return unmeasurable(metric, f"{where} has no room for {with_article(format_value(to_unit(size, 'MiB'), 'MiB'))} copy "
                                    f"buffer ({_first_line(error)}): another process holds its memory (see "
                                    f"nvidia-smi), or lower transfer.size", "GB/s", where)
    except RuntimeError as error:  # gpu_memory.DeviceFault and anything else CUDA raised mid-copy
        return unmeasurable(metric, f"the {metric} copy failed on {where} ({_first_line(error)}): a GPU fault, not a "
                                    f"host limit; check dmesg for Xid errors", "GB/s", where)
    method = f"{format_value(to_unit(size, 'MiB'), 'MiB')} copies, CUDA events, dedicated stream"
    return Measurement(metric, samples=samples.values, unit="GB/s", device=where, method=method,
                       stopped=samples.stopped)


def _link(pinned: Any, link: tuple[Any, ...], where: str) -> list[Measurement]:
    lib, found, rocm = link
    if rocm:
        return [not_applicable(name, found.reason, unit, where) for name, unit in (("link_rate", "GB/s"),
                                                                                   ("h2d_link_efficiency", "%"))]
    handle = found.handle
    if handle is None:
        return _no_link(found.reason, where)
    try:
        generation, width = nvml.max_link(lib, handle)
        now_generation, now_width = nvml.current_link(lib, handle)  # read right after the copies, under load
    except lib.NVMLError as error:  # NOT_SUPPORTED (vGPU, cloud guests) is a skip, as in the cuda check
        return [nvml.unanswered(lib, error, "link_rate", "GB/s", where),
                nvml.unanswered(lib, error, "h2d_link_efficiency", "%", where)]
    if generation not in LANE_GBPS:
        return _no_link(f"NVML reports PCIe generation {generation}, which preflight has no rate for", where)
    rate = LANE_GBPS[generation] * width
    method = (f"max Gen{generation} x{width}; Gen{now_generation} x{now_width} after the copies; NVML GPU matched by "
              f"{found.key}")
    results = [Measurement("link_rate", rate, "GB/s", device=where, method=method)]
    if isinstance(pinned, float):
        results.append(Measurement("h2d_link_efficiency", 100 * pinned / rate, "%", device=where, method=method))
    else:
        results.append(unmeasurable("h2d_link_efficiency", "h2d_pinned was not measured", "%", where))
    return results


def _no_link(reason: str, where: str) -> list[Measurement]:
    return [unmeasurable("link_rate", reason, "GB/s", where), unmeasurable("h2d_link_efficiency", reason, "%", where)]


def _numa(bus_id: str, where: str, root: str) -> list[Measurement]:
    """The GPU's NUMA node from sysfs at ``bus_id`` (torch's, else the NVML GPU matched to it; "" when neither)."""
    node = hostmem.numa_node_of_pci(bus_id, root) if bus_id else None
    process = hostmem.process_numa_nodes(root=root)
    if node is None:
        reason = f"sysfs has no NUMA node for PCI {bus_id or '(unknown)'}"
        return [unmeasurable("numa_node", reason, "", where), unmeasurable("numa_local", reason, "", where)]
    nodes = ",".join(map(str, process)) or "unknown"
    method = f"process CPUs on NUMA nodes {nodes}"
    if node < 0:
        return [Measurement("numa_node", float(node), "", device=where, method=method),
                not_applicable("numa_local", "the platform reports no NUMA placement for this GPU", "", where)]
    local = 1.0 if process == (node,) else 0.0
    reason = "" if local else f"the process may run on NUMA nodes {nodes}, the GPU is on node {node}"
    return [Measurement("numa_node", float(node), "", device=where, method=method),
            Measurement("numa_local", local, "", device=where, method=method, reason=reason)]


def _pin(cuda: gpu.TorchCuda, size: int) -> int | RuntimeError:
    """The bytes pinned for a ``size`` request, or the error that stopped it."""
    try:
        return cuda.pin(size)
    except RuntimeError as error:
        return error


def _release(cuda: gpu.TorchCuda) -> str:
    """Return the cached pinned blocks to the driver; say how that went, for the report."""
    try:
        held = cuda.release_pinned()
    except RuntimeError as error:
        return f"not released ({_first_line(error)})"
    if held:
        return f"released after the check; torch's host allocator still holds {format_value(to_unit(held, 'MiB'), 'MiB')}"
    return "released after the check"


def _pinned_alloc(size: int, pinned: int | RuntimeError, released: str, root: str) -> Measurement:
    method = f"torch.empty(pin_memory=True) of {format_value(to_unit(size, 'GiB'), 'GiB')}, {released}"
    if isinstance(pinned, gpu_memory.PinError):
        reason = hostmem.pinned_failure(gpu_memory.pinned_block(size), _first_line(pinned), root, requested=size)
        return Measurement("pinned_alloc", 0.0, "GiB", reason=reason, method=method)
    if isinstance(pinned, RuntimeError):
        return unmeasurable("pinned_alloc", f"pinning failed with a GPU error, not for want of host memory "
                                            f"({_first_line(pinned)}): check dmesg for Xid errors", "GiB")
    rounded = "" if pinned == size else (f"{format_value(to_unit(size, 'GiB'), 'GiB')} requested: torch's caching "
                                         f"host allocator pins whole powers of two")
    return Measurement("pinned_alloc", to_unit(pinned, "GiB"), "GiB", reason=rounded,
                       method=f"{method}, RLIMIT_MEMLOCK {hostmem.memlock_limit()}")


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
