"""Issue 21 cases 2 and 3: storage measures the filesystem that holds the dataset's bytes, and says where scratch was.

Each input is built for real: a DVC-style symlink farm whose links lie on / and whose files lie in a
cache on a loop-mounted ext4 disk, a dataset spread over two filesystems (a directory link and a
mount point below it), and a read-only ext4 dataset volume with ``scratch_dir`` on the local disk,
each mounted in a private mount namespace and measured through ``preflight run --json -``. A
filesystem whose metadata costs a second per ``stat`` (on a fake clock) shows that the walk is cut
short by its time limit and the check still returns figures.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import types
from pathlib import Path

import pytest

from preflight.checks.storage.facts import os_error_reason
from preflight.host.fsinfo import filesystem_of
from preflight.io import dataset_walk
from tests import datasets
from tests.helpers import REPO, in_mount_namespace, run_check, write_config, own_note

QUICK = {"duration": "1s", "data_size": "32 MiB", "write_size": "8 MiB", "small_file_count": 200, "rand_depth": 4,
         "file_readers": 2}


def _config(directory: Path, instances: dict[str, dict]) -> Path:
    """A config of ``instances`` (name: its keys and values, written as in YAML)."""
    lines = ["version: 1", "checks:"]
    for name, settings in instances.items():
        lines += [f"  {name}:", *(f"    {key}: {value}" for key, value in settings.items())]
    return write_config(directory, "\n".join(lines) + "\n")


def _run_in_namespace(mounts: str, config: Path) -> dict[str, dict]:
    """``preflight run -c config --json -`` after the shell commands ``mounts``, in a private mount namespace."""
    done = in_mount_namespace(f"set -e; {mounts}PYTHONPATH={REPO} NO_COLOR=1 {sys.executable} -m preflight run "
                              f"-c {config} --json -", timeout=300)
    if "mount: " in done.stderr and "failed" in done.stderr:
        pytest.skip(f"no loop mounts here: {done.stderr.strip()}")
    assert done.stdout, done.stderr
    return {r["id"]: r for r in json.loads(done.stdout)["results"]}


def _on(directory: Path) -> str:
    """How a method names ``directory``'s filesystem: "ext4 at / (/dev/vda"."""
    fs = filesystem_of(str(directory))
    return f"{fs.fstype} at {fs.mount_point} ({fs.source}"


@pytest.fixture(scope="module")
def farms(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """One run over two datasets whose bytes lie in a cache on a loop-mounted ext4 disk at ``cache``:
    ``farm/data``, 400 file links into it (DVC's symlink cache type), and ``mixed``, 50 files of its own on /,
    a directory link into the cache and a tmpfs mounted below it, holding one file of 100 kB."""
    root = tmp_path_factory.mktemp("where")
    cache = root / "cache"
    datasets.symlink_farm(root / "farm" / "data", root / "cache-tree", cache, files=400, size=50_000)
    image = datasets.ext4_image(root / "cache-tree", root / "cache.img", size_mb=64)
    mixed = root / "mixed"
    (mixed / "local").mkdir(parents=True)
    for i in range(50):
        (mixed / "local" / f"{i:02d}.jpg").write_bytes(os.urandom(20_000))
    (mixed / "cached").symlink_to(cache / "files")
    (mixed / "mnt").mkdir()
    config = _config(root, {
        "storage": {"path": root / "farm" / "data", **QUICK, "seq_read": "{min: 1 MB/s}",
                    "small_files": "{min: 1 files/s}", "skipped_files": "{max: 0}", "seq_write": "{min: 1 MB/s}",
                    "fsync_p99": "{max: 1000 ms}"},
        "mixed": {"check": "storage", "path": mixed, **QUICK, "small_files": "{min: 1 files/s}"},
        "dataloader": {"path": root / "farm" / "data", "duration": "1s", "worker_pools": 1, "num_workers": 1, "batch_size": 16,
                       "throughput": "{min: 1 samples/s}"}})
    mounts = (datasets.loop_mount(image, cache) + f"mount -t tmpfs -o size=1m tmpfs {mixed / 'mnt'} && "
              f"head -c 100000 /dev/urandom > {mixed / 'mnt' / 'other.jpg'} && ")
    return root, _run_in_namespace(mounts, config)


def test_a_symlink_farm_is_measured_on_the_disk_its_links_lead_to(farms):
    """Case 2: 400 files under data/train/cls*/ are links into a cache on another disk. They were "400 entries
    on another filesystem skipped", the loader could not measure, and small_files passed on scratch files on
    the links' disk. Now the files are read where the job's open() lands, and every row says which disk that is."""
    root, results = farms
    cache, data = root / "cache", root / "farm" / "data"
    filesystem = results["storage.filesystem"]
    assert filesystem["value"].startswith(f"ext4 at {cache} (/dev/loop")
    assert filesystem["note"].startswith(f"{data} links here: its 400 data files (20 MB) lie on this filesystem, "
                                         f"where the job's open() lands; {data} itself is on {_on(data)}")
    skipped = results["storage.skipped_files"]
    assert skipped["verdict"] == "pass" and skipped["value"] == 0 and own_note(skipped["note"]) == ""
    small = results["storage.small_files"]
    assert small["verdict"] == "pass" and small["subject"] == "dataset" and own_note(small["note"]) == "", json.dumps(small)
    # its share of the first epoch (the farm's 400 files, 200 of them small), each read once (issue 35: the method
    # says what it read)
    assert re.search(rf"open\+read\+close of up to 40 of 200 existing small files, each once \(its share of the first "
                     rf"epoch: 10% of the dataset's 400 files, at least 25\) on ext4 at {re.escape(str(cache))} "
                     rf"\(/dev/loop", small["method"]), small["method"]
    # No file to stream, and scratch beside data/ would lie on the links' disk: the farm's own files, read whole.
    for metric in ("seq_read", "rand_read", "rand_read_p50", "rand_read_p99"):
        read = results[f"storage.{metric}"]
        assert read["subject"] == "dataset", (metric, read)
        assert f"400 existing files read whole (18.75 MiB) on ext4 at {cache} (/dev/loop" in read["method"]
        assert read["note"].startswith("over 400 small files read whole (no file of 8 MiB or more, and scratch in "
                                       f"{data.parent}/.preflight-scratch-")
        assert "would not lie on the dataset's filesystem and device): not a device streaming figure" in read["note"]
    assert results["storage.seq_read"]["verdict"] == "pass"
    # Writes can only go to scratch, which lies on the links' disk: measured, named, and it cannot pass.
    for metric in ("seq_write", "fsync_p99"):
        write = results[f"storage.{metric}"]
        assert write["subject"] == "scratch_elsewhere", (metric, write)
        assert f"in {data.parent}/.preflight-scratch-" in write["method"] and f"on {_on(data)}" in write["method"]
        assert write["note"].endswith(f"on {_on(data)}), not on the dataset's filesystem and device")
    seq_write = results["storage.seq_write"]
    assert seq_write["verdict"] == "fail" and "not the dataset, so it cannot pass" in seq_write["message"]
    assert seq_write["hint"].startswith(f"set storage.scratch_dir to a writable directory on ext4 at {cache} "
                                        f"(/dev/loop")
    loader = results["dataloader.throughput"]
    assert loader["verdict"] == "pass" and loader["subject"] == "dataset"
    assert f"400 files under {data}, cold cache per file" in loader["method"]
    # storage ran first on the same 400 files and read its share; the loader read the rest, once (issue 32)
    read, _, before = own_note(loader["note"]).partition(" files read once (")
    assert read.startswith("one pass: ") and before.endswith(" others were read by checks before this one)")
    assert int(before.split()[0]) + int(read.split()[-1]) == 400  # every file is said (issue 35); the loader probes none


def test_data_on_three_filesystems_is_measured_where_most_bytes_are_and_the_others_are_named(farms):
    """A dataset of 50 files of its own (1 MB on /), a directory link into the cache (400 files, 20 MB) and a
    tmpfs mounted below it (1 file, 100 kB): the link and the mount point are walked as the job's
    os.walk(followlinks=True) walks them, and the figures come from the cache's disk, the others named with
    their shares of the files and of the bytes."""
    root, results = farms
    cache, mixed = root / "cache", root / "mixed"
    filesystem = results["mixed.filesystem"]
    assert filesystem["value"].startswith(f"ext4 at {cache} (/dev/loop")
    assert own_note(filesystem["note"]) == (f"the data under {mixed} lies on 3 filesystems (shares of the 451 data files and "
                                  f"of their bytes): {filesystem['value']} holds 400 (89%) and 20 MB (95%), the most "
                                  f"bytes, and is measured; {filesystem_of(str(mixed)).describe()} holds 50 (11%) "
                                  f"and 1 MB (5%); tmpfs at {mixed / 'mnt'} (tmpfs, rw,relatime) holds 1 (0%) and "
                                  f"100 kB (0%): not measured")
    skipped = results["mixed.skipped_files"]
    assert skipped["value"] == 0 and own_note(skipped["note"]) == ""
    small = results["mixed.small_files"]
    assert small["verdict"] == "pass" and small["subject"] == "dataset"
    assert re.search(rf"up to \d+ of 200 existing small files, each once \(its share of the first epoch: 10% of the "
                     rf"dataset's \d+ files, at least 25\) on ext4 at {re.escape(str(cache))} \(/dev/loop",
                     small["method"]), small["method"]
    assert f"400 existing files read whole (18.75 MiB) on ext4 at {cache}" in results["mixed.seq_read"]["method"]


@pytest.fixture(scope="module")
def read_only_volume(tmp_path_factory) -> tuple[Path, Path, dict[str, dict]]:
    """One run over a real ext4 volume mounted read-only (``mount -o loop,ro``) at ``volume``: ``train``, 200 files
    of 110 kB, and ``tiny``, 50 files of 20 kB, with ``scratch_dir`` on the local disk, as the old hint advised."""
    root = tmp_path_factory.mktemp("readonly")
    datasets.imagenet(root / "tree" / "train", classes=4, per_class=50, size=110_000)
    datasets.imagenet(root / "tree" / "tiny", classes=1, per_class=50, size=20_000)
    image = datasets.ext4_image(root / "tree", root / "volume.img", size_mb=64)
    volume, local = root / "volume", root / "local-scratch"
    local.mkdir()
    thresholds = {"seq_read": "{min: 1 MB/s}", "rand_read": "{min: 1 IOPS}", "rand_read_p99": "{max: 10000 ms}",
                  "small_files": "{min: 1 files/s}", "small_files_bandwidth": "{min: 1 MB/s}",
                  "seq_write": "{min: 1 MB/s}", "fsync_p99": "{max: 10000 ms}"}
    config = _config(root, {
        "tiny": {"check": "storage", "path": volume / "tiny", "scratch_dir": local, **QUICK, **thresholds},
        "train": {"check": "storage", "path": volume / "train", "scratch_dir": local, **QUICK, **thresholds},
        "train_alone": {"check": "storage", "path": volume / "train", **QUICK, "seq_write": "{min: 1 MB/s}"}})
    return volume, local, _run_in_namespace(datasets.loop_mount(image, volume, read_only=True), config)


def test_scratch_on_the_local_disk_is_named_there_and_never_passes_for_a_read_only_volume(read_only_volume):
    """Case 3: 50 small files (1 MB) on a read-only volume, scratch_dir on the local disk. seq_read used to pass,
    "a scratch file on ext4 at <the read-only volume>" while the file lay on /. Every row measured on scratch is
    now labelled scratch_elsewhere, names the local disk, fails, and says what works on a read-only volume."""
    volume, local, results = read_only_volume
    assert results["tiny.read_only"]["value"] == 1
    assert results["tiny.filesystem"]["value"].startswith(f"ext4 at {volume} (/dev/loop")
    rows = ("seq_read", "rand_read", "rand_read_p99", "small_files", "small_files_bandwidth", "seq_write",
            "fsync_p99")
    for metric in rows:
        row = results[f"tiny.{metric}"]
        assert row["subject"] == "scratch_elsewhere", (metric, row)
        assert row["verdict"] == "fail" and "not the dataset, so it cannot pass" in row["message"], (metric, row)
        assert f"in {local}/.preflight-scratch-" in row["method"], (metric, row["method"])
        assert f"on {_on(local)}" in row["method"] and f"at {volume}" not in row["method"], (metric, row["method"])
        assert row["hint"].startswith(f"ext4 at {volume} (/dev/loop"), (metric, row["hint"])
        assert ("is read-only; no scratch can lie on a read-only volume: the dataset's own files of 8 MiB or more "
                "are read in place and its small files read whole; scratch on another filesystem "
                "(tiny.scratch_dir) is measured but cannot pass a dataset threshold") in row["hint"]  # its instance
    assert results["tiny.rand_read_p50"]["subject"] == "scratch_elsewhere"
    assert results["tiny.seq_read"]["note"].startswith(
        f"on a scratch file in {local}/.preflight-scratch-")
    assert (f"on {_on(local)}), not on the dataset's filesystem and device: {volume / 'tiny'} holds 50 data files "
            f"(1.075 MB), none of 8 MiB or more") in results["tiny.seq_read"]["note"]
    assert results["tiny.small_files"]["note"].startswith("on 200 scratch files of 112 KiB in ")


def test_a_read_only_volume_is_read_in_place_and_only_writes_need_scratch(read_only_volume):
    """The same volume's 200 files of 110 kB (22 MB): seq_read reads them whole rather than a scratch file on
    the local disk, so read figures are the dataset's and pass; writes go to the local disk and cannot pass.
    Without scratch_dir, writes are unmeasured with a reason that no longer asks for scratch on a read-only mount."""
    volume, local, results = read_only_volume
    for metric in ("seq_read", "rand_read", "rand_read_p99", "small_files", "small_files_bandwidth"):
        row = results[f"train.{metric}"]
        assert row["subject"] == "dataset" and row["verdict"] == "pass", (metric, row)
        assert f"on ext4 at {volume} (/dev/loop" in row["method"], (metric, row["method"])
    assert results["train.seq_read"]["note"].startswith("over 200 small files read whole")
    for metric in ("seq_write", "fsync_p99"):
        row = results[f"train.{metric}"]
        assert row["subject"] == "scratch_elsewhere" and row["verdict"] == "fail", (metric, row)
        assert f"in {local}/.preflight-scratch-" in row["method"] and f"on {_on(local)}" in row["method"]
    alone = results["train_alone.seq_write"]
    assert alone["value"] is None and alone["subject"] is None  # nothing measured, so nothing to label
    assert (f"nowhere to write scratch files: {volume / 'train'} lies on a read-only mount, where no scratch can be "
            f"written") in alone["message"]
    assert "set storage.scratch_dir to a writable directory on that filesystem" not in alone["message"]
    assert results["train_alone.seq_read"]["subject"] == "dataset"
    assert "read-only mount" in results["train_alone.seq_read"]["note"]


def test_a_read_only_error_names_what_works_on_a_read_only_volume():
    reason = os_error_reason(OSError(errno.EROFS, "Read-only file system", "/data/x"), "/data")
    assert reason.startswith("Read-only file system: /data/x; the volume is read-only; ")
    assert "the dataset's own files of 8 MiB or more are read in place and its small files read whole" in reason
    assert "scratch on another filesystem (storage.scratch_dir) is measured but cannot pass" in reason
    assert "writable directory on it" not in reason


class _SlowMetadata:
    """A filesystem whose every ``stat`` takes one second of a fake clock, as a stalled NFS server's might:
    ``perf_counter`` reads that clock, so the walk's time limit is reached after a known number of stats."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        real = os.stat

        def slow_stat(*args, **kwargs):
            self.now += 1.0
            return real(*args, **kwargs)

        monkeypatch.setattr(os, "stat", slow_stat)
        monkeypatch.setattr(dataset_walk, "time", types.SimpleNamespace(perf_counter=lambda: self.now),
                            raising=False)  # raising=False: the branch point had no clock in the walk


def test_a_walk_on_slow_metadata_is_cut_short_by_its_time_limit_and_the_check_still_measures(tmp_path, monkeypatch):
    """With a stat costing a second, walking 300 files would take 300 s; run_check's 60 s timeout gives the walk
    15 s (a quarter), so it stops there, says so in skipped_files, and every figure is still measured."""
    root = datasets.imagenet(tmp_path / "train", classes=3, per_class=100, size=20_000)
    # The walk's own stats before the first entry: the path, then each directory from it up to / (loop guard).
    setup = 1 + len(root.resolve().parents) + 1
    _SlowMetadata(monkeypatch)
    measured = run_check("storage", 0.3, path=str(root), data_size="16 MiB", write_size="4 MiB", small_file_count=100,
                         rand_depth=2, file_readers=2)
    entries = 15 - setup  # each entry costs one stat; the walk stops at the first entry at or past 15 s
    assert measured["skipped_files"].note == (f"walk cut short by its 15 s time limit after {entries} entries, the "
                                              f"rest was not looked at")
    assert measured["skipped_files"].method.startswith(f"walk of {root}: {entries} entries looked at, ")
    for name in ("filesystem", "seq_read", "rand_read", "small_files", "seq_write", "fsync_p99"):
        assert measured[name].measured, (name, measured[name].reason)
    # no figure claims what the path holds: it says what the walk reached before its time limit
    assert re.match(rf"on 100 scratch files of 112 KiB beside the dataset: the first \d+ data files \(.*\) the walk "
                    rf"reached under {re.escape(str(root))} \(files up to 128 KiB\) \(it stopped at its 15 s time limit, "
                    rf"the rest was not looked at\)", measured["small_files"].note)
