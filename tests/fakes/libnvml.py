"""libnvidia-ml.so.1 as ctypes sees it, answering for the GPUs of a ``FakeNvml``, under the real pynvml.

``installed(monkeypatch, fake)`` puts a ``FakeLibnvml`` where pynvml keeps its loaded library, so
the real pynvml functions (nvidia-ml-py's own ctypes wrappers, structures and error mapping) run
over it. Each C symbol writes its out-parameters the way the NVML C API documents and returns an
``nvmlReturn_t``; it never builds a Python value, so what a caller receives (str or bytes, list
or tuple, which structure) is decided by the installed nvidia-ml-py alone. A symbol the fake
driver lacks is an AttributeError, which pynvml turns into NVML_ERROR_FUNCTION_NOT_FOUND.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import pynvml

from tests.fakes.gpu import FakeGpu, FakeNvml

# C symbols whose pynvml wrapper has another name (pynvml calls the versioned symbol).
WRAPPER = {"nvmlDeviceGetCount_v2": "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex_v2": "nvmlDeviceGetHandleByIndex",
           "nvmlDeviceGetPciInfo_v3": "nvmlDeviceGetPciInfo"}


def installed(monkeypatch: Any, fake: FakeNvml) -> FakeLibnvml:
    """Load a ``FakeLibnvml`` for ``fake`` into the real pynvml for the rest of the test."""
    library = FakeLibnvml(fake)
    monkeypatch.setattr(pynvml, "nvmlLib", library)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
    return library


def _out(argument: Any) -> Any:
    """The ctypes object behind ``byref(x)``."""
    return argument._obj


def _index(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value - 1


class FakeLibnvml:
    """The C library: one method per NVML symbol pynvml calls for ``preflight.host.nvml.CALLS``."""

    def __init__(self, fake: FakeNvml) -> None:
        self.fake = fake

    def __getattribute__(self, symbol: str) -> Any:
        if symbol.startswith("nvml") and WRAPPER.get(symbol, symbol) in object.__getattribute__(self, "fake").missing:
            raise AttributeError(symbol)  # as ctypes says for a symbol the .so does not export
        return object.__getattribute__(self, symbol)

    def _device(self, symbol: str, handle: Any, write: Callable[[FakeGpu], None]) -> int:
        gpu = self.fake.gpus[_index(handle)]
        code = gpu.errors.get(WRAPPER.get(symbol, symbol))
        if code is not None:
            return code
        write(gpu)
        return pynvml.NVML_SUCCESS

    def nvmlInitWithFlags(self, flags: int) -> int:
        return pynvml.NVML_SUCCESS if self.fake.init_error is None else self.fake.init_error

    def nvmlShutdown(self) -> int:
        return pynvml.NVML_SUCCESS

    def nvmlSystemGetDriverVersion(self, buffer: Any, length: Any) -> int:
        if self.fake.system_error is not None:
            return self.fake.system_error
        driver = self.fake.driver
        buffer.value = driver if isinstance(driver, bytes) else driver.encode()
        return pynvml.NVML_SUCCESS

    def nvmlSystemGetCudaDriverVersion(self, version: Any) -> int:
        _out(version).value = self.fake.cuda
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        _out(count).value = len(self.fake.gpus)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        if index.value >= len(self.fake.gpus):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        code = self.fake.gpus[index.value].errors.get("nvmlDeviceGetHandleByIndex")
        if code is not None:
            return code
        pointer = ctypes.c_void_p(index.value + 1)  # an opaque handle, never 0
        ctypes.memmove(ctypes.addressof(_out(device)), ctypes.addressof(pointer), ctypes.sizeof(pointer))
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetPciInfo_v3(self, handle: Any, info: Any) -> int:
        def write(gpu: FakeGpu) -> None:
            pci = _out(info)
            domain, bus, rest = gpu.bus_id.split(":")
            pci.busId = pci.busIdLegacy = gpu.bus_id.encode()  # char[32], as the driver fills it
            pci.domain, pci.bus, pci.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
        return self._device("nvmlDeviceGetPciInfo_v3", handle, write)

    def nvmlDeviceGetUUID(self, handle: Any, buffer: Any, length: Any) -> int:
        def write(gpu: FakeGpu) -> None:
            buffer.value = gpu.uuid.encode()  # char[length], NUL-terminated, as the driver fills it
        return self._device("nvmlDeviceGetUUID", handle, write)

    def _values(self, symbol: str, handle: Any, outs: tuple[Any, ...], values: Callable[[FakeGpu], tuple]) -> int:
        def write(gpu: FakeGpu) -> None:
            for out, value in zip(outs, values(gpu)):
                _out(out).value = value
        return self._device(symbol, handle, write)

    def nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        return self._values("nvmlDeviceGetMigMode", handle, (current, pending), lambda gpu: gpu.mig)

    def nvmlDeviceGetPersistenceMode(self, handle: Any, mode: Any) -> int:
        return self._values("nvmlDeviceGetPersistenceMode", handle, (mode,), lambda gpu: (gpu.persistence,))

    def nvmlDeviceGetEccMode(self, handle: Any, current: Any, pending: Any) -> int:
        return self._values("nvmlDeviceGetEccMode", handle, (current, pending), lambda gpu: gpu.ecc)

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: Any, counter: Any, count: Any) -> int:
        volatile = counter.value == pynvml.NVML_VOLATILE_ECC
        return self._values("nvmlDeviceGetTotalEccErrors", handle, (count,),
                            lambda gpu: (gpu.ecc_volatile if volatile else gpu.ecc_aggregate,))

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: Any, count: Any, addresses: Any) -> int:
        gpu = self.fake.gpus[_index(handle)]
        pages = gpu.retired.get(cause.value, [])
        if "nvmlDeviceGetRetiredPages" in gpu.errors:
            return gpu.errors["nvmlDeviceGetRetiredPages"]
        if addresses is None or _out(count).value < len(pages):
            _out(count).value = len(pages)
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE if pages else pynvml.NVML_SUCCESS
        for i, page in enumerate(pages):
            addresses[i] = page
        _out(count).value = len(pages)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any, pending: Any) -> int:
        return self._values("nvmlDeviceGetRetiredPagesPendingStatus", handle, (pending,),
                            lambda gpu: (gpu.retired_pending,))

    def nvmlDeviceGetRemappedRows(self, handle: Any, *outs: Any) -> int:
        return self._values("nvmlDeviceGetRemappedRows", handle, outs, lambda gpu: gpu.remapped)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any, out: Any) -> int:
        return self._values("nvmlDeviceGetCurrPcieLinkGeneration", handle, (out,), lambda gpu: gpu.link[:1])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any, out: Any) -> int:
        return self._values("nvmlDeviceGetMaxPcieLinkGeneration", handle, (out,), lambda gpu: gpu.link_max[:1])

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any, out: Any) -> int:
        return self._values("nvmlDeviceGetCurrPcieLinkWidth", handle, (out,), lambda gpu: gpu.link[1:])

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any, out: Any) -> int:
        return self._values("nvmlDeviceGetMaxPcieLinkWidth", handle, (out,), lambda gpu: gpu.link_max[1:])

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, reasons: Any) -> int:
        return self._values("nvmlDeviceGetCurrentClocksEventReasons", handle, (reasons,), lambda gpu: (gpu.throttle,))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any, reasons: Any) -> int:
        return self._values("nvmlDeviceGetCurrentClocksThrottleReasons", handle, (reasons,),
                            lambda gpu: (gpu.throttle,))

    def nvmlDeviceGetTemperatureV(self, handle: Any, temperature: Any) -> int:
        if _out(temperature).version != pynvml.nvmlTemperature_v1:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH

        def write(gpu: FakeGpu) -> None:
            _out(temperature).temperature = gpu.temperature
        return self._device("nvmlDeviceGetTemperatureV", handle, write)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, temperature: Any) -> int:
        return self._values("nvmlDeviceGetTemperature", handle, (temperature,), lambda gpu: (gpu.temperature,))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any, limit: Any) -> int:
        return self._values("nvmlDeviceGetEnforcedPowerLimit", handle, (limit,), lambda gpu: (gpu.power_limit_mw,))

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any, limit: Any) -> int:
        return self._values("nvmlDeviceGetPowerManagementDefaultLimit", handle, (limit,),
                            lambda gpu: (gpu.default_power_limit_mw,))
