"""Issue 44's wrong PASS, built for real: a read-only volume of small files (the report had 200) behind a 20 MB/s
blkio throttle, the scratch directory on another disk. One run with both cores busy read `seq_read PASS 289.9 MB/s`; quiet it read
29.8 MB/s FAIL. The cause: seq_read over small files read its first-epoch share (25 files, 2.75 MB) in one sample,
inside the throttle's start-up burst. Now such a figure is never decided within 10x of its bound while more of the
pass can be read, and its median is not the burst window: over 400 such files (half the pass is left to later
readers) the run fails, quiet or busy: decided, or marginal (fail closed) where the burst is one window of
under 8.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.founding_table import busy, drop_caches, loop_volume, throttled
from tests.helpers import REPO, write_config

RATE = 20_000_000  # bytes/s
TAIL_RATE = 30_000_000


def _cannot() -> str:
    if os.geteuid() != 0:
        return "needs root: a loop device, a mount and a blkio cgroup"
    missing = [tool for tool in ("mkfs.ext4", "losetup", "mount") if not shutil.which(tool)]
    return f"missing {', '.join(missing)}" if missing else ""


@pytest.mark.skipif(bool(_cannot()), reason=_cannot() or "can build it")
@pytest.mark.parametrize("load", ["quiet", "busy"])
def test_a_throttles_start_up_burst_never_passes_seq_read_on_a_read_only_volume(tmp_path, load):
    with contextlib.ExitStack() as stack:
        try:
            volume = stack.enter_context(loop_volume(str(tmp_path), 96 << 20))
        except SystemExit as error:  # no loop device in this container
            pytest.skip(str(error))
        train = volume.mountpoint / "train"
        train.mkdir()
        for index in range(400):  # half the pass is left to later readers: 200 may be read
            (train / f"{index:04d}.jpg").write_bytes(os.urandom(100_000 + index))
        subprocess.run(["mount", "-o", "remount,ro", str(volume.mountpoint)], check=True)  # read-only, in place
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        config = write_config(tmp_path, f"""
            version: 1
            defaults: {{retries: 0, marginal: fail}}
            checks:
              storage:
                path: {train}
                scratch_dir: {scratch}
                duration: 2s
                seq_read: {{min: 100 MB/s}}
            """)
        try:
            throttle = stack.enter_context(throttled(volume.device, RATE))
        except OSError as error:
            pytest.skip(f"no blkio throttle here ({error.strerror})")
        drop_caches()
        if load == "busy":
            stack.enter_context(busy(2))
        done = subprocess.run(throttle.wrap([sys.executable, "-m", "preflight", "run", "-c", str(config), "--json",
                                             "-"]), capture_output=True, text=True, cwd=REPO, timeout=240,
                              env=dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1", PREFLIGHT_LOCK="off"))
    row = {r["metric"]: r for r in json.loads(done.stdout)["results"]}["seq_read"]
    assert row["verdict"] == "fail", (row["value"], row["samples"], row["stopped"])
    assert row["value"] < 50.0 and len(row["samples"]) >= 3  # the throttle's rate over several windows
    assert row["marginal"] is None or row["marginal"].startswith("the 90% interval")  # the burst: one window of few
    assert sorted(row["samples"])[len(row["samples"]) // 2] < 50.0  # the burst is one window; the median is not it


@pytest.mark.skipif(bool(_cannot()), reason=_cannot() or "can build it")
def test_a_share_s_tail_is_read_in_its_last_window_not_timed_alone_inside_a_burst(tmp_path):
    """Far from its threshold (5 MB/s behind a 30 MB/s throttle, 1000 files of 110 kB), seq_read over small files read 404 MB/s: the
    warm-up window read most of its share, and the 16 files left were timed alone in 4 ms, inside the burst the
    throttle allows after the gap between windows. A tail under half a window's bytes is read in that window.
    Of the kind of WGBH-MLA/AAPB2#171: a volume on burst credits, where a short test reads the burst."""
    with contextlib.ExitStack() as stack:
        try:
            volume = stack.enter_context(loop_volume(str(tmp_path), 192 << 20))
        except SystemExit as error:  # no loop device in this container
            pytest.skip(str(error))
        train = volume.mountpoint / "train"
        train.mkdir()
        for index in range(1000):
            (train / f"{index:04d}.jpg").write_bytes(os.urandom(110_000 + index))
        config = write_config(tmp_path, f"""
            version: 1
            defaults: {{retries: 0}}
            checks:
              storage:
                path: {train}
                duration: 2s
                seq_read: {{min: 5 MB/s}}
            """)
        try:
            throttle = stack.enter_context(throttled(volume.device, TAIL_RATE))
        except OSError as error:
            pytest.skip(f"no blkio throttle here ({error.strerror})")
        drop_caches()
        done = subprocess.run(throttle.wrap([sys.executable, "-m", "preflight", "run", "-c", str(config), "--only",
                                             "storage", "--json", "-"]), capture_output=True, text=True, cwd=REPO,
                              timeout=240, env=dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1",
                                                    PREFLIGHT_LOCK="off"))
    row = {r["metric"]: r for r in json.loads(done.stdout)["results"]}["seq_read"]
    assert row["verdict"] == "pass", (row["value"], row["samples"], row["stopped"])
    assert row["value"] < 2 * TAIL_RATE / 1e6 and max(row["samples"]) < 3 * TAIL_RATE / 1e6, (row["samples"], row["stopped"])
    assert not any(w.startswith("short: 1 sample") for w in row["warnings"])
