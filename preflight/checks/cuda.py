"""CUDA as the job's torch and the driver (NVML) see it, each GPU's health, and a smoke kernel.

Method: ``torch.cuda`` for devices, compute capability and memory (PyTorch CUDA semantics);
NVML for the driver and each GPU's health (NVML API reference, the readings DCGM's
diagnostics and NVIDIA's GPU debug guidelines check); CUDA compatibility guide for whether
the driver runs torch's CUDA runtime (newer driver, minor-version or forward compatibility).
The smoke kernel compares a float32 matmul on the GPU with the CPU's and writes a share of
free memory, catching a device that enumerates but cannot compute.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from preflight.host import gpu, gpu_memory, gpu_visibility, nvml
from preflight.checks.base import DEFAULT_STARTUP_S, Budget, Metric, Option, Timing
from preflight.measurement import Measurement, not_applicable, unmeasurable
from preflight.units import Dimension, to_unit, with_article

NAME = "cuda"
HELP = "CUDA devices and driver (torch, NVML), per-GPU health (ECC, PCIe link, clocks) and a smoke kernel"
DURATION = "not used: NVML queries, one smoke matmul and one allocation per GPU (timeout bounds them)"
OPTIONS = (
    Option("matmul_size", "int", 1024, "rows of the square float32 smoke matmul", minimum=16),
    Option("allocate", Dimension.PERCENT, "90 %", "share of each GPU's free memory to allocate and write",
           minimum=1, maximum=100),
)
_RESET = "drain the node and reset or replace the GPU"
METRICS = (
    Metric("device_count", "", True, "CUDA devices torch can use (torch.cuda.device_count)",
           hint="torch sees {measured} GPUs: check the driver, --gpus all / the device plugin, CUDA_VISIBLE_DEVICES", by_user=True),
    Metric("driver_version", "version", True, "NVIDIA driver version (NVML nvmlSystemGetDriverVersion)"),
    Metric("cuda_driver_version", "version", True, "highest CUDA version the driver supports (NVML)"),
    Metric("cuda_runtime", "version", True, "the CUDA runtime torch was built with (torch.version.cuda)"),
    Metric("runtime_supported", "", True, "yes (1) when the driver runs torch's CUDA runtime: newer driver, same "
           "major (minor-version compatibility) or a working forward-compatibility package (CUDA compatibility "
           "guide); no (0) otherwise", flag=True),
    Metric("name", "text", None, "device name (torch.cuda.get_device_properties); match it with a regex",
           per_device=True),
    Metric("compute_capability", "version", True, "compute capability major.minor", per_device=True),
    Metric("memory_total", "GiB", True, "device memory (torch.cuda.get_device_properties.total_memory)",
           per_device=True),
    Metric("memory_free", "GiB", True, "free device memory before the smoke test (cudaMemGetInfo)", per_device=True,
           hint="another process holds GPU memory: find it with nvidia-smi"),
    Metric("matmul_error", "", False, "relative error of the float32 smoke matmul, a ratio of two magnitudes (no "
           "unit): max |GPU - CPU| / max |CPU| over the elements (~1e-6 on a healthy GPU, inf where "
           "the GPU gives NaN), inputs exact in TF32, TF32 off unless an override holds it on (the method says which "
           "ran)", per_device=True, hint=f"the GPU computes wrong results: {_RESET}", ratio=True),
    Metric("memory_allocatable", "%", True, "share of free memory allocated and written (0 when it failed)",
           per_device=True, hint="the GPU cannot hand out its free memory: check other processes and ECC errors"),
    Metric("mig_mode", "text", None, "MIG mode on/off (nvmlDeviceGetMigMode)", per_device=True),
    Metric("persistence_mode", "text", None, "persistence mode on/off (nvmlDeviceGetPersistenceMode)", per_device=True,
           hint="enable it: nvidia-smi -pm 1, or run nvidia-persistenced"),
    Metric("ecc_mode", "text", None, "ECC on/off (nvmlDeviceGetEccMode)", per_device=True),
    Metric("ecc_uncorrectable_volatile", "", False, "uncorrectable ECC errors since the last driver load (NVML)",
           per_device=True, hint=f"uncorrectable memory errors: {_RESET}"),
    Metric("ecc_uncorrectable_aggregate", "", False, "uncorrectable ECC errors over the GPU's life (NVML)",
           per_device=True, hint=f"uncorrectable memory errors: {_RESET}"),
    Metric("retired_pages", "", False, "pages retired for ECC errors, pre-Ampere GPUs (nvmlDeviceGetRetiredPages)",
           per_device=True, hint="many retired pages: plan an RMA (NVIDIA dynamic page retirement guide)"),
    Metric("retired_pages_pending", "", False, "1 when a page retirement awaits a reset (NVML)", per_device=True,
           hint="reset the GPU (nvidia-smi -r) to retire the pending pages"),
    Metric("remapped_rows_pending", "", False, "1 when a row remap awaits a reset, Ampere+ (nvmlDeviceGetRemappedRows)",
           per_device=True, hint="reset the GPU (nvidia-smi -r) to apply the row remapping"),
    Metric("remapped_rows_failed", "", False, "1 when a row remap failed, Ampere+ (NVML)", per_device=True,
           hint=f"row remapping failed: {_RESET} (NVIDIA row remapping guide)"),
    Metric("pcie_link_gen", "", True,
           "current PCIe generation; skipped while an idle GPU runs it below the max to save power",
           per_device=True),
    Metric("pcie_link_gen_max", "", True, "highest PCIe generation GPU and slot support (NVML)", per_device=True),
    Metric("pcie_link_width", "", True,
           "current PCIe lanes; skipped while an idle GPU runs them below the max to save power", per_device=True,
           hint="the link trained to x{measured}: reseat the GPU or check the riser/slot"),
    Metric("pcie_link_width_max", "", True, "most PCIe lanes GPU and slot support (NVML)", per_device=True),
    Metric("clock_throttle", "", False, "active clock-throttle reasons: power cap, thermal or HW slowdown (NVML)",
           per_device=True, hint="the GPU is throttled: check cooling, power cables and power limits"),
    Metric("temperature", "C", False, "GPU core temperature (NVML)", per_device=True, hint="check cooling"),
    Metric("power_limit", "W", True, "enforced power limit (nvmlDeviceGetEnforcedPowerLimit)", per_device=True,
           hint="restore the default limit: nvidia-smi -pl"),
)
_TORCH_DEVICE_METRICS = ("name", "compute_capability", "memory_total", "memory_free", "matmul_error",
                         "memory_allocatable")
NVML_DEVICE_METRICS = tuple(m.name for m in METRICS if m.per_device and m.name not in _TORCH_DEVICE_METRICS)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Ask torch and NVML, run the smoke kernel, and return every metric's measurement."""
    return measurements(options, gpu.TorchCuda(), nvml.library())


def measurements(options: Mapping[str, Any], cuda: gpu.TorchCuda, lib: Any, environ: Mapping[str, str] | None = None,
                 root: str = "/") -> list[Measurement]:
    """Measurements through the seam: ``cuda`` (torch) and ``lib`` (pynvml or a fake); ``environ`` and ``root``
    (for ``/dev``) are where what hides GPUs from torch is looked for."""
    view = cuda.view()
    environ = os.environ if environ is None else environ
    if view.hip_runtime is not None:
        rocm = f"ROCm build of torch (HIP {view.hip_runtime}): NVIDIA-only NVML reading; use amd-smi on AMD GPUs"
        return _measure(options, cuda, view, nvml.Session(None, rocm), rocm, "", environ)
    session = nvml.open_session(lib)
    try:
        return _measure(options, cuda, view, session, "", gpu_visibility.found(environ, root), environ)
    finally:
        nvml.close(session)


def _measure(options: Mapping[str, Any], cuda: gpu.TorchCuda, view: gpu.TorchView, session: nvml.Session,
             rocm: str, visibility: str, environ: Mapping[str, str]) -> list[Measurement]:
    method = f"torch {view.torch_version}, CUDA runtime {view.cuda_runtime or view.hip_runtime or 'none'}"
    nvml_devices = nvml.handles_by_bus(session)
    located = nvml.locate(nvml_devices, view.devices, environ)
    reason = _count_reason(view, nvml_devices, visibility)
    if view.no_gpu_here:  # the fix line says it: not twice in the same entry of "what to fix"
        reason = reason.removesuffix(": " + gpu.NO_GPU_FIX)
    results = [Measurement("device_count", float(len(view.devices)), "", method=method, reason=reason,
                           hint=gpu.NO_GPU_FIX if view.no_gpu_here else "")]  # not "check the driver": there is none
    if view.cuda_runtime is not None:
        results.append(Measurement("cuda_runtime", view.cuda_runtime, "version", method=method))
    elif not rocm:
        results.append(unmeasurable("cuda_runtime", view.reason or "torch has no CUDA runtime", "version"))
    system = nvml.system(session)
    if rocm:
        results += [not_applicable(name, rocm, unit) for name, unit in (
            ("cuda_runtime", "version"), ("driver_version", "version"), ("cuda_driver_version", "version"),
            ("runtime_supported", ""))]
    elif system.driver_version is None:
        results += [unmeasurable("driver_version", system.reason, "version"),
                    unmeasurable("cuda_driver_version", system.reason, "version"), _runtime_supported(view, system)]
    else:
        results += [Measurement("driver_version", system.driver_version, "version", method="NVML"),
                    Measurement("cuda_driver_version", system.cuda_driver_version, "version", method="NVML"),
                    _runtime_supported(view, system)]
    if not view.devices:
        return results + [unmeasurable(m.name, view.reason, m.unit) for m in METRICS if m.per_device]
    for device, found in zip(view.devices, located):
        where = f"cuda:{device.index}"
        results += [
            Measurement("name", device.name, "text", device=where, method=method),
            Measurement("compute_capability", device.compute_capability, "version", device=where, method=method),
            Measurement("memory_total", to_unit(device.memory_total_bytes, "GiB"), "GiB", device=where, method=method),
            *_smoke(cuda, device, options, where, environ),
        ]
        if rocm:
            results += [not_applicable(name, rocm, _unit(name), where) for name in NVML_DEVICE_METRICS]
        elif found.handle is not None:
            results += nvml.health(session.lib, found.handle, where, f"NVML, GPU matched by {found.key}")
        else:
            results += [unmeasurable(name, found.reason, _unit(name), where) for name in NVML_DEVICE_METRICS]
    return results


def _smoke(cuda: gpu.TorchCuda, device: gpu.Device, options: Mapping[str, Any], where: str,
           environ: Mapping[str, str]) -> list[Measurement]:
    size, share = int(options["matmul_size"]), float(options["allocate"]) / 100
    index = device.index
    try:
        smoke = cuda.matmul_error(index, size)
        matmul = Measurement("matmul_error", smoke.error, "", device=where,
                             method=f"{size}x{size} float32 matmul, GPU vs CPU, {_precision(smoke, device, environ)}")
    except gpu_memory.HostMemoryError as failure:
        matmul = unmeasurable("matmul_error", f"host memory ran out for the CPU reference of {with_article(f'{size}x{size}')} "
                                              f"matmul ({_first_line(failure)}): a host limit, not a GPU fault; lower "
                                              f"cuda.matmul_size or raise the memory limit", "", where)
    except RuntimeError as failure:
        matmul = unmeasurable("matmul_error", f"the GPU failed {with_article(f'{size}x{size}')} matmul ({_first_line(failure)}); "
                                              f"check dmesg for Xid errors", "", where)
    try:
        allocated, free = cuda.allocate_share(index, share)
        return [matmul, Measurement("memory_free", to_unit(free, "GiB"), "GiB", device=where, method="cudaMemGetInfo"),
                Measurement("memory_allocatable", round(100 * allocated / free, 1) if free else 0.0, "%", device=where,
                            method=f"allocate and write {share:.0%} of free memory")]
    except RuntimeError as failure:
        reason = f"allocating {share:.0%} of free memory failed ({_first_line(failure)})"
        return [matmul, unmeasurable("memory_free", reason, "GiB", where),
                Measurement("memory_allocatable", 0.0, "%", device=where, reason=reason)]


def _precision(smoke: gpu.SmokeMatmul, device: gpu.Device, environ: Mapping[str, str]) -> str:
    """The precision the smoke matmul really ran in, for its method, and what forced it (``gpu.matmul_error``)."""
    exact = "inputs exact in TF32, so the error is float32 accumulation's either way"
    if not smoke.tf32:
        return f"TF32 off, {exact}"
    cause = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 overrides allow_tf32=False in this torch"
             if gpu.tf32_override(environ) else "allow_tf32 reads True after being set False")
    if _version(device.compute_capability) < (8,):
        return f"TF32 requested ({cause}), but compute capability {device.compute_capability} has no TF32: float32 ran"
    return f"TF32 on ({cause}), {exact}"


def _count_reason(view: gpu.TorchView, devices: nvml.Devices, visibility: str) -> str:
    """torch's reason for its count, or, where a CUDA build of torch sees another number of GPUs than NVML
    counts, both counts and what can hide GPUs from torch here, with the values found (``visibility``)."""
    seen = len(view.devices)
    if view.unopened:
        return view.reason  # torch counts GPUs it cannot open: that, not what hides GPUs, is the finding
    if view.cuda_runtime is None or devices.count is None or devices.count == seen:
        return view.reason  # a CPU build (its reason says so), no NVML, or no disagreement
    hidden = f" ({len(devices.hidden)} of them this process may not open)" if devices.hidden else ""
    unreadable = "".join(f"; NVML could not read {line}" for line in devices.unreadable)
    return (f"torch sees {seen} GPU{'' if seen == 1 else 's'}, NVML counts {devices.count}{hidden}{unreadable}; "
            f"what can hide GPUs from torch here: {visibility}")


def _runtime_supported(view: gpu.TorchView, system: nvml.System) -> Measurement:
    if view.cuda_runtime is None:
        return unmeasurable("runtime_supported", view.reason or "torch has no CUDA runtime")
    if system.cuda_driver_version is None:
        return unmeasurable("runtime_supported", system.reason)
    runtime, driver = view.cuda_runtime, system.cuda_driver_version
    method = f"driver {system.driver_version} (CUDA {driver}) vs torch CUDA {runtime}"
    if _version(driver) >= _version(runtime):
        return Measurement("runtime_supported", 1.0, "", method=method)
    if _version(driver)[0] == _version(runtime)[0]:
        return Measurement("runtime_supported", 1.0, "", method=method, reason=(
            f"minor-version compatibility: CUDA {runtime} code runs on a CUDA {driver} driver, but kernels that "
            f"need PTX JIT from CUDA {runtime} do not; upgrading the driver removes the caveat"))
    if view.devices:
        return Measurement("runtime_supported", 1.0, "", method=method, reason=(
            f"forward compatibility: CUDA initialised although the driver supports only CUDA {driver} "
            f"(a cuda-compat package is in use; data-center GPUs only)"))
    return Measurement("runtime_supported", 0.0, "", method=method, reason=(
        f"driver {system.driver_version} supports CUDA {driver}, torch needs CUDA {runtime}: upgrade the driver, "
        f"add the cuda-compat package (data-center GPUs), or use a torch built for CUDA {driver}"))


def _unit(metric: str) -> str:
    return next(m.unit for m in METRICS if m.name == metric)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def timing(options: Mapping[str, Any], budget: Budget) -> Timing:
    """No measuring time: importing torch and initialising CUDA (``DEFAULT_STARTUP_S``), then a smoke test."""
    return Timing(0.0, DEFAULT_STARTUP_S)
