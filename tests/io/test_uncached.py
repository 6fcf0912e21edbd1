"""O_DIRECT where the filesystem allows it, none on tmpfs; whole files read exactly."""

from __future__ import annotations

import os

from preflight.host.fsinfo import filesystem_of
from preflight.io.uncached import aligned_buffer, bypass_for, read_file


def test_o_direct_on_this_disk_and_no_bypass_on_tmpfs(tmp_path):
    name = tmp_path / "f.bin"
    name.write_bytes(os.urandom(10_000))
    expected = "O_DIRECT" if filesystem_of(str(tmp_path)).fstype in ("ext4", "xfs", "btrfs") else None
    if expected:
        assert bypass_for(str(name), memory_backed=False) == expected
    assert bypass_for(str(name), memory_backed=True) == "none"


def test_read_file_returns_every_byte_of_unaligned_sizes(tmp_path):
    buffer = aligned_buffer(1 << 16)
    assert len(buffer) == 1 << 16
    for size in (1, 4095, 4096, 70_001, 300_000):
        name = tmp_path / f"{size}.bin"
        data = os.urandom(size)
        name.write_bytes(data)
        os.sync()
        for bypass in ("O_DIRECT", "fadvise", "none"):
            assert read_file(str(name), bypass, buffer) == size
        assert bytes(buffer[: size % len(buffer) or len(buffer)]) == data[-(size % len(buffer) or len(buffer)):]
