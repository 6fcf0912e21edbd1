"""Issue 21, cases 6-9: the dataloader check on the dataset shapes its file and tar paths misread.

Each case builds its input for real (``tests.datasets``) and asserts the verdict and the words a
user reads; the counts asserted (samples, keys, shards, files skipped) follow from what was built,
never from how much a time window held.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch.utils.data

from preflight.loading import shards
from preflight.loading.files import not_one_sample_each
from preflight.io.dataset_walk import DataFile
from preflight.io.uncached import bypass_for
from tests import datasets
from tests.helpers import REPO, memory_limited_cgroup, run_check, run_cli, write_config, own_note

BIG = 1_200_000_000  # the HDF5 file of case 6: 1.2 GB, one 110 kB record at a time in the job


def _results(stdout: str) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(stdout)["results"]}


def _peak_rss_reading(name: str, size: int) -> tuple[str, int]:
    """(what ``FileSamples`` returned for the one file ``name``, the peak RSS in KiB) of a fresh process reading it."""
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over exec from the forked parent (pytest's
    # own peak, 240 MB after the DataLoader tests), while VmHWM is the peak of this program's memory alone.
    code = ("import re, sys\n"
            "from preflight.loading.files import FileSamples\n"
            "from preflight.io.dataset_walk import DataFile\n"
            "from preflight.io.uncached import bypass_for\n"
            "name, size = sys.argv[1], int(sys.argv[2])\n"
            "got = FileSamples([DataFile(name, size)], bypass_for(name, False))[0]\n"
            "print(*got, re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read())[1])\n")
    done = subprocess.run([sys.executable, "-c", code, name, str(size)], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr
    samples, read, peak = done.stdout.split()
    return f"{samples} {read}", int(peak)


def test_case_6_a_1_2_GB_file_is_read_whole_through_one_fixed_buffer(tmp_path):
    """The worker read a file through a buffer the size of the largest file: 1.2 GB of memory for one sample."""
    big = datasets.sparse_file(tmp_path / "train.bin", size=BIG, every=300)  # 4 MiB written, the rest holes
    got, peak_kib = _peak_rss_reading(str(big), BIG)
    assert got == f"1 {BIG}"  # the whole file was read, one sample
    assert peak_kib < 150 * 1024, f"peak RSS {peak_kib} KiB reading one 1.2 GB file"


@pytest.mark.parametrize(("names", "size", "refused"), [
    (["train.h5"], BIG, "holds 1 data file (1.2 GB) in HDF5 (.h5), a container of records, not one sample per file"),
    ([f"part-{i}.parquet" for i in range(40)], 30_000_000,
     ", 40 of them in Parquet (.parquet), a container of records"),
    (["data.mdb"], 2_000_000, "in LMDB (.mdb)"),  # small, and still a container
    ([f"train.tfrecord-{i:05d}-of-01024" for i in range(3)], 100_000_000, "3 of them in TFRecord (.tfrecord)"),
    ([f"train.feather" if i else "labels.csv" for i in range(2)], 5_000_000, "1 of them in Arrow (Feather)"),
    ([f"x{i}.npy" for i in range(3)], BIG, "of 1.2 GB median size, above the 64 MiB a file read whole as one sample"),
    ([f"n0144_{i}.JPEG" for i in range(1000)] + ["labels.h5"], 110_000, ""),  # a stray container changes nothing
    ([f"{i}.npy" for i in range(1000)], 602_112, ""),  # one 3x224x224 float32 array per sample
    ([f"clip_{i}.mp4" for i in range(50)], 20_000_000, ""),
])
def test_case_6_the_rule_for_files_that_are_not_one_sample_each(names, size, refused):
    files = [DataFile(f"/data/{name}", size) for name in names]
    reason = not_one_sample_each(files, "/data")
    assert (refused in reason) if refused else reason == ""
    if refused:
        assert reason.endswith(': measure the job\'s own reader with dataloader.dataset: "package.module:factory" '
                               '(a Dataset over these files)')


def test_case_6_tar_files_read_whole_are_pointed_at_format_tar(tmp_path):
    root = datasets.tar_shards(tmp_path / "shards", shards=2, per_shard=10, size=1000)
    measured = run_check("dataloader", 0.5, path=str(root), num_workers=1, worker_pools=1)
    assert measured["throughput"].value is None
    assert ("2 of them in tar (.tar), a container of records, not one sample per file: a samples/s of whole files is "
            "not the job's: if they are WebDataset shards, set dataloader.format: tar; else"
            ) in measured["throughput"].reason


def test_case_6_a_1_2_GB_hdf5_file_is_unmeasurable_and_names_dataset_not_oom_killed_under_1_GiB(tmp_path):
    """The job reads the HDF5 file one 110 kB record at a time; the check read it whole as one sample (0.68
    samples/s), and under a 1 GiB limit its worker was OOM-killed and the pod's memory blamed."""
    data = tmp_path / "hdf5"
    datasets.sparse_file(data / "train.h5", size=BIG, every=300)
    config = write_config(tmp_path, f"""
        version: 1
        defaults: {{duration: 1s}}
        checks:
          dataloader:
            path: {data}
            num_workers: 1
            worker_pools: 1
            throughput: {{min: 100 samples/s}}
        """)
    with memory_limited_cgroup(1 << 30) as (_, inside):
        done = run_cli("run", "-c", str(config), "--json", "-", prefix=inside)
    throughput = _results(done.stdout)["dataloader.throughput"]
    assert throughput["verdict"] == "fail" and throughput["value"] is None, throughput
    assert (f"{data} holds 1 data file (1.2 GB) in HDF5 (.h5), a container of records, not one sample per file"
            in throughput["message"])
    assert 'dataloader.dataset: "package.module:factory"' in throughput["message"]
    assert "OOM" not in done.stdout + done.stderr and done.returncode == 1


def test_case_6_jpegs_and_20_MB_videos_measure_and_the_same_bytes_named_parquet_do_not(tmp_path, monkeypatch):
    """The rule on real folders: 100 JPEGs of 110 kB and 4 video clips of 20 MB are one sample per file; the
    same 4 files renamed ``.parquet`` are containers of records, whose rows the job reads."""
    jpegs = datasets.imagenet(tmp_path / "jpegs", classes=1, per_class=100)
    videos = datasets.videos(tmp_path / "videos", count=4, size=20_000_000)
    for root, files in ((jpegs, 100), (videos, 4)):
        measured = run_check("dataloader", 0.5, path=str(root), num_workers=1, worker_pools=1, batch_size=1)
        assert measured["throughput"].value > 0 and measured["throughput"].note == ""
        assert f"over {files} files under {root}" in measured["throughput"].method
        assert measured["bandwidth"].subject == "dataset"
    for clip in videos.iterdir():
        clip.rename(clip.with_suffix(".parquet"))
    measured = run_check("dataloader", 0.5, path=str(videos), num_workers=1, worker_pools=1, batch_size=1)
    assert measured["throughput"].value is None
    assert measured["throughput"].reason.startswith(f"{videos} holds 4 data files (80 MB), 4 of them in Parquet "
                                                    f"(.parquet), a container of records, not one sample per file")
    # With no dataset named, the working directory's files are stray files: measured and labelled as such,
    # with the fix that names the dataset, as before.
    monkeypatch.chdir(videos)
    stray = run_check("dataloader", 0.5, path="", num_workers=1, worker_pools=1, batch_size=1)["throughput"]
    assert stray.value > 0 and stray.subject == "no_dataset" and stray.hint.startswith("no dataset named: ")


def test_case_8_twenty_shards_of_fifty_samples_are_a_dataset_by_the_samples_inside(tmp_path):
    """20 shards x 50 samples (1,000 samples, 22 MB) were refused as 20 files "under the 100 files and 8 MiB (or
    64 MiB of shards)", with the advice "point dataloader.path at the shards", which the configuration did."""
    root = datasets.tar_shards(tmp_path / "shards", shards=20, per_shard=50, size=22_000)
    config = write_config(tmp_path, f"""
        version: 1
        defaults: {{duration: 1s}}
        checks:
          dataloader:
            path: {root}
            format: tar
            num_workers: 1
            worker_pools: 1
            throughput: {{min: 1 samples/s}}
        """)
    done = run_cli("run", "-c", str(config), "--json", "-")
    throughput = _results(done.stdout)["dataloader.throughput"]
    assert throughput["verdict"] == "pass" and done.returncode == 0, throughput
    assert f"over 20 tar shards (WebDataset) under {root}" in throughput["method"]
    assert own_note(throughput["note"]) == "" and throughput["subject"] == "dataset"


def test_case_8_too_few_samples_in_shards_says_so_without_advice_already_followed(tmp_path):
    root = datasets.tar_shards(tmp_path / "shards", shards=2, per_shard=20, size=22_000)
    measured = run_check("dataloader", 0.5, path=str(root), format="tar", num_workers=1, worker_pools=1)
    reason = measured["throughput"].reason
    assert measured["throughput"].value is None
    shards_kb = sum(p.stat().st_size for p in root.iterdir()) / 1000  # 2 x 20 x 22 kB and the tar headers
    assert reason.startswith(f"{root} holds 2 tar shards ({shards_kb:.1f} kB) of 40 samples, under the 100 samples "
                             f"and 8 MiB (or 64 MiB of shards) a dataset figure needs: ")
    assert "point dataloader.path at the shards" not in reason
    assert "if the dataset has more shards, widen dataloader.path or include to them all" in reason


def test_case_8_a_few_files_that_are_not_shards_hold_no_sample(tmp_path):
    for index in range(3):
        (tmp_path / f"{index}.jpg").write_bytes(os.urandom(20_000))
    measured = run_check("dataloader", 0.5, path=str(tmp_path), format="tar", num_workers=1, worker_pools=1)
    assert measured["throughput"].reason == (
        f"no sample in the 3 files under {tmp_path} (first: 0.jpg: not a tar archive, plain or compressed): point "
        f"dataloader.path at WebDataset tar shards, and include at their names (\"*.tar\")")


def test_case_7_a_key_is_one_sample_per_shard_however_its_members_are_ordered(tmp_path):
    """Images first, then labels appended (webdataset#140): each run of a key was a sample, ~1.8x the samples/s
    of the same data sorted. Two workers read the 4 ungrouped shards once: 200 keys, 200 samples."""
    root = datasets.tar_shards(tmp_path / "ungrouped", shards=4, per_shard=50, size=1000, grouped=False)
    files = [DataFile(str(p), p.stat().st_size) for p in sorted(root.glob("*.tar"))]
    dataset = shards.ShardSamples(files, bypass_for(files[0].name, memory_backed=False))
    batches = list(torch.utils.data.DataLoader(dataset, batch_size=16, num_workers=2, collate_fn=shards.collate_items))
    keys = [key for batch in batches for key in batch.keys]
    assert sum(batch.samples for batch in batches) == len(keys) == len(set(keys)) == 200
    assert sum(batch.bytes for batch in batches) == 200 * 1001  # every member's payload, the labels' too
    assert sorted(u for batch in batches for u in batch.ungrouped) == [
        f"shard-{s:06d}.tar: key {s:06d}0000 seen again after other keys" for s in range(4)]
    assert shards.count_samples([f.name for f in files], 1000) == (200, "")  # the header census agrees


def test_case_7_ungrouped_shards_are_named_in_the_row(tmp_path):
    root = datasets.tar_shards(tmp_path / "ungrouped", shards=4, per_shard=50, size=50_000, grouped=False)
    measured = run_check("dataloader", 0.5, path=str(root), format="tar", num_workers=1, worker_pools=1,
                         batch_size=16)
    note = measured["throughput"].note
    assert measured["throughput"].value > 0 and measured["throughput"].subject == "dataset"
    assert re.fullmatch(r"(4 of 4 shards|[1-4] of the shards read in the measuring time \(not all 4\)) ungrouped, each key counted once as one sample \(first: shard-000000\.tar: "
                        r"key 0000000000 seen again after other keys\): webdataset yields each run of a key's members "
                        r"as a sample of its own \(webdataset#140\); write each sample's members together", note), note
    sorted_root = datasets.tar_shards(tmp_path / "grouped", shards=4, per_shard=50, size=50_000)
    measured = run_check("dataloader", 0.5, path=str(sorted_root), format="tar", num_workers=1, worker_pools=1,
                         batch_size=16)
    assert measured["throughput"].note == ""


def test_case_9_what_the_walk_skipped_stays_in_the_row_when_scratch_stands_in(tmp_path):
    """80 readable files and a mode-700 folder of 60 more, run by a user without access to it (root without
    CAP_DAC_OVERRIDE, ``datasets.WITHOUT_DAC``): 80 files are too few, a scratch set stands in, and the row said
    "holds 80 data files" and nothing of the folder the job cannot read."""
    if os.geteuid() != 0:
        pytest.skip("needs root to chown the fixture to another uid")
    root = datasets.mixed_permissions(tmp_path / "data", files=80, unreadable=0, private_files=60)
    config = write_config(tmp_path, f"""
        version: 1
        defaults: {{duration: 1s}}
        checks:
          dataloader:
            path: {root}
            num_workers: 1
            worker_pools: 1
            throughput: {{min: 1 samples/s}}
        """)
    done = run_cli("run", "-c", str(config), "--json", "-", prefix=datasets.WITHOUT_DAC)
    throughput = _results(done.stdout)["dataloader.throughput"]
    assert throughput["verdict"] == "pass" and done.returncode == 0, throughput
    assert own_note(throughput["note"]) == (f"on an ImageNet-shaped scratch set: {root} holds 80 data files (8.8 MB), under the "
                                  f"100 files and 8 MiB (or 64 MiB of shards) a dataset figure needs; skipped under "
                                  f"{root}: 1 unreadable directory")
    assert throughput["subject"] == "scratch_on_dataset_fs"
    bandwidth = _results(done.stdout)["dataloader.bandwidth"]
    assert own_note(bandwidth["note"]) == own_note(throughput["note"])  # every row of the figure says it


def test_case_9_a_refusal_names_what_the_walk_skipped_too(tmp_path):
    root = tmp_path / "data"
    datasets.sparse_file(root / "train.h5", size=100 << 20, every=50)
    (root / "cache").mkdir()
    (root / "cache" / "loop").symlink_to("..")
    reason = run_check("dataloader", 0.5, path=str(root), num_workers=1, worker_pools=1)["throughput"].reason
    assert reason.startswith(f"{root} holds 1 data file (104.9 MB) in HDF5 (.h5)")
    assert reason.endswith(f"(a Dataset over these files); skipped under {root}: 1 directory loop")
