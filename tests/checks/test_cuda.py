"""The cuda check driven through the GPU seam's fakes: every metric's verdict path, every NVML error class."""

from __future__ import annotations

import inspect

import pynvml
import pytest

from preflight.host import gpu, nvml
from preflight.checks import cuda
from preflight.host.gpu_memory import HostMemoryError
from tests.fakes.gpu import H200_BUS, TORCH_RELEASES, FakeCuda, FakeGpu, FakeNvml, h200, node
from tests.fakes.libnvml import installed
from tests.helpers import judged, keyed

OPTIONS = {"matmul_size": 256, "allocate": 90.0}

HEALTHY_GATE = """
device_count: {min: 1}
driver_version: {min: "535.104"}
cuda_driver_version: {min: "12.2"}
cuda_runtime: {min: "12.1"}
runtime_supported: {min: 1}
name: {match: "H100|H200"}
compute_capability: {min: "9.0"}
memory_total: {min: 130 GiB}
memory_free: {min: 100 GiB}
matmul_error: {max: 1e-3}
memory_allocatable: {min: 90 %}
mig_mode: {match: "^off$"}
persistence_mode: {match: "^on$"}
ecc_mode: {match: "^on$"}
ecc_uncorrectable_volatile: {max: 0}
ecc_uncorrectable_aggregate: {max: 0}
retired_pages: {max: 0}
retired_pages_pending: {max: 0}
remapped_rows_pending: {max: 0}
remapped_rows_failed: {max: 0}
pcie_link_gen: {min: 4}
pcie_link_gen_max: {min: 5}
pcie_link_width: {min: 16}
pcie_link_width_max: {min: 16}
clock_throttle: {max: 0}
temperature: {max: 85 C}
power_limit: {min: 600 W}
"""


def run(fake_cuda: FakeCuda | None = None, fake_nvml: FakeNvml | None = None):
    fake_nvml = FakeNvml() if fake_nvml is None else fake_nvml
    measured = cuda.measurements(OPTIONS, fake_cuda or FakeCuda(), fake_nvml, environ={})
    assert fake_nvml.open == 0, "every successful nvmlInit is paired with nvmlShutdown"
    return measured


def run_over_the_real_pynvml(monkeypatch, root, fake_cuda: FakeCuda, gpus: list[FakeGpu], environ: dict[str, str],
                             nodes: tuple[str, ...] = ()):
    """The check with the installed nvidia-ml-py over ``tests.fakes.libnvml`` for ``gpus``; ``nodes``: /dev names."""
    installed(monkeypatch, FakeNvml(gpus))
    (root / "dev").mkdir()
    for node in nodes:
        (root / "dev" / node).touch()
    return cuda.measurements(OPTIONS, fake_cuda, pynvml, environ=environ, root=str(root))


def test_a_healthy_h200_passes_every_metric_with_real_values(tmp_path):
    measured = keyed(run())
    assert measured["name[cuda:0]"].value == "NVIDIA H200"
    assert measured["memory_total[cuda:0]"].value == pytest.approx(139.80, abs=0.01)
    assert measured["memory_allocatable[cuda:0]"].value == pytest.approx(90.0, abs=0.01)
    assert measured["driver_version"].value == "550.54.15"
    assert measured["cuda_driver_version"].value == "12.4"
    assert (measured["mig_mode[cuda:0]"].value, measured["ecc_mode[cuda:0]"].value) == ("off", "on")
    assert measured["power_limit[cuda:0]"].value == 700.0
    results = judged(tmp_path, "cuda", HEALTHY_GATE, list(measured.values()))
    assert {r.verdict for r in results.values()} == {"pass"}
    assert len(results) == 27
    assert results["cuda.name[cuda:0]"].message == "measured NVIDIA H200, required matches /H100|H200/"


def test_every_nvml_call_matches_the_installed_nvidia_ml_py_signature():
    current, old_driver = FakeNvml(), FakeNvml(missing=frozenset(nvml.PREDECESSORS))
    run(fake_nvml=current)
    run(fake_nvml=old_driver)
    assert {name for name, _ in current.calls} == set(nvml.CALLS) - set(nvml.PREDECESSORS.values())
    assert {name for name, _ in current.calls + old_driver.calls} == set(nvml.CALLS)
    for name, args in current.calls + old_driver.calls:
        inspect.signature(getattr(pynvml, name)).bind(*args)  # raises TypeError on a mismatch


def test_metrics_nvml_does_not_support_are_skipped_never_passed(tmp_path):
    consumer = FakeGpu(errors={name: pynvml.NVML_ERROR_NOT_SUPPORTED for name in (
        "nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPages",
        "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetMigMode")})
    results = judged(tmp_path, "cuda", HEALTHY_GATE, run(fake_nvml=FakeNvml([consumer])))
    skipped = {k for k, r in results.items() if r.verdict == "skip"}
    assert skipped == {f"cuda.{m}[cuda:0]" for m in (
        "ecc_mode", "ecc_uncorrectable_volatile", "ecc_uncorrectable_aggregate", "retired_pages",
        "retired_pages_pending", "remapped_rows_pending", "remapped_rows_failed", "mig_mode")}
    message = results["cuda.ecc_mode[cuda:0]"].message
    assert message == f"not applicable: {nvml.NOT_SUPPORTED}"
    assert results["cuda.temperature[cuda:0]"].verdict == "pass"


@pytest.mark.parametrize("code, expected", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML library not found (libnvidia-ml.so.1)"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded: load the kernel module"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "NVML failed to initialise (Insufficient Permissions (NVML error 4): run with"),
])
def test_nvml_that_cannot_start_fails_every_nvml_metric_with_its_reason(tmp_path, code, expected):
    results = judged(tmp_path, "cuda", HEALTHY_GATE, run(fake_nvml=FakeNvml(init_error=code)))
    nvml_ids = [f"cuda.{m}[cuda:0]" for m in cuda.NVML_DEVICE_METRICS] + ["cuda.driver_version"]
    for result_id in nvml_ids:
        assert results[result_id].verdict == "fail"
        assert results[result_id].message.startswith(f"could not measure: {expected}")
    assert results["cuda.matmul_error[cuda:0]"].verdict == "pass"  # torch still computes


def test_a_lost_gpu_fails_with_the_fix():
    lost = FakeGpu(errors={name: pynvml.NVML_ERROR_GPU_IS_LOST for name in nvml.CALLS if "Device" in name and
                           name not in ("nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPciInfo")})
    measured = keyed(run(fake_nvml=FakeNvml([lost])))
    reason = measured["ecc_uncorrectable_volatile[cuda:0]"].reason
    assert reason.startswith("GPU is lost (NVML error 15): the GPU fell off the bus; drain the node")
    assert all(measured[f"{m}[cuda:0]"].value is None and measured[f"{m}[cuda:0]"].applicable
               for m in cuda.NVML_DEVICE_METRICS)


def test_a_lost_gpu_while_listing_devices_fails_every_nvml_metric():
    lost = FakeGpu(errors={"nvmlDeviceGetPciInfo": pynvml.NVML_ERROR_GPU_IS_LOST})
    measured = keyed(run(fake_nvml=FakeNvml([lost])))
    assert measured["temperature[cuda:0]"].reason.startswith(
        "NVML lists no GPU at PCI 0000:3b:00.0; it could not read NVML GPU 0: GPU is lost (NVML error 15): the GPU "
        "fell off the bus")
    assert all(measured[f"{m}[cuda:0]"].value is None and measured[f"{m}[cuda:0]"].applicable
               for m in cuda.NVML_DEVICE_METRICS)


BUSES = ("0000:3b:00.0", "0000:5e:00.0", "0000:af:00.0")


def node_gpus(count: int = 3) -> list[FakeGpu]:
    """The node's GPUs as NVML lists them (``00000000:3B:00.0``), at ``BUSES``."""
    return [FakeGpu(bus_id=f"0000{bus.upper()}") for bus in BUSES[:count]]


def test_a_gpu_of_another_job_leaves_this_jobs_gpus_read_and_is_counted(monkeypatch, tmp_path):
    # a cgroup-restricted job (Slurm GRES) given GPUs 0 and 2 of 3: NVML counts 3, GPU 1 answers NO_PERMISSION
    gpus = node_gpus()
    gpus[1].errors["nvmlDeviceGetHandleByIndex"] = pynvml.NVML_ERROR_NO_PERMISSION
    job = FakeCuda(devices=(h200(0, BUSES[0]), h200(1, BUSES[2])))
    measured = run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, {"CUDA_VISIBLE_DEVICES": "0,2"},
                                        ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"))
    results = judged(tmp_path, "cuda", HEALTHY_GATE, measured)
    assert len(results) == 5 + 2 * 22 and {r.verdict for r in results.values()} == {"pass"}
    assert results["cuda.temperature[cuda:1]"].value == 34.0
    assert results["cuda.device_count"].message == (
        "measured 2, required >= 1 (torch sees 2 GPUs, NVML counts 3 (1 of them this process may not open); what can "
        "hide GPUs from torch here: CUDA_VISIBLE_DEVICES=0,2, NVIDIA_VISIBLE_DEVICES unset, device nodes /dev/nvidia0 "
        "/dev/nvidia1 /dev/nvidia2)")


def test_a_lost_gpu_the_job_sees_fails_by_name_and_the_others_are_still_read(monkeypatch, tmp_path):
    gpus = node_gpus()
    gpus[1].errors["nvmlDeviceGetHandleByIndex"] = pynvml.NVML_ERROR_GPU_IS_LOST
    job = FakeCuda(devices=tuple(h200(index, bus) for index, bus in enumerate(BUSES)))
    results = judged(tmp_path, "cuda", HEALTHY_GATE, run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, {}))
    failed = {k: r for k, r in results.items() if r.verdict != "pass"}
    assert sorted(failed) == sorted(f"cuda.{m}[cuda:1]" for m in cuda.NVML_DEVICE_METRICS)
    assert failed["cuda.ecc_uncorrectable_volatile[cuda:1]"].message == (
        "could not measure: NVML lists no GPU at PCI 0000:5e:00.0; it could not read NVML GPU 1: GPU is lost (NVML "
        "error 15): the GPU fell off the bus; drain the node and reset or replace the GPU (see dmesg Xid 79); "
        "required <= 0")
    assert results["cuda.device_count"].message == "measured 3, required >= 1"  # NVML counts the lost one too


def test_when_torch_sees_fewer_gpus_than_nvml_the_count_names_both_and_what_hides_them(monkeypatch, tmp_path):
    no_gpu = FakeCuda(devices=(), reason="no GPU visible to torch 2.5.1 (CUDA 12.4): check the driver, the "
                                         "container's GPU runtime (--gpus all) and CUDA_VISIBLE_DEVICES")
    measured = run_over_the_real_pynvml(monkeypatch, tmp_path, no_gpu, node_gpus(2),
                                        {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "all"},
                                        ("nvidia0", "nvidia1", "nvidia10", "nvidiactl"))
    result = judged(tmp_path, "cuda", HEALTHY_GATE, measured)["cuda.device_count"]
    assert result.verdict == "fail"
    assert result.message == (
        "measured 0, required >= 1 (torch sees 0 GPUs, NVML counts 2; what can hide GPUs from torch here: "
        "CUDA_VISIBLE_DEVICES='', NVIDIA_VISIBLE_DEVICES=all, device nodes /dev/nvidia0 /dev/nvidia1 /dev/nvidia10)")
    # a CPU build of torch sees no GPU whatever hides them: its own reason is the one to give
    cpu_build = FakeCuda(devices=(), cuda_runtime=None, reason="no CUDA device: torch 2.5.1+cpu is a CPU build; "
                                                                "install a CUDA build of torch")
    (tmp_path / "cpu").mkdir()
    measured = keyed(run_over_the_real_pynvml(monkeypatch, tmp_path / "cpu", cpu_build, node_gpus(2), {}))
    assert measured["device_count"].reason == cpu_build.reason


@pytest.mark.parametrize("gpu, metric, message", [
    (FakeGpu(ecc_volatile=3), "ecc_uncorrectable_volatile", "measured 3, required <= 0"),
    (FakeGpu(ecc_aggregate=12), "ecc_uncorrectable_aggregate", "measured 12, required <= 0"),
    (FakeGpu(retired={pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: [4096, 8192]}), "retired_pages",
     "measured 2, required <= 0"),
    (FakeGpu(retired_pending=1), "retired_pages_pending", "measured 1, required <= 0"),
    (FakeGpu(remapped=(0, 1, 1, 0)), "remapped_rows_pending", "measured 1, required <= 0"),
    (FakeGpu(remapped=(0, 3, 0, 1)), "remapped_rows_failed", "measured 1, required <= 0"),
    (FakeGpu(link=(3, 16)), "pcie_link_gen", "measured 3, required >= 4"),
    (FakeGpu(link_max=(4, 16), link=(4, 16)), "pcie_link_gen_max", "measured 4, required >= 5"),
    (FakeGpu(link=(5, 8)), "pcie_link_width", "measured 8, required >= 16"),
    (FakeGpu(link_max=(5, 8), link=(5, 8)), "pcie_link_width_max", "measured 8, required >= 16"),
    (FakeGpu(throttle=0x1 | 0x8 | 0x40), "clock_throttle",
     "measured 2, required <= 0 (HW slowdown, HW thermal slowdown)"),
    (FakeGpu(temperature=91), "temperature", "measured 91 C, required <= 85 C"),
    (FakeGpu(power_limit_mw=450000), "power_limit",
     "measured 450 W, required >= 600 W (capped below the default limit of 700 W)"),
    (FakeGpu(mig=(1, 1)), "mig_mode", "measured on, required matches /^off$/"),
    (FakeGpu(persistence=0), "persistence_mode", "measured off, required matches /^on$/"),
    (FakeGpu(ecc=(0, 1)), "ecc_mode", "measured off, required matches /^on$/ (changes to on after a GPU reset)"),
])
def test_each_unhealthy_reading_fails_its_threshold(tmp_path, gpu, metric, message):
    results = judged(tmp_path, "cuda", HEALTHY_GATE, run(fake_nvml=FakeNvml([gpu])))
    failed = {k: r for k, r in results.items() if r.verdict != "pass"}
    narrow_link = ["cuda.pcie_link_width[cuda:0]"] if metric == "pcie_link_width_max" else []  # current <= max
    assert list(failed) == narrow_link + [f"cuda.{metric}[cuda:0]"]
    assert failed[f"cuda.{metric}[cuda:0]"].message == message


def test_idle_throttle_reasons_do_not_count():
    idle_and_sync_boost = FakeGpu(throttle=0x1 | 0x2 | 0x10)
    assert keyed(run(fake_nvml=FakeNvml([idle_and_sync_boost])))["clock_throttle[cuda:0]"].value == 0.0


def test_a_wrong_gpu_model_fails_the_name_match(tmp_path):
    a10g = FakeCuda(devices=(h200()._replace(name="NVIDIA A10G", compute_capability="8.6"),))
    results = judged(tmp_path, "cuda", 'name: {match: "H100|H200"}\ncompute_capability: {min: "9.0"}', run(a10g))
    assert results["cuda.name[cuda:0]"].message == "measured NVIDIA A10G, required matches /H100|H200/"
    assert results["cuda.compute_capability[cuda:0]"].verdict == "fail"


@pytest.mark.parametrize("driver_cuda, runtime, devices, value, reason_starts", [
    (12040, "12.4", True, 1.0, ""),
    (12080, "12.4", True, 1.0, ""),
    (12020, "12.4", True, 1.0, "minor-version compatibility: CUDA 12.4 code runs on a CUDA 12.2 driver"),
    (11080, "12.4", True, 1.0, "forward compatibility: CUDA initialised although the driver supports only CUDA 11.8"),
    (11080, "12.4", False, 0.0, "driver 550.54.15 supports CUDA 11.8, torch needs CUDA 12.4: upgrade the driver"),
])
def test_runtime_support_knows_minor_version_and_forward_compatibility(driver_cuda, runtime, devices, value,
                                                                       reason_starts):
    fake_cuda = FakeCuda(cuda_runtime=runtime, devices=(h200(),) if devices else (),
                         reason="" if devices else "no GPU visible to torch")
    measured = keyed(run(fake_cuda, FakeNvml(cuda=driver_cuda)))["runtime_supported"]
    assert measured.value == value
    assert measured.reason.startswith(reason_starts) and (reason_starts or not measured.reason)


def test_the_smoke_kernel_fails_a_gpu_that_enumerates_but_cannot_compute(tmp_path):
    broken = FakeCuda(matmul=RuntimeError("CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors..."),
                      allocation=RuntimeError("CUDA out of memory. Tried to allocate 120.00 GiB"))
    results = judged(tmp_path, "cuda", HEALTHY_GATE, run(broken))
    assert results["cuda.matmul_error[cuda:0]"].message.startswith(
        "could not measure: the GPU failed a 256x256 matmul (CUDA error: uncorrectable ECC error encountered); "
        "check dmesg for Xid errors")
    allocatable = results["cuda.memory_allocatable[cuda:0]"]
    assert allocatable.verdict == "fail"
    assert allocatable.message == ("measured 0%, required >= 90% (allocating 90% of free memory failed "
                                   "(CUDA out of memory. Tried to allocate 120.00 GiB))")


def test_a_wrong_matmul_result_fails(tmp_path):
    results = judged(tmp_path, "cuda", "matmul_error: {max: 1e-3}", run(FakeCuda(matmul=0.37)))
    assert results["cuda.matmul_error[cuda:0]"].message == "measured 0.37, required <= 0.001"
    assert "drain the node" in results["cuda.matmul_error[cuda:0]"].hint


def test_rocm_skips_nvml_metrics_and_still_runs_the_smoke_kernel(tmp_path):
    rocm = FakeCuda(cuda_runtime=None, hip_runtime="6.2.41133",
                    devices=(h200()._replace(name="AMD Instinct MI300X", compute_capability="9.4"),))
    fake_nvml = FakeNvml()
    results = judged(tmp_path, "cuda", HEALTHY_GATE.replace("H100|H200", "MI300X"), run(rocm, fake_nvml))
    assert fake_nvml.calls == []  # NVML is never touched on ROCm
    assert results["cuda.ecc_mode[cuda:0]"].verdict == "skip"
    assert results["cuda.ecc_mode[cuda:0]"].message == (
        "not applicable: ROCm build of torch (HIP 6.2.41133): NVIDIA-only NVML reading; use amd-smi on AMD GPUs")
    assert results["cuda.driver_version"].verdict == "skip"
    assert results["cuda.matmul_error[cuda:0]"].verdict == "pass"
    assert results["cuda.name[cuda:0]"].verdict == "pass"


def test_without_a_gpu_every_threshold_fails_with_one_line_and_optional_ones_skip(tmp_path):
    cpu = FakeCuda(devices=(), cuda_runtime=None, reason="no CUDA device: torch 2.5.1+cpu is a CPU build")
    measured = run(cpu, FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    results = judged(tmp_path, "cuda", HEALTHY_GATE, measured)
    assert {r.verdict for r in results.values()} == {"fail"}
    assert all("\n" not in r.message for r in results.values())
    assert results["cuda.device_count"].message == "measured 0, required >= 1 (no CUDA device: torch 2.5.1+cpu is a " \
                                                   "CPU build)"
    optional = judged(tmp_path, "cuda", "required: false\n" + HEALTHY_GATE, measured)
    assert {r.verdict for k, r in optional.items() if k != "cuda.device_count"} == {"skip"}


def test_nvml_devices_are_matched_to_torch_devices_by_pci_bus_id():
    first, second = FakeGpu(bus_id="00000000:3B:00.0", temperature=30), FakeGpu(bus_id="00000000:86:00.0",
                                                                                temperature=70)
    # CUDA_VISIBLE_DEVICES=1: torch's cuda:0 is NVML's second GPU
    visible = FakeCuda(devices=(h200(0, "0000:86:00.0"),))
    measured = keyed(run(visible, FakeNvml([first, second])))
    assert measured["temperature[cuda:0]"].value == 70.0
    unknown = keyed(run(FakeCuda(devices=(h200(0, "0000:aa:00.0"),)), FakeNvml([first])))
    assert unknown["temperature[cuda:0]"].reason == "NVML lists no GPU at PCI 0000:aa:00.0"


def test_with_ecc_turned_off_the_error_counters_say_so(tmp_path):
    ecc_off = FakeGpu(ecc=(0, 0), errors={"nvmlDeviceGetTotalEccErrors": pynvml.NVML_ERROR_NOT_SUPPORTED})
    results = judged(tmp_path, "cuda", HEALTHY_GATE, run(fake_nvml=FakeNvml([ecc_off])))
    assert results["cuda.ecc_mode[cuda:0]"].verdict == "fail"
    assert results["cuda.ecc_uncorrectable_volatile[cuda:0]"].message == (
        "not applicable: ECC is off on this GPU, so it counts no errors: turn it on with nvidia-smi -e 1 and reset "
        "the GPU")


def test_torch_cuda_runtime_is_reported_next_to_the_driver(tmp_path):
    measured = keyed(run(FakeCuda(cuda_runtime="12.8"), FakeNvml(cuda=12080)))
    assert (measured["cuda_runtime"].value, measured["cuda_driver_version"].value) == ("12.8", "12.8")
    results = judged(tmp_path, "cuda", 'cuda_runtime: {min: "12.4"}', list(measured.values()))
    assert results["cuda.cuda_runtime"].message == "measured 12.8, required >= 12.4"


def test_a_host_that_cannot_hold_the_matmul_reference_is_not_blamed_on_the_gpu(tmp_path):
    short = FakeCuda(matmul=HostMemoryError("DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                                            "50331648 bytes. Error code 12 (Cannot allocate memory)"))
    message = judged(tmp_path, "cuda", HEALTHY_GATE, run(short))["cuda.matmul_error[cuda:0]"].message
    assert message == ("could not measure: host memory ran out for the CPU reference of a 256x256 matmul "
                       "(DefaultCPUAllocator: can't allocate memory: you tried to allocate 50331648 bytes. Error code "
                       "12 (Cannot allocate memory)): a host limit, not a GPU fault; lower cuda.matmul_size or raise "
                       "the memory limit; required <= 0.001")


def test_an_idle_gpu_whose_link_stepped_down_to_save_power_is_not_failed(monkeypatch, tmp_path):
    # Syllo/nvtop#6 and NVIDIA/open-gpu-kernel-modules#731: an idle GPU (clock event GpuIdle, P8) runs its PCIe
    # link at Gen1 and retrains to its maximum under load; a threshold on the idle reading fails a healthy node
    idle = FakeGpu(link=(1, 8), throttle=0x1)
    measured = keyed(run_over_the_real_pynvml(monkeypatch, tmp_path, FakeCuda(), [idle], {}))
    results = judged(tmp_path, "cuda", HEALTHY_GATE, list(measured.values()))
    assert {k: r.verdict for k, r in results.items() if r.verdict != "pass"} == {
        "cuda.pcie_link_gen[cuda:0]": "skip", "cuda.pcie_link_width[cuda:0]": "skip"}
    assert results["cuda.pcie_link_gen[cuda:0]"].message == (
        "not applicable: the GPU is idle (clock event GpuIdle) and runs its PCIe link at Gen1 of Gen5 to save power, "
        "so this reading says nothing of the link under load: transfer's h2d_link_efficiency measures that")
    assert "at x8 of x16 to save power" in results["cuda.pcie_link_width[cuda:0]"].message
    assert (results["cuda.pcie_link_gen_max[cuda:0]"].value, results["cuda.clock_throttle[cuda:0]"].value) == (5, 0)


@pytest.mark.parametrize("gpu, value", [
    (FakeGpu(link=(3, 16), throttle=0x0), 3.0),  # busy and below its maximum: the link is downtrained
    (FakeGpu(link=(5, 16), throttle=0x1), 5.0),  # idle at its maximum: the reading is the link
])
def test_a_busy_gpus_low_link_still_fails_and_an_idle_one_at_its_maximum_is_read(tmp_path, gpu, value):
    results = judged(tmp_path, "cuda", HEALTHY_GATE, run(fake_nvml=FakeNvml([gpu])))
    result = results["cuda.pcie_link_gen[cuda:0]"]
    assert (result.value, result.verdict) == (value, "fail" if value < 4 else "pass")


@pytest.mark.parametrize("others_answer", [None, pynvml.NVML_ERROR_NO_PERMISSION])
def test_a_slurm_jobs_renumbered_gpu_is_read_by_its_bus_not_by_its_job_local_index(monkeypatch, tmp_path,
                                                                                  others_answer):
    # guilbaults/slurm-job-exporter#63: inside a job's cgroup its one GPU is cuda:0 (CUDA_VISIBLE_DEVICES=0), but
    # it is the node's second GPU; reading NVML GPU 0 by that index reported the other job's card. Two shapes:
    # NVML lists only the job's GPU (None), or lists both and the other one answers NO_PERMISSION.
    other_job = FakeGpu(bus_id="00000000:3B:00.0", temperature=88, ecc_volatile=4)
    this_job = FakeGpu(bus_id="00000000:5E:00.0", temperature=41)
    gpus = [this_job] if others_answer is None else [other_job, this_job]
    if others_answer is not None:
        other_job.errors["nvmlDeviceGetHandleByIndex"] = others_answer
    job = FakeCuda(devices=(h200(0, "0000:5e:00.0"),))
    measured = run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, {"CUDA_VISIBLE_DEVICES": "0"},
                                        ("nvidia0", "nvidia1"))
    results = judged(tmp_path, "cuda", HEALTHY_GATE, measured)
    assert {r.verdict for r in results.values()} == {"pass"}
    assert (results["cuda.temperature[cuda:0]"].value, results["cuda.ecc_uncorrectable_volatile[cuda:0]"].value) \
        == (41.0, 0.0)


def test_a_mig_node_whose_torch_counts_gpus_it_cannot_open_fails_by_row_with_the_fix(monkeypatch, tmp_path):
    # pytorch/pytorch#131650: two A100s with MIG on, CUDA_VISIBLE_DEVICES unset; torch counts 2 and its lazy init
    # raises an INTERNAL ASSERT. The check raised it, so every row became the one error "please report a bug to
    # PyTorch"; now the device rows fail with the reason and the driver rows are still read.
    from tests.host.test_gpu import MIG_ASSERT, a_cuda_build_that_counts_gpus_it_cannot_open

    a_cuda_build_that_counts_gpus_it_cannot_open(monkeypatch, RuntimeError(MIG_ASSERT))
    mig = [FakeGpu(bus_id=f"0000{bus.upper()}", mig=(1, 1)) for bus in BUSES[:2]]
    measured = keyed(cuda.measurements(OPTIONS, gpu.TorchCuda(), FakeNvml(mig), environ={}))
    results = judged(tmp_path, "cuda", HEALTHY_GATE, list(measured.values()))
    assert results["cuda.device_count"].message.startswith(
        "measured 0, required >= 1 (torch counts 2 GPUs but CUDA could not open cuda:0 (device >= 0 && device < "
        "num_gpus INTERNAL ASSERT FAILED")
    assert "set CUDA_VISIBLE_DEVICES to one MIG UUID (nvidia-smi -L)" in results["cuda.matmul_error"].message
    assert (results["cuda.driver_version"].verdict, results["cuda.matmul_error"].verdict) == ("pass", "fail")


def test_an_azure_node_with_nonzero_pci_domains_and_pre_ampere_gaps_is_read_gpu_by_gpu(monkeypatch, tmp_path):
    # BugRoger/nvidia-exporter#3: two K80s on Azure at PCI domains 0x460e and 0x6180 ("0000460E:00:00.0"), and an
    # exporter that stopped collecting on the first "nvml: Not Supported". Here each GPU is matched by its domain
    # and a reading a K80 lacks (row remapping is Ampere+) is skipped on its own, the rest still read.
    k80s = [FakeGpu(bus_id=bus, link=(3, 16), link_max=(3, 16), temperature=temperature,
                    errors={"nvmlDeviceGetRemappedRows": pynvml.NVML_ERROR_NOT_SUPPORTED})
            for bus, temperature in (("0000460E:00:00.0", 37), ("00006180:00:00.0", 33))]
    job = FakeCuda(devices=(h200(0, "460e:00:00.0"), h200(1, "6180:00:00.0")))
    measured = keyed(run_over_the_real_pynvml(monkeypatch, tmp_path, job, k80s, {}))
    assert (measured["temperature[cuda:0]"].value, measured["temperature[cuda:1]"].value) == (37.0, 33.0)
    unanswered = {k for k, m in measured.items() if not m.measured}
    assert unanswered == {f"remapped_rows_{kind}[cuda:{index}]" for kind in ("pending", "failed") for index in (0, 1)}
    assert all(not measured[k].applicable for k in unanswered)


def test_ecc_on_with_error_counts_nvml_will_not_give_fails_instead_of_skipping(tmp_path):
    # NVIDIA/gpu-monitoring-tools#35: a T4 with ECC enabled whose error counts came back NOT_SUPPORTED while
    # nvidia-smi read them; a skip would pass a GPU whose uncorrectable errors were never counted
    unreadable = FakeGpu(ecc=(1, 1), errors={"nvmlDeviceGetTotalEccErrors": pynvml.NVML_ERROR_NOT_SUPPORTED})
    results = judged(tmp_path, "cuda", HEALTHY_GATE, run(fake_nvml=FakeNvml([unreadable])))
    assert {k for k, r in results.items() if r.verdict != "pass"} == {
        "cuda.ecc_uncorrectable_volatile[cuda:0]", "cuda.ecc_uncorrectable_aggregate[cuda:0]"}
    assert results["cuda.ecc_uncorrectable_aggregate[cuda:0]"].message == (
        "could not measure: ECC is on but NVML answers Not Supported for its uncorrectable error count, so whether "
        "this GPU has had any is unknown: read it with nvidia-smi -q -d ECC (an older driver or nvidia-ml-py may not "
        "read it); required <= 0")
    assert results["cuda.ecc_mode[cuda:0]"].verdict == "pass"


# Issue 34, defect 1: torch 2.2/2.3 give neither PCI ids nor a UUID; torch 2.4 gives the UUID; 2.13 both.
A100S = [("0000:86:00.0", "GPU-0b6e3a52-1111-4e1c-9f3a-7d2c5b8e9a01"), ("0000:3b:00.0", "GPU-9c4d2f10-2222-4b7a-8e65-"
         "1f0a3c9d7b02"), ("0000:af:00.0", "GPU-2a7f9e33-3333-4d08-b1c4-6e5d8f2a0c03"),
         ("0000:5e:00.0", "GPU-e81c0d47-4444-4f29-a3b6-0c7e1d4f9b04")]  # NVML's index order, not PCI order
HEALTH_GATE = """
ecc_uncorrectable_volatile: {max: 0}
retired_pages_pending: {max: 0}
remapped_rows_pending: {max: 0}
remapped_rows_failed: {max: 0}
matmul_error: {max: 1e-3}
"""
HEALTH_ROWS = ("ecc_uncorrectable_volatile", "retired_pages_pending", "remapped_rows_pending", "remapped_rows_failed")
KEY = {"2.2.2": "CUDA's numbering (CUDA_DEVICE_ORDER=(unset: FASTEST_FIRST), CUDA_VISIBLE_DEVICES=(unset)): cuda:0 "
                "is PCI 0000:3b:00.0",
       "2.3.1": "CUDA's numbering (CUDA_DEVICE_ORDER=(unset: FASTEST_FIRST), CUDA_VISIBLE_DEVICES=(unset)): cuda:0 "
                "is PCI 0000:3b:00.0",
       "2.4.1": "UUID GPU-9c4d2f10-2222-4b7a-8e65-1f0a3c9d7b02", "2.13.0": "PCI bus id 0000:3b:00.0"}


@pytest.mark.parametrize("release", TORCH_RELEASES)
def test_a_healthy_a100_passes_its_health_rows_on_every_torch_release_and_says_how_it_was_matched(
        monkeypatch, tmp_path, release):
    job, gpus = node(release, A100S[1:2], monkeypatch)
    measured = run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, {})
    results = judged(tmp_path, "cuda", HEALTH_GATE, measured)
    assert {results[f"cuda.{m}[cuda:0]"].verdict for m in (*HEALTH_ROWS, "matmul_error")} == {"pass"}
    assert keyed(measured)["ecc_uncorrectable_volatile[cuda:0]"].method == f"NVML, GPU matched by {KEY[release]}"


@pytest.mark.parametrize("release", ["2.2.2", "2.3.1"])
def test_without_ids_the_pci_bus_order_and_the_visible_list_place_each_gpu(monkeypatch, tmp_path, release):
    # CUDA_VISIBLE_DEVICES=3,0 under PCI_BUS_ID order (3b, 5e, 86, af): cuda:0 is the fourth GPU by bus id (af),
    # cuda:1 the first (3b); NVML lists them as 86, 3b, af, 5e
    environ = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "3,0"}
    job, gpus = node(release, A100S, monkeypatch, torch_order=[2, 1], environ=environ,
                     **{"0000:af:00.0": {"ecc_volatile": 3}})
    measured = keyed(run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, environ))
    assert (measured["ecc_uncorrectable_volatile[cuda:0]"].value,
            measured["ecc_uncorrectable_volatile[cuda:1]"].value) == (3.0, 0.0)
    assert measured["ecc_uncorrectable_volatile[cuda:0]"].method == (
        "NVML, GPU matched by CUDA's numbering (CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA_VISIBLE_DEVICES=3,0): cuda:0 is "
        "PCI 0000:af:00.0")


def test_a_visible_list_of_uuid_prefixes_places_gpus_in_any_device_order(monkeypatch, tmp_path):
    # shootthesound/Fizgig#105: UUIDs in CUDA_VISIBLE_DEVICES name the same GPU for NVML and CUDA in any order
    environ = {"CUDA_VISIBLE_DEVICES": "GPU-e81c0d47, GPU-0b6e"}  # unique prefixes, as CUDA accepts them
    job, gpus = node("2.2.2", A100S, monkeypatch, torch_order=[3, 0], environ=environ,
                     **{"0000:5e:00.0": {"remapped": (0, 0, 1, 0)}})
    measured = keyed(run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, environ))
    assert (measured["remapped_rows_pending[cuda:0]"].value, measured["remapped_rows_pending[cuda:1]"].value) == (1, 0)
    assert measured["remapped_rows_pending[cuda:1]"].method.endswith("cuda:1 is PCI 0000:86:00.0")


def test_torch_2_4_finds_each_gpu_by_uuid_whatever_order_cuda_numbers_them_in(monkeypatch, tmp_path):
    # rapidsai/dask-cuda#777: on a DGX Station A100 CUDA's order and nvidia-smi's differ; the UUID does not care
    job, gpus = node("2.4.1", A100S, monkeypatch, torch_order=[3, 2, 1, 0], **{"0000:3b:00.0": {"ecc_volatile": 1}})
    measured = keyed(run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, {}))
    assert [measured[f"ecc_uncorrectable_volatile[cuda:{i}]"].value for i in range(4)] == [0.0, 0.0, 1.0, 0.0]
    assert measured["ecc_uncorrectable_volatile[cuda:2]"].method == (
        "NVML, GPU matched by UUID GPU-9c4d2f10-2222-4b7a-8e65-1f0a3c9d7b02")


def test_without_ids_or_a_known_order_the_rows_fail_with_the_setting_that_fixes_it(monkeypatch, tmp_path):
    # ModelCloud/Device-SMI#40, gpuopenanalytics/pynvml#28: under FASTEST_FIRST, cuda:N is not NVML's GPU N
    job, gpus = node("2.3.1", A100S, monkeypatch)
    results = judged(tmp_path, "cuda", HEALTH_GATE, run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, {}))
    result = results["cuda.ecc_uncorrectable_volatile[cuda:1]"]
    assert result.verdict == "fail"
    assert result.message.startswith(
        "could not measure: torch gives neither PCI ids nor a UUID for its GPUs (torch 2.4 added the UUID), and with "
        "CUDA_DEVICE_ORDER=(unset: FASTEST_FIRST), CUDA_VISIBLE_DEVICES=(unset) CUDA numbers the 4 GPUs fastest "
        "first, an order NVML does not know: set CUDA_DEVICE_ORDER=PCI_BUS_ID in the job's environment, or use "
        "torch 2.4 or newer")


@pytest.mark.parametrize("visible", ["0,MIG-7e2d1c0b-5555-4a1e-9d3c-2b8f6e0a1c05", "0,7", "0,0"])
def test_a_visible_list_cuda_stops_reading_early_is_not_guessed_past(monkeypatch, tmp_path, visible):
    environ = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": visible}
    job, gpus = node("2.2.2", A100S, monkeypatch, torch_order=[1, 0], environ=environ)  # torch claims two
    measured = keyed(run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, environ))
    assert measured["ecc_uncorrectable_volatile[cuda:0]"].reason == (
        f"torch gives neither PCI ids nor a UUID for its GPUs, and CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA_VISIBLE_DEVICES="
        f"{visible} pick 1 of NVML's 4 GPUs while torch sees 2, so which is which is unknown: use torch 2.4 or newer")


@pytest.mark.parametrize("release, forced", [("2.3.1", True), ("2.13.0", False)])
def test_the_smoke_matmul_method_names_a_tf32_override_that_holds(monkeypatch, tmp_path, release, forced):
    environ = {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    job, gpus = node(release, A100S[1:2], monkeypatch, environ=environ)
    measured = keyed(run_over_the_real_pynvml(monkeypatch, tmp_path, job, gpus, environ))
    matmul = measured["matmul_error[cuda:0]"]
    assert matmul.value < 1e-6
    precision = ("TF32 on (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 overrides allow_tf32=False in this torch)" if forced
                 else "TF32 off")
    assert matmul.method == (f"256x256 float32 matmul, GPU vs CPU, {precision}, inputs exact in TF32, so the error "
                             f"is float32 accumulation's either way")


def test_a_tf32_override_on_a_gpu_without_tf32_says_float32_ran(monkeypatch, tmp_path):
    environ = {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    v100 = gpu.Device(0, "Tesla V100-SXM2-32GB", "7.0", 34_089_730_048, H200_BUS)
    measured = keyed(cuda.measurements(OPTIONS, FakeCuda(devices=(v100,), tf32=True), FakeNvml(), environ=environ))
    assert measured["matmul_error[cuda:0]"].method == (
        "256x256 float32 matmul, GPU vs CPU, TF32 requested (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 overrides "
        "allow_tf32=False in this torch), but compute capability 7.0 has no TF32: float32 ran")
