"""``io.residency``: the page cache's share of files, read without reading them, and dropped.

Files are made on the test's disk (``tmp_path``), read into the page cache with ``cat`` and checked against
util-linux fincore(1), a reader of the page cache that is not this module.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from preflight.io import residency

pytestmark = pytest.mark.skipif(shutil.which("fincore") is None, reason="util-linux fincore is not installed")


def _files(tmp_path, count=6, size=200_000):
    names = []
    for index in range(count):
        name = tmp_path / f"{index}.bin"
        name.write_bytes(os.urandom(size))
        names.append(str(name))
    os.sync()
    return names


def _cached_bytes(names):
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *names], capture_output=True,
                         text=True, check=True).stdout
    return sum(int(line) for line in out.split())


def test_mincore_sees_what_cat_cached_and_evict_drops_it(tmp_path):
    names = _files(tmp_path)
    residency.evict(names)
    subprocess.run(["cat", *names[:3]], stdout=subprocess.DEVNULL, check=True)  # half the files cached
    found = residency.probe(names)
    assert found.method == residency.MINCORE and found.files == 6
    assert found.share == pytest.approx(0.5, abs=0.02), found
    assert found.resident * residency.PAGE == pytest.approx(_cached_bytes(names), abs=2 * residency.PAGE)
    done = residency.evict(names)
    assert done == residency.Evicted(6, 6, 0)
    assert _cached_bytes(names) == 0 and residency.probe(names).resident == 0


def test_without_mincore_rwf_nowait_tells_cached_pages_from_others(tmp_path, monkeypatch):
    """A user who neither owns nor may write the files: mincore would report zeros, so single-page RWF_NOWAIT
    reads answer (EAGAIN where a page is not cached)."""
    monkeypatch.setattr(residency, "_mincore_sees", lambda name, status: False)
    names = _files(tmp_path, count=4)
    residency.evict(names)
    subprocess.run(["cat", names[0]], stdout=subprocess.DEVNULL, check=True)
    found = residency.probe(names)
    assert found.method == residency.NOWAIT and found.pages == 4 * residency.PROBE_PAGES
    assert found.resident == residency.PROBE_PAGES, found  # the cat'ed file's pages, no other's
    residency.evict(names)
    assert residency.probe(names, shift=1).resident == 0  # other pages than the first probe may have read


def test_sample_spreads_over_the_list_and_a_vanished_file_is_unprobed(tmp_path):
    assert residency.sample([str(i) for i in range(1000)], 4) == ["0", "250", "500", "750"]
    names = _files(tmp_path, count=2) + [str(tmp_path / "gone.bin")]
    found = residency.probe(names)
    assert found.files == 2 and found.unprobed == 1
    assert residency.evict(names).failed == 1


def test_files_written_just_before_are_written_back_and_dropped_not_left_dirty_in_the_cache(tmp_path):
    """A dataset copied or generated just before the run is dirty in the page cache, and DONTNEED alone leaves dirty
    pages: the imagefolder example's fixture read 100% resident after the drop. The filesystem is synced first."""
    names = []
    for index in range(4):
        name = tmp_path / f"dirty{index}.bin"
        name.write_bytes(os.urandom(200_000))  # no sync: dirty pages
        names.append(str(name))
    assert _cached_bytes(names) >= 4 * 196_608
    evicted = residency.evict(names)
    assert evicted.dropped == 4
    assert _cached_bytes(names) == 0
