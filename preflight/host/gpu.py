"""The torch half of the GPU seam: every torch.cuda call the GPU checks make is here.

``TorchCuda`` is the one small interface the ``cuda``, ``transfer`` and ``p2p`` checks talk
to (NVML is the other half, in ``preflight.host.nvml``). CPU tests pass a fake with the same
methods; the methods marked ``gpu-only`` need a device and are run for real by
``scripts/gpu-smoke.sh``. On ROCm builds torch.cuda drives HIP devices, so the same
methods work there (``torch.version.hip`` is set and NVML readings are skipped).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import uuid
from pathlib import Path
from typing import Any, Callable, NamedTuple

from preflight.host import gpu_visibility, nvml
from preflight.host.gpu_memory import EMPTY_HOST_CACHE, PinError, allocating, host_stats, pinned_bytes, torch_attribute


class Device(NamedTuple):
    index: int
    name: str
    compute_capability: str  # "9.0"
    memory_total_bytes: int
    bus_id: str  # "0000:3b:00.0", as sysfs writes it; "" when torch does not say (its PCI ids came after 2.4)
    uuid: str = ""  # "ffc79498-8ff3-c2dc-3b0d-fafd804516ae" (torch 2.4+, pytorch#125083); "" when torch does not say


class SmokeMatmul(NamedTuple):
    """What the smoke matmul found, and the precision the GPU really ran it in."""

    error: float  # max |GPU - CPU| / max |CPU|
    tf32: bool  # TF32 stayed on although allow_tf32 was set False (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, older torch)


class TorchView(NamedTuple):
    """What the job's own torch sees."""

    torch_version: str
    cuda_runtime: str | None  # torch.version.cuda, None on CPU and ROCm builds
    hip_runtime: str | None  # torch.version.hip on ROCm builds
    devices: tuple[Device, ...]
    reason: str  # why there is no device, "" when there is one
    unopened: int = 0  # GPUs torch counts but CUDA could not open (``reason`` says which and why)
    no_gpu_here: bool = False  # no device, and nothing shows an NVIDIA GPU on the host (``reason`` says ``NO_GPU``)


def torch_build() -> dict[str, object] | None:
    """The constants of torch/version.py (``__version__``, ``cuda``, ``hip``), read without importing torch.

    None when torch is not installed; ``{"cuda": "unknown"}`` when the file cannot be read (then
    callers import torch to find out).
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        tree = ast.parse(Path(spec.submodule_search_locations[0], "version.py").read_text())
    except (OSError, SyntaxError):
        return {"cuda": "unknown"}
    constants: dict[str, object] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            constants[target.id] = value.value
    return constants


# Where nothing shows an NVIDIA GPU (``gpu_visibility.nvidia_evidence``): the fix for a GPU check's rows, and the cause
# with it. A CUDA build of torch would see nothing either, and no driver or container runtime is missing (issue 35).
NO_GPU_FIX = ("a CPU-only node should not run the GPU checks: leave them out (--skip cuda,transfer, or drop those "
              "instances from its thresholds.yaml)")
NO_GPU = ("this host has no NVIDIA GPU (no /dev/nvidia[0-9]* device node, no NVIDIA driver, no NVIDIA PCI device): "
          + NO_GPU_FIX)


class TorchCuda:
    """The real seam, backed by torch.cuda; ``root`` and ``nvml_lib`` are where the reason for no device looks for a
    GPU on the host (``gpu_visibility.nvidia_evidence``; ``nvml_lib`` None: the installed pynvml): a CPU build is
    told to install a CUDA build only where one is, a CUDA build to check the driver and runtime only where one is."""

    def __init__(self, root: str = "/", nvml_lib: Any = None) -> None:
        self.root, self.nvml_lib = root, nvml_lib

    def _nvml(self) -> Any:
        return self.nvml_lib if self.nvml_lib is not None else nvml.library()

    def _unseen(self, version: str, cuda: str | None, hip: str | None) -> TorchView:
        """The view of a torch that sees no device: why, with the fix that fits this host (issue 35).

        Where an NVIDIA GPU shows here (``gpu_visibility.nvidia_evidence``: a ``/dev/nvidiaN`` node, NVML starting,
        or an NVIDIA display controller in sysfs), a CPU build is told to install a CUDA build, a CUDA build to check
        the driver, the container's runtime and CUDA_VISIBLE_DEVICES. Where nothing shows one, both are told there
        is no GPU and to leave the GPU checks out (``NO_GPU``); a ROCm build is told to check its driver and runtime.
        """
        if hip is not None:
            return TorchView(version, cuda, hip, (), f"no GPU visible to torch {version} (HIP {hip}): check the driver, "
                                                     f"the container's GPU runtime (--gpus all) and CUDA_VISIBLE_DEVICES")
        here = bool(gpu_visibility.nvidia_evidence(self.root, self._nvml()))
        if cuda is None:
            said = f"no CUDA device: torch {version} is a CPU build"
            reason = f"{said}; install a CUDA build of torch" if here else f"{said}, and {NO_GPU}"
        elif here:
            reason = (f"no GPU visible to torch {version} (CUDA {cuda}): check the driver, the container's GPU runtime "
                      f"(--gpus all) and CUDA_VISIBLE_DEVICES")
        else:
            reason = f"no GPU visible to torch {version} (CUDA {cuda}): {NO_GPU}"
        return TorchView(version, cuda, hip, (), reason, no_gpu_here=not here)

    def view(self) -> TorchView:
        """Ask torch for its build and devices; never raises for a missing GPU.

        A CPU build of torch can never see a GPU, so it is recognised from torch's own
        ``version.py`` without importing torch (seconds on a busy node).
        """
        build = torch_build()
        if build is None:
            return TorchView("not installed", None, None, (), "torch is not installed: install the job's torch")
        if build.get("cuda") is None and build.get("hip") is None:
            return self._unseen(str(build.get("__version__")), None, None)
        import torch

        version = torch.__version__
        cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
        if not torch.cuda.is_available():
            return self._unseen(version, cuda, hip)
        count = torch.cuda.device_count()
        devices = []
        for index in range(count):
            try:
                devices.append(self._device(index))  # gpu-only
            except (RuntimeError, AssertionError) as error:  # AssertionError: torch's "Invalid device id"
                return TorchView(version, cuda, hip, (), unopened_reason(count, index, error), count)
        return TorchView(version, cuda, hip, tuple(devices), "")

    def _device(self, index: int) -> Device:  # pragma: no mutate block (gpu-only)
        import torch

        return device_of(index, torch.cuda.get_device_properties(index))

    def matmul_error(self, index: int, size: int) -> SmokeMatmul:
        """Max |GPU - CPU| / max |CPU| of a ``size`` x ``size`` float32 matmul, and whether TF32 ran it.

        allow_tf32 is set False for the matmul, but ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (pytorch#77114;
        NGC containers set it) overrides that in older torch: up to 2.3 ``Context::allowTF32CuBLAS`` ORs
        the variable into every answer, so cuBLAS still runs TF32 and the flag reads back True; torch 2.13
        only takes it as the starting value (ATen Context.h), so setting False holds. The flag is read back
        after setting it, so the answer says which precision really ran. Either way the inputs are exact in
        TF32 (the low 13 of float32's 23 mantissa bits zero): TF32 tensor cores then multiply them exactly
        and accumulate in float32, so the error measures the GPU's arithmetic (~1e-6 on a healthy GPU)
        whichever precision the override leaves on, never the rounding of inputs (~3e-4).

        Raises:
            HostMemoryError: the host could not hold the CPU reference (three ``size`` x ``size`` matrices).
            RuntimeError: the device cannot run the kernel (CUDA error, Xid, ECC fault).
        """
        import torch

        generator = torch.Generator().manual_seed(index)

        def reference() -> tuple[Any, Any, Any]:
            a, b = (tf32_exact(torch.randn(size, size, generator=generator)) for _ in range(2))
            return a, b, a @ b

        a, b, expected = allocating("pageable", reference)
        allow_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            tf32 = bool(torch.backends.cuda.matmul.allow_tf32)  # True only where an override holds it on
            got = _device_matmul(a, b, index)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        return SmokeMatmul(relative_error(got, expected), tf32)

    def bf16_native(self, index: int) -> bool:
        """Whether GPU ``index`` has bf16 in hardware: compute capability 8.0+ (Ampere), or any ROCm GPU torch runs.

        Read from the compute capability, not ``torch.cuda.is_bf16_supported``: that counts emulation
        in torch 2.3.x (with no parameter to refuse it, it falls back to creating a bf16 tensor, which
        works on compute capability 7.x: V100, T4) and in torch 2.13 by default
        (``including_emulation=True``); only torch 2.2's answer was the hardware's.
        """
        import torch

        if getattr(torch.version, "hip", None):
            return True
        return int(torch.cuda.get_device_properties(index).major) >= 8

    def allocate_share(self, index: int, share: float) -> tuple[int, int]:  # pragma: no mutate block (gpu-only)
        """Allocate and write ``share`` (0..1) of the free memory; return (bytes, free bytes).

        Raises:
            RuntimeError: the allocation or the write failed (torch.OutOfMemoryError included).
        """
        import torch

        free, _ = torch.cuda.mem_get_info(index)
        size = int(free * share)
        block = torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", index))
        block.fill_(0xA5)  # touch every page: an allocation alone may not reach a faulty region
        torch.cuda.synchronize(index)
        del block
        torch.cuda.empty_cache()
        return size, free

    def pin(self, size: int) -> int:
        """Pin ``size`` bytes of host memory as the trainer would, release them, and return the bytes pinned.

        The caching host allocator pins whole power-of-two blocks, so 3 GiB pins 4 GiB; the figure
        is read from its own statistics (``pinned_bytes``). Its cache is emptied first, which
        also settles blocks still waiting on copies (they would leave the statistics while this
        one enters them), and the block is returned to the driver at once, so it does not stay
        locked for the checks that follow.

        Raises:
            PinError: cudaHostAlloc failed for want of host memory, or the buffer came back unpinned.
            DeviceFault: CUDA failed for another reason (a sticky error from an earlier fault).
        """
        self.release_pinned()
        before = host_stats()
        buffer = _pinned(size)
        after = host_stats()
        del buffer
        self.release_pinned()
        return pinned_bytes(size, before, after)

    def release_pinned(self) -> int | None:
        """Give the host allocator's cached pinned blocks back to the driver; return the bytes it still holds.

        Synchronises every GPU first, since a block is only freed once the copies that used it
        are done. None when this torch keeps no host allocator statistics.
        """
        import torch

        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)
        for name in EMPTY_HOST_CACHE:
            empty = torch_attribute(name)
            if empty is not None:
                empty()
                break
        return host_stats().get("allocated_bytes.current")

    def copy_timer(self, index: int, direction: str, pinned: bool, size: int,
                   copies: int = 4) -> Callable[[], float]:  # pragma: no mutate block (gpu-only)
        """A function that times ``copies`` back-to-back copies and returns GB/s (10^9 B/s).

        nvbandwidth's method (NVIDIA/nvbandwidth, host_to_device_memcpy_ce): copies of
        ``size`` bytes on a dedicated stream bracketed by CUDA events, so the host clock
        and launch gaps stay out of the timing. Both buffers are written before timing
        (``host_buffer``), so no copy reads unfaulted pages.

        Raises:
            DeviceMemoryError: the device buffer could not be allocated.
            HostMemoryError: the host buffer could not be allocated (PinError: the pinned one, or it is not pinned).
            DeviceFault: CUDA failed while allocating, writing or copying.
        """
        import torch

        device = torch.device("cuda", index)
        device_buffer = allocating("device", lambda: torch.empty(size, dtype=torch.uint8, device=device).fill_(0x5A))
        host = host_buffer(size, pinned)
        source, target = (host, device_buffer) if direction == "h2d" else (device_buffer, host)
        return _event_timer(torch.cuda.Stream(device=device), lambda: target.copy_(source, non_blocking=pinned),
                            size, copies)

    def can_access_peer(self, source: int, target: int) -> bool:  # pragma: no mutate block (gpu-only)
        """Whether ``source`` can access ``target``'s memory directly (cudaDeviceCanAccessPeer)."""
        import torch

        return bool(torch.cuda.can_device_access_peer(source, target))

    def peer_timer(self, source: int, target: int, size: int,
                   copies: int = 4) -> Callable[[], float]:  # pragma: no mutate block (gpu-only)
        """Like ``copy_timer`` for a copy from GPU ``source`` into GPU ``target``: a peer *write*.

        torch runs a cross-device copy on the source device's current stream (ATen
        copy_device_to_device: "we always perform the copy on the source device"), so the
        source's copy engine writes into the peer: nvbandwidth's device_to_device_memcpy_write_ce.
        The stream here is the source's, so the events bracket exactly that copy.

        Raises:
            DeviceMemoryError: a buffer could not be allocated.
            DeviceFault: CUDA failed while allocating, writing or copying.
        """
        import torch

        src = allocating("device", lambda: torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", source))
                         .fill_(0x5A))
        dst = allocating("device", lambda: torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", target)))
        stream = torch.cuda.Stream(device=torch.device("cuda", source))
        return _event_timer(stream, lambda: dst.copy_(src, non_blocking=True), size, copies)


def device_of(index: int, props: Any) -> Device:
    """The ``Device`` torch's properties of GPU ``index`` describe, with whatever ids this torch binds.

    ``pci_domain_id``/``pci_bus_id``/``pci_device_id`` exist only in recent torch (bound for
    torch.numa's binding; torch 2.2-2.4 have none) and ``uuid`` since torch 2.4 (pytorch#125083, a
    ``_CUuuid``: ``uuid_text`` reads it). A torch without them gives "", and the NVML side matches the GPU
    another way (``nvml.locate``).
    """
    ids = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    bus_id = f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}.0" if all(isinstance(i, int) for i in ids) else ""
    return Device(index, props.name, f"{props.major}.{props.minor}", int(props.total_memory), bus_id,
                  uuid_text(getattr(props, "uuid", None)))


def uuid_text(cu_uuid: Any) -> str:
    """torch's ``_CUuuid`` as ``"ffc79498-8ff3-c2dc-3b0d-fafd804516ae"`` (NVML's UUID without ``GPU-``); "" for none.

    torch binds its ``bytes`` as a ``std::vector<uint8_t>``, which pybind11 hands Python as a list of 16 ints
    (torch/csrc/cuda/Module.cpp, registerCudaDeviceProperties); ``bytes`` and the object's own str (8-4-4-4-12
    hex, pytorch#132863) are read too, so another binding of it still matches.
    """
    raw = getattr(cu_uuid, "bytes", None)
    try:
        if isinstance(raw, (bytes, bytearray, list, tuple)) and len(raw) == 16:
            return str(uuid.UUID(bytes=bytes(raw)))
        if cu_uuid is not None:
            return str(uuid.UUID(str(cu_uuid).strip().lower().removeprefix("gpu-")))
    except (TypeError, ValueError):  # ints outside 0-255, or a str that is no UUID
        pass
    return ""


def tf32_exact(tensor: Any) -> Any:
    """``tensor`` (float32) with the 13 low mantissa bits cleared, in place: every value exact in TF32.

    TF32 keeps float32's 8 exponent bits and 10 of its 23 mantissa bits (NVIDIA A100 whitepaper), so
    a tensor-core product of two such values is exact and only the float32 accumulation rounds.
    """
    import torch

    tensor.view(dtype=torch.int32).bitwise_and_(-(1 << 13))
    return tensor


def tf32_override(environ: Any = None) -> bool:
    """Whether ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE`` asks for TF32: c10's check_env takes only "1" as true."""
    return (os.environ if environ is None else environ).get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1"


def _device_matmul(a: Any, b: Any, index: int) -> Any:  # pragma: no mutate block (gpu-only)
    """``a @ b`` computed on GPU ``index``, back on the host."""
    import torch

    device = torch.device("cuda", index)
    return (a.to(device) @ b.to(device)).cpu()


def unopened_reason(count: int, index: int, error: BaseException) -> str:
    """Why torch counts ``count`` GPUs yet cannot open ``cuda:<index>``, with the usual cause and its fix.

    On a node with MIG on, CUDA enumerates one MIG instance per process (NVIDIA MIG user guide,
    "Device Enumeration") while torch may count the GPUs or instances the driver lists; opening
    the others fails in torch's lazy init ("device >= 0 && device < num_gpus INTERNAL ASSERT
    FAILED": pytorch/pytorch#110000, #130181, #131650; "invalid device ordinal": pytorch#92315).
    torch initialises every device it counts on first use, so the job cannot use any of them.
    """
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return (f"torch counts {count} GPU{'' if count == 1 else 's'} but CUDA could not open cuda:{index} ({line}), so "
            f"the job's torch cannot use any: with MIG on, a process gets one MIG instance, so set "
            f"CUDA_VISIBLE_DEVICES to one MIG UUID (nvidia-smi -L); without MIG, check dmesg for Xid errors")


def host_buffer(size: int, pinned: bool) -> Any:
    """``size`` bytes of host memory (pinned or pageable) for a copy, every page written once.

    A fresh ``torch.empty`` buffer has no pages yet; a copy that reads it faults each one in as
    the kernel's shared zero page, which is read far faster than memory (on a 2-core VM a
    2 MiB-chunked copy out of an unwritten 256 MiB buffer ran at 30-34 GB/s, out of a written
    one at 13-14 GB/s), so pageable H2D would read high and pinned_speedup low. Writing every
    byte makes each page the process's own before any timing (CUDA C++ Best Practices Guide:
    pageable copies are staged by the CPU through a pinned buffer, so the source's memory
    speed is part of the figure). Pinned pages are resident already; they are written alike.

    Raises:
        HostMemoryError: the pageable buffer could not be allocated or written (host RAM, cgroup limit).
        PinError: cudaHostAlloc failed for want of host memory, or the buffer came back unpinned.
        DeviceFault: CUDA failed for another reason.
    """
    import torch

    if pinned:
        return _pinned(size).fill_(0xA5)
    return allocating("pageable", lambda: torch.empty(size, dtype=torch.uint8).fill_(0xA5))


def _pinned(size: int) -> Any:  # pragma: no mutate block (gpu-only)
    import torch

    buffer = allocating("pinned", lambda: torch.empty(size, dtype=torch.uint8, pin_memory=True))
    if not buffer.is_pinned():
        raise PinError(f"torch returned an unpinned buffer of {size} bytes")
    return buffer


def relative_error(got: object, expected: object) -> float:
    """max |got - expected| / max |expected| of two same-shape tensors (inf when they disagree on NaNs)."""
    import torch

    assert isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)
    difference = (got - expected).abs().max()
    if torch.isnan(difference):
        return float("inf")
    return float(difference / expected.abs().max())


def _event_timer(stream: object, copy: Callable[[], object], size: int, copies: int) -> Callable[[], float]:
    """A function timing ``copies`` calls of ``copy`` (``size`` bytes each) on ``stream``; returns GB/s (10^9 B/s).

    CUDA events bracket the copies on the stream (nvbandwidth's method); ``elapsed_time`` answers
    in milliseconds, so the rate is bytes / (ms / 1e3) / 1e9.
    """
    import torch

    def once() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record(stream)
            for _ in range(copies):
                copy()
            end.record(stream)
        end.synchronize()
        return size * copies / (start.elapsed_time(end) / 1e3) / 1e9

    return once
