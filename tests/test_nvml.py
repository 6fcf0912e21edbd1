"""The real NVML path against the installed nvidia-ml-py: names, signatures and error classes.

No NVIDIA driver here, so every real call must end in an NVMLError (LibraryNotFound on
init, Uninitialized after it), never in an AttributeError or a TypeError.
"""

from __future__ import annotations

import inspect
import re

import pynvml
import pytest

from preflight import nvml
from tests.fakes.gpu import FakeNvml

DUMMY_ARGUMENTS = {"nvmlDeviceGetHandleByIndex": (0,), "nvmlDeviceGetTotalEccErrors": (None, 1, 0),
                   "nvmlDeviceGetRetiredPages": (None, 0), "nvmlDeviceGetTemperature": (None, 0)}


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
    assert nvml.handles_by_bus(session) == ({}, session.reason)


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
