import os
import zlib

import pytest

from preflight.io import scratch


def test_is_inside_resolves_links_and_dots(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    os.symlink(data / "sub", tmp_path / "link")
    assert scratch.is_inside(str(data), str(data))
    assert scratch.is_inside(str(tmp_path / "link"), str(data))
    assert scratch.is_inside(f"{tmp_path}/other/../data/sub", str(data))
    assert not scratch.is_inside(str(tmp_path / "data2"), str(data))  # a shared prefix is not containment
    assert not scratch.is_inside(str(tmp_path), str(data))


def test_parent_outside_is_the_nearest_writable_ancestor(tmp_path):
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    assert scratch.parent_outside(str(data)) == str(tmp_path / "data")
    assert scratch.parent_outside(str(tmp_path / "missing")) is None


def test_parent_outside_never_crosses_into_another_filesystem():
    # / has no parent; /proc is its own filesystem whose parent (/) is another one.
    assert scratch.parent_outside("/") is None
    assert scratch.parent_outside("/proc") is None


def test_scratch_is_refused_inside_the_protected_tree(tmp_path):
    with pytest.raises(PermissionError, match="inside the dataset path"):
        with scratch.scratch_dir(str(tmp_path), protect=str(tmp_path)):
            pass
    assert os.listdir(tmp_path) == []


def test_scratch_data_has_no_two_4k_blocks_alike_so_no_deduplicating_volume_can_shrink_it(tmp_path):
    """axboe/fio#463: one random MiB repeated is 256 distinct blocks in 256 MiB; a deduplicating store
    keeps one copy and serves every read of it from cache."""
    import hashlib

    from preflight.io.scratch import write_file, write_small_files

    big = write_file(str(tmp_path / "seq_read.dat"), 8 << 20, os.urandom(1 << 20))
    small = write_small_files(str(tmp_path / "small"), 50, 110_000)
    blocks = []
    for found in [big, *small]:
        data = open(found.name, "rb").read()
        assert len(data) == found.size
        blocks += [hashlib.sha256(data[i:i + 4096]).digest() for i in range(0, len(data) - 4095, 4096)]
    assert len(blocks) == 2048 + 50 * 26 and len(set(blocks)) == len(blocks)
    assert len(zlib.compress(open(big.name, "rb").read(), 1)) > 0.99 * (8 << 20)  # still incompressible


def test_no_space_for_scratch_says_each_size_in_the_unit_it_fits(tmp_path):
    """Issue 35's wording: a size under 1 MiB was "0 MiB" beside MiB figures. On a real 512 KiB tmpfs with 200 KiB
    written, scratch of 300 KiB does not fit: each size reads in its own unit (``units.format_value``)."""
    import sys

    from tests.helpers import in_mount_namespace

    volume = tmp_path / "volume"
    volume.mkdir()
    (tmp_path / "probe.py").write_text("import sys\nfrom preflight.io.scratch import room_for\n"
                                       "print(room_for(sys.argv[1], 300 * 1024))\n")
    done = in_mount_namespace(f"mount -t tmpfs -o size=512k tmpfs {volume} && "
                              f"head -c 204800 /dev/zero > {volume}/held && "
                              f"{sys.executable} {tmp_path / 'probe.py'} {volume}")
    assert done.stdout.strip() == (f"no space for scratch: 312 KiB free in {volume}, 300 KiB needed and 64 MiB kept "
                                   f"free"), done.stdout + done.stderr
