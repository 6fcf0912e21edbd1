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

import contextlib
import uuid
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
H200_UUID = "GPU-5e3f0c1a-9b2d-4c6e-8f71-a2b3c4d5e6f7"


@dataclass
class FakeGpu:
    """One GPU as NVML reports it; ``errors`` maps a pynvml function name to an NVML error code
    (``nvmlDeviceGetHandleByIndex`` too: the handle of a GPU this process may not open, or a lost one)."""

    bus_id: str = "00000000:3B:00.0"
    uuid: str = H200_UUID  # as nvmlDeviceGetUUID and nvidia-smi -L give it
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

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return self._call("nvmlDeviceGetUUID", (handle,), lambda: handle.uuid)

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
    tf32: bool = False  # an override held TF32 on for the smoke matmul
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

    def matmul_error(self, index: int, size: int) -> gpu.SmokeMatmul:
        return gpu.SmokeMatmul(_answer(self.matmul), self.tf32)

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


# torch releases the fakes can present: what training images pin (NGC 23.x-24.0x carry 2.1-2.3), the first
# with a device UUID, and the installed one.
TORCH_RELEASES = ("2.2.2", "2.3.1", "2.4.1", "2.13.0")


class FakeUuid:
    """torch's ``_CUuuid`` (torch 2.4+, pytorch#125083): ``bytes`` are cudaDeviceProp.uuid as pybind11 hands a
    ``std::vector<uint8_t>`` to Python, a list of 16 ints (torch/csrc/cuda/Module.cpp), never ``bytes``; its str
    is 8-4-4-4-12 lower-case hex without NVML's ``GPU-`` prefix (pytorch#132863 made it printable)."""

    def __init__(self, text: str) -> None:
        self.bytes = list(uuid.UUID(text.lower().removeprefix("gpu-")).bytes)

    def __repr__(self) -> str:
        return str(uuid.UUID(bytes=bytes(self.bytes)))

    __str__ = __repr__


class FakeProperties:
    """``torch.cuda.get_device_properties(i)``: only the attributes the release binds, so a missing one is an
    AttributeError as on pybind's ``_CudaDeviceProperties``."""

    def __init__(self, **attributes: Any) -> None:
        self.__dict__.update(attributes)


@dataclass
class CudaGpu:
    """One GPU as CUDA describes it (cudaDeviceProp)."""

    name: str = "NVIDIA H200"
    capability: tuple[int, int] = (9, 0)
    total_memory: int = 150_110_011_392
    bus_id: str = H200_BUS
    uuid: str = H200_UUID


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


class FakeTorch:
    """torch.cuda as torch ``release`` presents ``gpus``, installed under the real torch's names.

    Per release, from torch's own sources: the device properties (torch 2.2 and 2.3 bind name,
    major, minor, total_memory, multi_processor_count, is_integrated, is_multi_gpu_board; 2.4 adds
    ``uuid`` and L2_cache_size; the installed 2.13 also the PCI ids torch.numa reads);
    ``is_bf16_supported`` (2.2: compute capability 8.0+ and CUDA 11+; 2.3 and 2.4: the same, else
    a bf16 tensor is created, which works on 7.x; 2.13: ``including_emulation=True``, the same
    fallback unless False); and ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE`` (in 2.2 and 2.3 ORed into every
    ``allowTF32CuBLAS`` answer, so allow_tf32 reads True after being set False; in 2.13 only the
    starting value, ATen Context.h). ``environ`` is read once, as torch's static read does.
    A tensor moved to ``cuda:i`` multiplies as that GPU would (``device_matmul``): with TF32 on
    (allow_tf32 as this torch answers it) and compute capability 8.0+, inputs are rounded to TF32
    (round to nearest, cvt.rna.tf32.f32) before a float32 product.
    """

    def __init__(self, release: str = "2.13.0", gpus: tuple[CudaGpu, ...] = (CudaGpu(),),
                 environ: dict[str, str] | None = None, cuda: str = "12.1") -> None:
        self.release, self.gpus, self.cuda = release, gpus, cuda
        self.override = (environ or {}).get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1"
        self.sticky = _release(release) <= (2, 3)  # the override ORed into every answer, not a starting value
        self.allow_tf32 = self.override and not self.sticky
        self.current = 0
        self.tensors_made: list[int] = []  # devices the bf16 fallback created a tensor on

    def properties(self, index: int) -> FakeProperties:
        card = self.gpus[index]
        attributes: dict[str, Any] = dict(name=card.name, major=card.capability[0], minor=card.capability[1],
                                          total_memory=card.total_memory, multi_processor_count=132,
                                          is_integrated=0, is_multi_gpu_board=0)
        if _release(self.release) >= (2, 4):
            attributes.update(uuid=FakeUuid(card.uuid), L2_cache_size=50 << 20)
        if _release(self.release) >= (2, 9):
            domain, bus, rest = card.bus_id.split(":")
            attributes.update(pci_domain_id=int(domain, 16), pci_bus_id=int(bus, 16),
                              pci_device_id=int(rest.split(".")[0], 16))
        return FakeProperties(**attributes)

    def is_bf16_supported(self) -> Callable[..., bool]:
        """This release's ``torch.cuda.is_bf16_supported``, with its own signature."""
        def hardware() -> bool:
            return self.properties(self.current).major >= 8 and int(self.cuda.split(".")[0]) >= 11

        def tensor() -> bool:  # _check_bf16_tensor_supported: torch.tensor([1.0], dtype=bfloat16, device=...)
            self.tensors_made.append(self.current)
            return True

        if _release(self.release) < (2, 3):
            return hardware
        if _release(self.release) <= (2, 4):
            return lambda: hardware() or tensor()
        return lambda including_emulation=True: hardware() or (including_emulation and tensor())

    def device_matmul(self, a: Any, b: Any, index: int) -> Any:
        import torch

        if torch.backends.cuda.matmul.allow_tf32 and self.gpus[index].capability >= (8, 0):
            a, b = (tf32_rounded(x) for x in (a, b))
        return a @ b

    def install(self, monkeypatch: Any) -> FakeTorch:
        import torch

        monkeypatch.setattr(gpu, "torch_build", lambda: {"__version__": f"{self.release}+cu121", "cuda": self.cuda,
                                                         "hip": None})
        monkeypatch.setattr(torch, "__version__", f"{self.release}+cu121")
        monkeypatch.setattr(torch.version, "cuda", self.cuda)
        monkeypatch.setattr(torch.version, "hip", None, raising=False)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(self.gpus))
        monkeypatch.setattr(torch.cuda, "get_device_properties", self.properties)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "device", self._device)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", self.is_bf16_supported())
        monkeypatch.setattr(torch._C, "_get_cublas_allow_tf32", lambda: self.allow_tf32 or (self.sticky and
                                                                                             self.override))
        monkeypatch.setattr(torch._C, "_set_cublas_allow_tf32", lambda value: setattr(self, "allow_tf32", bool(value)))
        monkeypatch.setattr(torch.Tensor, "to", self._to(torch.Tensor.to))
        return self

    def _to(self, to: Callable[..., Any]) -> Callable[..., Any]:
        """``Tensor.to`` that moves a tensor to this fake's GPU: a CPU tensor whose ``@`` and ``.cpu()`` run as
        that GPU's (``device_matmul``); any other move is torch's own."""
        import torch

        fake = self

        class OnGpu(torch.Tensor):
            def __matmul__(self, other: Any) -> Any:
                product = fake.device_matmul(self.as_subclass(torch.Tensor), other.as_subclass(torch.Tensor),
                                             fake.current)
                return product.as_subclass(OnGpu)

            def cpu(self) -> Any:
                return self.as_subclass(torch.Tensor)

        def moved(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            target = args[0] if args else kwargs.get("device")
            if isinstance(target, torch.device) and target.type == "cuda":
                fake.current = target.index or 0
                return tensor.clone().as_subclass(OnGpu)
            return to(tensor, *args, **kwargs)

        return moved

    @contextlib.contextmanager
    def _device(self, index: int) -> Any:
        before, self.current = self.current, index
        try:
            yield
        finally:
            self.current = before


def tf32_rounded(tensor: Any) -> Any:
    """A copy of float32 ``tensor`` rounded to TF32's 10 mantissa bits, to nearest, ties away (cvt.rna.tf32.f32)."""
    import torch

    bits = tensor.clone().view(dtype=torch.int32)
    return ((bits + (1 << 12)) & -(1 << 13)).view(dtype=torch.float32)


class TorchOverFakes:
    """The real torch seam run over a ``FakeTorch``: view, smoke matmul and bf16 are ``gpu.TorchCuda``'s own code;
    only the allocation, which needs device memory, answers as a healthy H200's (``FakeCuda.allocation``).
    (Composed, not subclassed: tests/fakes/gpu_site replaces ``gpu.TorchCuda`` before this module is imported.)"""

    def __init__(self) -> None:
        self.torch = gpu.TorchCuda()

    def view(self) -> gpu.TorchView:
        return self.torch.view()

    def matmul_error(self, index: int, size: int) -> gpu.SmokeMatmul:
        return self.torch.matmul_error(index, size)

    def bf16_native(self, index: int) -> bool:
        return self.torch.bf16_native(index)

    def allocate_share(self, index: int, share: float) -> tuple[int, int]:
        free = 143_165_576_396
        return int(free * share), free


def node(release: str, cards: list[tuple[str, str]], monkeypatch: Any, torch_order: list[int] | None = None,
         environ: dict[str, str] | None = None, **nvml_gpu: Any) -> tuple[TorchOverFakes, list[FakeGpu]]:
    """A node whose GPUs are ``cards`` ((PCI bus id, UUID), in NVML's index order) under torch ``release``:
    torch numbers them as ``torch_order`` says (indices into ``cards``; default NVML's order). Returns the
    torch seam and NVML's GPUs; ``nvml_gpu`` maps a bus id to FakeGpu fields for that GPU."""
    order = list(range(len(cards))) if torch_order is None else torch_order
    FakeTorch(release, tuple(CudaGpu(name="NVIDIA A100-SXM4-80GB", capability=(8, 0), bus_id=cards[i][0],
                                     uuid=cards[i][1]) for i in order), environ).install(monkeypatch)
    gpus = [FakeGpu(bus_id=f"0000{bus.upper()}", uuid=uuid, **nvml_gpu.get(bus, {})) for bus, uuid in cards]
    return TorchOverFakes(), gpus
