"""The pipeline tests' dataset: one folder of files per test module."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """120 files of 72 kB in class folders: enough to stand for a dataset (100 files, 8 MiB)."""
    root = tmp_path_factory.mktemp("pipeline-data")
    for index in range(120):
        folder = root / f"n{index % 10:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"{index:04d}.bin").write_bytes(os.urandom(72_000))
    return root
