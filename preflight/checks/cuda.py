"""CUDA availability as the job's torch and the driver (NVML) see it.

Method: ``torch.cuda`` for devices, compute capability and memory (PyTorch CUDA
semantics docs); NVML's ``nvmlSystemGetDriverVersion`` and
``nvmlSystemGetCudaDriverVersion`` for the driver (NVML API reference). The driver's
CUDA version must be at least torch's CUDA runtime (CUDA compatibility guide, "minor
version compatibility").
"""

from __future__ import annotations

from typing import Any, Mapping

from preflight import gpu
from preflight.checks.base import Budget, Metric
from preflight.measurement import Measurement, unmeasurable
from preflight.units import to_unit

NAME = "cuda"
HELP = "CUDA devices, compute capability and memory (torch), driver and its CUDA version (NVML)"
OPTIONS = ()
METRICS = (
    Metric("device_count", "", True, "CUDA devices torch can use (torch.cuda.device_count)"),
    Metric("driver_version", "version", True, "NVIDIA driver version (NVML nvmlSystemGetDriverVersion)"),
    Metric("cuda_driver_version", "version", True, "highest CUDA version the driver supports (NVML)"),
    Metric("runtime_supported", "", True, "1 when the driver's CUDA version >= torch's CUDA runtime, else 0"),
    Metric("name", "text", None, "device name (torch.cuda.get_device_properties)", per_device=True),
    Metric("compute_capability", "version", True, "compute capability major.minor", per_device=True),
    Metric("memory_total", "GiB", True, "device memory (torch.cuda.get_device_properties.total_memory)",
           per_device=True),
)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Ask torch and NVML, then turn their answers into measurements."""
    return measurements(gpu.torch_view(), gpu.nvml_view())


def measurements(torch_view: gpu.TorchView, nvml: gpu.NvmlView) -> list[Measurement]:
    """Measurements from the two views; a pure function, so fakes test every branch."""
    method = f"torch {torch_view.torch_version}, CUDA runtime {torch_view.cuda_runtime or 'none'}"
    results = [Measurement("device_count", float(len(torch_view.devices)), "", method=method,
                           reason=torch_view.reason)]
    if nvml.driver_version is None:
        results += [unmeasurable("driver_version", nvml.reason, "version"),
                    unmeasurable("cuda_driver_version", nvml.reason, "version")]
    else:
        results += [Measurement("driver_version", nvml.driver_version, "version", method="NVML"),
                    Measurement("cuda_driver_version", nvml.cuda_driver_version, "version", method="NVML")]
    results.append(_runtime_supported(torch_view, nvml))
    for device in torch_view.devices:
        where = f"cuda:{device.index}"
        results += [
            Measurement("name", device.name, "text", device=where, method=method),
            Measurement("compute_capability", device.compute_capability, "version", device=where, method=method),
            Measurement("memory_total", to_unit(device.memory_total_bytes, "GiB"), "GiB", device=where,
                        method=method),
        ]
    return results


def _runtime_supported(torch_view: gpu.TorchView, nvml: gpu.NvmlView) -> Measurement:
    if torch_view.cuda_runtime is None:
        return unmeasurable("runtime_supported", torch_view.reason or "torch has no CUDA runtime (ROCm build?)")
    if nvml.cuda_driver_version is None:
        return unmeasurable("runtime_supported", nvml.reason)
    runtime, driver = torch_view.cuda_runtime, nvml.cuda_driver_version
    supported = _version(driver) >= _version(runtime)
    reason = "" if supported else (
        f"driver {nvml.driver_version} supports CUDA {driver}, torch needs CUDA {runtime}: upgrade the driver "
        f"or use an image built for CUDA {driver}"
    )
    return Measurement("runtime_supported", 1.0 if supported else 0.0, "",
                       method=f"driver CUDA {driver} vs torch CUDA {runtime}", reason=reason)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())
