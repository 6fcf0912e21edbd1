"""Xid errors in the kernel log since boot, by GPU and code: the NVIDIA driver's record of a GPU that failed.

Method: read the kernel ring buffer as ``dmesg`` does (``host/kmsg``), keep the ``NVRM: Xid`` lines, and
count them per GPU (the line's PCI bus id; NVML's index and the driver's model name where this node lists the
GPU) in two classes of NVIDIA's Xid catalog (``host/xid_catalog``, docs.nvidia.com/deploy/xid-errors/
analyzing-xid-catalog.html): ``xid_drain`` (a GPU reset, a reboot, a mechanical check or NVIDIA support:
48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92/94/95 ECC, 119/120 GSP, ...) and
``xid_application`` (the application's own fault: 13, 31, 43, 45, ...). Meta's Llama 3 report counts 58.7 % of
419 interruptions as GPU-related, mostly HBM and fallen-off-the-bus faults: both log Xid lines first.

A line whose bus id names no GPU this node lists now is still counted, in a row of its own: a GPU that fell
off the bus (Xid 79) may no longer be listed by NVML or PCI, and it is exactly the GPU to report. Where neither
NVML nor the driver's /proc/driver/nvidia/gpus can list GPUs (no driver, no nvidia-ml-py), the row says the bus
id could not be checked against the node's GPUs, not that the GPU fell off. The log keeps its lines until
reboot, also after the GPU was reset: ``since_seq`` starts the count at a later record, for the whole node, so
each row's fix names one value, past the last drain line of every GPU.

/dev/kmsg is the whole host's log, while libnvidia-container gives a container only its own GPUs under NVML and
/proc/driver/nvidia/gpus. Where the PCI bus (sysfs, the host's whole tree) holds NVIDIA GPUs neither lists, the
gate sees part of the node: a line on one of those is another container's GPU, shown in ``xid_other_gpus`` and
not judged (``other_gpus: judge`` counts it as the node's own).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Mapping, NamedTuple

from preflight.checks.base import Budget, Metric, Option, Timing
from preflight.host import gpu_visibility, kmsg, nvml, xid_catalog
from preflight.measurement import Measurement, unmeasurable

NAME = "xid"
HELP = "NVIDIA Xid errors in the kernel log since boot, per GPU: codes that mean drain the node, and application faults"
RUNS_AS = "gate"  # the kernel log is the node's, read as root (or CAP_SYSLOG) whoever the job is
DURATION = "not used: one read of the kernel log (/dev/kmsg), well under a second"
OPTIONS = (
    Option("since_seq", "int", 0, "count kernel log records from this sequence number on (0: since boot), for "
           "every GPU of the node; after fixing the GPUs, the one value the failing rows name, as the log keeps Xid "
           "lines until reboot", minimum=0),
    Option("other_gpus", "choice", "show", "an Xid line on a GPU of the node that this container was not given "
           "(the PCI bus holds NVIDIA GPUs that NVML and the driver do not list here): `show` counts it in "
           "xid_other_gpus, never judged; `judge` counts it in xid_drain and xid_application as this node's own",
           choices=("show", "judge")),
)
_CATALOG = "NVIDIA's Xid catalog, docs.nvidia.com/deploy/xid-errors"
METRICS = (
    Metric("xid_drain", "", False, f"Xid lines since boot whose catalog action is not the application's (GPU reset, "
           f"reboot, mechanical check, NVIDIA support), and codes the catalog does not list; /dev/kmsg read as dmesg "
           f"does ({_CATALOG})", per_device=True,
           hint="drain the node and act as the NVIDIA Xid catalog says for each code; the log keeps the lines until "
                "reboot: after a GPU reset, set xid.since_seq past them"),
    Metric("xid_application", "", False, f"Xid lines since boot whose catalog action is restarting the application "
           f"or none (13, 31, 43, 45: the job's fault, not the GPU's); /dev/kmsg ({_CATALOG})", per_device=True),
    Metric("xid_other_gpus", "", False, "Xid lines since boot, of every class, on a GPU of the node's PCI bus that "
           "NVML and the driver do not list here: another container's GPU (libnvidia-container lists only the "
           "container's own; /dev/kmsg is the host's); shown, never judged by the bundled gate (other_gpus: judge "
           "counts them in xid_drain and xid_application instead)", per_device=True),
)
_PROC = "proc/driver/nvidia/gpus"  # the driver's per-GPU directory, under the root
# What a bus id no listed GPU has means where NVML and the driver both list GPUs (``unlisted`` says it for each case).
_UNLISTED = "not a GPU this node lists now: NVML and the driver do not know it; a GPU that fell off the bus"
_ACTIONS = {
    "RESET_GPU": "reset the GPU (nvidia-smi -r) or reboot",
    "RESTART_BM": "reboot the node",
    "RESTART_VM": "restart the VM",
    "CHECK_MECHANICALS": "check the GPU's seating, power and cooling",
    "CONTACT_SUPPORT": "run nvidia-bug-report.sh and contact NVIDIA support",
    "UPDATE_SWFW": "update the driver and GPU firmware",
    "WORKFLOW_XID_48": "reset the GPU; if it repeats, read nvidia-smi -q -d ROW_REMAPPER and replace the GPU",
    "WORKFLOW_NVLINK_ERR": "reset the GPU and check its NVLinks (nvidia-smi nvlink -s)",
    "WORKFLOW_NVLINK5_ERR": "reset the GPU and check its NVLinks (nvidia-smi nvlink -s)",
    "RECOVERY_ACTION": "do what the line's new recovery action says",
}


class Outside(NamedTuple):
    """The node's NVIDIA GPUs this process was not given, where it can tell: empty where it sees them all."""

    buses: tuple[str, ...]  # bus ids on the PCI bus that neither NVML nor the driver lists here
    said: str  # "this container is given 1 of the node's 2 NVIDIA GPUs (...)", or why no GPU is another's


UNREAD = Outside((), "the node's PCI bus was not read")


class Gpu(NamedTuple):
    """A GPU this node lists at a PCI bus id: NVML's index (None where NVML cannot say) and the driver's name."""

    index: int | None
    name: str


def measure(options: Mapping[str, Any], budget: Budget, log: str = kmsg.DEVICE, root: str = "/") -> list[Measurement]:
    """Read the kernel log and this node's GPUs, and count the Xid lines per GPU and class.

    ``log`` (the kernel log's path, ``/dev/kmsg``) and ``root`` (where ``/proc/driver/nvidia`` and
    ``/sys/bus/pci`` are looked for) are for tests: a file of records in /dev/kmsg's format that the test wrote,
    and a directory of its own.
    """
    session = nvml.open_session(nvml.library())
    try:
        devices = nvml.handles_by_bus(session)
    finally:
        nvml.close(session)
    listed = gpus(nvml_indices(devices), root)
    others = outside(devices, listed, gpu_visibility.nvidia_pci_gpus(root))
    return measurements(options, kmsg.read(log), listed, unlisted(devices, root, others), others)


def nvml_indices(devices: nvml.Devices) -> dict[str, int]:
    """NVML's index (nvidia-smi's) of each GPU by bus id, where NVML opened every GPU it counts ({} otherwise).

    ``handles_by_bus`` resolves GPUs index by index, so its order is NVML's; a GPU it could not open (another
    job's, or one lost off the bus) leaves the indices after it unknown, and then none is given.
    """
    if devices.count is None or devices.count != len(devices.handles):
        return {}
    return {bus: index for index, bus in enumerate(devices.handles)}


def gpus(indices: Mapping[str, int], root: str = "/") -> dict[str, Gpu]:
    """Every GPU NVML (``indices``) or the driver's ``/proc/driver/nvidia/gpus`` lists, by bus id, in index order.

    The name is the driver's ``Model:`` line, which it keeps for a GPU NVML has lost.
    """
    try:
        listed = sorted(os.listdir(os.path.join(root, _PROC)))
    except OSError:
        listed = []
    found = {nvml.normalise_bus_id(bus): Gpu(indices.get(nvml.normalise_bus_id(bus)), _model(root, bus))
             for bus in listed}
    for bus, index in indices.items():
        found.setdefault(bus, Gpu(index, ""))
    return dict(sorted(found.items(), key=lambda item: (item[1].index is None, item[1].index or 0, item[0])))


def outside(devices: nvml.Devices, listed: Mapping[str, Gpu], pci: list[str]) -> Outside:
    """The GPUs on the PCI bus (``pci``, the host's whole set) that this process was not given: neither NVML
    (``devices``) nor the driver lists them here (``listed``, from ``gpus``).

    Said only where this process's own GPUs are all placed: NVML or the driver answered, and every GPU NVML counts
    has a bus id here (an own GPU that NVML lost and the driver does not list might be any of the others).
    """
    # Without NVML, the driver's list alone places this process's GPUs; with it, every GPU it counts must be listed.
    placed = bool(listed) if devices.reason else len(listed) >= (devices.count or 0)
    others = tuple(bus for bus in pci if bus not in listed)
    if not others:
        return Outside((), "the PCI bus holds no NVIDIA GPU that NVML and the driver do not list here")
    if not placed:
        return Outside((), f"not every GPU NVML counts is listed here, so {', '.join(others)} on the PCI bus may be "
                           f"this container's own")
    given = ", ".join(listed) or "none"
    return Outside(others, f"this container is given {len(listed)} of the node's {len(listed) + len(others)} NVIDIA "
                           f"GPUs (its own: {given}; the PCI bus also holds {', '.join(others)})")


def unlisted(devices: nvml.Devices, root: str = "/", others: Outside = UNREAD) -> str:
    """What a bus id none of the node's listed GPUs has means, by what could list them: NVML (``devices``) and the
    driver (``/proc/driver/nvidia/gpus`` under ``root``). With neither, the bus id cannot be checked at all; where
    this container is given part of the node (``others``), the GPU may be another container's.
    """
    listers = (["NVML"] if not devices.reason else []) + (["the driver"] if os.path.isdir(os.path.join(root, _PROC))
                                                         else [])
    if not listers:
        return (f"cannot be checked against this node's GPUs: NVML not available ({devices.reason}), and no "
                f"NVIDIA driver lists GPUs here (no /{_PROC})")
    missing = f"; NVML not available: {devices.reason}" if devices.reason else ""
    partial = f"; {others.said}: it may also be another container's" if others.buses else ""
    return (f"not a GPU this node lists now: {' and '.join(listers)} {'do' if len(listers) > 1 else 'does'} not "
            f"know it{missing}; a GPU that fell off the bus{partial}")


def measurements(options: Mapping[str, Any], log: kmsg.Log, listed: Mapping[str, Gpu],
                 unknown: str = _UNLISTED, others: Outside = UNREAD) -> list[Measurement]:
    """The two metrics per GPU, from ``log`` (the records read, or why not) and the GPUs this node ``listed``;
    ``unknown`` (``unlisted``) is what a bus id no listed GPU has means here, said in its rows. A line on one of
    ``others`` (another container's GPU) is counted in ``xid_other_gpus`` unless ``other_gpus`` is ``judge``.
    """
    if log.reason:
        return [unmeasurable(metric.name, log.reason) for metric in METRICS]
    since = int(options["since_seq"])
    records = [r for r in log.records if r.seq >= since]
    lines = _deduplicated([(record, xid) for record in records
                           for xid in [xid_catalog.parse(record.message)] if xid is not None])
    method = _method(log, records, since)
    judging = options["other_gpus"] == "judge"
    shown = [] if judging else [(record, xid) for record, xid in lines if xid.bus_id in others.buses]
    lines = [(record, xid) for record, xid in lines if judging or xid.bus_id not in others.buses]
    targets = list(listed) + sorted({xid.bus_id for _, xid in lines} - set(listed))
    elsewhere = _elsewhere(shown, others, judging, method)
    if not targets:
        note = f"no NVRM Xid lines {'since boot' if since == 0 else f'from seq {since} on'}, and no NVIDIA GPU listed"
        return [Measurement(metric, 0.0, "", method=method, note=note)
                for metric in ("xid_drain", "xid_application")] + elsewhere
    drained = [(record, xid) for record, xid in lines if xid.xid_class == "drain"]
    results = []
    for bus in targets:
        mine = [(record, xid) for record, xid in lines if xid.bus_id == bus]
        who = (f"{bus} (another container's GPU: {others.said}; judged as this node's own, xid.other_gpus: judge)"
               if bus in others.buses else _who(bus, listed.get(bus), unknown))
        for metric, kind in (("xid_drain", "drain"), ("xid_application", "application")):
            found = [(record, xid) for record, xid in mine if xid.xid_class == kind]
            note = f"{who}: " + (_groups(found) if found else f"no {kind} Xid lines")
            hint = _hint(found, drained) if kind == "drain" and found else ""
            results.append(Measurement(metric, float(len(found)), "", device=bus, method=method, note=note, hint=hint))
    return results + elsewhere


def _elsewhere(shown: list[tuple[kmsg.Record, xid_catalog.Xid]], others: Outside, judging: bool,
               method: str) -> list[Measurement]:
    """One ``xid_other_gpus`` row per GPU of another container with Xid lines (``shown``), every class counted;
    else one row of 0 saying why there is none, so that a threshold on the metric always meets a value."""
    if judging and others.buses:
        note = f"counted in xid_drain and xid_application as this node's own (other_gpus: judge); {others.said}"
        return [Measurement("xid_other_gpus", 0.0, "", method=method, note=note)]
    if not shown:
        note = f"no Xid lines on another container's GPU: {others.said}"
        return [Measurement("xid_other_gpus", 0.0, "", method=method, note=note)]
    rows = []
    for bus in sorted({xid.bus_id for _, xid in shown}):
        mine = [(record, xid) for record, xid in shown if xid.bus_id == bus]
        note = f"{bus}, another container's GPU ({others.said}): {_groups(mine)}"
        rows.append(Measurement("xid_other_gpus", float(len(mine)), "", device=bus, method=method, note=note))
    return rows


def _deduplicated(lines: list[tuple[kmsg.Record, xid_catalog.Xid]]) -> list[tuple[kmsg.Record, xid_catalog.Xid]]:
    """``lines`` without the "fallen off the bus" messages of a GPU that also has a logged Xid 79 (they repeat it)."""
    logged = {xid.bus_id for _, xid in lines if xid.logged and xid.code == xid_catalog.FALLEN_OFF_THE_BUS}
    return [(record, xid) for record, xid in lines if xid.logged or xid.bus_id not in logged]


def _method(log: kmsg.Log, records: list[kmsg.Record], since: int) -> str:
    if not log.records:
        return f"{log.source}: the kernel log held no records"
    first, last = log.records[0].seq, log.records[-1].seq
    text = f"{log.source}, kernel log records seq {first}-{last}"
    if since:
        text += f", counted from seq {since} ({len(records)} records)"
    if first > 0:
        text += f"; the {first} oldest records since boot were overwritten (ring buffer full): Xid lines there are lost"
    if log.lost:
        text += f"; {log.lost} records were overwritten while reading"
    return text


def _who(bus: str, gpu: Gpu | None, unknown: str) -> str:
    if gpu is None:
        return f"{bus} ({unknown})"
    index = f"GPU {gpu.index}" if gpu.index is not None else "GPU (no NVML index)"
    return f"{index} {gpu.name or 'of unknown model'} at {bus}"


def _groups(found: list[tuple[kmsg.Record, xid_catalog.Xid]]) -> str:
    """``Xid 79 x2 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, RESTART_BM), last at 12.3 s: "text"``, per code."""
    counts = Counter(xid.code for _, xid in found)
    parts = []
    for code, count in sorted(counts.items()):
        record, xid = [pair for pair in found if pair[1].code == code][-1]
        raised = f"; {xid_catalog.RAISED[code]}" if code in xid_catalog.RAISED else ""
        raised += "" if xid.logged else "; no Xid line: the driver's fallen-off-the-bus message"
        parts.append(f"Xid {code} x{count} ({xid.mnemonic}, {xid.action}{raised}), last at {record.usec / 1e6:.1f} s "
                     f"after boot (seq {record.seq}): {xid.text[:120]!r}")
    return "; ".join(parts)


def _hint(found: list[tuple[kmsg.Record, xid_catalog.Xid]], drained: list[tuple[kmsg.Record, xid_catalog.Xid]]) -> str:
    """The fix for one GPU's drain lines (``found``), and the one ``since_seq`` that leaves out the drain lines of
    every GPU (``drained``): it applies to the whole node, so a value per GPU would leave the others failing.
    """
    actions = dict.fromkeys(xid.action for _, xid in found)
    fixes = "; ".join(f"{action}: {_ACTIONS.get(action, 'see the Xid catalog')}" for action in actions)
    last = max(record.seq for record, _ in drained)
    gpus = len({xid.bus_id for _, xid in drained})
    fixed = "after the fix" if gpus == 1 else f"once all {gpus} GPUs with drain Xid lines are fixed, for the whole node"
    return (f"drain the node, then {fixes} (NVIDIA Xid catalog); the log keeps these lines until reboot: {fixed}, "
            f"--set xid.since_seq={last + 1}")


def _model(root: str, bus: str) -> str:
    try:
        with open(os.path.join(root, _PROC, bus, "information")) as handle:
            for line in handle:
                if line.startswith("Model:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def timing(options: Mapping[str, Any], budget: Budget) -> Timing:
    """No measuring time: one read of the kernel log and NVML's GPU list, well under a second."""
    return Timing(0.0, 0.5)
