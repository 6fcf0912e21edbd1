"""The xid check against the real kernel ring buffer: lines written into /dev/kmsg are read back and judged.

Every test that writes uses a PCI domain of its own (``bus``), absent from this machine, and asserts the rows of
that bus id only: the ring buffer keeps what is written until reboot, and other runs write there too.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.checks import xid
from preflight.host import kmsg, nvml, xid_catalog
from preflight.measurement import unmeasurable
from tests.fakes.gpu import FakeGpu, FakeNvml
from tests.helpers import REPO, judged, keyed, run_check

GATE = "xid_drain: {max: 0}"


def _can_write_kmsg() -> bool:
    return os.geteuid() == 0 and os.access(kmsg.DEVICE, os.W_OK)


needs_kmsg = pytest.mark.skipif(not _can_write_kmsg(), reason="writing /dev/kmsg needs root")


@pytest.fixture
def bus() -> str:
    """A PCI ``domain:bus:device`` prefix no device of this machine has and no earlier run wrote: ``a3f1:3b``."""
    domains = {name.split(":")[0] for name in os.listdir("/sys/bus/pci/devices")} if os.path.isdir(
        "/sys/bus/pci/devices") else set()
    while True:
        domain = f"{0xa000 + secrets.randbelow(0x5000):04x}"
        if domain not in domains and not any(domain in r.message for r in kmsg.read().records):
            return domain


def inject(*lines: str) -> None:
    """Write each line into the kernel log as one record (a fresh open each: /dev/kmsg rate-limits per open file)."""
    for line in lines:
        with open(kmsg.DEVICE, "w") as handle:
            handle.write(line + "\n")


@needs_kmsg
def test_xid_lines_written_into_the_kernel_log_are_read_back_per_gpu_and_class(tmp_path, bus):
    fallen = f"NVRM: Xid (PCI:{bus}:3b:00): 79, pid=1234, GPU has fallen off the bus."
    inject(fallen, fallen,
           f"NVRM: Xid (PCI:{bus}:3b:00): 48, pid=1234, name=python, Ch 00000010, An uncorrectable double bit error",
           *[f"NVRM: Xid (PCI:{bus}:3b:00): 13, pid=4321, name=python, Graphics Exception: ESR 0x50{n}" for n in range(3)],
           f"NVRM: Xid (PCI:{bus}:3b:00): 43, pid=4321, name=python, Ch 00000008",
           f"NVRM: Xid (PCI:{bus}:3c:00): 31, pid=99, name=train.py, Ch 00000008, intr 00000000. MMU Fault")
    measured = run_check("xid")
    first, second = f"{bus}:3b:00.0", f"{bus}:3c:00.0"
    assert measured[f"xid_drain[{first}]"].value == 3.0
    assert measured[f"xid_application[{first}]"].value == 4.0
    assert (measured[f"xid_drain[{second}]"].value, measured[f"xid_application[{second}]"].value) == (0.0, 1.0)
    note = measured[f"xid_drain[{first}]"].note
    assert note.startswith(f"{first} (not a GPU this node lists now")
    assert "Xid 48 x1 (ROBUST_CHANNEL_GPU_ECC_DBE, WORKFLOW_XID_48)" in note
    assert "Xid 79 x2 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM), last at " in note
    assert "'pid=1234, GPU has fallen off the bus.'" in note
    assert "Xid 13 x3 (ROBUST_CHANNEL_GR_EXCEPTION, RESTART_APP)" in measured[f"xid_application[{first}]"].note
    assert measured[f"xid_drain[{first}]"].method.startswith("/dev/kmsg, kernel log records seq ")
    results = judged(tmp_path, "xid", GATE, list(measured.values()))
    drained = results[f"xid.xid_drain[{first}]"]
    assert drained.verdict == "fail" and drained.message.startswith("measured 3")
    assert "RESTART_BM: reboot the node" in drained.hint and "WORKFLOW_XID_48: reset the GPU" in drained.hint
    assert results[f"xid.xid_drain[{second}]"].verdict == "pass"
    assert results[f"xid.xid_application[{first}]"].verdict == "info"  # counted and shown, never gating
    # The log keeps the lines until reboot: counting from the seq the hint names leaves the drain lines out,
    # and the later lines (the application's, written after them) in.
    after = int(drained.hint.rsplit("since_seq=", 1)[1])
    later = run_check("xid", since_seq=after)
    assert (later[f"xid_drain[{first}]"].value, later[f"xid_application[{first}]"].value) == (0.0, 4.0)
    assert f", counted from seq {after} (" in later[f"xid_drain[{first}]"].method


@needs_kmsg
def test_lines_from_public_reports_are_counted_as_those_reports_need(tmp_path, bus):
    # NVIDIA/NVSentinel#155: the driver found the GPU off the bus at load and logged no Xid line (one record,
    # its newlines kept); open-gpu-kernel-modules#1151: Xid 79 without a pid, then the driver's own sentence,
    # counted once; leptonai/gpud#1174: NVLink5 Xids on a GB200's PCI domain, one Fatal, one Nonfatal.
    inject(f"NVRM: The NVIDIA GPU {bus}:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\n"
           f"NVRM: fallen off the bus and is not responding to commands.",
           f"NVRM: Xid (PCI:{bus}:2b:00): 79, GPU has fallen off the bus.",
           f"NVRM: GPU {bus}:2b:00.0: GPU has fallen off the bus.",
           f"NVRM: Xid (PCI:{bus}:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 "
           f"0x00000000 0x00000000 0x00000000)",
           f"NVRM: Xid (PCI:{bus}:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 "
           f"0x00000000 0x00100000 0x00000004)")
    measured = run_check("xid")
    probe, lost, nvlink = f"{bus}:b3:00.0", f"{bus}:2b:00.0", f"{bus}:01:00.0"
    assert measured[f"xid_drain[{probe}]"].value == 1.0
    assert "no Xid line: the driver's fallen-off-the-bus message" in measured[f"xid_drain[{probe}]"].note
    assert "installed in this system has NVRM: fallen off the bus" in measured[f"xid_drain[{probe}]"].note
    assert measured[f"xid_drain[{lost}]"].value == 1.0  # the Xid line and the sentence after it: one event
    assert "no Xid line" not in measured[f"xid_drain[{lost}]"].note
    assert (measured[f"xid_drain[{nvlink}]"].value, measured[f"xid_application[{nvlink}]"].value) == (1.0, 1.0)
    assert "Xid 149 x1 (NVLINK_NETIR_ERROR, WORKFLOW_NVLINK5_ERR)" in measured[f"xid_drain[{nvlink}]"].note
    results = judged(tmp_path, "xid", GATE, list(measured.values()))
    assert {results[f"xid.xid_drain[{b}]"].verdict for b in (probe, lost, nvlink)} == {"fail"}


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
    old = _restrict("1")
    try:
        done = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all",
                               "--bounding-set=-all", sys.executable, "-c", script], cwd=REPO, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        _restrict(old)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert set(rows) == {"xid_drain", "xid_application"}
    value, reason = rows["xid_drain"]
    assert value is None
    assert reason.startswith("cannot read the kernel log: /dev/kmsg: Operation not permitted (kernel.dmesg_restrict=1)")
    assert "capabilities.add: [SYSLOG]" in reason and "kernel.dmesg_restrict=0" in reason
    unread = [unmeasurable(name, reason) for name in rows]
    assert judged(tmp_path, "xid", GATE, unread)["xid.xid_drain"].verdict == "fail"
    assert judged(tmp_path, "xid", "required: false\n" + GATE, unread)["xid.xid_drain"].verdict == "skip"


def test_no_xid_lines_and_no_gpu_measure_zero_and_say_so():
    log = kmsg.Log((kmsg.Record(0, 0, "Linux version 6.18"), kmsg.Record(1, 10, "EXT4-fs (vda): mounted")), "")
    measured = keyed(xid.measurements({"since_seq": 0}, log, {}))
    assert (measured["xid_drain"].value, measured["xid_application"].value) == (0.0, 0.0)
    assert measured["xid_drain"].note == "no NVRM Xid lines since boot, and no NVIDIA GPU listed"
    assert measured["xid_drain"].method == "/dev/kmsg, kernel log records seq 0-1"


def test_a_wrapped_ring_buffer_says_the_oldest_records_are_lost():
    log = kmsg.Log((kmsg.Record(5000, 9, "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics Exception"),), "", lost=2)
    measured = keyed(xid.measurements({"since_seq": 0}, log, {}))
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
    measured = keyed(xid.measurements({"since_seq": 0}, log, listed))
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
