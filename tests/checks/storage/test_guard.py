"""The plausibility guard: page-cache speed and the network link bound what a device can deliver."""

from __future__ import annotations

import os

from preflight.checks.storage import guard


def test_a_rate_near_page_cache_speed_is_rejected():
    assert "not bypassed" in guard.implausible(4500, cache_mb_s=5000, network=False, link_mb_s=None)
    assert guard.implausible(1200, cache_mb_s=5000, network=False, link_mb_s=None) == ""


def test_a_network_read_faster_than_the_wire_is_the_client_cache():
    assert "network link" in guard.implausible(3000, cache_mb_s=20000, network=True, link_mb_s=1250)
    assert guard.implausible(1100, cache_mb_s=20000, network=True, link_mb_s=1250) == ""
    assert guard.implausible(3000, cache_mb_s=20000, network=False, link_mb_s=1250) == ""


def test_link_rate_reads_the_fastest_interface(tmp_path):
    for name, speed in (("lo", "100000"), ("eth0", "10000"), ("eth1", "25000"), ("wlan0", "-1")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "speed").write_text(speed + "\n")
    assert guard.link_rate(tmp_path) == 25000 / 8  # 25 Gb/s = 3125 MB/s
    assert guard.link_rate(tmp_path / "none") is None


def test_page_cache_rate_is_far_above_this_disks_uncached_reads(tmp_path):
    name = tmp_path / "c.bin"
    name.write_bytes(os.urandom(32 << 20))
    runs = [[(str(name), 0, 16 << 20)], [(str(name), 16 << 20, 32 << 20)]]
    assert guard.page_cache_rate(runs, block=1 << 20) > 1000


def test_the_page_cache_probe_is_not_fooled_by_small_files(tmp_path):
    """Issue 11 case 1: 110 kB files. The old probe timed one 110 kB read per thread, so thread
    start-up dominated and an honest O_DIRECT rate looked like 184-389% of "the page cache".
    Probed over the same files for a fixed time, the cached rate is far above any uncached one."""
    runs = [[], [], [], []]
    for index in range(200):
        name = tmp_path / f"{index:03d}.JPEG"
        name.write_bytes(os.urandom(110_000))
        runs[index % 4].append((str(name), 0, 110_000 // 4096 * 4096))
    assert guard.page_cache_rate(runs, block=1 << 20) > 1000


def test_o_direct_on_a_block_filesystem_is_trusted_and_not_probed(tmp_path, monkeypatch):
    """A loaded CPU slows a page-cache probe, never the device: on ext4 with O_DIRECT the probe would only
    make false accusations, so it does not run."""
    from tests.helpers import run_check

    def probe(*args, **kwargs):
        raise AssertionError("the page-cache probe ran for O_DIRECT on a block filesystem")

    monkeypatch.setattr(guard, "page_cache_rate", probe)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "shard.bin").write_bytes(os.urandom(20 << 20))
    measured = run_check("storage", 0.3, path=str(tmp_path / "data"), data_size="16 MiB", write_size="4 MiB",
                         small_file_count=100)
    assert "O_DIRECT" in measured["seq_read"].method and measured["seq_read"].value > 0
    assert not measured["seq_read"].cache_bound


def test_the_page_cache_probe_runs_in_processes_as_seq_read_did(tmp_path):
    """Small files read whole are read by processes (measure_io.IO.seq_read): the ceiling they are
    judged against must be probed the same way, every run read, not a GIL-bound thread's."""
    runs = [[], [], [], []]
    for index in range(200):
        name = tmp_path / f"{index:03d}.JPEG"
        name.write_bytes(os.urandom(110_000))
        runs[index % 4].append((str(name), 0, 110_000 // 4096 * 4096))
    assert guard.page_cache_rate(runs, block=1 << 20, processes=4) > 1000
    assert guard.page_cache_rate(runs, block=1 << 20, processes=2) > 1000
