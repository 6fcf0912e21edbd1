"""The dataset path is never written: not by default, not when the config points scratch_dir into it."""

import os

import pytest

from preflight import config
from preflight.errors import ConfigError
from tests.helpers import run_check, write_config


def snapshot(tree):
    return {(root, name, os.stat(os.path.join(root, name)).st_mtime_ns, os.stat(os.path.join(root, name)).st_size)
            for root, directories, names in os.walk(tree) for name in names + directories}


def test_a_small_dataset_is_measured_through_scratch_beside_it_never_inside(tmp_path):
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "one.bin").write_bytes(b"x" * 4096)  # far too little to time a read
    os.utime(data, ns=(1, 1))
    before, beside_before = snapshot(data), set(os.listdir(tmp_path))
    measured = run_check("storage", duration_s=0.3, path=str(data), data_size="16 MiB")["seq_read"]
    assert measured.measured and measured.value > 0, measured.reason
    assert "a scratch file" in measured.method
    assert snapshot(data) == before and os.stat(data).st_mtime_ns == 1  # not even a directory entry added
    assert set(os.listdir(tmp_path)) == beside_before  # and the scratch beside it is gone


@pytest.mark.parametrize("scratch", ["{data}", "{data}/tmp", "{data}/../dataset/x"])
def test_scratch_dir_inside_the_dataset_is_a_config_error(tmp_path, scratch):
    data = tmp_path / "dataset"
    data.mkdir()
    path = write_config(tmp_path, f"""
        version: 1
        checks:
          storage:
            path: {data}
            scratch_dir: {scratch.format(data=data)}
        """)
    with pytest.raises(ConfigError, match=r"thresholds.yaml:5:\d+: `storage.scratch_dir` .* is inside "
                                          r"`storage.path` .*which preflight never writes: choose a directory"):
        config.load(str(path), environ={})


def test_a_dataset_that_is_its_filesystems_top_is_unmeasurable_rather_than_written(tmp_path, monkeypatch):
    # As for a dataset mounted at /data: no directory above it on its filesystem (see tests/io/test_scratch.py).
    monkeypatch.setattr("preflight.io.scratch.parent_outside", lambda path: None)
    measured = run_check("storage", duration_s=0.3, path=str(tmp_path), data_size="16 MiB")["seq_read"]
    assert not measured.measured
    assert "preflight never writes inside it: set storage.scratch_dir" in measured.reason
    assert os.listdir(tmp_path) == []
