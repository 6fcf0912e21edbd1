"""Fakes for the two halves of the GPU seam: ``FakeNvml`` (pynvml) and ``FakeCuda`` (torch.cuda).

``FakeNvml`` has pynvml's function names and raises pynvml's own ``NVMLError`` classes, built
from real NVML error codes; its constants are copied from the installed pynvml, so a name
the real module lacks fails here too. Every call is recorded, so tests can bind each one to
the real function's signature, and tests/host/test_nvml.py checks every answer against what the
real pynvml returns over ``tests.fakes.libnvml`` (the same GPUs behind the C interface), so
the fake cannot drift from the library. Default values are those of a healthy H200 on PCIe
Gen5 x16.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pynvml

from preflight.host import gpu

_CONSTANTS = (
    "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_NO_PERMISSION", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC", "NVML_AGGREGATE_ECC", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",
    "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", "NVML_TEMPERATURE_GPU",
    "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
)

H200_BUS = "0000:3b:00.0"


@dataclass
class FakeGpu:
    """One GPU as NVML reports it; ``errors`` maps a pynvml function name to an NVML error code
    (``nvmlDeviceGetHandleByIndex`` too: the handle of a GPU this process may not open, or a lost one)."""

    bus_id: str = "00000000:3B:00.0"
    mig: tuple[int, int] = (0, 0)
    persistence: int = 1
    ecc: tuple[int, int] = (1, 1)
    ecc_volatile: int = 0
    ecc_aggregate: int = 0
    retired: dict[int, list[int]] = field(default_factory=dict)
    retired_pending: int = 0
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)  # corrected, uncorrected, pending, failed
    link: tuple[int, int] = (5, 16)  # current generation, width
    link_max: tuple[int, int] = (5, 16)
    throttle: int = 0
    temperature: int = 34
    power_limit_mw: int = 700000
    default_power_limit_mw: int = 700000
    errors: dict[str, int] = field(default_factory=dict)


class FakeNvml:
    """Stands in for the ``pynvml`` module.

    ``init_error``: an NVML code for nvmlInit to fail with. ``missing``: functions the driver lacks
    (an older driver): they raise NVML_ERROR_FUNCTION_NOT_FOUND, as pynvml does when the symbol is
    not in libnvidia-ml.so.
    """

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded

    def __init__(self, gpus: list[FakeGpu] | None = None, init_error: int | None = None,
                 driver: str | bytes = "550.54.15", cuda: int = 12040, system_error: int | None = None,
                 missing: frozenset[str] = frozenset()) -> None:
        for name in _CONSTANTS:
            setattr(self, name, getattr(pynvml, name))
        self.gpus = [FakeGpu()] if gpus is None else gpus
        self.init_error, self.system_error = init_error, system_error
        self.driver, self.cuda, self.missing = driver, cuda, missing
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.open = 0

    def _call(self, name: str, args: tuple[Any, ...], answer: Callable[[], Any]) -> Any:
        self.calls.append((name, args))
        if name in self.missing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        handle = args[0] if args and isinstance(args[0], FakeGpu) else None
        if handle is not None and name in handle.errors:
            raise pynvml.NVMLError(handle.errors[name])
        return answer()

    def nvmlInit(self) -> None:
        self.calls.append(("nvmlInit", ()))
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.open += 1

    def nvmlShutdown(self) -> None:
        self.calls.append(("nvmlShutdown", ()))
        self.open -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        if self.system_error is not None:
            raise pynvml.NVMLError(self.system_error)
        return self._call("nvmlSystemGetDriverVersion", (), lambda: self.driver)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._call("nvmlSystemGetCudaDriverVersion", (), lambda: self.cuda)

    def nvmlDeviceGetCount(self) -> int:
        return self._call("nvmlDeviceGetCount", (), lambda: len(self.gpus))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self.calls.append(("nvmlDeviceGetHandleByIndex", (index,)))
        code = self.gpus[index].errors.get("nvmlDeviceGetHandleByIndex")  # NO_PERMISSION: a GPU of another job
        if code is not None:
            raise pynvml.NVMLError(code)
        return self.gpus[index]

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> pynvml.nvmlPciInfo_t:
        return self._call("nvmlDeviceGetPciInfo", (handle,), lambda: pci_info(handle.bus_id))

    def nvmlDeviceGetMigMode(self, device: FakeGpu) -> list[int]:
        return self._call("nvmlDeviceGetMigMode", (device,), lambda: list(device.mig))

    def nvmlDeviceGetPersistenceMode(self, handle: FakeGpu) -> int:
        return self._call("nvmlDeviceGetPersistenceMode", (handle,), lambda: handle.persistence)

    def nvmlDeviceGetEccMode(self, handle: FakeGpu) -> list[int]:
        return self._call("nvmlDeviceGetEccMode", (handle,), lambda: list(handle.ecc))

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, errorType: int, counterType: int) -> int:
        assert errorType == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        volatile = counterType == pynvml.NVML_VOLATILE_ECC
        return self._call("nvmlDeviceGetTotalEccErrors", (handle, errorType, counterType),
                          lambda: handle.ecc_volatile if volatile else handle.ecc_aggregate)

    def nvmlDeviceGetRetiredPages(self, device: FakeGpu, sourceFilter: int) -> list[int]:
        return self._call("nvmlDeviceGetRetiredPages", (device, sourceFilter),
                          lambda: list(device.retired.get(sourceFilter, [])))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: FakeGpu) -> int:
        return self._call("nvmlDeviceGetRetiredPagesPendingStatus", (device,), lambda: device.retired_pending)

    def nvmlDeviceGetRemappedRows(self, device: FakeGpu) -> tuple[int, int, int, int]:
        return self._call("nvmlDeviceGetRemappedRows", (device,), lambda: device.remapped)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeGpu) -> int:
        return self._call("nvmlDeviceGetCurrPcieLinkGeneration", (handle,), lambda: handle.link[0])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeGpu) -> int:
        return self._call("nvmlDeviceGetMaxPcieLinkGeneration", (handle,), lambda: handle.link_max[0])

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeGpu) -> int:
        return self._call("nvmlDeviceGetCurrPcieLinkWidth", (handle,), lambda: handle.link[1])

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeGpu) -> int:
        return self._call("nvmlDeviceGetMaxPcieLinkWidth", (handle,), lambda: handle.link_max[1])

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        return self._call("nvmlDeviceGetCurrentClocksEventReasons", (handle,), lambda: handle.throttle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeGpu) -> int:
        return self._call("nvmlDeviceGetCurrentClocksThrottleReasons", (handle,), lambda: handle.throttle)

    def nvmlDeviceGetTemperatureV(self, handle: FakeGpu, sensor: int, version: int = pynvml.nvmlTemperature_v1) -> int:
        if version != pynvml.nvmlTemperature_v1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return self._call("nvmlDeviceGetTemperatureV", (handle, sensor), lambda: handle.temperature)

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        return self._call("nvmlDeviceGetTemperature", (handle, sensor), lambda: handle.temperature)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGpu) -> int:
        return self._call("nvmlDeviceGetEnforcedPowerLimit", (handle,), lambda: handle.power_limit_mw)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: FakeGpu) -> int:
        return self._call("nvmlDeviceGetPowerManagementDefaultLimit", (handle,),
                          lambda: handle.default_power_limit_mw)


def pci_info(bus_id: str) -> pynvml.nvmlPciInfo_t:
    """The structure nvmlDeviceGetPciInfo returns, filled as the driver fills it (``00000000:3B:00.0``).

    pynvml's structures encode text on assignment and decode it on access: ``busId`` reads as str.
    """
    info = pynvml.nvmlPciInfo_t()
    domain, bus, rest = bus_id.split(":")
    info.busId = info.busIdLegacy = bus_id
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    return info


def h200(index: int = 0, bus: str = H200_BUS) -> gpu.Device:
    return gpu.Device(index, "NVIDIA H200", "9.0", 150_110_011_392, bus)


@dataclass
class FakeCuda:
    """Stands in for ``gpu.TorchCuda``; a value that is an Exception is raised instead of returned."""

    devices: tuple[gpu.Device, ...] = (h200(),)
    cuda_runtime: str | None = "12.4"
    hip_runtime: str | None = None
    reason: str = ""
    matmul: float | Exception = 2.4e-7
    allocation: tuple[int, int] | Exception = (128_849_018_880, 143_165_576_396)
    pin_error: Exception | None = None
    # GB/s per (direction, pinned), as nvbandwidth measures on an H200 in a Gen5 x16 slot
    rates: dict[tuple[str, bool], float | Exception] = field(default_factory=lambda: {
        ("h2d", True): 55.1, ("h2d", False): 19.8, ("d2h", True): 55.6, ("d2h", False): 17.2})
    peer_rate: float | Exception = 372.5
    peer_access: bool = True
    bf16: bool = True  # bf16 in hardware (compute capability 8.0+)
    # What the seam was asked, in order (("pin", size), ("copy", direction, pinned), ("release",)), and
    # the pinned bytes torch's caching host allocator would hold: pinned copy buffers stay cached
    # after use until release_pinned; pin() releases its own block before returning.
    events: list[tuple[Any, ...]] = field(default_factory=list)
    pinned_held: int = 0

    def view(self) -> gpu.TorchView:
        return gpu.TorchView("2.5.1", self.cuda_runtime, self.hip_runtime, self.devices, self.reason)

    def matmul_error(self, index: int, size: int) -> float:
        return _answer(self.matmul)

    def bf16_native(self, index: int) -> bool:
        return self.bf16

    def allocate_share(self, index: int, share: float) -> tuple[int, int]:
        used, free = _answer(self.allocation)
        return int(free * share), free

    def pin(self, size: int) -> int:
        self.events.append(("pin", size))
        if self.pin_error is not None:
            raise self.pin_error
        return power_of_two(size)

    def release_pinned(self) -> int | None:
        self.events.append(("release",))
        self.pinned_held = 0
        return 0

    def copy_timer(self, index: int, direction: str, pinned: bool, size: int) -> Callable[[], float]:
        self.events.append(("copy", direction, pinned))
        rate = _answer(self.rates[(direction, pinned)])
        self.pinned_held += power_of_two(size) if pinned else 0
        return lambda: rate

    def can_access_peer(self, source: int, target: int) -> bool:
        return self.peer_access

    def peer_timer(self, source: int, target: int, size: int) -> Callable[[], float]:
        rate = _answer(self.peer_rate)
        return lambda: rate


def power_of_two(size: int) -> int:
    """The block torch's caching host allocator pins for ``size`` bytes (ATen CachingHostAllocator roundSize)."""
    block = 1
    while block < size:
        block *= 2
    return block


class FakeHostAllocator:
    """torch's caching host allocator as its statistics show it, behind the real torch names.

    As in ATen's CachingHostAllocator: a request is rounded up to a power of two and served from
    a cached free block of that size or pinned anew; a freed block stays cached, and pinned,
    until the cache is emptied. ``install`` puts it behind ``torch.cuda.host_memory_stats``,
    ``torch.accelerator.empty_host_cache``, ``torch.cuda.synchronize`` and
    ``torch.cuda.device_count`` (monkeypatch refuses a name the installed torch lacks) and
    behind ``gpu._pinned``, the one line that needs a GPU.
    """

    def __init__(self, cached: tuple[int, ...] = ()) -> None:
        self.cached = list(cached)
        self.active = 0
        self.allocated = sum(cached)
        self.calls: list[str] = []

    def install(self, monkeypatch: Any) -> None:
        import torch

        monkeypatch.setattr(torch.cuda, "host_memory_stats", self.stats)
        monkeypatch.setattr(torch.accelerator, "empty_host_cache", self.empty_cache)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self.calls.append(f"synchronize {device}"))
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        monkeypatch.setattr(gpu, "_pinned", self.allocate)

    def stats(self) -> dict[str, int]:
        return {"active_bytes.current": self.active, "allocated_bytes.current": self.allocated}

    def allocate(self, size: int) -> Any:
        block = power_of_two(size)
        if block in self.cached:
            self.cached.remove(block)
        else:
            self.allocated += block
        self.active += block
        allocator = self

        class Block:
            def __del__(self) -> None:
                allocator.active -= block
                allocator.cached.append(block)

        return Block()

    def empty_cache(self) -> None:
        self.calls.append("empty_cache")
        self.allocated -= sum(self.cached)
        self.cached.clear()


def _answer(value: Any) -> Any:
    if isinstance(value, Exception):
        raise value
    return value
