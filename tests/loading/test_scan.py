"""``scan: all`` (``loading/scan.py``): the rest of the pass read to its end, with progress, bounded by time."""

from __future__ import annotations

import pytest

from preflight.checks import base
from preflight.io.dataset import Dataset
from preflight.loading.sampler import PassSampler
from preflight.loading.scan import rest_of_pass
from preflight.loading.source import Counted, Loader


class Files:
    """A map-style dataset of ``n`` files of 1,000 bytes: sample i is (1, 1000)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[int, int]:
        return 1, 1000


class Batches:
    """A DataLoader of batches of 10 over a sampler, as torch's hands out its indices."""

    def __init__(self, sampler: PassSampler, dataset: Files) -> None:
        self.sampler, self.dataset = sampler, dataset

    def __iter__(self):
        taken = []
        for index in self.sampler:
            taken.append(index)
            if len(taken) == 10:
                yield taken
                taken = []
        if taken:
            yield taken


def _loader(tmp_path, n: int, read_before: int = 0) -> tuple[Loader, PassSampler, Dataset]:
    dataset = Dataset(str(tmp_path / "ledger"))
    names = [f"/data/{i}.jpg" for i in range(n)]
    for name in names[:read_before]:
        dataset.record(name)
    sampler = PassSampler(dataset, n, names, shuffle=False)
    files = Files(n)
    loader = Loader("m", 2, None, None, lambda: Counted(Batches(sampler, files), lambda batch: (len(batch),
                                                                                                  1000 * len(batch))),
                    first_pass=sampler)
    return loader, sampler, dataset


def test_the_scan_reads_the_rest_of_the_pass_and_the_files_read_before_it_and_reports_progress(tmp_path, monkeypatch):
    loader, sampler, _ = _loader(tmp_path, 100, read_before=5)
    next(iter(sampler))  # a pool before the scan took one index
    said: list[str] = []
    monkeypatch.setattr(base, "on_progress", said.append)
    now = [0.0]

    def clock() -> float:  # a second a batch
        now[0] += 1.0
        return now[0]

    scanned = rest_of_pass(loader, seconds=1000.0, clock=clock)
    assert (scanned.files, scanned.left) == (94 + 5, 0)  # the 94 left of the pass, and the 5 read before it
    assert scanned.said(100).startswith("scan: all read the rest of the 100 files: 99 in ")
    assert said[0] == "scan: 20 of 94 files, 20 kB, 10 files/s, ~7 s left", said


def test_a_scan_out_of_time_says_how_far_it_got(tmp_path):
    loader, _, _ = _loader(tmp_path, 100)
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    scanned = rest_of_pass(loader, seconds=3.0, clock=clock)
    assert scanned.left == 100 - scanned.files > 0
    assert scanned.said(100).startswith(f"scan: all stopped at the check's timeout with {scanned.left} of the 100 "
                                        f"files not read ({scanned.files} read in ")
    assert scanned.said(100).endswith("raise the instance's timeout to read them all")
