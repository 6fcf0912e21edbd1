"""Issue 32, public reports of the same kinds built here: caches below the client, streams, per-sample faults.

Each test builds the reported shape for real (a FUSE client with its own cache, files that fail with EIO part
way through, images Pillow refuses, a stream dataset that is not split across workers) and runs ``preflight run``
on it, as tests/checks/test_first_epoch.py does. What is asserted is what the run did and what its rows say,
never how much a time window held.
"""

from __future__ import annotations

import io
import json
import os
import struct
import zlib
from pathlib import Path

import pytest

from tests import fusefs
from tests.helpers import job_package, run_cli, write_config

FUSE = pytest.mark.skipif(bool(fusefs.available()), reason=fusefs.available() or "FUSE can be mounted")


def _run(tmp_path: Path, config: str) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    run = run_cli("run", "-c", str(write_config(tmp_path, config)), "--json", str(report), cwd=tmp_path,
                  timeout=240)
    output = run.stdout + run.stderr
    assert report.exists(), output
    return run.returncode, {r["id"]: r for r in json.loads(report.read_text())["results"]}, output


@FUSE
def test_large_files_behind_a_client_with_its_own_cache_are_streamed_once(tmp_path):
    """kahing/goofys#581, s3fs-fuse/s3fs-fuse#829: s3fs keeps what it fetched in its own cache (use_cache), so `dd`
    of a 2 GB file after drop_caches took 6 s where goofys, with no such cache, took 1046 s; fio over s3fs gave
    other figures with the cache on than off. Here: two 10 MB shards behind a FUSE client that fetches each MiB at
    its first read at 20 MB/s and serves every later read of it from its own cache. seq_read streamed its spans
    from their start in every window, so every window after the warm-up was the client's cache: WARN 1.13 GB/s,
    the gate passed, and rand_read, over the same bytes, said nothing. Now the windows continue one stream, each
    byte read once, the first touch fails, and rand_read, left no unread byte, says it re-read."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(2):
        (data / f"shard-{i:04d}.bin").write_bytes(os.urandom(10 << 20))
    with fusefs.mounted(str(data), first_read_ms=5, first_read_mb_s=20, fetch_chunk=1 << 20) as mount:
        code, results, output = _run(tmp_path, f"""
version: 1
defaults: {{timeout: 120s, retries: 0}}
checks:
  storage:
    path: {mount}
    duration: 2s
    seq_read: {{min: 200 MB/s}}
""")
    row = results["storage.seq_read"]
    assert row["verdict"] == "fail" and row["value"] < 200 and row["subject"] == "dataset", row
    assert "streamed once" in row["stopped"], row["stopped"]  # its windows continued one stream to its end
    randoms = results["storage.rand_read"]
    assert randoms["subject"] == "reread" and "warm: " in randoms["message"], randoms
    assert code == 1, output
