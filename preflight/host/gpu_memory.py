"""How torch's GPU-side memory behaves and fails, for the torch half of the GPU seam (``preflight.host.gpu``).

Which memory an allocation error means, and how much pinned memory torch's caching host allocator holds, read from
torch 2.13's sources and names; tests check the names against the installed torch.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Mapping

# torch's caching host allocator (ATen/core/CachingHostAllocator.h): rounds up to a power of two, keeps freed
# blocks pinned until emptied. Its statistics and emptying call, by their torch 2.13 names (then the older one).
HOST_STATS = "cuda.host_memory_stats"
EMPTY_HOST_CACHE = ("accelerator.empty_host_cache", "_C._host_emptyCache")

Memory = Literal["pinned", "pageable", "device"]  # where a buffer is allocated

# cudaHostAlloc's cudaErrorInvalidValue: the driver refused one block of 2-5 GiB and up on working GPUs, not a
# sticky fault (sgl-project/sglang#6285, #7666, LMCache/LMCache#1063: a smaller block pins on the same node).
PIN_REFUSED = "invalid argument"


class HostMemoryError(RuntimeError):
    """Host memory could not be had for a buffer (torch's CPU allocator failed): host RAM or the cgroup memory
    limit is short; the GPU is not at fault."""


class PinError(HostMemoryError):
    """Pinned host memory could not be had: cudaHostAlloc ran out of memory or torch returned an unpinned
    buffer. Host RAM, the cgroup limit or RLIMIT_MEMLOCK is short; the GPU is not at fault."""


class DeviceMemoryError(RuntimeError):
    """A buffer could not be allocated on the GPU (torch.OutOfMemoryError): its memory is held elsewhere."""


class DeviceFault(RuntimeError):
    """CUDA reported an error on the device (torch.AcceleratorError, "CUDA error: ..."): an illegal access,
    an ECC error, a GPU that fell off the bus. Any later CUDA call in the process may fail the same way."""


def allocating(where: Memory, allocate: Callable[[], Any]) -> Any:
    """``allocate()``, its RuntimeError raised as what it means for an allocation in ``where`` (``"pinned"``,
    ``"pageable"`` or ``"device"``).

    In torch 2.13 OutOfMemoryError and AcceleratorError are both RuntimeErrors, so the allocation that failed says
    which memory ran out; a pageable buffer's failure is the host's (c10's DefaultCPUAllocator).

    Raises:
        HostMemoryError: ``where`` is "pageable" (any RuntimeError).
        PinError: ``where`` is "pinned" and the error is an out-of-memory one, or CUDA refused the block
            as an invalid argument (``PIN_REFUSED``).
        DeviceMemoryError: ``where`` is "device" and the error is an out-of-memory one
            (torch.OutOfMemoryError, or a CUDA error "out of memory" from outside the caching allocator).
        DeviceFault: any other CUDA error (a sticky fault from earlier fails every later call).
        RuntimeError: anything else, as raised.
    """
    if where not in ("pinned", "pageable", "device"):
        raise ValueError(f"allocating: where must be pinned, pageable or device, not {where!r}")
    try:
        return allocate()
    except RuntimeError as error:
        raise classified(error, where) from error


def classified(error: RuntimeError, where: Memory) -> RuntimeError:
    """The preflight error for ``error`` raised by an allocation in ``where`` (see ``allocating``)."""
    import torch

    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if where == "pageable":
        return HostMemoryError(text)
    out_of_memory = isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in text.lower()
    if out_of_memory:
        return PinError(text) if where == "pinned" else DeviceMemoryError(text)
    if where == "pinned" and PIN_REFUSED in text.lower():
        return PinError(text)
    accelerator_error = getattr(torch, "AcceleratorError", ())  # torch 2.8+; before, a RuntimeError "CUDA error: ..."
    if isinstance(error, accelerator_error) or text.startswith(("CUDA error", "HIP error")):
        return DeviceFault(text)
    return error


def pinned_block(size: int) -> int:
    """Bytes torch's caching host allocator pins for a request of ``size`` bytes: the next power of two (ATen
    CachingHostAllocator ``roundSize``); where torch keeps no statistics."""
    return 1 << max(size - 1, 0).bit_length()


def pinned_bytes(size: int, before: Mapping[str, int], after: Mapping[str, int]) -> int:
    """Bytes pinned for a request of ``size``: the growth of ``torch.cuda.host_memory_stats()``'s
    ``active_bytes.current`` (the block handed out, cached or new); ``pinned_block(size)`` without statistics."""
    key = "active_bytes.current"
    if key in before and key in after and after[key] > before[key]:
        return int(after[key] - before[key])
    return pinned_block(size)


def host_stats() -> Mapping[str, int]:
    """``torch.cuda.host_memory_stats()``, empty where this torch has none (or CUDA is not initialised)."""
    stats = torch_attribute(HOST_STATS)
    return stats() if stats is not None else {}


def torch_attribute(dotted: str) -> Any:
    """``torch.<dotted>`` (``"cuda.host_memory_stats"``), or None where this torch has no such name."""
    import torch

    target: Any = torch
    for part in dotted.split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    return target
