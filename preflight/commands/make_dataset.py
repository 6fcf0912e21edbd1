"""``preflight make-dataset DIR``: write an ImageNet-shaped sample dataset to rehearse the gate on.

A newcomer's machine has no dataset, and a gate never told where one is cannot pass
(``checks.subject``). This writes the shape the default thresholds are written for: ImageNet's
``train/`` layout, ``classes`` folders named like WordNet ids (``n01440764``), each of
``per_class`` files of about 110 kB (ImageNet's median JPEG), random bytes so that no
filesystem compresses them, synced to the device so that reads of them reach it.

It writes into an empty or new directory only, and records what it wrote in a hidden marker
file (the dataset walk skips hidden entries): run again with the same shape it changes
nothing, so the README's command can be repeated; a directory holding anything else is
refused (exit 2), never overwritten.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TextIO

from preflight.errors import UsageError
from preflight.io.dataset_walk import DATASET_MARKER

MARKER = DATASET_MARKER  # hidden, and not counted by the dataset walk: preflight's, not the job's
FIRST_WNID = 1440764  # n01440764, tench: ImageNet's first class
SAMPLE_BYTES = 110_000  # ImageNet's median JPEG is about 110 kB


def main(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    """Write the dataset (or find it already written); print where and what. Returns 0.

    Raises:
        UsageError: a count below 1; ``DIR`` is a file, holds other entries, or cannot be written.
    """
    stdout = stdout or sys.stdout
    shape = {"classes": args.classes, "per_class": args.per_class, "sample_bytes": args.sample_bytes}
    for key, value in shape.items():
        if value < 1:
            raise UsageError(f"make-dataset: --{key.replace('_', '-')} must be at least 1, found {value}")
    directory = args.directory
    if _already_written(directory, shape):
        stdout.write(f"{directory}: already holds {_describe(shape)}\n")
        return 0
    _refuse_unless_empty(directory)
    try:
        write(directory, **shape)
    except OSError as error:
        raise UsageError(f"make-dataset: cannot write {directory} ({error.strerror or error}): choose a writable "
                         f"directory with {_describe(shape)} free") from None
    stdout.write(f"{directory}: wrote {_describe(shape)}; measure it with DATA_DIR={directory} preflight run\n")
    return 0


def write(directory: str, classes: int, per_class: int, sample_bytes: int) -> None:
    """Write ``classes`` x ``per_class`` files of about ``sample_bytes`` bytes under ``directory``, synced.

    Sizes vary by up to 3 kB above ``sample_bytes``, as JPEGs do. The marker is written last:
    an interrupted run leaves a directory that a rerun refuses rather than trusts.

    Raises:
        OSError: a directory or file could not be written (ENOSPC on a full volume).
    """
    os.makedirs(directory, exist_ok=True)
    for c in range(classes):
        wnid = f"n{FIRST_WNID + c:08d}"
        folder = os.path.join(directory, wnid)
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            with open(os.path.join(folder, f"{wnid}_{i}.JPEG"), "wb") as handle:
                # fresh random bytes per file: no compressing or deduplicating store can shrink the reads
                handle.write(os.urandom(sample_bytes + (i % 7) * 512))
    os.sync()
    with open(os.path.join(directory, MARKER), "w", encoding="utf-8") as marker:
        json.dump({"classes": classes, "per_class": per_class, "sample_bytes": sample_bytes}, marker)


def _already_written(directory: str, shape: dict[str, int]) -> bool:
    try:
        with open(os.path.join(directory, MARKER), encoding="utf-8") as marker:
            return json.load(marker) == shape
    except (OSError, ValueError):
        return False


def _refuse_unless_empty(directory: str) -> None:
    if os.path.isfile(directory):
        raise UsageError(f"make-dataset: {directory} is a file: name a new or empty directory")
    if os.path.isdir(directory) and os.listdir(directory):
        raise UsageError(f"make-dataset: {directory} is not empty and was not written by make-dataset with this "
                         f"shape: name a new or empty directory (nothing was changed)")


def _describe(shape: dict[str, int]) -> str:
    files = shape["classes"] * shape["per_class"]
    total = files * (shape["sample_bytes"] + 1536) / 1e6
    return (f"{files} files of ~{shape['sample_bytes'] / 1000:g} kB in {shape['classes']} ImageNet-style class "
            f"folders (~{total:.0f} MB)")
