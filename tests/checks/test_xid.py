"""The xid check against kernel logs the tests write themselves, in /dev/kmsg's record format, and read back.

A test never writes the node's real kernel log (/dev/kmsg): a fake Xid line stays there until reboot, fails every
later run of the check on the machine and would reach the node's other monitors. tests/conftest.py refuses such an
open in every test process, and ``test_no_test_writes_the_kernel_log`` finds one written as code or as a command.
The real /dev/kmsg is only read: ``test_the_real_kernel_log_is_read_record_by_record_without_blocking``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pynvml
import pytest

from preflight.checks import xid
from preflight.checks.base import Budget
from preflight.host import kmsg, nvml, xid_catalog
from preflight.measurement import unmeasurable
from tests import nobody
from tests.fakes.gpu import FakeGpu, FakeNvml
from tests.helpers import REPO, judged, keyed

GATE = "xid_drain: {max: 0}"
OPTIONS = {"since_seq": 0, "other_gpus": "show"}
NEWLINE = "\\x0a"  # how /dev/kmsg writes a newline inside a message


def kernel_log(path: Path, *messages: str, first: int = 100) -> str:
    """A kernel log file of ``messages`` as /dev/kmsg returns them (Documentation/ABI/testing/dev-kmsg): one record
    a line, ``prio,seq,usec,flags;message``, newlines inside a message written ``\\x0a``, seq from ``first``.

    Each log opens with the record the driver's PCI probe writes, with the `` KEY=value`` continuation lines a
    device's record carries, so the reader is shown a record of each shape. Returns the file's path.
    """
    records = ["6,{},{},-;nvidia 0000:3b:00.0: enabling device (0000 -> 0002)\n SUBSYSTEM=pci\n "
               "DEVICE=+pci:0000:3b:00.0\n".format(first, 4_000_000)]
    for seq, message in enumerate(messages, first + 1):
        records.append(f"4,{seq},{seq * 1_000_000},-;{message.replace(chr(10), NEWLINE)}\n")
    path.write_text("".join(records))
    return str(path)


@pytest.fixture
def no_gpu(monkeypatch, tmp_path) -> str:
    """A node whose NVML answers and lists no GPU, and whose driver lists none: the root to read the driver at."""
    fake = FakeNvml([])
    monkeypatch.setattr(nvml, "library", lambda: fake)
    (tmp_path / "root/proc/driver/nvidia/gpus").mkdir(parents=True)
    return str(tmp_path / "root")


def run(log: str, root: str, since_seq: int = 0, other_gpus: str = "show") -> dict:
    """The xid check's measurements of the kernel log file ``log``, with the driver's /proc and sysfs under ``root``."""
    options = {"since_seq": since_seq, "other_gpus": other_gpus}
    return keyed(xid.measure(options, Budget(1.0, 60.0, None), log=log, root=root))


def pci_device(root: Path, bus: str, vendor: str = "0x10de", kind: str = "0x030200") -> None:
    """A PCI function in sysfs under ``root`` (``/sys/bus/pci/devices/BUS`` with its vendor and class files)."""
    folder = root / "sys/bus/pci/devices" / bus
    folder.mkdir(parents=True)
    (folder / "vendor").write_text(vendor + "\n")
    (folder / "class").write_text(kind + "\n")


def driver_lists(root: Path, bus: str, model: str = "NVIDIA H200") -> None:
    """The driver's /proc/driver/nvidia/gpus/BUS/information under ``root``, as libnvidia-container mounts it."""
    folder = root / "proc/driver/nvidia/gpus" / bus
    folder.mkdir(parents=True)
    (folder / "information").write_text(f"Model: \t\t {model}\nBus Location: \t {bus}\n")


@pytest.fixture
def one_of_two(monkeypatch, tmp_path) -> Path:
    """A container given the node's GPU at 3b of two H200s (3b, 3c): NVML and the driver list 3b alone, while
    the PCI bus (sysfs shows the host's whole tree) holds both, an NVSwitch (NVIDIA, class bridge) and a NIC."""
    monkeypatch.setattr(nvml, "library", lambda: FakeNvml([FakeGpu(bus_id="00000000:3B:00.0")]))
    root = tmp_path / "container"
    driver_lists(root, "0000:3b:00.0")
    for bus in ("0000:3b:00.0", "0000:3c:00.0"):
        pci_device(root, bus)
    pci_device(root, "0000:05:00.0", kind="0x068000")  # an NVSwitch: NVIDIA's, not a GPU
    pci_device(root, "0000:17:00.0", vendor="0x15b3", kind="0x020700")  # a ConnectX NIC
    return root


def test_an_xid_on_another_containers_gpu_is_shown_not_judged(tmp_path, one_of_two):
    # /dev/kmsg is the host's ring buffer, while the container is given one GPU of two: the other pod's GPU at 3c
    # fell off the bus and was reset since. It used to fail this pod as "a GPU that fell off the bus". The log is
    # a file of records in /dev/kmsg's format (no test writes the node's real log: see the module's docstring).
    log = kernel_log(tmp_path / "kmsg", "NVRM: Xid (PCI:0000:3c:00): 79, pid=1234, GPU has fallen off the bus.",
                     "NVRM: Xid (PCI:0000:3c:00): 13, pid=99, name=python, Graphics Exception: ESR 0x504")
    measured = run(log, str(one_of_two))
    assert sorted(measured) == ["xid_application[0000:3b:00.0]", "xid_drain[0000:3b:00.0]",
                                "xid_other_gpus[0000:3c:00.0]"]
    assert measured["xid_drain[0000:3b:00.0]"].value == 0.0
    other = measured["xid_other_gpus[0000:3c:00.0]"]
    assert other.value == 2.0  # every class: the drain line and the application's
    assert other.note.startswith("0000:3c:00.0, another container's GPU (this container is given 1 of the node's 2 "
                                 "NVIDIA GPUs (its own: 0000:3b:00.0; the PCI bus also holds 0000:3c:00.0)): "
                                 "Xid 13 x1 (ROBUST_CHANNEL_GR_EXCEPTION, RESTART_APP)")
    assert "Xid 79 x1 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM)" in other.note
    results = judged(tmp_path, "xid", GATE, list(measured.values()))
    assert {key: result.verdict for key, result in results.items()} == {
        "xid.xid_drain[0000:3b:00.0]": "pass", "xid.xid_application[0000:3b:00.0]": "info",
        "xid.xid_other_gpus[0000:3c:00.0]": "info"}
    # The setting judges it anyway, as this node's own, and says whose GPU it is.
    judging = run(log, str(one_of_two), other_gpus="judge")
    assert "xid_other_gpus[0000:3c:00.0]" not in judging
    assert judging["xid_other_gpus"].value == 0.0
    assert judging["xid_other_gpus"].note.startswith("counted in xid_drain and xid_application as this node's own")
    assert judging["xid_drain[0000:3c:00.0]"].value == 1.0
    assert judging["xid_drain[0000:3c:00.0]"].note.startswith(
        "0000:3c:00.0 (another container's GPU: this container is given 1 of the node's 2 NVIDIA GPUs")
    failed = judged(tmp_path, "xid", "other_gpus: judge\n" + GATE, list(judging.values()))
    assert failed["xid.xid_drain[0000:3c:00.0]"].verdict == "fail"
    assert failed["xid.xid_drain[0000:3c:00.0]"].hint.endswith("after the fix, --set xid.since_seq=102")


def test_a_container_with_every_gpu_of_the_node_judges_each(tmp_path, one_of_two, monkeypatch):
    # The same node, the container given both GPUs: NVML and the driver list 3c too, so its line is this node's.
    monkeypatch.setattr(nvml, "library", lambda: FakeNvml([FakeGpu(bus_id="00000000:3B:00.0"),
                                                           FakeGpu(bus_id="00000000:3C:00.0")]))
    driver_lists(one_of_two, "0000:3c:00.0")
    log = kernel_log(tmp_path / "kmsg", "NVRM: Xid (PCI:0000:3c:00): 79, pid=1234, GPU has fallen off the bus.")
    measured = run(log, str(one_of_two))
    assert "xid_other_gpus[0000:3c:00.0]" not in measured
    assert measured["xid_drain[0000:3c:00.0]"].value == 1.0
    assert measured["xid_drain[0000:3c:00.0]"].note.startswith("GPU 1 NVIDIA H200 at 0000:3c:00.0: Xid 79 x1")
    # One row of 0 says why no GPU is another's, so a threshold on xid_other_gpus meets a value, not a gap.
    assert (measured["xid_other_gpus"].value, measured["xid_other_gpus"].note) == (
        0.0, "no Xid lines on another container's GPU: the PCI bus holds no NVIDIA GPU that NVML and the driver do "
             "not list here")
    results = judged(tmp_path, "xid", GATE + "\nxid_other_gpus: {max: 0}", list(measured.values()))
    assert results["xid.xid_drain[0000:3c:00.0]"].verdict == "fail"
    assert results["xid.xid_other_gpus"].verdict == "pass"


def test_a_gpu_nvml_counts_but_cannot_place_keeps_every_line_judged(tmp_path, one_of_two, monkeypatch):
    # The container's own second GPU is lost (NVML counts it, cannot open it) and no driver list places it: it may
    # be the one at 3c, so a line there stays this node's, and its row says it may be another container's.
    lost = FakeGpu(bus_id="00000000:3C:00.0", errors={"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_GPU_IS_LOST})
    monkeypatch.setattr(nvml, "library", lambda: FakeNvml([FakeGpu(bus_id="00000000:3B:00.0"), lost]))
    log = kernel_log(tmp_path / "kmsg", "NVRM: Xid (PCI:0000:3c:00): 79, pid=1234, GPU has fallen off the bus.")
    measured = run(log, str(one_of_two))
    assert "xid_other_gpus[0000:3c:00.0]" not in measured
    assert measured["xid_other_gpus"].note == ("no Xid lines on another container's GPU: not every GPU NVML counts "
                                               "is listed here, so 0000:3c:00.0 on the PCI bus may be this "
                                               "container's own")
    assert measured["xid_drain[0000:3c:00.0]"].value == 1.0
    assert measured["xid_drain[0000:3c:00.0]"].note.startswith("0000:3c:00.0 (not a GPU this node lists now: NVML "
                                                               "and the driver do not know it; a GPU that fell off")
    # A bus id the PCI bus does not hold either (fallen off it) stays judged where the view is partial, too.
    vanished = kernel_log(tmp_path / "kmsg2", "NVRM: Xid (PCI:0000:9a:00): 79, pid=1, GPU has fallen off the bus.")
    monkeypatch.setattr(nvml, "library", lambda: FakeNvml([FakeGpu(bus_id="00000000:3B:00.0")]))
    row = run(vanished, str(one_of_two))["xid_drain[0000:9a:00.0]"]
    assert row.value == 1.0
    assert row.note.startswith("0000:9a:00.0 (not a GPU this node lists now: NVML and the driver do not know it; a "
                               "GPU that fell off the bus; this container is given 1 of the node's 2 NVIDIA GPUs")
    assert "it may also be another container's)" in row.note


def test_xid_lines_in_the_kernel_log_are_read_back_per_gpu_and_class(tmp_path, no_gpu):
    fallen = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
    log = kernel_log(tmp_path / "kmsg", fallen, fallen,
                     "NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, Ch 00000010, An uncorrectable double "
                     "bit error",
                     *[f"NVRM: Xid (PCI:0000:3b:00): 13, pid=4321, name=python, Graphics Exception: ESR 0x50{n}"
                       for n in range(3)],
                     "NVRM: Xid (PCI:0000:3b:00): 43, pid=4321, name=python, Ch 00000008",
                     "NVRM: Xid (PCI:0000:3c:00): 31, pid=99, name=train.py, Ch 00000008, intr 00000000. MMU Fault")
    measured = run(log, no_gpu)
    first, second = "0000:3b:00.0", "0000:3c:00.0"
    assert measured[f"xid_drain[{first}]"].value == 3.0
    assert measured[f"xid_application[{first}]"].value == 4.0
    assert (measured[f"xid_drain[{second}]"].value, measured[f"xid_application[{second}]"].value) == (0.0, 1.0)
    note = measured[f"xid_drain[{first}]"].note
    assert note.startswith(f"{first} (not a GPU this node lists now: NVML and the driver do not know it; a GPU that "
                           f"fell off the bus): ")
    assert "Xid 48 x1 (ROBUST_CHANNEL_GPU_ECC_DBE, WORKFLOW_XID_48)" in note
    assert ("Xid 79 x2 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM), last at 102.0 s after boot "
            "(seq 102)") in note
    assert "'pid=1234, GPU has fallen off the bus.'" in note
    assert "Xid 13 x3 (ROBUST_CHANNEL_GR_EXCEPTION, RESTART_APP)" in measured[f"xid_application[{first}]"].note
    assert measured[f"xid_drain[{first}]"].method == f"{log}, kernel log records seq 100-108; the 100 oldest records " \
        f"since boot were overwritten (ring buffer full): Xid lines there are lost"
    results = judged(tmp_path, "xid", GATE, list(measured.values()))
    drained = results[f"xid.xid_drain[{first}]"]
    assert drained.verdict == "fail" and drained.message.startswith("measured 3")
    assert "RESTART_BM: reboot the node" in drained.hint and "WORKFLOW_XID_48: reset the GPU" in drained.hint
    assert drained.hint.endswith("the log keeps these lines until reboot: after the fix, --set xid.since_seq=104")
    assert results[f"xid.xid_drain[{second}]"].verdict == "pass"
    assert results[f"xid.xid_application[{first}]"].verdict == "info"  # counted and shown, never gating
    # The log keeps the lines until reboot: counting from the seq the hint names leaves the drain lines out,
    # and the later lines (the application's, written after them) in.
    later = run(log, no_gpu, since_seq=104)
    assert (later[f"xid_drain[{first}]"].value, later[f"xid_application[{first}]"].value) == (0.0, 4.0)
    assert f", counted from seq 104 (5 records)" in later[f"xid_drain[{first}]"].method


def test_every_drain_row_names_the_one_since_seq_that_clears_the_whole_node(tmp_path, no_gpu):
    # A node of 12 GPUs with drain lines at different records (a trial: following the first row's value left 7
    # failing). since_seq is the node's, so every row names the same value, past the last drain line of all.
    buses = [f"0000:{bus:02x}:00" for bus in range(0x10, 0x1c)]
    lines = [f"NVRM: Xid (PCI:{bus}): {code}, pid={n}, name=python, Ch 00000010"
             for n, (bus, code) in enumerate(zip(buses, [79, 48, 94, 119, 63, 74, 79, 48, 92, 120, 95, 64]))]
    log = kernel_log(tmp_path / "kmsg", *lines, "NVRM: Xid (PCI:0000:10:00): 13, pid=7, Graphics Exception")
    results = judged(tmp_path, "xid", GATE, list(run(log, no_gpu).values()))
    failed = {key: result for key, result in results.items() if result.verdict == "fail"}
    assert sorted(failed) == sorted(f"xid.xid_drain[{bus}.0]" for bus in buses)
    values = {int(result.hint.rsplit("--set xid.since_seq=", 1)[1]) for result in failed.values()}
    assert values == {113}  # the drain lines are seq 101-112
    assert all("once all 12 GPUs with drain Xid lines are fixed, for the whole node, --set xid.since_seq=113"
               in result.hint for result in failed.values())
    after = judged(tmp_path, "xid", GATE, list(run(log, no_gpu, since_seq=113).values()))
    assert {result.verdict for key, result in after.items() if ".xid_drain[" in key} == {"pass"}
    assert run(log, no_gpu, since_seq=113)["xid_application[0000:10:00.0]"].value == 1.0  # written after: kept


def test_a_new_xid_after_since_seq_fails_again_and_names_the_next_value(tmp_path, no_gpu):
    # Azure/azurehpc#648 (a node kept drained by old lines until the log rotated) and NVIDIA/DCGM#277 (Xid counts
    # kept until a driver reset or reboot): since_seq clears the old lines, and a later Xid fails again. The new
    # line is gpud's injected Xid 74 (leptonai/gpud#864, which moved its fault injection off the real kernel log).
    lines = ["NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus",
             "NVRM: Xid (PCI:0000:05:00): 48, pid=1234, name=python3, Ch 00000010, An uncorrectable double bit error"]
    kernel_log(tmp_path / "kmsg", *lines)
    first = judged(tmp_path, "xid", GATE, list(run(str(tmp_path / "kmsg"), no_gpu).values()))
    named = {first[f"xid.xid_drain[{bus}]"].hint.rsplit("=", 1)[1] for bus in ("0000:04:00.0", "0000:05:00.0")}
    assert named == {"103"}
    log = kernel_log(tmp_path / "kmsg", *lines, "NVRM: Xid (PCI:0000:04:00): 74, pid=1234, name=python3, Channel "
                     "0x23, MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7fc123456000. Fault is of type "
                     "FAULT_PTE ACCESS_TYPE_VIRT_READ")
    again = judged(tmp_path, "xid", GATE, list(run(log, no_gpu, since_seq=103).values()))
    assert again["xid.xid_drain[0000:04:00.0]"].verdict == "fail"
    assert again["xid.xid_drain[0000:04:00.0]"].message.startswith("measured 1")
    assert again["xid.xid_drain[0000:04:00.0]"].hint.endswith("after the fix, --set xid.since_seq=104")
    assert "xid.xid_drain[0000:05:00.0]" not in again  # its lines are before since_seq: no row of its own now


@pytest.mark.parametrize("init_error, why", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver here"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded"),
    (None, "nvidia-ml-py is not installed"),
])
def test_without_nvml_or_a_driver_a_bus_id_is_unchecked_not_fallen_off(tmp_path, monkeypatch, init_error, why):
    # A trial on a machine with no NVIDIA driver: every row said "a GPU that fell off the bus".
    library = None if init_error is None else FakeNvml(init_error=init_error)
    monkeypatch.setattr(nvml, "library", lambda: library)
    log = kernel_log(tmp_path / "kmsg", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.")
    measured = run(log, str(tmp_path / "no-driver"))
    note = measured["xid_drain[0000:3b:00.0]"].note
    assert measured["xid_drain[0000:3b:00.0]"].value == 1.0
    assert note.startswith("0000:3b:00.0 (cannot be checked against this node's GPUs: NVML not available (" + why)
    assert "and no NVIDIA driver lists GPUs here (no /proc/driver/nvidia/gpus)): Xid 79 x1" in note
    assert "fell off the bus)" not in note and "not a GPU this node lists" not in note
    # The driver's /proc lists GPUs although NVML is not available: a bus id it does not list is checked against it.
    (tmp_path / "driver/proc/driver/nvidia/gpus/0000:5e:00.0").mkdir(parents=True)
    listed = run(log, str(tmp_path / "driver"))
    assert listed["xid_drain[0000:3b:00.0]"].note.startswith(
        f"0000:3b:00.0 (not a GPU this node lists now: the driver does not know it; NVML not available: {why}")
    assert listed["xid_drain[0000:5e:00.0]"].note == \
        "GPU (no NVML index) of unknown model at 0000:5e:00.0: no drain Xid lines"


def test_lines_from_public_reports_are_counted_as_those_reports_need(tmp_path, no_gpu):
    # NVIDIA/NVSentinel#155: the driver found the GPU off the bus at load and logged no Xid line (one record,
    # its newlines written \x0a); open-gpu-kernel-modules#1151: Xid 79 without a pid, then the driver's own
    # sentence, counted once; leptonai/gpud#1174: NVLink5 Xids on a GB200's PCI domain, one Fatal, one Nonfatal.
    log = kernel_log(tmp_path / "kmsg",
                     "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\n"
                     "NVRM: fallen off the bus and is not responding to commands.",
                     "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
                     "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
                     "NVRM: Xid (PCI:0018:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 "
                     "0x00000000 0x00000000 0x00000000)",
                     "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 "
                     "0x00000001 0x00000000 0x00100000 0x00000004)")
    measured = run(log, no_gpu)
    probe, lost, nvlink = "0000:b3:00.0", "0000:2b:00.0", "0018:01:00.0"
    assert measured[f"xid_drain[{probe}]"].value == 1.0
    assert "no Xid line: the driver's fallen-off-the-bus message" in measured[f"xid_drain[{probe}]"].note
    assert "installed in this system has NVRM: fallen off the bus" in measured[f"xid_drain[{probe}]"].note
    assert measured[f"xid_drain[{lost}]"].value == 1.0  # the Xid line and the sentence after it: one event
    assert "no Xid line" not in measured[f"xid_drain[{lost}]"].note
    assert (measured[f"xid_drain[{nvlink}]"].value, measured[f"xid_application[{nvlink}]"].value) == (1.0, 1.0)
    assert "Xid 149 x1 (NVLINK_NETIR_ERROR, WORKFLOW_NVLINK5_ERR)" in measured[f"xid_drain[{nvlink}]"].note
    results = judged(tmp_path, "xid", GATE, list(measured.values()))
    assert {results[f"xid.xid_drain[{b}]"].verdict for b in (probe, lost, nvlink)} == {"fail"}


def test_a_log_longer_than_one_read_keeps_every_record(tmp_path):
    # A file returns many records per read() (the device one): a record cut by the read's size is joined.
    messages = [f"NVRM: Xid (PCI:0000:3b:00): 13, pid={n}, name=python, Graphics Exception: ESR 0x{n:05x}"
                for n in range(400)]
    log = kmsg.read(kernel_log(tmp_path / "kmsg", *messages, first=0))
    assert log.reason == "" and log.source == str(tmp_path / "kmsg")
    assert [record.seq for record in log.records] == list(range(401))
    assert log.records[0].message == "nvidia 0000:3b:00.0: enabling device (0000 -> 0002)"
    assert [record.message for record in log.records[1:]] == messages


def test_a_fifo_of_records_is_read_to_its_end_without_blocking(tmp_path):
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # held open: the reader meets EAGAIN, not end of file
    try:
        os.write(writer, b"4,7,1000,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
        log = kmsg.read(str(fifo))
    finally:
        os.close(writer)
    assert log.reason == ""
    assert log.records == (kmsg.Record(7, 1000, "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."),)


def test_the_real_kernel_log_is_read_record_by_record_without_blocking():
    # Only read: the reader opens /dev/kmsg non-blocking and returns at the end of the buffer, whatever it holds.
    try:
        os.close(os.open(kmsg.DEVICE, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as error:
        pytest.skip(f"{kmsg.DEVICE} cannot be read here: {error.strerror}")
    logs: list[kmsg.Log] = []
    reader = threading.Thread(target=lambda: logs.append(kmsg.read()), daemon=True)
    reader.start()
    reader.join(120)
    assert not reader.is_alive(), "kmsg.read() blocked on /dev/kmsg"
    log = logs[0]
    assert log.reason == "" and log.source == kmsg.DEVICE and log.records
    seqs = [record.seq for record in log.records]
    assert seqs == sorted(set(seqs))  # one record per read, oldest first


# Writes to the kernel log, as Python or as a command a test runs: open() of it in a mode w, a or r+, os.open
# with O_WRONLY or O_RDWR, Path.write_text/bytes, and a shell's redirection, tee, dd's of= or logger's kmsg option.
_WRITES = re.compile(r"""open\([^)\n]*kmsg[^)\n]*,\s*(mode\s*=\s*)?["'][^"']*[wax+]"""
                     r"|kmsg[^\n]*(O_(WRONLY|RDWR)|\.write_(text|bytes)\()"
                     r"|(>|\btee\s+(-a\s+)?|\bof=)\s*['\"]?/dev/kmsg|logger\s[^\n]*--kmsg", re.IGNORECASE)


def test_no_test_writes_the_kernel_log():
    found = [f"{path.relative_to(REPO)}:{text[:match.start()].count(chr(10)) + 1}: {match.group(0)}"
             for path in sorted((REPO / "tests").rglob("*.py")) for text in [path.read_text()]
             for match in _WRITES.finditer(text)]
    assert found == []
    # What the suite once ran, and the same as a command (split here, so that this file does not match itself).
    assert _WRITES.search('with open(kmsg.DEVICE, "' + 'w") as handle:')
    assert _WRITES.search("subprocess.run(['sh', '-c', 'echo NVRM: Xid > /dev/" + "kmsg'])")
    assert not _WRITES.search("fd = os.open(kmsg.DEVICE, os.O_RDONLY | os.O_NONBLOCK)")


def test_opening_the_kernel_log_for_writing_is_refused_in_every_test():
    # tests/conftest.py's audit hook: refused before the open reaches the kernel, whatever the caller's rights.
    flags = os.O_WRONLY  # nothing is written: the open itself is refused
    with pytest.raises(PermissionError, match="tests must never write the node's real kernel log"):
        os.close(os.open(kmsg.DEVICE, flags))


def _restrict(value: str) -> str:
    path = Path("/proc/sys/kernel/dmesg_restrict")
    old = path.read_text().strip()
    path.write_text(value)
    return old


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/proc/sys/kernel/dmesg_restrict", os.W_OK),
                    reason="setting kernel.dmesg_restrict and becoming nobody need root")
def test_an_unprivileged_reader_under_dmesg_restrict_is_unmeasurable_with_the_fix(tmp_path):
    script = ("import json; from tests.helpers import run_check; "
              "print(json.dumps({k: [m.value, m.reason] for k, m in run_check('xid').items()}))")
    with nobody.child() as child:  # the checkout may lie in a folder nobody cannot enter: a readable copy
        old = _restrict("1")
        try:
            done = subprocess.run([*nobody.SWITCH, "--inh-caps=-all", "--bounding-set=-all", child.python, "-c",
                                   script], cwd=child.cwd, capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "PYTHONPATH": child.pythonpath})
        finally:
            _restrict(old)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert set(rows) == {"xid_drain", "xid_application", "xid_other_gpus"}
    value, reason = rows["xid_drain"]
    assert value is None
    assert reason.startswith("cannot read the kernel log: /dev/kmsg: Operation not permitted (kernel.dmesg_restrict=1)")
    assert "capabilities.add: [SYSLOG]" in reason and "kernel.dmesg_restrict=0" in reason
    unread = [unmeasurable(name, reason) for name in rows]
    assert judged(tmp_path, "xid", GATE, unread)["xid.xid_drain"].verdict == "fail"
    assert judged(tmp_path, "xid", "required: false\n" + GATE, unread)["xid.xid_drain"].verdict == "skip"


def test_no_xid_lines_and_no_gpu_measure_zero_and_say_so():
    log = kmsg.Log((kmsg.Record(0, 0, "Linux version 6.18"), kmsg.Record(1, 10, "EXT4-fs (vda): mounted")), "")
    measured = keyed(xid.measurements(OPTIONS, log, {}))
    assert (measured["xid_drain"].value, measured["xid_application"].value) == (0.0, 0.0)
    assert measured["xid_drain"].note == "no NVRM Xid lines since boot, and no NVIDIA GPU listed"
    assert measured["xid_drain"].method == "/dev/kmsg, kernel log records seq 0-1"


def test_a_wrapped_ring_buffer_says_the_oldest_records_are_lost():
    log = kmsg.Log((kmsg.Record(5000, 9, "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics Exception"),), "", lost=2)
    measured = keyed(xid.measurements(OPTIONS, log, {}))
    method = measured["xid_application[0000:3b:00.0]"].method
    assert "the 5000 oldest records since boot were overwritten" in method and "2 records were overwritten" in method


def test_gpus_are_named_by_nvml_index_and_the_driver_model_a_lost_one_by_the_driver_alone(tmp_path, monkeypatch):
    for bus, model in (("0000:3b:00.0", "NVIDIA H100 80GB HBM3"), ("0000:5e:00.0", "NVIDIA H100 80GB HBM3")):
        folder = tmp_path / "proc/driver/nvidia/gpus" / bus
        folder.mkdir(parents=True)
        (folder / "information").write_text(f"Model: \t\t {model}\nIRQ:   \t\t 42\nBus Location: \t {bus}\n")
    import pynvml

    from tests.fakes.libnvml import installed
    installed(monkeypatch, FakeNvml([FakeGpu(bus_id="00000000:3B:00.0")]))  # the GPU at 5e fell off: NVML lost it
    session = nvml.open_session(pynvml)
    try:
        listed = xid.gpus(xid.nvml_indices(nvml.handles_by_bus(session)), root=str(tmp_path))
    finally:
        nvml.close(session)
    assert listed == {"0000:3b:00.0": xid.Gpu(0, "NVIDIA H100 80GB HBM3"),
                      "0000:5e:00.0": xid.Gpu(None, "NVIDIA H100 80GB HBM3")}
    log = kmsg.Log((kmsg.Record(7, 1_500_000, "NVRM: Xid (PCI:0000:5e:00): 79, pid=1, GPU has fallen off the bus."),), "")
    measured = keyed(xid.measurements(OPTIONS, log, listed))
    assert measured["xid_drain[0000:3b:00.0]"].value == 0.0
    assert measured["xid_drain[0000:3b:00.0]"].note == "GPU 0 NVIDIA H100 80GB HBM3 at 0000:3b:00.0: no drain Xid lines"
    assert measured["xid_drain[0000:5e:00.0]"].value == 1.0
    assert measured["xid_drain[0000:5e:00.0]"].note.startswith(
        "GPU (no NVML index) NVIDIA H100 80GB HBM3 at 0000:5e:00.0: Xid 79 x1 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, "
        "RESTART_BM), last at 1.5 s after boot (seq 7)")


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_application_codes_are_shown_not_drained(code):
    assert xid_catalog.classify(code) == "application"


@pytest.mark.parametrize("code", [48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 999])
def test_codes_of_a_broken_gpu_and_unknown_codes_drain(code):
    assert xid_catalog.classify(code) == "drain"


def test_xid_154_drains_unless_the_recovery_action_is_none():
    assert xid_catalog.classify(154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)") == "drain"
    assert xid_catalog.classify(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)") == \
        "application"


def test_a_line_that_is_not_an_xid_is_not_parsed():
    assert xid_catalog.parse("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15") is None
    assert xid_catalog.parse("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32") is None
    old_driver = xid_catalog.parse("NVRM: Xid (0000:03:00): 13, 0003 00000000 0000a197 00001808 00000000 00000000")
    assert old_driver is not None and (old_driver.bus_id, old_driver.code) == ("0000:03:00.0", 13)


def test_reading_a_missing_device_says_how_to_give_it_to_a_container(tmp_path):
    log = kmsg.read(str(tmp_path / "kmsg"))
    assert log.records == () and log.reason.startswith(f"cannot read the kernel log: {tmp_path / 'kmsg'}: No such file")
    assert "hostPath volume" in log.reason and "--device" in log.reason


@pytest.mark.parametrize("restrict, capabilities, cause", [
    ("1", "0000000000000000", "this process lacks CAP_SYSLOG"),
    ("1", "000001ffffffffff", "(kernel.dmesg_restrict=1, CAP_SYSLOG held): the container's device rules deny"),
    ("0", "0000000000000000", "(kernel.dmesg_restrict=0, CAP_SYSLOG not needed): the container's device rules deny"),
])
def test_eperm_names_its_cause_the_restriction_or_the_containers_device_rules(tmp_path, restrict, capabilities, cause):
    # kubernetes/node-problem-detector#698: a pod with a hostPath /dev/kmsg and every capability, not privileged,
    # is still refused: CAP_SYSLOG is then not the fix, privileged is.
    (tmp_path / "restrict").write_text(restrict + "\n")
    (tmp_path / "status").write_text(f"Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t{capabilities}\n")
    reason = kmsg.unreadable("/dev/kmsg", PermissionError(1, "Operation not permitted"), str(tmp_path / "restrict"),
                             str(tmp_path / "status"))
    assert reason.startswith("cannot read the kernel log: /dev/kmsg: Operation not permitted (")
    assert cause in reason
    assert ("capabilities.add: [SYSLOG]" in reason) == (cause == "this process lacks CAP_SYSLOG")
