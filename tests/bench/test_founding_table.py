"""The founding table's arithmetic and parsing: expected rate, the 10% band, throttle lines, cgroup and dd output.
(The bench itself needs root, a loop device and a blkio cgroup; it is run by hand, not here.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.founding_table import (busy, bytes_read, config, dd_seconds, expected_rate, throttle_line, within)


def test_the_expected_rate_is_bandwidth_over_the_mean_file_size():
    assert expected_rate(88e6, 111_536) == pytest.approx(789.0, abs=0.5)  # the founding table's ~800
    assert expected_rate(286e6, 111_536) == pytest.approx(2564.2, abs=0.5)  # and ~2,600
    with pytest.raises(ValueError, match="mean file size must be positive, not 0"):
        expected_rate(88e6, 0)


def test_within_ten_percent_holds_on_either_side_and_no_further():
    assert within(711.0, 789.0) and within(867.0, 789.0)
    assert not within(710.0, 789.0) and not within(868.0, 789.0)


def test_throttle_lines_name_the_device_by_major_and_minor():
    device = os.makedev(7, 3)
    assert throttle_line(device, 88_000_000) == "7:3 88000000"
    assert throttle_line(device, 88_000_000, v2=True) == "7:3 rbps=88000000"


def test_bytes_read_takes_the_devices_read_line_in_v1_and_v2_statistics():
    device = os.makedev(7, 3)
    v1 = "7:0 Read 5\n7:3 Read 311296000\n7:3 Write 4096\n7:3 Total 311300096\nTotal 311300101\n"
    assert bytes_read(v1, device) == 311_296_000
    assert bytes_read("7:0 rbytes=1 wbytes=2\n7:3 rbytes=4096 wbytes=0 rios=1 wios=0\n", device) == 4096
    assert bytes_read("Total 0\n", device) == 0


def test_dd_seconds_reads_the_copy_time_from_dds_last_line():
    said = ("300+0 records in\n300+0 records out\n"
            "314572800 bytes (315 MB, 300 MiB) copied, 1.02573 s, 307 MB/s\n")
    assert dd_seconds(said) == 1.02573
    with pytest.raises(ValueError, match="no copy time in dd's output"):
        dd_seconds("dd: failed to open '/dev/loop9': No such file or directory\n")


def test_the_config_is_one_dataloader_check_with_the_founding_settings_and_loads(tmp_path):
    path = config(str(tmp_path), tmp_path / "train", "4s", pools=1)
    text = Path(path).read_text()
    assert "batch_size: 64" in text and "num_workers: 2" in text and "worker_pools: 1" in text
    assert "duration: 4s" in text and "worker_pools" not in Path(config(str(tmp_path), tmp_path, "4s")).read_text()
    from preflight import config as preflight_config
    (tmp_path / "train").mkdir()
    loaded = preflight_config.load(path, environ={})
    assert [i.check for i in loaded.instances] == ["dataloader"]


def test_busy_spinners_are_gone_when_the_block_ends_however_it_ends():
    with pytest.raises(KeyError):
        with busy(2):
            children = subprocess.run(["pgrep", "-P", str(os.getpid()), "-x", "yes"], capture_output=True,
                                      text=True).stdout.split()
            assert len(children) == 2
            raise KeyError("a run failed")
    left = subprocess.run(["pgrep", "-P", str(os.getpid()), "-x", "yes"], capture_output=True, text=True).stdout
    assert left == "", sys.exc_info()
