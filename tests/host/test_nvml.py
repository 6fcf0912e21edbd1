"""The real NVML path against the installed nvidia-ml-py: names, signatures, error classes, return values.

No NVIDIA driver here, so every real call must end in an NVMLError (LibraryNotFound on
init, Uninitialized after it), never in an AttributeError or a TypeError. Behind the C
interface, ``tests.fakes.libnvml`` stands in for the driver, so the real pynvml wrappers run and
``FakeNvml``'s answers can be checked against theirs.
"""

from __future__ import annotations

import inspect
import re

import pynvml
import pytest

from preflight.host import nvml
from tests.fakes.gpu import FakeGpu, FakeNvml
from tests.fakes.libnvml import installed

DUMMY_ARGUMENTS = {"nvmlDeviceGetHandleByIndex": (0,), "nvmlDeviceGetTotalEccErrors": (None, 1, 0),
                   "nvmlDeviceGetRetiredPages": (None, 0), "nvmlDeviceGetTemperature": (None, 0),
                   "nvmlDeviceGetTemperatureV": (None, 0, pynvml.nvmlTemperature_v1)}
# A GPU with every reading away from zero, so that a fake answering the wrong field shows.
UNHEALTHY = FakeGpu(bus_id="00000000:86:00.0", mig=(1, 0), persistence=0, ecc=(1, 0), ecc_volatile=3, ecc_aggregate=9,
                    retired={pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: [0x1F000, 0x2A000]},
                    retired_pending=1, remapped=(5, 2, 1, 0), link=(3, 8), link_max=(5, 16), throttle=0x4 | 0x40,
                    temperature=91, power_limit_mw=450000)
DEVICE_ARGUMENTS = {
    "nvmlDeviceGetTotalEccErrors": [(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
                                    (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC)],
    "nvmlDeviceGetRetiredPages": [(pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,),
                                  (pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,)],
    "nvmlDeviceGetTemperatureV": [(pynvml.NVML_TEMPERATURE_GPU,)],
    "nvmlDeviceGetTemperature": [(pynvml.NVML_TEMPERATURE_GPU,)],
}
SETUP_CALLS = ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetHandleByIndex")  # their answers are None or a handle


@pytest.mark.parametrize("name", nvml.CALLS)
def test_every_call_exists_and_fails_only_with_nvml_errors_without_a_driver(name):
    function = getattr(pynvml, name)
    parameters = inspect.signature(function).parameters
    arguments = DUMMY_ARGUMENTS.get(name, (None,) * len(parameters))
    assert len(arguments) == len(parameters), f"{name}{inspect.signature(function)}"
    if name == "nvmlInit":
        with pytest.raises(pynvml.NVMLError_LibraryNotFound):
            function(*arguments)
    else:
        with pytest.raises(pynvml.NVMLError):
            function(*arguments)


def test_every_constant_and_error_class_used_exists_in_pynvml():
    used = set(re.findall(r"\blib\.(NVML\w+)", inspect.getsource(nvml)))
    assert {"NVMLError_NotSupported", "NVML_ERROR_GPU_IS_LOST", "NVML_VOLATILE_ECC"} <= used
    assert [name for name in sorted(used) if not hasattr(pynvml, name)] == []


def test_the_real_library_on_a_machine_without_a_driver_says_so():
    session = nvml.open_session(nvml.library())
    assert session.lib is None
    assert session.reason.startswith("NVML library not found (libnvidia-ml.so.1): no NVIDIA driver here")
    assert nvml.system(session) == nvml.System(None, None, session.reason)
    assert nvml.handles_by_bus(session) == nvml.Devices({}, None, (), (), session.reason)


def test_a_missing_nvidia_ml_py_names_the_package():
    assert nvml.open_session(None).reason == "nvidia-ml-py is not installed: pip install nvidia-ml-py"


def test_system_reads_bytes_or_text_and_the_cuda_version_integer():
    for driver in ("550.54.15", b"550.54.15"):
        fake = FakeNvml(driver=driver, cuda=12060)
        assert nvml.system(nvml.open_session(fake)) == nvml.System("550.54.15", "12.6", "")


def test_a_failing_system_query_explains_itself():
    fake = FakeNvml(system_error=pynvml.NVML_ERROR_UNKNOWN)
    assert nvml.system(nvml.open_session(fake)).reason == "NVML driver query failed (Unknown Error (NVML error 999))"


def test_bus_ids_from_nvml_and_sysfs_compare_equal():
    assert nvml.normalise_bus_id("00000000:3B:00.0") == nvml.normalise_bus_id("0000:3b:00.0") == "0000:3b:00.0"


def assert_same(fake, real, where):
    """Same type, same value; structures field by field (pynvml structures have no ``==``)."""
    assert type(fake) is type(real), f"{where}: the fake returns {type(fake).__name__}, pynvml {type(real).__name__}"
    if isinstance(real, pynvml._PrintableStructure):
        for field, *_ in real._fields_:
            assert_same(getattr(fake, field), getattr(real, field), f"{where}.{field}")
    elif isinstance(real, (list, tuple)):
        assert len(fake) == len(real), where
        for i, (one, other) in enumerate(zip(fake, real)):
            assert_same(one, other, f"{where}[{i}]")
    else:
        assert fake == real, where


def real_and_fake(monkeypatch, gpu, **fake_options):
    fake = FakeNvml([gpu], **fake_options)
    installed(monkeypatch, FakeNvml([gpu], **fake_options))
    pynvml.nvmlInit()
    return fake, pynvml.nvmlDeviceGetHandleByIndex(0)


@pytest.mark.parametrize("name", [name for name in nvml.CALLS if name not in SETUP_CALLS])
def test_every_fake_answer_is_what_the_real_pynvml_returns_over_the_c_library(monkeypatch, name):
    fake, handle = real_and_fake(monkeypatch, UNHEALTHY)
    device = list(inspect.signature(getattr(pynvml, name)).parameters)[:1] in (["handle"], ["device"])
    for arguments in DEVICE_ARGUMENTS.get(name, [()]):
        real = getattr(pynvml, name)(*((handle,) if device else ()), *arguments)
        answer = getattr(fake, name)(*((UNHEALTHY,) if device else ()), *arguments)
        assert_same(answer, real, f"{name}{arguments}")


def test_the_bus_id_is_text_in_the_installed_nvidia_ml_py(monkeypatch):
    fake, handle = real_and_fake(monkeypatch, UNHEALTHY)
    assert isinstance(pynvml.nvmlDeviceGetPciInfo(handle), pynvml.nvmlPciInfo_t)
    assert pynvml.nvmlDeviceGetPciInfo(handle).busId == fake.nvmlDeviceGetPciInfo(UNHEALTHY).busId == "00000000:86:00.0"
    assert pynvml.nvmlSystemGetDriverVersion() == fake.nvmlSystemGetDriverVersion() == "550.54.15"


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_GPU_IS_LOST])
def test_the_fake_raises_the_error_class_the_real_pynvml_raises(monkeypatch, code):
    failing = FakeGpu(errors={"nvmlDeviceGetRemappedRows": code, "nvmlDeviceGetPciInfo": code})
    fake, handle = real_and_fake(monkeypatch, failing)
    for name in ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetPciInfo"):
        with pytest.raises(pynvml.NVMLError) as real:
            getattr(pynvml, name)(handle)
        with pytest.raises(pynvml.NVMLError) as answer:
            getattr(fake, name)(failing)
        assert type(answer.value) is type(real.value) and answer.value.value == real.value.value == code


def test_the_whole_health_reading_is_the_same_over_the_real_pynvml(monkeypatch):
    fake, handle = real_and_fake(monkeypatch, UNHEALTHY)
    assert nvml.health(pynvml, handle, "cuda:0") == nvml.health(fake, UNHEALTHY, "cuda:0")
    real_session, fake_session = nvml.open_session(pynvml), nvml.open_session(fake)
    assert nvml.system(real_session) == nvml.system(fake_session) == nvml.System("550.54.15", "12.4", "")
    assert list(nvml.handles_by_bus(real_session).handles) == list(nvml.handles_by_bus(fake_session).handles) == [
        "0000:86:00.0"]


def test_clock_events_and_temperature_use_the_current_calls_not_the_deprecated_ones():
    fake = FakeNvml([UNHEALTHY])
    readings = {m.metric: m for m in nvml.health(fake, UNHEALTHY, "cuda:0")}
    assert (readings["clock_throttle"].value, readings["temperature"].value) == (2.0, 91.0)
    called = {name for name, _ in fake.calls}
    assert {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperatureV"} <= called
    assert not called & {"nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetTemperature"}


def test_a_driver_without_the_current_calls_is_read_with_their_predecessors(monkeypatch):
    old = frozenset(nvml.PREDECESSORS)
    fake, handle = real_and_fake(monkeypatch, UNHEALTHY, missing=old)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU)  # what such a driver answers
    for lib, device in ((fake, UNHEALTHY), (pynvml, handle)):
        readings = {m.metric: m for m in nvml.health(lib, device, "cuda:0")}
        assert (readings["clock_throttle"].value, readings["temperature"].value) == (2.0, 91.0)
    assert {"nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetTemperature"} <= {n for n, _ in fake.calls}


def test_an_nvidia_ml_py_without_the_current_calls_is_read_with_their_predecessors():
    class OldBinding(FakeNvml):
        nvmlDeviceGetTemperatureV = nvmlDeviceGetCurrentClocksEventReasons = None

    readings = {m.metric: m for m in nvml.health(OldBinding([UNHEALTHY]), UNHEALTHY, "cuda:0")}
    assert (readings["clock_throttle"].value, readings["temperature"].value) == (2.0, 91.0)


def test_a_real_error_of_the_current_call_is_reported_not_hidden_by_the_fallback():
    lost = FakeGpu(errors={"nvmlDeviceGetTemperatureV": pynvml.NVML_ERROR_GPU_IS_LOST})
    fake = FakeNvml([lost])
    readings = {m.metric: m for m in nvml.health(fake, lost, "cuda:0")}
    assert readings["temperature"].value is None and "the GPU fell off the bus" in readings["temperature"].reason
    assert "nvmlDeviceGetTemperature" not in {name for name, _ in fake.calls}


def test_the_adverse_clock_event_bits_are_pynvmls():
    names = {0x4: "SwPowerCap", 0x8: "HwSlowdown", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown",
             0x80: "HwPowerBrakeSlowdown"}
    assert set(nvml.ADVERSE_THROTTLE) == set(names)
    for bit, name in names.items():
        assert getattr(pynvml, f"nvmlClocksEventReason{name}") == getattr(pynvml, f"nvmlClocksThrottleReason{name}") == bit


THREE_BUSES = ("00000000:3B:00.0", "00000000:5E:00.0", "00000000:AF:00.0")


@pytest.mark.parametrize("code, hidden, unreadable", [
    (pynvml.NVML_ERROR_NO_PERMISSION, (1,), ()),
    (pynvml.NVML_ERROR_GPU_IS_LOST, (), ("NVML GPU 1: GPU is lost (NVML error 15): the GPU fell off the bus; drain the "
                                         "node and reset or replace the GPU (see dmesg Xid 79)",)),
], ids=["no-permission", "gpu-lost"])
def test_one_gpu_nvml_cannot_open_leaves_the_others_listed_over_the_real_pynvml(monkeypatch, code, hidden, unreadable):
    # nvmlDeviceGetCount_v2 counts a GPU of another job (cgroup device restriction) and a lost one
    gpus = [FakeGpu(bus_id=bus) for bus in THREE_BUSES]
    gpus[1].errors["nvmlDeviceGetHandleByIndex"] = code
    installed(monkeypatch, FakeNvml(gpus))
    fake = FakeNvml(gpus)
    for lib in (pynvml, fake):
        devices = nvml.handles_by_bus(nvml.open_session(lib))
        assert list(devices.handles) == ["0000:3b:00.0", "0000:af:00.0"]
        assert (devices.count, devices.hidden, devices.unreadable, devices.reason) == (3, hidden, unreadable, "")
    with pytest.raises(pynvml.NVMLError) as real:
        pynvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError) as answer:
        fake.nvmlDeviceGetHandleByIndex(1)
    assert type(answer.value) is type(real.value) and answer.value.value == real.value.value == code
