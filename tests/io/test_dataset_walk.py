import json
import os
import socket
import subprocess
import sys
import types

import pytest

from preflight.io import dataset_walk
from preflight.io.dataset_walk import DataFile, Walk, by_device, too_few
from tests import datasets
from tests.helpers import REPO, in_mount_namespace


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    (tmp_path / "train" / "a" / "img1.jpg").write_bytes(b"x" * 10)
    (tmp_path / "train" / "img0.jpg").write_bytes(b"y" * 20)
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "objects.pack").write_bytes(b"z" * 30)
    (tmp_path / ".hidden.txt").write_bytes(b"h")
    (tmp_path / "link.jpg").symlink_to(tmp_path / "train" / "img0.jpg")
    return tmp_path


def test_walks_regular_non_empty_files_in_sorted_order_skipping_hidden_and_following_links(tree):
    walk = Walk(str(tree))
    found = [(f.name, f.size) for f in walk]
    # top-down: a directory's files before its subdirectories, as os.walk and find; the link is
    # followed as open() follows it, and the file it names is one sample, not two
    assert found == [(str(tree / "link.jpg"), 20), (str(tree / "train" / "a" / "img1.jpg"), 10)]
    assert walk.skipped == {"empty": 1, "duplicate": 1}
    assert walk.summary() == "1 empty file, 1 second link to a file already counted"


def test_a_file_path_is_its_own_dataset_and_a_missing_path_is_empty(tree):
    assert [f[:2] for f in Walk(str(tree / "train" / "img0.jpg"))] == [(str(tree / "train" / "img0.jpg"), 20)]
    assert list(Walk(str(tree / "nope"))) == []


def test_stays_on_the_filesystem_of_path(tree):
    """A real tmpfs mounted inside the tree (private mount namespace) is not walked, as find -xdev."""
    mount = tree / "train" / "mnt"
    mount.mkdir()
    code = (f"from preflight.io.dataset_walk import Walk\n"
            f"print(sorted(f.name for f in Walk({str(tree)!r})))")
    script = (f"mount -t tmpfs -o size=1m tmpfs {mount} && echo data > {mount}/other.jpg && "
              f"{sys.executable} -c \"{code}\"")
    result = in_mount_namespace(script)
    assert result.returncode == 0, result.stderr
    assert "other.jpg" not in result.stdout
    assert "img1.jpg" in result.stdout


def test_links_lead_onto_other_filesystems_and_mount_points_are_not_descended(tmp_path):
    """Issue 21 case 2: a file link and a directory link into a tmpfs are read where open() lands, as the job's
    open() and os.walk(followlinks=True) reach them; a tmpfs mounted below the dataset is not descended (-xdev)."""
    data, other = tmp_path / "data", tmp_path / "other"
    (data / "mnt").mkdir(parents=True)
    other.mkdir()
    (data / "own.jpg").write_bytes(b"x" * 100)
    (data / "blob.jpg").symlink_to(other / "blob")
    (data / "linked").symlink_to(other / "folder")
    code = ("import json, os, sys; from preflight.io.dataset_walk import Walk; w = Walk(sys.argv[1]); "
            "found = [(os.path.relpath(f.name, sys.argv[1]), f.device == os.stat(sys.argv[2]).st_dev) for f in w]; "
            "print(json.dumps([found, dict(w.skipped), w.summary()]))")
    script = (f"mount -t tmpfs -o size=1m tmpfs {other} && mount -t tmpfs -o size=1m tmpfs {data / 'mnt'} && "
              f"mkdir {other / 'folder'} && echo blob > {other / 'blob'} && echo one > {other / 'folder' / 'a.jpg'} && "
              f"echo mounted > {data / 'mnt' / 'b.jpg'} && {sys.executable} -c '{code}' {data} {other}")
    result = in_mount_namespace(script)
    assert result.returncode == 0, result.stderr
    found, skipped, summary = json.loads(result.stdout)
    # sorted, files before directories: the link's own path, with the device its bytes are on
    assert found == [["blob.jpg", True], ["own.jpg", False], ["linked/a.jpg", True]]
    assert skipped == {"other_fs": 1} and summary == "1 mount point not descended (another filesystem)"


def test_files_are_grouped_by_the_device_that_holds_their_bytes_most_bytes_first():
    files = [DataFile("a", 10, device=1), DataFile("b", 50, device=2), DataFile("c", 30, device=1),
             DataFile("d", 50, device=2)]
    assert by_device(files) == [[files[1], files[3]], [files[0], files[2]]]
    assert by_device([]) == []


def test_a_walk_on_slow_metadata_stops_at_its_time_limit(tmp_path, monkeypatch):
    """A stat that takes one second of a fake clock (a stalled NFS server): a 10 s walk of 50 files looks at
    the entries whose stat fits in 10 s after its own (the path and the directories above it), then stops."""
    for i in range(50):
        (tmp_path / f"{i:02d}.jpg").write_bytes(b"x")
    entries = 10 - (1 + len(tmp_path.resolve().parents) + 1)  # after the path's stat and one per directory up to /
    clock, real = types.SimpleNamespace(now=0.0), os.stat

    def slow_stat(*args, **kwargs):
        clock.now += 1.0
        return real(*args, **kwargs)

    monkeypatch.setattr(os, "stat", slow_stat)
    monkeypatch.setattr(dataset_walk, "time", types.SimpleNamespace(perf_counter=lambda: clock.now), raising=False)
    walk = Walk.for_files(str(tmp_path), max_files=1000, seconds=10)
    found = list(walk)
    assert walk.looked_at == len(found) == entries and clock.now == 10
    assert walk.truncated and walk.timed_out
    assert walk.summary() == f"walk cut short by its 10 s time limit after {entries} entries"


def test_a_hugging_face_cache_of_symlinks_is_300_samples_and_its_loop_is_not_followed(tmp_path):
    snapshot = datasets.hf_cache(tmp_path / "hub", files=300, size=1000)
    walk = Walk(str(snapshot))
    files = list(walk)
    assert len(files) == 300 and all(f.size == 1000 for f in files)
    assert files[0].name == str(snapshot / "train" / "img_0000.jpg")  # the path the job opens
    # loop -> ../.. reaches snapshots/, then <rev> again: the loop is seen once and not followed
    assert walk.skipped == {"loop": 1}


def test_special_files_dangling_links_and_loops_are_counted_not_followed(tmp_path):
    (tmp_path / "ok.bin").write_bytes(b"x" * 100)
    os.mkfifo(tmp_path / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    (tmp_path / "dangling.jpg").symlink_to(tmp_path / "missing")
    (tmp_path / "self").symlink_to(tmp_path / "self")  # ELOOP
    walk = Walk(str(tmp_path))
    assert [os.path.basename(f.name) for f in walk] == ["ok.bin"]
    server.close()
    assert walk.skipped == {"special": 2, "dangling": 1, "loop": 1}


def test_a_file_listed_then_gone_is_counted_as_vanished(tmp_path, monkeypatch):
    """The window between readdir and stat, where another process deletes a file, made deterministic."""
    (tmp_path / "kept.bin").write_bytes(b"x")
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda d: real(d) + ["deleted-meanwhile.bin"])
    walk = Walk(str(tmp_path))
    assert len(list(walk)) == 1 and walk.skipped == {"vanished": 1}


def test_the_walk_is_bounded_by_entries_looked_at(tmp_path):
    for i in range(50):
        (tmp_path / f"{i:02d}").write_bytes(b"")  # empty: skipped, but each one is looked at
    walk = Walk(str(tmp_path), max_entries=20)
    assert list(walk) == [] and walk.looked_at == 20 and walk.truncated
    assert walk.summary() == "20 empty files, walk stopped after 20 entries"


def test_unreadable_files_and_directories_are_counted_for_a_user_without_access(tmp_path):
    """Issue 11 case 7: 60 of 140 files mode 600 owned by another uid and a folder mode 700, walked by a
    process without the capability to override file permissions."""
    if os.geteuid() != 0:
        pytest.skip("needs root to chown the fixture to another uid")
    root = datasets.mixed_permissions(tmp_path / "data", files=140, unreadable=60, size=100)
    code = ("import json, sys; from preflight.io.dataset_walk import Walk; w = Walk(sys.argv[1]); "
            "n = len(list(w)); print(json.dumps([n, dict(w.skipped), w.unreadable(), w.summary()]))")
    done = subprocess.run([*datasets.WITHOUT_DAC, sys.executable, "-c", code, str(root)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    count, skipped, unreadable, summary = json.loads(done.stdout)
    assert count == 80 and skipped == {"unreadable": 60, "unreadable_dir": 1} and unreadable == 61
    assert summary == "60 unreadable files, 1 unreadable directory"


def test_too_few_files_are_not_a_dataset():
    assert too_few([DataFile("a", 100_000)] * 3, "x") == (
        "x holds 3 data files (300 kB), under the 100 files and 8 MiB (or 64 MiB of shards) a dataset figure needs")
    assert too_few([DataFile("a", 110_000)] * 100, "x") == ""  # ImageNet-sized samples
    assert too_few([DataFile("a", 11 << 20)] * 6, "x") == ""  # a few shards
    assert too_few([DataFile("a", 1000)] * 5000, "x") != ""  # 5 MB of files: not enough bytes
