"""The DataLoader check behind a FUSE client's bandwidth limit with a burst, against the limit / file size.

A client's token bucket (rclone's ``--bwlimit`` on golang.org/x/time/rate, gcsfuse's ``--limit-bytes-per-sec``,
Guava's SmoothBursty behind Flink's rate-limited file system, apache/flink#6149; a bucket that starts full,
bandwidth-throttle/token-bucket#11) lets a reader that sat idle take the burst at once, then the rate. The burst
here is 15% of the pass's bytes. Counted over its time, the ~2.3 s pass read 1.17-1.18x the limit; a line fitted
to one point per batch, 1.06-1.07x (the burst's many batches tilt it); fitted to the count at evenly spaced
moments, 1.01-1.02x (1.07x once in a loaded CI run). What is asserted: the figure lies nearer the refill than the
count over time does (which reads bytes / (bytes - burst), the burst taken as bandwidth), it read through the bucket,
and every file went through the bucket once. A load-tight bound (1.06x) failed on a busy machine; the gap this test
guards is the burst's, ~1.18x."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.founding_table import expected_rate
from tests import datasets, fusefs
from tests.helpers import run_cli, write_config

pytestmark = pytest.mark.skipif(bool(fusefs.available()), reason=fusefs.available() or "FUSE can be mounted")

RATE_MB_S = 30.0  # the bucket's refill: ~270 samples/s of 110 kB files, far below what the loader reads unlimited
BURST_MB = 12.0  # 15% of the pass's 78 MB; a batch of 4 leaves most of it to the windows after the warm-up


def test_a_client_s_token_bucket_burst_is_not_read_as_its_bandwidth_limit(tmp_path):
    """700 files of ~111 kB (78 MB: a ~2.3 s pass at 30 MB/s), batch 4, 2 workers, behind a bucket of 12 MB that
    refills at 30 MB/s. Its windows begin with most of the burst left, delivered at the loader's own speed through
    the daemon (~200 MB/s unlimited); the least-squares rate reads the refill's."""
    root = datasets.imagenet(tmp_path / "data", classes=7, per_class=100)
    sizes = [f.stat().st_size for f in root.rglob("*.JPEG")]
    assert 0.10 <= BURST_MB * 1e6 / sum(sizes) <= 0.20  # the burst, a share of the pass's bytes
    with fusefs.mounted(str(root), bucket_mb_s=RATE_MB_S, bucket_burst_mb=BURST_MB) as mount:
        config = write_config(tmp_path, f"""
            version: 1
            defaults: {{duration: 4s, retries: 0}}
            checks:
              dataloader:
                path: {mount}
                batch_size: 4
                num_workers: 2
                throughput: {{min: 1 samples/s}}
            """)
        report = tmp_path / "report.json"
        run = run_cli("run", "-c", str(config), "--json", str(report), cwd=tmp_path, timeout=120)
        served_twice = fusefs.rereads(mount)
    assert report.exists(), run.stdout + run.stderr
    row = {r["id"]: r for r in json.loads(report.read_text())["results"]}["dataloader.throughput"]
    expected = expected_rate(RATE_MB_S * 1e6, sum(sizes) / len(sizes))
    assert row["value"] is not None, row
    assert "least-squares slope of samples delivered against time" in row["method"], row["method"]  # named
    burst_as_bandwidth = sum(sizes) / (sum(sizes) - BURST_MB * 1e6)  # what a count over the pass's time reads: ~1.18x
    halfway = 1 + (burst_as_bandwidth - 1) / 2
    assert row["value"] <= halfway * expected, (row["value"] / expected, halfway, row["method"])  # 1.01-1.07x seen
    assert row["value"] >= 0.4 * expected, (row["value"] / expected, row["method"])  # it read through the bucket
    assert served_twice == [], served_twice[:5]  # each file went through the bucket once: no figure from a cache
