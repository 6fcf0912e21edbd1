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


def _seq_read_behind_throttle(tmp_path: Path, files: int, size: int, volume_bytes: int, rate: int, options: str,
                              read_only: bool = False, load: str = "quiet") -> dict:
    """The seq_read row of ``preflight run`` over ``files`` files of about ``size`` bytes in ``train`` on a fresh
    ext4 loop volume read through a blkio throttle at ``rate`` bytes/s, the page cache dropped first; ``options``:
    the YAML of ``version: 1`` onward, formatted with ``train`` and ``scratch`` (a folder on another disk)."""
    with contextlib.ExitStack() as stack:
        try:
            volume = stack.enter_context(loop_volume(str(tmp_path), volume_bytes))
        except SystemExit as error:  # no loop device in this container
            pytest.skip(str(error))
        train = volume.mountpoint / "train"
        train.mkdir()
        for index in range(files):
            (train / f"{index:04d}.jpg").write_bytes(os.urandom(size + index))
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(volume.mountpoint)], check=True)  # in place
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        config = write_config(tmp_path, options.format(train=train, scratch=scratch))
        try:
            throttle = stack.enter_context(throttled(volume.device, rate))
        except OSError as error:
            pytest.skip(f"no blkio throttle here ({error.strerror})")
        drop_caches()
        if load == "busy":
            stack.enter_context(busy(2))
        done = subprocess.run(throttle.wrap([sys.executable, "-m", "preflight", "run", "-c", str(config), "--json",
                                             "-"]), capture_output=True, text=True, cwd=REPO, timeout=240,
                              env=dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1", PREFLIGHT_LOCK="off"))
    return {r["metric"]: r for r in json.loads(done.stdout)["results"]}["seq_read"]


@pytest.mark.skipif(bool(_cannot()), reason=_cannot() or "can build it")
@pytest.mark.parametrize("load", ["quiet", "busy"])
def test_a_throttles_start_up_burst_never_passes_seq_read_on_a_read_only_volume(tmp_path, load):
    # 400 files: half the pass is left to later readers, so 200 may be read
    row = _seq_read_behind_throttle(tmp_path, 400, 100_000, 96 << 20, RATE, """
        version: 1
        defaults: {{retries: 0, marginal: fail}}
        checks:
          storage:
            path: {train}
            scratch_dir: {scratch}
            duration: 2s
            seq_read: {{min: 100 MB/s}}
        """, read_only=True, load=load)
    assert row["verdict"] == "fail", (row["value"], row["samples"], row["stopped"])
    assert row["value"] < 50.0 and len(row["samples"]) >= 3  # the throttle's rate over several windows
    assert row["marginal"] is None or row["marginal"].startswith("the 90% interval")  # the burst: one window of few
    assert sorted(row["samples"])[len(row["samples"]) // 2] < 50.0  # the burst is one window; the median is not it


@pytest.mark.skipif(bool(_cannot()), reason=_cannot() or "can build it")
def test_a_share_s_tail_is_read_in_its_last_window_not_timed_alone_inside_a_burst(tmp_path):
    """Far from its threshold (5 MB/s behind a 30 MB/s throttle, 1000 files of 110 kB), seq_read over small files
    read 404 MB/s: the warm-up window read most of its share, and the 16 files left were timed alone in 4 ms, inside
    the burst the throttle allows after the gap between windows. A tail under half a window's bytes is read in that
    window. Of the kind of WGBH-MLA/AAPB2#171: a volume on burst credits, where a short test reads the burst."""
    row = _seq_read_behind_throttle(tmp_path, 1000, 110_000, 192 << 20, TAIL_RATE, """
        version: 1
        defaults: {{retries: 0}}
        checks:
          storage:
            path: {train}
            duration: 2s
            seq_read: {{min: 5 MB/s}}
        """)
    assert row["verdict"] == "pass", (row["value"], row["samples"], row["stopped"])
    assert row["value"] < 2 * TAIL_RATE / 1e6 and max(row["samples"]) < 3 * TAIL_RATE / 1e6, (row["samples"],
                                                                                             row["stopped"])
    assert not any(w.startswith("short: 1 sample") for w in row["warnings"])
