"""The NVML half of the GPU seam: every pynvml call preflight makes is in this module.

Functions take the NVML library as an argument: the real ``pynvml`` module (from
nvidia-ml-py) in production, and in CPU tests a fake with the same function names that
raises the real ``pynvml.NVMLError`` codes. ``CALLS`` names every function used here, so a
test can check each against the installed nvidia-ml-py's signatures.

Method and meanings: NVML API reference (docs.nvidia.com/deploy/nvml-api), "Device
Queries"; the health readings are the ones NVIDIA's GPU debug guidelines and DCGM's
diagnostics check before a job (ECC, retired pages / row remapping, PCIe link, clocks).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Sequence

from preflight.measurement import Measurement, not_applicable, unmeasurable

CALLS = (
    "nvmlInit", "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPciInfo", "nvmlDeviceGetUUID",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature", "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementDefaultLimit",
)
# Calls NVML replaced, each with its predecessor. NVML API reference, "Deprecation and/or Removal
# Notices": the predecessors are deprecated since CUDA 13.0 and removed in CUDA 14.0, where they
# return NVML_ERROR_DEPRECATED; the clock-event bits are the throttle-reason bits renamed. The new
# call is made first; only a driver or an nvidia-ml-py older than it gets the predecessor.
PREDECESSORS = {
    "nvmlDeviceGetCurrentClocksEventReasons": "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTemperatureV": "nvmlDeviceGetTemperature",
}

# Clock-event bits (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*) that mean the GPU is
# held back by heat, power or a hardware fault. GpuIdle, ApplicationsClocksSetting and SyncBoost are
# normal states and not counted.
ADVERSE_THROTTLE = {
    0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
GPU_IDLE = 0x1  # nvmlClocksEventReasonGpuIdle: nothing runs on the GPU, its clocks and PCIe link step down
# The readings an idle GPU lowers to save power: NVML's nvmlDeviceGetCurrPcieLinkGeneration/Width ("may be
# reduced when the GPU is not in use", as nvidia-smi's pcie.link.gen.current says), each with its maximum.
IDLE_LOWERED = {"pcie_link_gen": "pcie_link_gen_max", "pcie_link_width": "pcie_link_width_max"}


NOT_SUPPORTED = ("NVML answers Not Supported for this GPU: it lacks the feature, or a vGPU or cloud guest does not "
                 "expose it")


class Session(NamedTuple):
    """An initialised NVML, or why there is none (``lib`` is None then)."""

    lib: Any
    reason: str


class System(NamedTuple):
    driver_version: str | None  # "550.54.15"
    cuda_driver_version: str | None  # highest CUDA the driver supports, "12.4"
    reason: str  # why NVML could not answer, "" when it did


def open_session(lib: Any) -> Session:
    """``nvmlInit`` with each failure explained; call ``close`` when done if ``lib`` is set."""
    if lib is None:
        return Session(None, "nvidia-ml-py is not installed: pip install nvidia-ml-py")
    try:
        lib.nvmlInit()
    except lib.NVMLError_LibraryNotFound:
        return Session(None, "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver here, or the container "
                             "was started without the NVIDIA runtime (--gpus all / runtimeClassName: nvidia)")
    except lib.NVMLError_DriverNotLoaded:
        return Session(None, "NVIDIA driver not loaded: load the kernel module (modprobe nvidia) or fix the driver "
                             "install; see dmesg")
    except lib.NVMLError as error:
        return Session(None, f"NVML failed to initialise ({describe(lib, error)})")
    return Session(lib, "")


def close(session: Session) -> None:
    """``nvmlShutdown`` for a session ``open_session`` started (nothing when it failed)."""
    if session.lib is not None:
        session.lib.nvmlShutdown()


def library() -> Any:
    """The real pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def system(session: Session) -> System:
    """The driver version and the highest CUDA version it supports (``12040`` -> ``"12.4"``)."""
    if session.lib is None:
        return System(None, None, session.reason)
    lib = session.lib
    try:
        driver = _text(lib.nvmlSystemGetDriverVersion())
        cuda = lib.nvmlSystemGetCudaDriverVersion()
    except lib.NVMLError as error:
        return System(None, None, f"NVML driver query failed ({describe(lib, error)})")
    return System(driver, f"{cuda // 1000}.{cuda % 1000 // 10}", "")


class Devices(NamedTuple):
    """The GPUs NVML lists, each resolved on its own, so one that cannot be read leaves the others readable."""

    handles: dict[str, Any]  # by normalised PCI bus id (``0000:3b:00.0``)
    count: int | None  # nvmlDeviceGetCount: every GPU the driver has, those this process may not open too
    hidden: tuple[int, ...]  # NVML indices this process may not open (NO_PERMISSION): GPUs of other jobs
    unreadable: tuple[str, ...]  # one line per other GPU NVML could not open or place (GPU lost), with the fix
    reason: str  # why NVML lists nothing (not initialised, no count), "" when it counted
    uuids: dict[str, str] = {}  # normalised UUID (``normalise_uuid``) -> PCI bus id, for each GPU NVML gave one

    def missing(self, bus_id: str) -> str:
        """Why NVML has no handle for the GPU torch sees at ``bus_id``: names the GPUs NVML could not read."""
        return self.lacking(f"at PCI {bus_id or '(unknown: torch gave no PCI id)'}")

    def lacking(self, what: str) -> str:
        """Why NVML has no GPU ``what`` ("at PCI 0000:3b:00.0", "with UUID GPU-..."), naming those it could not read."""
        if self.reason:
            return self.reason
        lines = [f"NVML lists no GPU {what}"]
        lines += [f"it could not read {line}" for line in self.unreadable]
        if self.hidden:
            lines.append(f"it may not open NVML {_indices(self.hidden)} (no permission): run with access to their "
                         f"/dev/nvidia* devices")
        return "; ".join(lines)


def handles_by_bus(session: Session) -> Devices:
    """Every GPU NVML lists, resolved index by index (``nvmlDeviceGetHandleByIndex``, then its PCI bus id and UUID).

    ``nvmlDeviceGetCount`` counts GPUs this process may not open: under a cgroup device
    restriction (Slurm with GRES, a container given some of a node's GPUs) their handles
    answer NO_PERMISSION. Those are another job's GPUs and not this one's problem, so they
    are only counted (``hidden``). Any other error (GPU_IS_LOST: the GPU fell off the bus) is
    kept with its fix (``unreadable``), for the GPU torch sees that NVML then cannot read.
    NVML API reference, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID.
    """
    lib = session.lib
    if lib is None:
        return Devices({}, None, (), (), session.reason)
    try:
        count = lib.nvmlDeviceGetCount()
    except lib.NVMLError as error:
        return Devices({}, None, (), (), f"NVML could not count devices ({describe(lib, error)})")
    handles: dict[str, Any] = {}
    uuids: dict[str, str] = {}
    hidden: list[int] = []
    unreadable: list[str] = []
    for index in range(count):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            bus_id = normalise_bus_id(_text(lib.nvmlDeviceGetPciInfo(handle).busId))
            handles[bus_id] = handle
        except lib.NVMLError as error:
            if getattr(error, "value", None) == lib.NVML_ERROR_NO_PERMISSION:
                hidden.append(index)
            else:
                unreadable.append(f"NVML GPU {index}: {describe(lib, error)}")
            continue
        try:
            uuids[normalise_uuid(_text(lib.nvmlDeviceGetUUID(handle)))] = bus_id
        except lib.NVMLError:
            pass  # the UUID is one key among others; the bus id places the GPU still
    return Devices(handles, count, tuple(hidden), tuple(unreadable), "", uuids)


class Located(NamedTuple):
    """The NVML GPU that is one of torch's, and how it was found."""

    handle: Any  # the NVML handle, None when none was found
    bus_id: str  # its PCI bus id (``0000:3b:00.0``), "" when none was found
    key: str  # what matched it, for the rows' method: "PCI bus id ...", "UUID GPU-...", "CUDA's numbering ..."
    reason: str  # why none was found, "" when one was


def locate(devices: Devices, cuda_devices: Sequence[Any], environ: Mapping[str, str]) -> list[Located]:
    """The NVML GPU of each of torch's ``cuda_devices`` (``gpu.Device``), by the surest key this torch gives.

    1. The PCI bus id torch reports (recent torch binds cudaDeviceProp's pci ids).
    2. Else its UUID (torch 2.4+) against ``nvmlDeviceGetUUID``: the same 16 bytes, NVML's text with a
       ``GPU-`` prefix, torch's without.
    3. Else (torch 2.2, 2.3) the order CUDA numbers GPUs in, where NVML can know it (``cuda_order``).
    """
    order: tuple[list[str], str, str] | None = None
    located = []
    for device in cuda_devices:
        if devices.reason:
            located.append(Located(None, "", "", devices.reason))
        elif device.bus_id:
            handle = devices.handles.get(device.bus_id)
            located.append(Located(handle, device.bus_id if handle is not None else "", f"PCI bus id {device.bus_id}",
                                   "" if handle is not None else devices.missing(device.bus_id)))
        elif device.uuid:
            bus_id = devices.uuids.get(normalise_uuid(device.uuid), "")
            located.append(Located(devices.handles.get(bus_id), bus_id, f"UUID GPU-{device.uuid}",
                                   "" if bus_id else devices.lacking(f"with UUID GPU-{device.uuid}")))
        else:
            order = order or cuda_order(devices, len(cuda_devices), environ)
            buses, setting, reason = order
            if reason:
                located.append(Located(None, "", "", reason))
            else:
                bus_id = buses[device.index]
                located.append(Located(devices.handles[bus_id], bus_id, f"CUDA's numbering ({setting}): "
                                       f"cuda:{device.index} is PCI {bus_id}", ""))
    return located


def cuda_order(devices: Devices, seen: int, environ: Mapping[str, str]) -> tuple[list[str], str, str]:
    """The PCI bus ids of the GPUs CUDA numbers 0, 1, ... here, the settings read, and why not ("" when known).

    CUDA C Programming Guide, "CUDA Environment Variables": ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` numbers the
    GPUs by PCI bus id, ascending, as NVML's bus ids sort; the default, FASTEST_FIRST, by a speed
    heuristic NVML does not share, so a position means nothing there unless one GPU is all there is.
    ``CUDA_VISIBLE_DEVICES`` then picks GPUs by that position or by UUID (a unique prefix will do) and
    numbers them in its own order; CUDA stops at the first entry it cannot use (a bad index, a MIG
    instance, a repeat). The GPUs CUDA can number are those this process may open: NVML's, less the
    hidden ones. Any unreadable GPU makes the numbering unknown, as does a count torch does not share.
    """
    by_pci = environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    shown = "(unset)" if visible is None else visible or "''"  # empty: every GPU hidden
    order = environ.get("CUDA_DEVICE_ORDER", "(unset: FASTEST_FIRST)")
    setting = f"CUDA_DEVICE_ORDER={order}, CUDA_VISIBLE_DEVICES={shown}"
    if devices.unreadable:
        return [], setting, devices.lacking("that is certainly CUDA's: torch gives neither PCI ids nor a UUID, so "
                                            "only CUDA's numbering could match them")
    candidates = sorted(devices.handles)
    picked, by_position = (list(candidates), True) if visible is None else ([], False)
    for entry in [] if visible is None else [part.strip() for part in visible.split(",")]:
        if entry.isdigit():
            by_position = True
            bus_id = candidates[int(entry)] if int(entry) < len(candidates) else ""
        elif entry.lower().startswith("gpu-"):
            matches = [bus for uuid, bus in devices.uuids.items() if uuid.startswith(normalise_uuid(entry))]
            bus_id = matches[0] if len(matches) == 1 else ""
        else:
            bus_id = ""
        if not bus_id or bus_id in picked:
            break
        picked.append(bus_id)
    if by_position and not by_pci and len(candidates) > 1:
        return [], setting, (f"torch gives neither PCI ids nor a UUID for its GPUs (torch 2.4 added the UUID), and "
                             f"with {setting} CUDA numbers the {len(candidates)} GPUs fastest first, an order NVML "
                             f"does not know: set CUDA_DEVICE_ORDER=PCI_BUS_ID in the job's environment, or use "
                             f"torch 2.4 or newer")
    if len(picked) != seen:
        return [], setting, (f"torch gives neither PCI ids nor a UUID for its GPUs, and {setting} pick "
                             f"{len(picked)} of NVML's {len(candidates)} GPUs while torch sees {seen}, so which is "
                             f"which is unknown: use torch 2.4 or newer")
    return picked, setting, ""


def _indices(indices: tuple[int, ...]) -> str:
    return f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {', '.join(map(str, indices))}"


def normalise_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` (NVML) or ``0000:3b:00.0`` (sysfs) -> ``0000:3b:00.0``."""
    domain, rest = bus_id.strip().lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def normalise_uuid(uuid: str) -> str:
    """``GPU-FFC79498-8ff3-...`` (NVML, nvidia-smi -L, CUDA_VISIBLE_DEVICES) or ``ffc79498-8ff3-...`` (torch)
    -> ``ffc79498-8ff3-...``."""
    text = uuid.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def describe(lib: Any, error: Exception) -> str:
    """One line for an NVML error: its message, code and, for the fatal ones, the fix."""
    code = getattr(error, "value", None)
    text = f"{error} (NVML error {code})"
    if code == lib.NVML_ERROR_GPU_IS_LOST:
        return text + ": the GPU fell off the bus; drain the node and reset or replace the GPU (see dmesg Xid 79)"
    if code == lib.NVML_ERROR_NO_PERMISSION:
        return text + ": run with access to /dev/nvidiactl or as a user allowed to query the GPU"
    return text


def unanswered(lib: Any, error: Exception, metric: str, unit: str, device: str | None) -> Measurement:
    """The row of a reading NVML did not give, by one rule for every check.

    NOT_SUPPORTED means the GPU has no such reading here (a consumer GPU has no ECC; a vGPU or
    some cloud guests hide the PCIe link): ``not_applicable``, judged skip with the reason. Any
    other NVML error (GPU lost, no permission) is ``unmeasurable``, with the fix from ``describe``.
    """
    if isinstance(error, lib.NVMLError_NotSupported):
        return not_applicable(metric, NOT_SUPPORTED, unit, device)
    return unmeasurable(metric, describe(lib, error), unit, device)


def health(lib: Any, handle: Any, device: str, method: str = "NVML") -> list[Measurement]:
    """The NVML health readings of one device, one measurement per metric of ``cuda``, each with ``method``
    (which says how the NVML GPU was matched to torch's, ``locate``).

    A reading NVML cannot give is ``unanswered``: NOT_SUPPORTED is judged skip, any other NVML
    error (GPU lost, no permission) fails with the fix. A current PCIe generation or width below
    its maximum while the GPU is idle (clock event GpuIdle) is the power-saving state, not the
    link the GPU trains under load (``idle_link``): not applicable, with the reading in the reason.
    """
    clock_events: list[int] = []

    def read(metric: str, unit: str, query: Callable[[], Any]) -> Measurement:
        try:
            value, reason = query()
        except lib.NVMLError as error:
            return unanswered(lib, error, metric, unit, device)
        return Measurement(metric, value, unit, device=device, method=method, reason=reason)

    def mode(get: Callable[[Any], Any]) -> tuple[str, str]:
        current, pending = get(handle)
        word = "on" if current else "off"
        return word, "" if current == pending else f"changes to {'on' if pending else 'off'} after a GPU reset"

    def ecc(counter: int) -> tuple[float, str]:
        return float(lib.nvmlDeviceGetTotalEccErrors(handle, lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter)), ""

    def retired_pages() -> tuple[float, str]:
        causes = (lib.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
                  lib.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        return float(sum(len(lib.nvmlDeviceGetRetiredPages(handle, cause)) for cause in causes)), ""

    def remapped(field: int) -> tuple[float, str]:
        return float(bool(lib.nvmlDeviceGetRemappedRows(handle)[field])), ""

    def link(get: Callable[[Any], int]) -> tuple[float, str]:
        return float(get(handle)), ""

    def throttle() -> tuple[float, str]:
        mask = newest(lib, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        clock_events.append(mask)
        active = [name for bit, name in ADVERSE_THROTTLE.items() if mask & bit]
        return float(len(active)), ", ".join(active)

    def power_limit() -> tuple[float, str]:
        enforced = lib.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000
        default = lib.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000
        return enforced, "" if enforced >= default else f"capped below the default limit of {default:g} W"

    readings = [
        read("mig_mode", "text", lambda: mode(lib.nvmlDeviceGetMigMode)),
        read("persistence_mode", "text", lambda: mode(lambda h: (lib.nvmlDeviceGetPersistenceMode(h),) * 2)),
        read("ecc_mode", "text", lambda: mode(lib.nvmlDeviceGetEccMode)),
        read("ecc_uncorrectable_volatile", "", lambda: ecc(lib.NVML_VOLATILE_ECC)),
        read("ecc_uncorrectable_aggregate", "", lambda: ecc(lib.NVML_AGGREGATE_ECC)),
        read("retired_pages", "", retired_pages),
        read("retired_pages_pending", "", lambda: (float(lib.nvmlDeviceGetRetiredPagesPendingStatus(handle)), "")),
        read("remapped_rows_pending", "", lambda: remapped(2)),
        read("remapped_rows_failed", "", lambda: remapped(3)),
        read("pcie_link_gen", "", lambda: link(lib.nvmlDeviceGetCurrPcieLinkGeneration)),
        read("pcie_link_gen_max", "", lambda: link(lib.nvmlDeviceGetMaxPcieLinkGeneration)),
        read("pcie_link_width", "", lambda: link(lib.nvmlDeviceGetCurrPcieLinkWidth)),
        read("pcie_link_width_max", "", lambda: link(lib.nvmlDeviceGetMaxPcieLinkWidth)),
        read("clock_throttle", "", throttle),
        read("temperature", "C",
             lambda: (float(newest(lib, "nvmlDeviceGetTemperatureV", handle, lib.NVML_TEMPERATURE_GPU)), "")),
        read("power_limit", "W", power_limit),
    ]
    ecc_mode = next(m.value for m in readings if m.metric == "ecc_mode")
    readings = [_ecc_counter(m, ecc_mode, device) if m.metric.startswith("ecc_uncorrectable") else m for m in readings]
    idle = bool(clock_events) and bool(clock_events[0] & GPU_IDLE)
    return idle_link(readings, device) if idle else readings


def _ecc_counter(counter: Measurement, ecc_mode: Any, device: str) -> Measurement:
    """An uncorrectable-ECC count NVML did not give, read against the GPU's ECC mode.

    With ECC off the GPU counts nothing: not applicable, with the fix. With ECC on, NOT_SUPPORTED
    contradicts the mode (a binding or guest that cannot read a counter the GPU keeps, as in
    NVIDIA/gpu-monitoring-tools#35 on a T4), so the count is unknown rather than absent:
    unmeasurable, never a skip that lets a GPU with uncorrectable errors pass.
    """
    if counter.measured or counter.applicable or ecc_mode not in ("on", "off"):
        return counter
    if ecc_mode == "off":
        return not_applicable(counter.metric, "ECC is off on this GPU, so it counts no errors: turn it on with "
                                              "nvidia-smi -e 1 and reset the GPU", counter.unit, device)
    return unmeasurable(counter.metric, "ECC is on but NVML answers Not Supported for its uncorrectable error count, "
                                        "so whether this GPU has had any is unknown: read it with nvidia-smi -q -d "
                                        "ECC (an older driver or nvidia-ml-py may not read it)", counter.unit, device)


def idle_link(readings: list[Measurement], device: str) -> list[Measurement]:
    """``readings`` of an idle GPU with each current PCIe reading below its maximum made not applicable.

    An idle GPU steps its link down to save power: the generation follows the performance state
    (NVIDIA/open-gpu-kernel-modules issue 731: Gen1 of Gen4 in P8, Gen3 in P0; Syllo/nvtop issue 6:
    an idle GTX 1080 Ti at Gen1 x16 that works at Gen3), so the current generation or width of
    an idle GPU says nothing about the link it trains under load, and a threshold on it would
    fail a healthy node. A reading at its maximum is kept: it is the link. The link under load
    is what transfer's ``h2d_link_efficiency`` measures.
    """
    by_metric = {m.metric: m for m in readings}

    def lowered(m: Measurement) -> bool:
        most = by_metric.get(IDLE_LOWERED.get(m.metric, ""))
        return most is not None and isinstance(m.value, float) and isinstance(most.value, float) \
            and m.value < most.value

    def reason(m: Measurement) -> str:
        most = by_metric[IDLE_LOWERED[m.metric]]
        now, top = (f"Gen{m.value:g}", f"Gen{most.value:g}") if m.metric == "pcie_link_gen" else \
            (f"x{m.value:g}", f"x{most.value:g}")
        return (f"the GPU is idle (clock event GpuIdle) and runs its PCIe link at {now} of {top} to save power, "
                f"so this reading says nothing of the link under load: transfer's h2d_link_efficiency measures that")

    return [not_applicable(m.metric, reason(m), m.unit, device) if lowered(m) else m for m in readings]


def newest(lib: Any, name: str, *args: Any) -> Any:
    """``lib.<name>(*args)``, or its predecessor in ``PREDECESSORS`` where the driver or nvidia-ml-py lacks it.

    A driver without the symbol answers NVML_ERROR_FUNCTION_NOT_FOUND (pynvml looks each symbol up
    when called), one that does not know the struct version NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    any other NVML error is the reading's own and is raised.
    """
    call = getattr(lib, name, None)
    if call is not None:
        try:
            return call(*args)
        except lib.NVMLError as error:
            too_old = (getattr(lib, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
                       getattr(lib, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25))
            if getattr(error, "value", None) not in too_old:
                raise
    return getattr(lib, PREDECESSORS[name])(*args)


def max_link(lib: Any, handle: Any) -> tuple[int, int]:
    """The (generation, width) the GPU and its slot can train to; raises ``lib.NVMLError``."""
    return lib.nvmlDeviceGetMaxPcieLinkGeneration(handle), lib.nvmlDeviceGetMaxPcieLinkWidth(handle)


def current_link(lib: Any, handle: Any) -> tuple[int, int]:
    """The (generation, width) the link runs at now (an idle GPU may drop its generation)."""
    return lib.nvmlDeviceGetCurrPcieLinkGeneration(handle), lib.nvmlDeviceGetCurrPcieLinkWidth(handle)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
