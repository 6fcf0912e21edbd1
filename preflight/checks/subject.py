"""What a data check measured, decided from evidence: the dataset, verified scratch, or something else.

The checks that read data (storage, dataloader, pipeline) label every figure with a subject
(``measurement.SUBJECTS``), and ``verdict`` lets only the dataset's pass a dataset threshold.
A label is a claim to verify, not to assume:
- no dataset named (``path`` empty, as the bundled default without ``DATA_DIR``): the working
  directory is measured, so the run still shows what the node does, but under ``no_dataset``;
- scratch data stands in for the dataset only when it lies on the filesystem *and* device that
  hold the dataset's bytes: the same ``st_dev`` and the same mount source in
  /proc/self/mountinfo (a bind mount of another disk has its own source; two mounts of one
  device share it); anything else is ``scratch_elsewhere``;
- the dataset's bytes are where ``open()`` lands, not where the dataset's directory is: a
  symlink farm (DVC's ``symlink`` cache, a Hugging Face snapshot) keeps its links on one disk
  and its bytes on another, so the device compared is the one that holds most of the walked
  files' bytes (``bytes_home``), links followed.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterable, Mapping, Sequence

from preflight.checks.base import Metric
from preflight.host.fsinfo import filesystem_of
from preflight.io.dataset_walk import DataFile, by_device
from preflight.measurement import Measurement

WORKING_DIRECTORY = "."


def named(options: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """``options`` with an empty ``path`` replaced by the working directory, and whether a dataset was named.

    The bundled thresholds.yaml writes ``path: ${DATA_DIR:-}``: without DATA_DIR nothing names the
    dataset, the working directory is measured and every figure is labelled ``no_dataset``.
    """
    if options.get("path"):
        return options, True
    return {**options, "path": WORKING_DIRECTORY}, False


def no_dataset_fix(*instances: str) -> str:
    """The one fix for a gate that was never told where the dataset is: a ``--set`` for each of ``instances``
    (every instance that measured no dataset: naming it for ``storage`` alone leaves ``dataloader`` unnamed)."""
    named = " ".join(f"--set {instance}.path=/path/to/dataset" for instance in instances)
    here = " ".join(f"--set {instance}.path=." for instance in instances)
    return (f"no dataset named: set DATA_DIR=/path/to/dataset (the bundled thresholds.yaml reads it) or "
            f"{named}; to measure the working directory, name it: {here}")


def scratch_subject(directory: str, dataset_device: int, dataset_source: str) -> str:
    """``scratch_on_dataset_fs`` when ``directory`` lies on the device (``st_dev``) and mount source that hold the
    dataset's bytes, else ``scratch_elsewhere``: a directory that cannot be stat'ed is never verified."""
    device, source = device_of(directory)
    verified = device != -1 and (device, source) == (dataset_device, dataset_source)
    return "scratch_on_dataset_fs" if verified else "scratch_elsewhere"


def device_of(path: str) -> tuple[int, str]:
    """(``st_dev``, mount source) of ``path`` as ``open()`` reaches it (links followed); (-1, "") if it is gone."""
    try:
        return os.stat(path).st_dev, filesystem_of(path).source
    except OSError:
        return -1, ""


def bytes_home(files: Sequence[DataFile], path: str) -> str:
    """A path on the filesystem that holds most of ``files``' bytes as ``open()`` reaches them (links followed):
    the first of them still there on the device with the most bytes (``dataset_walk.by_device``), else ``path``.

    ``device_of`` and ``filesystem_of`` of it name the dataset's device and filesystem; ``path``'s own would
    name the disk that holds a symlink farm's links.
    """
    groups = by_device(files)
    for found in groups[0][:100] if groups else ():
        if os.path.exists(found.name):  # a file deleted since the walk names no filesystem
            return found.name
    return path


def of_reads(measured_on: str, warm: bool, fs: Any) -> str:
    """What reads were measured on: ``reread`` where every file was read before in this run (``warm``) and a cache
    below the page cache may serve it (``Filesystem.may_cache_below``: FUSE, NFS, a loop device's host), else
    ``measured_on``: the one rule for storage, the DataLoader and the pipeline."""
    return "reread" if warm and fs is not None and fs.may_cache_below else measured_on


def labelled(measurements: Iterable[Measurement], subject: str, metrics: Iterable[Metric]) -> list[Measurement]:
    """``measurements`` with ``subject`` set on those of ``metrics`` that are about data (``Metric.about_data``);
    a process fact (the open-file limit) or a filesystem's name keeps none."""
    about_data = {m.name for m in metrics if m.about_data}
    return [dataclasses.replace(m, subject=subject) if m.metric in about_data else m for m in measurements]
