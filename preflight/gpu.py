"""The seam between checks and the GPU: every torch.cuda and NVML call lives here.

``cuda`` and ``transfer`` turn the plain records below into measurements with pure
functions, which CPU tests drive with fake records. The functions marked ``gpu-only``
need a CUDA device and are exercised by ``scripts/gpu-smoke.sh``, not by the CPU tests.
"""

from __future__ import annotations

import resource
from typing import Callable, NamedTuple


class Device(NamedTuple):
    index: int
    name: str
    compute_capability: str  # "9.0"
    memory_total_bytes: int


class TorchView(NamedTuple):
    """What the job's own torch sees."""

    torch_version: str
    cuda_runtime: str | None  # torch.version.cuda, None on CPU and ROCm builds
    hip_runtime: str | None  # torch.version.hip on ROCm builds
    devices: tuple[Device, ...]
    reason: str  # why there is no device, "" when there is one


class NvmlView(NamedTuple):
    """What the driver reports through NVML."""

    driver_version: str | None  # "550.54.15"
    cuda_driver_version: str | None  # highest CUDA the driver supports, "12.4"
    reason: str  # why NVML could not answer, "" when it did


def torch_view() -> TorchView:
    """Ask torch for its build and devices; never raises for a missing GPU."""
    import torch

    version = torch.__version__
    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    if not torch.cuda.is_available():
        if cuda is None and hip is None:
            reason = f"no CUDA device: torch {version} is a CPU build"
        else:
            reason = f"no CUDA device: torch {version} (CUDA {cuda or hip}) found none (driver, container runtime, CUDA_VISIBLE_DEVICES?)"
        return TorchView(version, cuda, hip, (), reason)
    devices = tuple(_device(index) for index in range(torch.cuda.device_count()))  # gpu-only
    return TorchView(version, cuda, hip, devices, "")


def _device(index: int) -> Device:  # gpu-only
    import torch

    props = torch.cuda.get_device_properties(index)
    return Device(index, props.name, f"{props.major}.{props.minor}", int(props.total_memory))


def nvml_view() -> NvmlView:
    """Ask NVML for the driver version and the highest CUDA version it supports."""
    try:
        import pynvml
    except ImportError:
        return NvmlView(None, None, "nvidia-ml-py is not installed: pip install nvidia-ml-py")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return NvmlView(None, None, "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver on this machine")
    except pynvml.NVMLError_DriverNotLoaded:
        return NvmlView(None, None, "NVIDIA driver not loaded: is the kernel module installed and the GPU passed in?")
    except pynvml.NVMLError as error:
        return NvmlView(None, None, f"NVML failed to initialise: {error}")
    try:  # gpu-only from here: a driver is present
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        return NvmlView(driver, f"{cuda // 1000}.{cuda % 1000 // 10}", "")
    except pynvml.NVMLError as error:
        return NvmlView(None, None, f"NVML query failed: {error}")
    finally:
        pynvml.nvmlShutdown()


def memlock_limit() -> str:
    """RLIMIT_MEMLOCK (soft) for reports: pinned allocations beyond it fail or fall back."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft / 2**20:g} MiB"


def copy_timer(index: int, direction: str, pinned: bool, size: int) -> Callable[[], float]:  # gpu-only
    """A function that times one batch of copies and returns GB/s (10^9 bytes/s).

    nvbandwidth's method: ``copies`` back-to-back copies of ``size`` bytes on a dedicated
    stream, bracketed by CUDA events, so the host clock and launch gaps stay out of it.

    Raises:
        RuntimeError: the pinned buffer could not be page-locked (RLIMIT_MEMLOCK, host RAM).
    """
    import torch

    device = torch.device("cuda", index)
    device_buffer = torch.empty(size, dtype=torch.uint8, device=device)
    host_buffer = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
    if pinned and not host_buffer.is_pinned():
        raise RuntimeError(f"host buffer of {size} bytes is not pinned (RLIMIT_MEMLOCK {memlock_limit()})")
    source, target = (host_buffer, device_buffer) if direction == "h2d" else (device_buffer, host_buffer)
    stream = torch.cuda.Stream(device=device)
    copies = 4

    def once() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record(stream)
            for _ in range(copies):
                target.copy_(source, non_blocking=pinned)
            end.record(stream)
        end.synchronize()
        return size * copies / (start.elapsed_time(end) / 1e3) / 1e9

    return once
