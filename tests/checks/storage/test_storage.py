"""The storage check end to end on real filesystems: ext4 under /tmp and the tmpfs at /dev/shm."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile

import pytest

from preflight.errors import ConfigMistake
from preflight.checks import storage
from preflight.checks.storage import measuring
from preflight.config import Instance, Threshold
from preflight.verdict import Outcome, judge
from tests.helpers import in_mount_namespace, run_check, write_config

SMALL_RUN = dict(data_size="16 MiB", write_size="4 MiB", small_file_count=120, rand_depth=4, file_readers=2)


def _snapshot(root: str) -> dict[str, tuple[str, int]]:
    """Every file's sha256 and mtime, and every directory's mtime, under ``root``."""
    seen = {}
    for folder, directories, names in os.walk(root):
        seen[folder] = ("dir", os.stat(folder).st_mtime_ns)
        for name in names:
            full = os.path.join(folder, name)
            with open(full, "rb") as handle:
                seen[full] = (hashlib.sha256(handle.read()).hexdigest(), os.stat(full).st_mtime_ns)
    return seen


def _make_dataset(root):
    """A read-only-by-contract dataset: one 20 MiB file and 150 small files (9 MB) in class folders."""
    (root / "big").mkdir(parents=True)
    (root / "big" / "shard-0.bin").write_bytes(os.urandom(20 << 20))
    for index in range(150):
        folder = root / f"class{index % 5}"
        folder.mkdir(exist_ok=True)
        (folder / f"{index}.jpg").write_bytes(os.urandom(60_000 + index))
    os.sync()
    return root


@pytest.fixture
def dataset(tmp_path):
    return _make_dataset(tmp_path / "data")


@pytest.fixture(scope="module")
def measured_once(tmp_path_factory):
    """One full storage run over a fresh dataset: (dataset, snapshot before, measurements)."""
    root = _make_dataset(tmp_path_factory.mktemp("storage") / "data")
    before = _snapshot(str(root))
    return root, before, run_check("storage", 0.5, path=str(root), **SMALL_RUN)


def test_files_under_path_are_unchanged_after_a_run(measured_once):
    dataset, before, measured = measured_once
    assert measured["seq_read"].value > 0 and measured["small_files"].value > 0
    assert "existing files" in measured["seq_read"].method  # the dataset itself was read
    assert "existing small files" in measured["small_files"].method
    assert _snapshot(str(dataset)) == before
    leftovers = [n for n in os.listdir(dataset.parent) if n.startswith(".preflight-scratch-")]
    assert leftovers == []  # scratch went beside path and was removed


def test_every_metric_is_measured_on_a_block_filesystem(measured_once):
    _, _, measured = measured_once
    assert set(measured) == {m.name for m in storage.METRICS}
    missing = [m.metric for m in measured.values() if not m.measured]
    assert missing == []
    assert measured["rand_read_p50"].value <= measured["rand_read_p99"].value
    assert measured["free_space"].value > 0
    assert measured["open_files_limit"].value >= 1
    assert measured["read_only"].value == 0.0  # /tmp is a writable mount
    assert measured["seq_write"].value > 0 and measured["fsync_p99"].value > 0
    assert "4 processes x 1 threads = 4 in flight" in measured["rand_read"].method
    assert not measured["seq_read"].cache_bound


def test_a_tmpfs_path_is_named_and_its_numbers_are_cache_bound():
    directory = tempfile.mkdtemp(prefix="preflight-test-tmpfs-", dir="/dev/shm")  # unique: suites may run at once
    try:
        with open(os.path.join(directory, "data.bin"), "wb") as handle:
            handle.write(os.urandom(20 << 20))
        measured = run_check("storage", 0.3, path=directory, **SMALL_RUN)
    finally:
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)
    assert measured["filesystem"].value.startswith("tmpfs at /dev/shm")
    for metric in ("seq_read", "rand_read", "small_files", "seq_write"):
        assert measured[metric].cache_bound, metric
        assert "tmpfs is RAM" in measured[metric].reason
    instance = Instance("storage", "storage", {"path": directory}, (Threshold("seq_read", 1.0, None, "fail", "t:1:1"),),
                        10, 1, True, "t:1:1")
    (result,) = [r for r in judge(instance, Outcome(tuple(measured.values()))) if r.metric == "seq_read"]
    assert result.verdict == "warn"  # far above 1 MB/s, yet never a silent pass
    assert "cache-bound" in result.message


def test_a_missing_path_is_the_configs_mistake_with_the_fix(tmp_path):
    """Issue 35: exit 2 at run (``ConfigMistake`` on option ``path``), never a failed node."""
    with pytest.raises(ConfigMistake) as raised:
        run_check("storage", path=str(tmp_path / "absent"))
    assert raised.value.option == "path"
    assert str(raised.value).startswith(f"storage.path: {tmp_path / 'absent'} does not exist on this node: set "
                                        f"storage.path (or DATA_DIR")


def test_a_block_size_that_breaks_o_direct_alignment_is_refused(dataset):
    measured = run_check("storage", path=str(dataset), block_size="6 KiB")
    assert "multiple of 4 KiB" in measured["seq_read"].reason


def test_without_scratch_space_reads_use_path_and_writes_say_why(dataset, tmp_path):
    measured = run_check("storage", 0.3, path=str(dataset), scratch_dir=str(tmp_path / "nope"), **SMALL_RUN)
    assert measured["seq_read"].measured  # 20 MiB of existing data suffices
    assert not measured["seq_write"].measured
    assert "is not a writable directory" in measured["seq_write"].reason


def test_small_files_read_whole_for_seq_read_are_read_by_processes(tmp_path):
    """No large file and no scratch: seq_read reads the small files whole, an open and a close per
    request, which threads of one process stall on (the GIL); processes, as small_files uses."""
    root = tmp_path / "data"
    for index in range(160):  # 17.6 MB: above the 16 MiB a read set needs
        folder = root / f"class{index % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index}.jpg").write_bytes(os.urandom(110_000))
    os.sync()
    measured = run_check("storage", 0.3, path=str(root), scratch_dir=str(tmp_path / "nope"), **SMALL_RUN)
    seq = measured["seq_read"]
    assert seq.measured and "small files read whole" in seq.note, seq
    assert seq.method.startswith("4 processes x 1 threads x 1 MiB blocks, 158 existing files read whole (16 MiB)"), \
        seq.method  # data_size 16 MiB: 158 whole files of the 160


def test_small_files_far_below_seq_read_point_at_shards():
    from preflight.measurement import Measurement

    results = [Measurement("seq_read", 2000.0, "MB/s"), Measurement("small_files_bandwidth", 40.0, "MB/s"),
               Measurement("small_files", 400.0, "files/s")]
    hinted = measuring._shards_hint(results)
    assert "WebDataset" in hinted[1].hint and "40 MB/s against 2000 MB/s" in hinted[1].hint
    assert hinted[2].hint == hinted[1].hint and hinted[0].hint == ""
    assert measuring._shards_hint([results[0], Measurement("small_files_bandwidth", 900.0, "MB/s")])[1].hint == ""


def test_small_files_of_no_dataset_named_keep_the_fix_that_names_it_not_the_shards_advice():
    """A CI run from a working directory, DATA_DIR unset: its small files read at 204 of 1351 MB/s, and the row
    told the user to pack them into shards; the fix is to name the dataset."""
    import dataclasses

    from preflight.checks import subject
    from preflight.measurement import Measurement

    fix = subject.no_dataset_fix("storage")
    results = [dataclasses.replace(m, subject="no_dataset", hint=fix) for m in (
        Measurement("seq_read", 1351.0, "MB/s"), Measurement("small_files_bandwidth", 204.0, "MB/s"),
        Measurement("small_files", 1800.0, "files/s"))]
    assert [m.hint for m in measuring._shards_hint(results)] == [fix] * 3


def test_a_read_only_bind_mount_is_reported_read_only_through_the_cli(dataset, tmp_path):
    config = write_config(tmp_path, f"""
        version: 1
        checks:
          storage:
            path: {dataset}
            duration: 0.3s
            data_size: 16 MiB
            small_file_count: 120
            write_size: 4 MiB
            read_only: {{min: 1}}
            open_files_limit: {{min: 1000000000}}
            seq_write: {{min: 1 MB/s}}
        """)
    script = (f"mount --bind {dataset} {dataset} && mount -o remount,bind,ro {dataset} && "
              f"{sys.executable} -m preflight run -c {config} --json -")
    result = in_mount_namespace(script)
    assert result.returncode == 1, result.stderr  # the open-file limit below is impossible
    results = {r["id"]: r for r in json.loads(result.stdout)["results"]}
    assert results["storage.read_only"]["verdict"] == "pass"
    assert results["storage.read_only"]["value"] == 1.0
    assert results["storage.open_files_limit"]["verdict"] == "fail"
    assert "ulimit -n" in results["storage.open_files_limit"]["hint"]
    assert results["storage.seq_read"]["verdict"] == "info"  # the read-only data is still read
    seq_write = results["storage.seq_write"]  # judged, so measured: scratch went beside path, not into it
    assert seq_write["value"] > 0 and f"in {dataset.parent}/.preflight-scratch-" in seq_write["method"]
