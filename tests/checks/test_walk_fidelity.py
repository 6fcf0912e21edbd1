"""The gate measures what the job reads: three public reports of a walk that saw something else.

Each input is built for real and run through ``preflight run -c CONFIG --json -``:
1. shundhammer/qdirstat#64, hoytech/vmtouch#50: an ImageFolder whose class ``n002`` is a second
   volume (a loop-mounted ext4, as a Kubernetes subPath or an NFS class folder) holding 85% of the
   samples, in a private mount namespace; a proc mounted beside it is a pseudo filesystem.
2. dotnet/machinelearning#3778: ``a_cifar/`` of many small files sorted before ``b_hires/`` of
   fewer large ones that hold most of the bytes, walked with a ``max_files`` cap.
3. pytorch/vision#2831, hako-mikan/sd-webui-traintrain#26: a Jupyter ``.ipynb_checkpoints``
   folder among the classes and a macOS AppleDouble ``._NAME.jpg`` beside every image.
The tests assert which files were taken, counts, notes and verdicts, never how much a window held.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from preflight.io.dataset_walk import listing
from preflight.checks.storage.data import survey
from preflight.host.fsinfo import filesystem_of
from tests import datasets
from tests.helpers import REPO, in_mount_namespace, run_cli, write_config, own_note

QUICK = {"duration": "1s", "data_size": "32 MiB", "write_size": "8 MiB", "small_file_count": 200, "rand_depth": 4,
         "file_readers": 2}
LOADER = {"duration": "1s", "num_workers": 1, "batch_size": 16, "worker_pools": 2}


def _config(directory: Path, instances: dict[str, dict]) -> Path:
    """A config of ``instances`` (name: its keys and values, written as in YAML)."""
    lines = ["version: 1", "checks:"]
    for name, settings in instances.items():
        lines += [f"  {name}:", *(f"    {key}: {value}" for key, value in settings.items())]
    return write_config(directory, "\n".join(lines) + "\n")


def _results(stdout: str) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(stdout)["results"]}


def _per_directory(files, root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for found in files:
        folder = os.path.relpath(os.path.dirname(found.name), root)
        counts[folder] = counts.get(folder, 0) + 1
    return counts


@pytest.fixture(scope="module")
def class_on_its_own_volume(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """``train/n000`` and ``train/n001`` (15 files of 60 kB each) on /, ``train/n002`` an ext4 volume of 170
    files of 60 kB mounted there, and ``train/proc`` a proc mount, in a private mount namespace."""
    root = tmp_path_factory.mktemp("submount")
    train, volume = root / "train", root / "volume"
    for name in ("n000", "n001"):
        (train / name).mkdir(parents=True)
        for i in range(15):
            (train / name / f"img_{i:03d}.jpg").write_bytes(os.urandom(60_000))
    volume.mkdir()
    for i in range(170):
        (volume / f"img_{i:03d}.jpg").write_bytes(os.urandom(60_000))
    os.sync()
    image = datasets.ext4_image(volume, root / "n002.img", size_mb=32)
    (train / "proc").mkdir()
    config = _config(root, {
        "storage": {"path": train, **QUICK, "small_files": "{min: 1 files/s}"},
        "dataloader": {"path": train, **LOADER, "throughput": "{min: 1 samples/s}"}})
    done = in_mount_namespace(f"set -e; {datasets.loop_mount(image, train / 'n002')}mount -t proc proc {train / 'proc'}"
                              f" && PYTHONPATH={REPO} NO_COLOR=1 {sys.executable} -m preflight run -c {config} "
                              f"--json -", timeout=300)
    if "mount: " in done.stderr and "failed" in done.stderr:
        pytest.skip(f"no loop mounts here: {done.stderr.strip()}")
    assert done.stdout, done.stderr
    return train, _results(done.stdout)


def test_a_class_folder_on_another_volume_is_read_as_the_job_reads_it(class_on_its_own_volume):
    """qdirstat#64: the walk stopped at the mount point ("1 entry on another filesystem") and passed on the
    30 samples it saw. The job's os.walk crosses it, so the walk does: storage measures the volume that holds
    85% of the samples and names both, with their shares; the loader reads the files on both."""
    train, results = class_on_its_own_volume
    filesystem = results["storage.filesystem"]
    assert re.match(rf"ext4 at {re.escape(str(train / 'n002'))} \(/dev/loop\d+, ", filesystem["value"])
    top = filesystem_of(str(train)).describe()
    assert own_note(filesystem["note"]) == (
        f"the data under {train} lies on 2 filesystems (shares of the 200 data files and of their bytes): "
        f"{filesystem['value']} holds 170 (85%) and 10.2 MB (85%), the most bytes, and is measured; "
        f"{top} holds 30 (15%) and 1.8 MB (15%): not measured")
    skipped = results["storage.skipped_files"]
    assert skipped["value"] == 1
    assert own_note(skipped["note"]) == "1 pseudo filesystem not descended (no dataset lives on it: proc at proc)"
    small = results["storage.small_files"]
    assert small["verdict"] == "pass" and small["subject"] == "dataset" and own_note(small["note"]) == ""
    assert (f"open+read+close of up to 25 of 170 existing small files, each once (its share of the first epoch: 10% "
            f"of the dataset's 200 files, at least 25) on {filesystem['value']}") in small["method"]
    loader = results["dataloader.throughput"]
    assert loader["verdict"] == "pass" and loader["subject"] == "dataset"
    assert (f"200 files under {train} on 2 filesystems (170 on {filesystem['value']}, 30 on {top}) (1 pseudo "
            f"filesystem not descended (no dataset lives on it: proc at proc) skipped)") in loader["method"]
    # the storage check ran first and read its share: the loader's one pass says so (issue 32)
    assert loader["note"].startswith(f"skipped under {train}: 1 pseudo filesystem not descended (no dataset lives on "
                                     f"it: proc at proc); one pass: ")
    assert "others were read by checks before this one" in loader["note"]


@pytest.fixture(scope="module")
def sorted_sources(tmp_path_factory) -> Path:
    """repro_3 at a tenth: 1000 files of 2.5 kB in a_cifar/, then 40 of 1 MB in b_hires/ (94% of the bytes)."""
    return datasets.mixed_sources(tmp_path_factory.mktemp("sorted") / "train", small=1000, large=40)


def test_a_capped_walk_samples_every_folder_not_the_first_in_sorted_order(sorted_sources):
    """machinelearning#3778: with max_files 1000 the first 1000 files in sorted order were all a_cifar's. The walk
    now takes one file from each folder in turn: all 40 of b_hires, and a_cifar's share of the rest."""
    files, walk = listing(str(sorted_sources), 1000, include="*", exclude="")
    assert _per_directory(files, sorted_sources) == {"a_cifar": 960, "b_hires": 40}
    assert walk.stopped == "max_files"
    found = survey(str(sorted_sources), 32 << 20, 128 << 10, 1000)
    assert _per_directory(found.files, sorted_sources) == {"a_cifar": 960, "b_hires": 40}
    assert _per_directory(found.small, sorted_sources) == {"a_cifar": 960}
    # a shuffled loader over these reads b_hires' bytes as the job does: 40 MB of the 42.4 MB
    assert sum(f.size for f in files if "b_hires" in f.name) == 40_000_000


def test_every_figure_on_a_capped_walk_says_it_stopped_and_none_claims_what_the_path_holds(sorted_sources, tmp_path):
    """The note used to say the path "holds 10000 data files (25 MB)" and nothing said the walk stopped."""
    config = _config(tmp_path, {
        "storage": {"path": sorted_sources, **QUICK, "max_files": 1000, "small_files": "{min: 1 files/s}",
                    "seq_write": "{min: 1 MB/s}", "fsync_p99": "{max: 1000 ms}"},  # judged, so the writes run
        "dataloader": {"path": sorted_sources, **LOADER, "max_files": 1000, "throughput": "{min: 1 samples/s}"}})
    done = run_cli("run", "-c", str(config), "--json", "-", timeout=300)
    results = _results(done.stdout)
    reached = (f"the first 1000 data files (42.4 MB) the walk reached under {sorted_sources}; it stopped at "
               f"max_files, the rest was not looked at")
    for metric in ("filesystem", "unreadable_files", "seq_read", "rand_read", "rand_read_p99", "small_files",
                   "small_files_bandwidth"):
        row = results[f"storage.{metric}"]
        assert "it stopped at max_files, the rest was not looked at" in row["note"], (metric, row["note"])
        assert " holds " not in row["note"], (metric, row["note"])
    assert own_note(results["storage.filesystem"]["note"]) == reached
    assert own_note(results["storage.seq_read"]["note"]) == (
        f"on a scratch file beside the dataset: the first 1000 data files (42.4 MB) the walk reached under "
        f"{sorted_sources} (it stopped at max_files, the rest was not looked at), none of 8 MiB or more")
    assert results["storage.skipped_files"]["note"].startswith("walk stopped at max_files after ")
    for metric in ("seq_write", "fsync_p99"):  # scratch writes are not built on the walk
        assert "walk" not in results[f"storage.{metric}"]["note"]
    loader = results["dataloader.throughput"]
    assert loader["verdict"] == "pass" and loader["subject"] == "dataset"
    assert f"1000 files under {sorted_sources}, cold cache per file" in loader["method"]
    assert own_note(loader["note"]) == reached
    assert own_note(results["dataloader.bandwidth"]["note"]) == reached


@pytest.fixture(scope="module")
def mac_copied_folder(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """repro_4: 2 classes of 80 JPEGs, an AppleDouble ``._`` file beside each, a ``.ipynb_checkpoints`` folder;
    decoded as images (``include: "*.jpg"``), with ``skipped_files`` gated at 0."""
    pytest.importorskip("PIL")
    root = tmp_path_factory.mktemp("mac")
    data = datasets.apple_double_image_folder(root / "data")
    config = _config(root, {
        "dataloader": {"path": data, **LOADER, "include": '"*.jpg"', "decode": "image",
                       "throughput": "{min: 1 samples/s}"},
        "storage": {"path": data, **QUICK, "unreadable_files": "{max: 0}", "skipped_files": "{max: 0}"}})
    done = run_cli("run", "-c", str(config), "--json", "-", timeout=300)
    return data, _results(done.stdout)


def test_hidden_files_the_job_would_read_are_counted_and_named(mac_copied_folder):
    """vision#2831 and AppleDouble files: skipped_files was 0 and nothing was said, though ImageFolder reads all
    161 hidden entries (a class of its own, and 160 files Pillow cannot decode). They are not read as samples,
    but counted, named in both checks' notes, and the gate on skipped_files fails."""
    data, results = mac_copied_folder
    named = ("161 hidden files or directories, not read (the job's os.walk may read them: .ipynb_checkpoints, "
             "cat/._img_000.jpg, cat/._img_001.jpg, ...)")
    skipped = results["storage.skipped_files"]
    assert skipped["value"] == 161 and own_note(skipped["note"]) == named
    assert skipped["verdict"] == "fail"
    assert results["storage.unreadable_files"]["verdict"] == "pass"
    loader = results["dataloader.throughput"]
    assert loader["verdict"] == "pass" and loader["subject"] == "dataset"
    assert f"160 files under {data} ({named} skipped)" in loader["method"]  # the real JPEGs only, decoded
    assert own_note(loader["note"]) == f"skipped under {data}: {named}"
