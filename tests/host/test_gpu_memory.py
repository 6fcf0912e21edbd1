"""Which memory an allocation error means, and what the caching host allocator pins, against the installed torch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from preflight.host import gpu_memory
from preflight.host.gpu_memory import DeviceFault, DeviceMemoryError, PinError

GIB = 1 << 30
# torch 2.13's messages, as its allocators and c10_cuda_check_implementation write them
DEVICE_OOM = ("CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of 139.81 GiB of which "
              "12.00 MiB is free. Process 4242 has 139.78 GiB memory in use.")
HOST_OOM = "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call"
ILLEGAL_ACCESS = "CUDA error: an illegal memory access was encountered\nSearch for `cudaErrorIllegalAddress'"
# torch.empty(..., pin_memory=True) of 5 GiB on a working GPU (LMCache/LMCache#1063, sgl-project/sglang#7666)
PIN_REFUSED = "CUDA error: invalid argument\nCUDA kernel errors might be asynchronously reported at some other API call"


def test_torch_raises_runtime_errors_for_both_device_oom_and_cuda_faults():
    # why the type alone cannot say whose memory ran out
    assert issubclass(torch.OutOfMemoryError, RuntimeError) and issubclass(torch.AcceleratorError, RuntimeError)
    assert torch.cuda.OutOfMemoryError is torch.OutOfMemoryError


@pytest.mark.parametrize("error, where, expected, text", [
    (torch.OutOfMemoryError(DEVICE_OOM), "device", DeviceMemoryError, DEVICE_OOM),
    (torch.AcceleratorError(HOST_OOM), "pinned", PinError, "CUDA error: out of memory"),
    (torch.AcceleratorError(ILLEGAL_ACCESS), "pinned", DeviceFault, "CUDA error: an illegal memory access was encountered"),
    (torch.AcceleratorError(ILLEGAL_ACCESS), "device", DeviceFault, "CUDA error: an illegal memory access was encountered"),
    (RuntimeError(ILLEGAL_ACCESS), "device", DeviceFault, "CUDA error: an illegal memory access was encountered"),
    (torch.AcceleratorError(HOST_OOM), "device", DeviceMemoryError, "CUDA error: out of memory"),
    (torch.AcceleratorError(PIN_REFUSED), "pinned", PinError, "CUDA error: invalid argument"),
    (torch.AcceleratorError(PIN_REFUSED), "device", DeviceFault, "CUDA error: invalid argument"),
])
def test_each_failed_allocation_is_named_by_the_memory_it_asked_for(error, where, expected, text):
    def allocate():
        raise error

    with pytest.raises(expected) as raised:
        gpu_memory.allocating(where, allocate)
    assert str(raised.value) == text
    assert raised.value.__cause__ is error


def test_an_error_that_is_not_cudas_passes_through():
    error = RuntimeError("pin_memory=True requires a CUDA or other accelerator backend")
    assert gpu_memory.classified(error, "pinned") is error
    assert gpu_memory.allocating("device", lambda: "buffer") == "buffer"


def test_the_pinned_block_is_the_next_power_of_two():
    assert [gpu_memory.pinned_block(n) for n in (1, 4096, 4097, 3 * GIB, 4 * GIB, 4 * GIB + 1)] == [
        1, 4096, 8192, 4 * GIB, 4 * GIB, 8 * GIB]


def test_pinned_bytes_come_from_the_allocators_statistics_else_from_its_rounding_rule():
    before = {"active_bytes.current": 256 << 20, "allocated_bytes.current": 4 * GIB + (256 << 20)}
    after = {"active_bytes.current": 4 * GIB + (256 << 20), "allocated_bytes.current": 4 * GIB + (256 << 20)}
    assert gpu_memory.pinned_bytes(3 * GIB, before, after) == 4 * GIB  # served from a cached 4 GiB block
    assert gpu_memory.pinned_bytes(3 * GIB, {}, {}) == 4 * GIB  # a torch without host statistics
    assert gpu_memory.pinned_bytes(3 * GIB, {"active_bytes.current": 0}, {"active_bytes.current": 3 * GIB}) == 3 * GIB


def test_the_allocator_names_and_statistics_exist_in_the_installed_torch():
    assert gpu_memory.torch_attribute(gpu_memory.HOST_STATS) is torch.cuda.host_memory_stats
    assert gpu_memory.torch_attribute(gpu_memory.EMPTY_HOST_CACHE[0]) is torch.accelerator.empty_host_cache
    # the older name is compiled into CUDA builds only; this CPU build still declares it
    stubs = Path(torch.__file__).parent / "_C" / "__init__.pyi"
    assert f"def {gpu_memory.EMPTY_HOST_CACHE[1].split('.')[-1]}() -> None" in stubs.read_text()
    documented = torch.cuda.host_memory_stats.__doc__
    for key in ("active_bytes.{current", "allocated_bytes.{current", "rounded up to the next power of two"):
        assert key in documented
    assert gpu_memory.host_stats() == {}  # CUDA is not initialised here: torch keeps none yet


def test_the_rounding_rule_is_the_one_in_the_installed_torch_headers():
    header = Path(torch.__file__).parent / "include" / "ATen" / "core" / "CachingHostAllocator.h"
    if not header.exists():
        pytest.skip("this torch ships no C++ headers")
    source = header.read_text()
    assert "return c10::llvm::PowerOf2Ceil(size);" in source
    assert "virtual void empty_cache()" in source


def test_a_pageable_allocation_is_always_the_hosts():
    # an ordinary host buffer never touches CUDA: whatever its allocation raises is host memory
    for error in (RuntimeError("DefaultCPUAllocator: can't allocate memory"), torch.OutOfMemoryError(DEVICE_OOM)):
        def allocate():
            raise error

        with pytest.raises(gpu_memory.HostMemoryError) as raised:
            gpu_memory.allocating("pageable", allocate)
        assert not isinstance(raised.value, (PinError, DeviceMemoryError, DeviceFault))


def test_an_unknown_memory_is_refused_rather_than_read_as_the_device():
    with pytest.raises(ValueError):
        gpu_memory.allocating("host", lambda: None)
