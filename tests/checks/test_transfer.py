"""The transfer check through the GPU seam's fakes: bandwidths, link share, NUMA, pinned allocation."""

from __future__ import annotations

import os

import pynvml
import pytest

from preflight.checks import cuda, transfer
from preflight.checks.base import Budget
from preflight.host import gpu, gpu_memory, nvml
from preflight.host.gpu_memory import DeviceFault, DeviceMemoryError, HostMemoryError, PinError
from tests.fakes.gpu import TORCH_RELEASES, FakeCuda, FakeGpu, FakeNvml, h200, node
from tests.fakes.libnvml import installed
from tests.helpers import judged, keyed

OPTIONS = {"size": 64 << 20, "pinned_size": 8 << 30}
GATE = """
h2d_pinned: {min: 40 GB/s}
d2h_pinned: {min: 40 GB/s}
h2d_pageable: {min: 10 GB/s}
d2h_pageable: {min: 10 GB/s}
pinned_speedup: {min: 1.5}
h2d_link_efficiency: {min: 75 %}
numa_local: {min: 1}
pinned_alloc: {min: 8 GiB}
"""


@pytest.fixture
def sysfs(tmp_path):
    """A two-socket host: the H200 at 0000:3b:00.0 on node 0, this process's CPUs all on node 0."""
    cpus = sorted(os.sched_getaffinity(0))
    (tmp_path / "sys/bus/pci/devices/0000:3b:00.0").mkdir(parents=True)
    (tmp_path / "sys/bus/pci/devices/0000:3b:00.0/numa_node").write_text("0\n")
    for node, cpulist in (("node0", f"{cpus[0]}-{cpus[-1]}"), ("node1", "512-1023")):
        (tmp_path / "sys/devices/system/node" / node).mkdir(parents=True)
        (tmp_path / "sys/devices/system/node" / node / "cpulist").write_text(cpulist + "\n")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal: 2113929216 kB\nMemAvailable: 4194304 kB\n")
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("cpuset cpu io memory pids\n")  # a v2 root
    (tmp_path / "sys/fs/cgroup/memory.max").write_text(f"{16 << 30}\n")
    (tmp_path / ".dockerenv").write_text("")
    return tmp_path


def run(sysfs, fake_cuda=None, fake_nvml=None, options=OPTIONS):
    fake_nvml = FakeNvml() if fake_nvml is None else fake_nvml
    measured = transfer.measurements(options, Budget(0.4, 60), fake_cuda or FakeCuda(), fake_nvml, root=str(sysfs))
    assert fake_nvml.open == 0
    return measured


def test_a_healthy_gen5_h200_passes_with_its_link_share(tmp_path, sysfs):
    measured = keyed(run(sysfs))
    assert measured["h2d_pinned[cuda:0]"].value == 55.1
    assert len(measured["h2d_pinned[cuda:0]"].samples) >= 3
    assert measured["pinned_speedup[cuda:0]"].value == pytest.approx(55.1 / 19.8)
    assert measured["link_rate[cuda:0]"].value == pytest.approx(63.015, abs=0.001)  # Gen5 x16, 128b/130b
    assert measured["h2d_link_efficiency[cuda:0]"].value == pytest.approx(87.44, abs=0.01)
    assert measured["link_rate[cuda:0]"].method == ("max Gen5 x16; Gen5 x16 after the copies; NVML GPU matched by "
                                                   "PCI bus id 0000:3b:00.0")
    assert (measured["numa_node[cuda:0]"].value, measured["numa_local[cuda:0]"].value) == (0.0, 1.0)
    assert measured["pinned_alloc"].value == 8.0
    results = judged(tmp_path, "transfer", GATE, list(measured.values()))
    gated = [r for r in results.values() if r.threshold]
    assert len(gated) == 8 and {r.verdict for r in gated} == {"pass"}
    assert results["transfer.link_rate[cuda:0]"].verdict == "info"


def test_a_downtrained_link_fails_the_link_share_not_just_the_rate(tmp_path, sysfs):
    # the slot trained to Gen5 x8: copies run at ~26 GB/s, which still clears a naive 20 GB/s floor
    slow = FakeCuda(rates={("h2d", True): 26.3, ("h2d", False): 12.0, ("d2h", True): 26.5, ("d2h", False): 11.0})
    gate = "h2d_pinned: {min: 20 GB/s}\nh2d_link_efficiency: {min: 75 %}"
    results = judged(tmp_path, "transfer", gate, run(sysfs, slow))
    assert results["transfer.h2d_pinned[cuda:0]"].verdict == "pass"
    efficiency = results["transfer.h2d_link_efficiency[cuda:0]"]
    assert efficiency.message == "measured 41.74%, required >= 75%"
    assert "downtrained" in efficiency.hint


def test_the_far_numa_node_is_reported(tmp_path, sysfs):
    (sysfs / "sys/bus/pci/devices/0000:3b:00.0/numa_node").write_text("1\n")
    results = judged(tmp_path, "transfer", "numa_local: {min: 1}", run(sysfs))
    assert results["transfer.numa_local[cuda:0]"].message == (
        "measured no, required >= 1 (the process may run on NUMA nodes 0, the GPU is on node 1)")


def test_a_pinned_allocation_failure_is_explained_as_a_host_limit(tmp_path, sysfs):
    refused = FakeCuda(pin_error=PinError("CUDA error: out of memory"))
    result = judged(tmp_path, "transfer", GATE, run(sysfs, refused))["transfer.pinned_alloc"]
    assert result.verdict == "fail"
    assert result.message.startswith(
        "measured 0 GiB, required >= 8 GiB (could not pin 8 GiB of host memory in a docker container "
        "(CUDA error: out of memory); RLIMIT_MEMLOCK ")
    assert result.message.endswith("MemAvailable 4 GiB, cgroup memory limit 16 GiB: raise --memory and run with "
                                   "--ulimit memlock=-1; this is a host memory limit, not a GPU fault)")


def test_a_pinned_copy_that_cannot_pin_fails_with_the_same_explanation(tmp_path, sysfs):
    unpinned = FakeCuda(rates={("h2d", True): PinError("host buffer of 67108864 bytes came back unpinned"),
                               ("h2d", False): 19.8, ("d2h", True): 55.6, ("d2h", False): 17.2})
    results = judged(tmp_path, "transfer", GATE, run(sysfs, unpinned))
    assert "could not pin 64 MiB of host memory in a docker container (host buffer of 67108864 bytes came back " \
           "unpinned)" in results["transfer.h2d_pinned[cuda:0]"].message
    assert results["transfer.pinned_speedup[cuda:0]"].message.startswith(
        "could not measure: needs both h2d_pinned and h2d_pageable")
    assert results["transfer.h2d_link_efficiency[cuda:0]"].message.startswith(
        "could not measure: h2d_pinned was not measured")


@pytest.mark.parametrize("code, reason", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML library not found"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded"),
])
def test_without_nvml_the_link_share_fails_but_copies_are_measured(tmp_path, sysfs, code, reason):
    results = judged(tmp_path, "transfer", GATE, run(sysfs, fake_nvml=FakeNvml(init_error=code)))
    assert results["transfer.h2d_link_efficiency[cuda:0]"].message.startswith(f"could not measure: {reason}")
    assert results["transfer.h2d_pinned[cuda:0]"].verdict == "pass"


def test_a_gpu_lost_while_reading_the_link_fails_with_the_fix(tmp_path, sysfs):
    lost = FakeGpu(errors={"nvmlDeviceGetMaxPcieLinkGeneration": pynvml.NVML_ERROR_GPU_IS_LOST})
    results = judged(tmp_path, "transfer", GATE, run(sysfs, fake_nvml=FakeNvml([lost])))
    assert "the GPU fell off the bus" in results["transfer.h2d_link_efficiency[cuda:0]"].message


def test_rocm_skips_the_nvml_link_rate_and_measures_the_rest(tmp_path, sysfs):
    rocm = FakeCuda(cuda_runtime=None, hip_runtime="6.2.41133")
    fake_nvml = FakeNvml()
    results = judged(tmp_path, "transfer", GATE, run(sysfs, rocm, fake_nvml))
    assert fake_nvml.calls == []
    assert results["transfer.h2d_link_efficiency[cuda:0]"].message == (
        "not applicable: ROCm build (HIP 6.2.41133): the link rate needs NVML")
    assert results["transfer.h2d_pinned[cuda:0]"].verdict == "pass"


def test_without_a_gpu_every_metric_fails_with_one_line(tmp_path, sysfs):
    cpu = FakeCuda(devices=(), cuda_runtime=None, reason="no CUDA device: torch 2.5.1+cpu is a CPU build")
    results = judged(tmp_path, "transfer", GATE, run(sysfs, cpu))
    assert {r.verdict for r in results.values()} == {"fail"}
    assert {r.message.split(";")[0] for r in results.values()} == {
        "could not measure: no CUDA device: torch 2.5.1+cpu is a CPU build"}


def test_each_gpu_is_measured_and_named(sysfs):
    two = FakeCuda(devices=(h200(0), h200(1, "0000:86:00.0")))
    measured = keyed(run(sysfs, two, FakeNvml([FakeGpu(), FakeGpu(bus_id="00000000:86:00.0", link_max=(4, 16))])))
    assert measured["link_rate[cuda:1]"].value == pytest.approx(31.508, abs=0.001)
    assert measured["numa_node[cuda:1]"].reason == "sysfs has no NUMA node for PCI 0000:86:00.0"


def test_lane_rates_follow_the_pci_sig_line_coding():
    assert transfer.LANE_GBPS[3] * 16 == pytest.approx(15.754, abs=0.001)  # 8 GT/s, 128b/130b
    assert transfer.LANE_GBPS[2] * 16 == pytest.approx(8.0)  # 5 GT/s, 8b/10b
    assert transfer.LANE_GBPS[6] * 16 == pytest.approx(121.0)  # 64 GT/s PAM4, 242B/256B FLIT


def test_a_link_generation_without_a_known_rate_fails_instead_of_guessing(sysfs):
    future = FakeNvml([FakeGpu(link=(7, 16), link_max=(7, 16))])
    measured = keyed(run(sysfs, fake_nvml=future))
    assert measured["h2d_link_efficiency[cuda:0]"].reason == (
        "NVML reports PCIe generation 7, which preflight has no rate for")


def test_a_platform_without_numa_reports_node_minus_one_and_skips_locality(tmp_path, sysfs):
    (sysfs / "sys/bus/pci/devices/0000:3b:00.0/numa_node").write_text("-1\n")
    results = judged(tmp_path, "transfer", "numa_node: {min: 0}\nnuma_local: {min: 1}", run(sysfs))
    assert results["transfer.numa_node[cuda:0]"].message.startswith("measured -1, required >= 0")
    assert results["transfer.numa_local[cuda:0]"].message == (
        "not applicable: the platform reports no NUMA placement for this GPU")


def test_a_device_oom_on_the_pinned_copy_is_not_blamed_on_host_memory(tmp_path, sysfs):
    oom = DeviceMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of "
                            "139.81 GiB of which 12.00 MiB is free.")
    full = FakeCuda(rates={("h2d", True): oom, ("h2d", False): oom, ("d2h", True): 55.6, ("d2h", False): 17.2})
    results = judged(tmp_path, "transfer", GATE, run(sysfs, full))
    for metric in ("h2d_pinned", "h2d_pageable"):
        message = results[f"transfer.{metric}[cuda:0]"].message
        assert message.startswith("could not measure: cuda:0 has no room for a 64 MiB copy buffer (CUDA out of "
                                  "memory. Tried to allocate 64.00 MiB.")
        assert "another process holds its memory (see nvidia-smi), or lower transfer.size; required" in message
        assert "host memory" not in message and "RLIMIT_MEMLOCK" not in message


def test_a_cuda_fault_during_a_pinned_copy_is_a_gpu_fault(tmp_path, sysfs):
    fault = DeviceFault("CUDA error: an illegal memory access was encountered")
    faulty = FakeCuda(rates={("h2d", True): fault, ("h2d", False): 19.8, ("d2h", True): 55.6, ("d2h", False): 17.2})
    message = judged(tmp_path, "transfer", GATE, run(sysfs, faulty))["transfer.h2d_pinned[cuda:0]"].message
    assert message == ("could not measure: the h2d_pinned copy failed on cuda:0 (CUDA error: an illegal memory access "
                       "was encountered): a GPU fault, not a host limit; check dmesg for Xid errors; required >= 40 GB/s")


def test_a_cuda_fault_while_pinning_is_not_reported_as_a_host_limit(tmp_path, sysfs):
    faulty = FakeCuda(pin_error=DeviceFault("CUDA error: unspecified launch failure"))
    result = judged(tmp_path, "transfer", GATE, run(sysfs, faulty))["transfer.pinned_alloc"]
    assert result.message == ("could not measure: pinning failed with a GPU error, not for want of host memory "
                              "(CUDA error: unspecified launch failure): check dmesg for Xid errors; required >= 8 GiB")


def test_a_pinned_block_cuda_refuses_as_an_invalid_argument_is_a_host_limit_not_a_gpu_fault(tmp_path, sysfs):
    # sgl-project/sglang#6285 and #7666, LMCache/LMCache#1063: torch.empty(pin_memory=True) of a few GiB raises
    # "CUDA error: invalid argument" on a working GPU while 2 GiB pins; it was reported as a GPU error (see dmesg)
    import torch

    refused = gpu_memory.classified(torch.AcceleratorError(
        "CUDA error: invalid argument\nCUDA kernel errors might be asynchronously reported at some other API call"),
        "pinned")
    result = judged(tmp_path, "transfer", GATE, run(sysfs, FakeCuda(pin_error=refused)))["transfer.pinned_alloc"]
    assert (result.value, result.verdict) == (0.0, "fail")
    assert result.message.startswith("measured 0 GiB, required >= 8 GiB (could not pin 8 GiB of host memory in a "
                                     "docker container (CUDA error: invalid argument); RLIMIT_MEMLOCK ")
    assert result.message.endswith(
        "cgroup memory limit 16 GiB: CUDA refused one pinned block of 8 GiB, which some drivers and hosts do from a "
        "few GiB up while smaller blocks pin: pin in smaller blocks (lower transfer.pinned_size to find the "
        "largest), or raise --memory and run with --ulimit memlock=-1; this is a host memory limit, not a GPU fault)")


def test_pinned_alloc_reports_the_rounded_block_torch_really_pinned(tmp_path, sysfs):
    results = judged(tmp_path, "transfer", "pinned_alloc: {min: 4 GiB}",
                     run(sysfs, options={"size": 64 << 20, "pinned_size": 3 << 30}))
    result = results["transfer.pinned_alloc"]
    assert (result.value, result.verdict) == (4.0, "pass")
    assert result.message == ("measured 4 GiB, required >= 4 GiB (3 GiB requested: torch's caching host allocator "
                              "pins whole powers of two)")
    assert result.method.startswith("torch.empty(pin_memory=True) of 3 GiB, released after the check, RLIMIT_MEMLOCK")


def test_a_failed_rounded_pin_names_the_block_it_asked_the_driver_for(tmp_path, sysfs):
    refused = FakeCuda(pin_error=PinError("CUDA error: out of memory"))
    measured = keyed(run(sysfs, refused, options={"size": 64 << 20, "pinned_size": 3 << 30}))
    assert measured["pinned_alloc"].reason.startswith(
        "could not pin 4 GiB (3 GiB requested, rounded up) of host memory in a docker container")


def test_pinned_memory_is_released_when_the_check_ends(sysfs):
    fake = FakeCuda(devices=(h200(0), h200(1, "0000:86:00.0")))
    run(sysfs, fake, FakeNvml([FakeGpu(), FakeGpu(bus_id="00000000:86:00.0")]))
    assert fake.events[0] == ("pin", 8 << 30)
    assert fake.events[-1] == ("release",) and fake.events.count(("release",)) == 1
    assert sum(event == ("copy", "h2d", True) for event in fake.events) == 2
    assert fake.pinned_held == 0


def test_pinned_memory_is_released_even_when_a_copy_crashes(sysfs):
    class Crash(Exception):
        pass

    fake = FakeCuda(rates={("h2d", True): 55.1, ("h2d", False): 19.8, ("d2h", True): Crash("bug"),
                           ("d2h", False): 17.2})
    with pytest.raises(Crash):
        run(sysfs, fake)
    assert fake.events[-1] == ("release",) and fake.pinned_held == 0


def test_a_failed_release_is_reported_in_the_method(sysfs):
    class Stuck(FakeCuda):
        def release_pinned(self):
            raise DeviceFault("CUDA error: an illegal memory access was encountered")

    measured = keyed(run(sysfs, Stuck()))
    assert "not released (CUDA error: an illegal memory access was encountered)" in measured["pinned_alloc"].method


LINK_CALLS = ("nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth",
              "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth")


def test_a_link_nvml_does_not_report_is_a_skip_here_as_in_the_cuda_check(monkeypatch, tmp_path, sysfs):
    # a vGPU or cloud guest: NVML answers NOT_SUPPORTED for the PCIe link; read through the real pynvml
    guest = FakeGpu(errors={name: pynvml.NVML_ERROR_NOT_SUPPORTED for name in LINK_CALLS})
    installed(monkeypatch, FakeNvml([guest]))
    results = judged(tmp_path, "transfer", GATE + "link_rate: {min: 1 GB/s}",
                     transfer.measurements(OPTIONS, Budget(0.4, 60), FakeCuda(), pynvml, root=str(sysfs)))
    link = [results["transfer.link_rate[cuda:0]"], results["transfer.h2d_link_efficiency[cuda:0]"]]
    assert [(r.verdict, r.message) for r in link] == [("skip", f"not applicable: {nvml.NOT_SUPPORTED}")] * 2
    assert results["transfer.h2d_pinned[cuda:0]"].verdict == "pass"
    same_rule = keyed(cuda.measurements({"matmul_size": 256, "allocate": 90.0}, FakeCuda(), pynvml, environ={}))
    assert (same_rule["pcie_link_width[cuda:0]"].applicable, same_rule["pcie_link_width[cuda:0]"].reason) == (
        False, nvml.NOT_SUPPORTED)


def test_a_pageable_buffer_the_host_cannot_hold_is_a_host_limit_not_a_gpu_fault(tmp_path, sysfs):
    with pytest.raises(HostMemoryError) as refused:  # the real CPU allocator, asked for 1 EiB
        gpu.host_buffer(1 << 60, pinned=False)
    short = FakeCuda(rates={("h2d", True): 55.1, ("h2d", False): refused.value, ("d2h", True): 55.6,
                            ("d2h", False): 17.2})
    message = judged(tmp_path, "transfer", GATE, run(sysfs, short))["transfer.h2d_pageable[cuda:0]"].message
    assert message == (f"could not measure: could not allocate 64 MiB of pageable host memory in a docker container "
                       f"({str(refused.value)}); MemAvailable 4 GiB, cgroup memory limit 16 GiB: raise --memory; "
                       f"this is a host memory limit, not a GPU fault; required >= 10 GB/s")
    assert "Xid" not in message


@pytest.mark.parametrize("release", TORCH_RELEASES)
def test_the_link_share_and_numa_node_are_measured_on_every_torch_release(monkeypatch, tmp_path, sysfs, release):
    # issue 34: torch 2.2/2.3 give no PCI id, so no NVML GPU matched and h2d_link_efficiency went unmeasured
    view, gpus = node(release, [("0000:3b:00.0", "GPU-5e3f0c1a-9b2d-4c6e-8f71-a2b3c4d5e6f7")], monkeypatch)
    devices = view.view().devices
    installed(monkeypatch, FakeNvml(gpus))
    for name in ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)  # the process environment, as the check reads it by default
    measured = keyed(transfer.measurements(OPTIONS, Budget(0.4, 60), FakeCuda(devices=devices), pynvml,
                                           root=str(sysfs)))
    assert measured["h2d_link_efficiency[cuda:0]"].value == pytest.approx(87.44, abs=0.01)
    key = {"2.4.1": "UUID GPU-5e3f0c1a-9b2d-4c6e-8f71-a2b3c4d5e6f7", "2.13.0": "PCI bus id 0000:3b:00.0"}.get(
        release, "CUDA's numbering (CUDA_DEVICE_ORDER=(unset: FASTEST_FIRST), CUDA_VISIBLE_DEVICES=(unset)): cuda:0 "
                 "is PCI 0000:3b:00.0")
    assert measured["h2d_link_efficiency[cuda:0]"].method.endswith(f"; NVML GPU matched by {key}")
    assert (measured["numa_node[cuda:0]"].value, measured["numa_local[cuda:0]"].value) == (0.0, 1.0)
    results = judged(tmp_path, "transfer", GATE, list(measured.values()))
    assert results["transfer.h2d_link_efficiency[cuda:0]"].verdict == "pass"
