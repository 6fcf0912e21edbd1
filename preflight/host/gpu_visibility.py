"""What can hide GPUs from torch in this process, as found here: environment variables and device nodes.

CUDA enumerates only the GPUs ``CUDA_VISIBLE_DEVICES`` lists (CUDA C++ Programming Guide, "CUDA
Environment Variables"; Slurm sets it for a job's GRES). The NVIDIA container runtime gives a
container the GPUs ``NVIDIA_VISIBLE_DEVICES`` names, as the Kubernetes device plugin does
(nvidia-container-toolkit), and mounts a ``/dev/nvidiaN`` node for each; a cgroup device
restriction (Slurm's ConstrainDevices) leaves nodes the process may not open. NVML counts every
GPU of the node in the last case, so torch and NVML disagree there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

from preflight.host import nvml

VARIABLES = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def found(environ: Mapping[str, str] | None = None, root: str = "/") -> str:
    """One line of what is set here: each variable of ``VARIABLES`` with its value, and the device nodes.

    ``CUDA_VISIBLE_DEVICES=0,1, NVIDIA_VISIBLE_DEVICES unset, device nodes /dev/nvidia0 /dev/nvidia1``;
    an empty value, which hides every GPU, is shown quoted (``CUDA_VISIBLE_DEVICES=''``).
    """
    environ = os.environ if environ is None else environ
    facts = [_variable(name, environ.get(name)) for name in VARIABLES]
    nodes = device_nodes(root)
    facts.append(f"device nodes {' '.join(nodes)}" if nodes else "no /dev/nvidia[0-9]* device nodes")
    return ", ".join(facts)


def device_nodes(root: str = "/") -> list[str]:
    """The ``/dev/nvidiaN`` GPU device nodes present (not nvidiactl or nvidia-uvm), in numeric order."""
    numbered = [(int(match.group(1)), path.name) for path in Path(root, "dev").glob("nvidia[0-9]*")
                if (match := re.fullmatch(r"nvidia(\d+)", path.name))]
    return [f"/dev/{name}" for _, name in sorted(numbered)]


def _variable(name: str, value: str | None) -> str:
    if value is None:
        return f"{name} unset"
    return f"{name}={value!r}" if not value.strip() else f"{name}={value}"


NVIDIA_VENDOR = "0x10de"  # PCI vendor id (pci.ids)
DISPLAY_CLASS = "0x03"  # PCI base class 03: display controller (VGA 0300, 3D controller 0302: data-centre GPUs)


def nvidia_evidence(root: str = "/", lib: Any = None) -> str:
    """What shows an NVIDIA GPU on this host, or "" where nothing does: a ``/dev/nvidiaN`` node, NVML starting
    through ``lib`` (pynvml or a fake; None: not asked), or a PCI display controller of NVIDIA's vendor id in sysfs
    (``/sys/bus/pci/devices/*/vendor`` and ``class``), which a container sees even without the NVIDIA runtime.

    ``"device nodes /dev/nvidia0"``, ``"NVML starts"``, ``"PCI 0000:3b:00.0 (class 0x030200)"``.
    """
    nodes = device_nodes(root)
    if nodes:
        return f"device nodes {' '.join(nodes)}"
    if lib is not None:
        session = nvml.open_session(lib)
        nvml.close(session)
        if session.lib is not None:
            return "NVML starts"
    for bus, kind in _nvidia_display_devices(root):
        return f"PCI {bus} (class {kind})"
    return ""


def nvidia_pci_gpus(root: str = "/") -> list[str]:
    """The bus ids (normalised, ``0000:3b:00.0``) of every NVIDIA display controller in sysfs, in bus order.

    sysfs shows the host's whole PCI tree also inside a container, where NVML and ``/proc/driver/nvidia/gpus``
    list only the GPUs the container was given (libnvidia-container): this is the node's set. [] where
    ``/sys/bus/pci`` cannot be read.
    """
    return [nvml.normalise_bus_id(bus) for bus, _ in _nvidia_display_devices(root)]


def _nvidia_display_devices(root: str) -> list[tuple[str, str]]:
    """(bus id as sysfs names it, PCI class) of each NVIDIA display controller under ``root``'s /sys/bus/pci."""
    found = []
    for device in sorted(Path(root, "sys", "bus", "pci", "devices").glob("*")):
        try:
            vendor = (device / "vendor").read_text().strip().lower()
            kind = (device / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and kind.startswith(DISPLAY_CLASS):
            found.append((device.name, kind))
    return found
