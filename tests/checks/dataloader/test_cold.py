"""Issue 32: a claim of cold is verified, not assumed, for the job's own Dataset (``checks/dataloader/cold.py``).

A new user's Dataset read its files with plain ``open()``; the second of two back-to-back runs measured 2.3x the
first, with no note: the files were in the page cache. Each test here builds the job's package and its files for
real, reads the files into the page cache with ``cat`` first, and asserts what the run did: the share it found
resident, that it dropped the pages (read back with util-linux ``fincore`` right after the drop, not by the
module's own probe), and the row's words; never how fast a window read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from preflight.checks.dataloader import cold
from preflight.io import residency
from tests.helpers import job_package, run_check

OPENED = '''
import os
import torch


class Files(torch.utils.data.Dataset):
    """The job's Dataset: one file a sample, read with plain open(), as a new user's was."""

    def __init__(self, root, listed=True):
        self.root = root
        names = sorted(os.path.join(root, n) for n in os.listdir(root))
        if listed:
            self.files = names  # found as a list of paths on the Dataset
        else:
            self._count = len(names)  # found only by walking root

    def __len__(self):
        return len(self.files) if hasattr(self, "files") else self._count

    def __getitem__(self, index):
        name = self.files[index] if hasattr(self, "files") else os.path.join(self.root, f"{index:04d}.bin")
        with open(name, "rb") as handle:
            return torch.tensor(len(handle.read()))


def files(root, listed=True):
    return Files(root, listed)
'''


def _dataset(root: Path, count: int = 120, size: int = 64_000) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    names = []
    for index in range(count):
        name = root / f"{index:04d}.bin"
        name.write_bytes(os.urandom(size))
        names.append(str(name))
    os.sync()  # clean pages: DONTNEED drops only those
    return names


def _cached_bytes(names: list[str]) -> int:
    """Bytes of ``names`` in the page cache, as util-linux fincore(1) reads them (its own mincore, not ours)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *names], capture_output=True,
                         text=True, check=True).stdout
    return sum(int(line) for line in out.split())


needs_fincore = pytest.mark.skipif(shutil.which("fincore") is None, reason="util-linux fincore is not installed")


@needs_fincore
@pytest.mark.parametrize("listed", [True, False], ids=["files-listed-on-the-dataset", "root-walked"])
def test_files_the_job_read_before_are_dropped_from_the_page_cache_and_the_row_says_so(tmp_path, monkeypatch,
                                                                                     listed):
    names = _dataset(tmp_path / "data")
    subprocess.run(["cat", *names], stdout=subprocess.DEVNULL, check=True)  # a previous run, a copy: all cached
    assert _cached_bytes(names) >= 0.9 * 120 * 64_000
    left_after_drop = []
    evict = residency.evict

    def watched(files, *args, **kwargs):
        done = evict(files, *args, **kwargs)
        left_after_drop.append(_cached_bytes(names))  # before any worker reads a file again
        return done

    monkeypatch.setattr(residency, "evict", watched)
    job_package(tmp_path / "src", "myjob", {"data": OPENED})
    measured = run_check("dataloader", 0.5, dataset="myjob.data:files",
                         dataset_args={"root": str(tmp_path / "data"), "listed": listed},
                         python_path=[str(tmp_path / "src")], num_workers=1, batch_size=8, worker_pools=1)
    row = measured["throughput"]
    assert row.measured, row
    where = "the Dataset's .files" if listed else f"under {tmp_path / 'data'}"
    assert f"page cache before the pass: 100% of" in row.method and where in row.method, row.method
    assert "dropped (posix_fadvise DONTNEED on 120 files), 0% after" in row.method, row.method
    assert left_after_drop and left_after_drop[0] <= 4 * 4096, left_after_drop  # the drop happened, verified apart
    assert "warm:" not in row.note and not row.cache_bound, row


def test_a_dataset_on_tmpfs_cannot_be_dropped_and_its_figure_is_labelled_warm_memory():
    """tmpfs pages are the files themselves: DONTNEED cannot drop them, so the figure is memory's, and says so."""
    directory = Path(tempfile.mkdtemp(prefix="preflight-test-cold-", dir="/dev/shm"))  # tmpfs
    source = Path(tempfile.mkdtemp(prefix="preflight-test-cold-src-"))
    try:
        _dataset(directory, count=60, size=32_000)
        job_package(source, "ramjob", {"data": OPENED})
        measured = run_check("dataloader", 0.5, dataset="ramjob.data:files", dataset_args={"root": str(directory)},
                             python_path=[str(source)], num_workers=1, batch_size=8, worker_pools=1)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(source, ignore_errors=True)
    row = measured["throughput"]
    assert row.measured, row
    assert "page cache before the pass: 100% of" in row.method and "100% after" in row.method, row.method
    assert row.note.startswith("warm: 100% of the pages sampled"), row.note
    assert "tmpfs is RAM: the dataset lives in memory" in row.note, row.note
    assert row.cache_bound and measured["bandwidth"].cache_bound


def test_a_dataset_naming_no_file_says_its_cold_is_not_verified(tmp_path):
    job_package(tmp_path / "src", "synth", {"data": '''
import torch


class Noise(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        return torch.zeros(4)


def noise():
    return Noise()
'''})
    measured = run_check("dataloader", 0.5, dataset="synth.data:noise", python_path=[str(tmp_path / "src")],
                         num_workers=0, batch_size=8, worker_pools=1)
    assert "page cache not verified cold: the job's Dataset names no files" in measured["throughput"].method


def test_exposed_finds_an_image_folder_s_samples_through_a_subset(tmp_path):
    """torchvision's ImageFolder keeps (path, class) tuples in ``.samples``; a Subset wraps it as ``.dataset``."""
    names = _dataset(tmp_path / "data", count=5, size=10)

    class Folder:
        def __init__(self) -> None:
            self.samples = [(name, 0) for name in names]

    class Subset:
        def __init__(self) -> None:
            self.dataset, self.indices = Folder(), [0, 1]

    found, where = cold.exposed(Subset(), {})
    assert found == names and where == "the Dataset's .dataset.samples"
