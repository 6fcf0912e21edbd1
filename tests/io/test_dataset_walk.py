import json
import os
import socket
import subprocess
import sys
import types

import pytest

from preflight.io import dataset_walk
from preflight.io.dataset_walk import WALK_FACTOR, DataFile, Walk, by_device, listing, too_few
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


def test_walks_regular_non_empty_files_counting_hidden_ones_and_following_links(tree):
    walk = Walk(str(tree))
    found = [(f.name, f.size) for f in walk]
    # the top directory's own files have the first turn; the link is followed as open() follows it, and the
    # file it names is one sample, not two; hidden entries are not samples, but counted and named
    assert found == [(str(tree / "link.jpg"), 20), (str(tree / "train" / "a" / "img1.jpg"), 10)]
    assert walk.skipped == {"empty": 1, "linked_duplicate": 1, "hidden": 2}
    assert walk.summary() == ("1 empty file, 1 file already counted through a symbolic link, 2 hidden files or "
                              "directories, not read (the job's os.walk may read them: .git, .hidden.txt)")
    assert walk.stopped == "" and walk.holds(list(Walk(str(tree))), str(tree)) == f"{tree} holds 2 data files (30 B)"


def test_a_file_path_is_its_own_dataset_and_a_missing_path_is_empty(tree):
    assert [f[:2] for f in Walk(str(tree / "train" / "img0.jpg"))] == [(str(tree / "train" / "img0.jpg"), 20)]
    assert list(Walk(str(tree / "nope"))) == []


def test_descends_a_volume_mounted_inside_the_tree_as_os_walk_does(tree):
    """A real tmpfs mounted inside the tree (private mount namespace) is walked: the job's os.walk reads it."""
    mount = tree / "train" / "mnt"
    mount.mkdir()
    code = (f"from preflight.io.dataset_walk import Walk\n"
            f"print(sorted(f.name for f in Walk({str(tree)!r})))")
    script = (f"mount -t tmpfs -o size=1m tmpfs {mount} && echo data > {mount}/other.jpg && "
              f"{sys.executable} -c \"{code}\"")
    result = in_mount_namespace(script)
    assert result.returncode == 0, result.stderr
    assert "other.jpg" in result.stdout
    assert "img1.jpg" in result.stdout


def test_links_lead_onto_other_filesystems_and_mount_points_are_descended(tmp_path):
    """Issue 21 case 2: a file link and a directory link into a tmpfs are read where open() lands, as the job's
    open() and os.walk(followlinks=True) reach them; a tmpfs mounted below the dataset is descended, as os.walk
    descends it."""
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
    # the link's own path, with the device its bytes are on; the top directory's own files take turns with
    # its subdirectories, met among them in bit-reversed order (blob.jpg, mnt, linked, own.jpg)
    assert found == [["blob.jpg", True], ["own.jpg", False], ["mnt/b.jpg", False], ["linked/a.jpg", True]]
    assert skipped == {} and summary == ""


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
    assert walk.truncated and walk.timed_out and walk.stopped == "time"
    assert walk.summary() == (f"walk cut short by its 10 s time limit after {entries} entries, the rest was not "
                              f"looked at")
    assert walk.holds(found, "D") == (f"the first {entries} data files ({entries} B) the walk reached under D (it "
                                      f"stopped at its 10 s time limit, the rest was not looked at)")


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
    # the folder keeps 20 of its 50 names (its share of the limit), every other one
    assert list(walk) == [] and walk.looked_at == 20 and walk.stopped == "share"
    assert walk.summary() == ("20 empty files, walk looked at 20 entries, an evenly spaced share of each folder "
                              "larger than its part of the limit on entries, the rest was not looked at")


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


def _per_directory(files, root) -> dict[str, int]:
    counts: dict[str, int] = {}
    for found in files:
        folder = os.path.relpath(os.path.dirname(found.name), root)
        counts[folder] = counts.get(folder, 0) + 1
    return counts


def test_a_capped_walk_takes_files_from_every_folder_in_turn_not_the_first_folders(tmp_path):
    """A sorted prefix is a biased sample (dotnet/machinelearning#3778): 300 small files in a_cifar/ beside 20
    large ones in b_hires/ and a nested c/d/: 100 files taken alternate between the folders until one runs out."""
    for i in range(300):
        (tmp_path / "a_cifar").mkdir(exist_ok=True)
        (tmp_path / "a_cifar" / f"{i:05d}.png").write_bytes(b"s" * 25)
    for i in range(20):
        (tmp_path / "b_hires").mkdir(exist_ok=True)
        (tmp_path / "b_hires" / f"{i:05d}.jpg").write_bytes(b"L" * 1000)
    (tmp_path / "c" / "d").mkdir(parents=True)
    for i in range(50):
        (tmp_path / "c" / "d" / f"{i:03d}.jpg").write_bytes(b"m" * 100)
    walk = Walk.for_files(str(tmp_path), 100)
    taken = walk.take(100)
    # a turn each, one file per turn: 20 rounds of three, then a_cifar and c/d alternate for the other 40
    assert _per_directory(taken, tmp_path) == {"a_cifar": 40, "b_hires": 20, "c/d": 40}
    assert walk.stopped == "max_files" and walk.truncated
    assert walk.reached(taken, "D") == ("the first 100 data files (25 kB) the walk reached under D; it stopped at "
                                        "max_files, the rest was not looked at")
    assert walk.holds(taken, "D").startswith("the first 100 data files (25 kB) the walk reached under D (it stopped")
    assert "walk stopped at max_files after" in walk.summary()
    again = Walk.for_files(str(tmp_path), 100)
    assert [f.name for f in again.take(100)] == [f.name for f in taken]  # two runs take the same files


def test_a_walk_that_takes_everything_is_not_cut_short(tmp_path):
    for i in range(10):
        (tmp_path / f"{i}.bin").write_bytes(b"x")
    walk = Walk.for_files(str(tmp_path), 10)
    assert len(walk.take(10)) == 10 and walk.stopped == "" and walk.reached([], "D") == ""


def test_within_a_folder_any_prefix_spans_its_sorted_entries(tmp_path):
    """A flat folder whose sorted names put one source first (cifar_*, then hires_*): the first files taken are
    spread over the listing in bit-reversed order (0, 64, 32, 96, ... of 128), not its first names: a quarter
    of them hires, as in the folder."""
    for i in range(96):
        (tmp_path / f"cifar_{i:03d}.png").write_bytes(b"s")
    for i in range(32):
        (tmp_path / f"hires_{i:03d}.jpg").write_bytes(b"L" * 10)
    names = [os.path.basename(f.name) for f in Walk(str(tmp_path)).take(8)]
    assert names == ["cifar_000.png", "cifar_064.png", "cifar_032.png", "hires_000.jpg", "cifar_016.png",
                     "cifar_080.png", "cifar_048.png", "hires_016.jpg"]


def test_each_folder_keeps_only_its_share_of_the_entry_limit(tmp_path):
    """Memory stays bounded: with max_entries 40, each of 10 folders of 100 files keeps 4 names (40 / 10),
    evenly spaced over its listing, so the walk's files come from every folder and from across each."""
    for c in range(10):
        (tmp_path / f"c{c}").mkdir()
        for i in range(100):
            (tmp_path / f"c{c}" / f"{i:03d}.jpg").write_bytes(b"x")
    walk = Walk(str(tmp_path), max_entries=40)
    files = list(walk)
    assert _per_directory(files, tmp_path) == {f"c{c}": 3 for c in range(10)}  # 10 folders + 30 files = 40
    assert walk.looked_at == 40 and walk.stopped == "entries"
    assert {os.path.basename(f.name) for f in files if "/c0/" in f.name} == {"000.jpg", "050.jpg", "025.jpg"}


def test_hidden_entries_are_counted_and_named_but_preflights_own_are_not(tmp_path):
    """pytorch/vision#2831 and AppleDouble files: the job's os.walk reads .ipynb_checkpoints and ._x.jpg; the walk
    does not take them as samples but counts each (a hidden folder once, not walked) and names the first three.
    Its own scratch directories and make-dataset's marker are preflight's, not the job's: not counted."""
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(3):
            (tmp_path / cls / f"img_{i}.jpg").write_bytes(b"j" * 100)
            (tmp_path / cls / f"._img_{i}.jpg").write_bytes(b"a" * 40)
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "img_0-checkpoint.jpg").write_bytes(b"c" * 100)
    (tmp_path / f"{dataset_walk.SCRATCH_PREFIX}abc").mkdir()
    (tmp_path / f"{dataset_walk.SCRATCH_PREFIX}abc" / "seq_read.dat").write_bytes(b"s" * 100)
    (tmp_path / dataset_walk.DATASET_MARKER).write_text("{}")
    walk = Walk(str(tmp_path))
    assert sorted(os.path.relpath(f.name, tmp_path) for f in walk) == [
        f"{cls}/img_{i}.jpg" for cls in ("cat", "dog") for i in range(3)]
    assert walk.skipped == {"hidden": 7}
    assert walk.summary() == ("7 hidden files or directories, not read (the job's os.walk may read them: "
                              ".ipynb_checkpoints, cat/._img_0.jpg, cat/._img_1.jpg, ...)")
    assert walk.note([], "D") == f"skipped under D: {walk.summary()}"


def test_pseudo_filesystems_are_not_descended_whether_mounted_or_linked(tmp_path):
    """A real proc mounted inside the tree and a link to /sys (a sysfs here) are kernel interfaces, not data:
    counted as pseudo filesystems, never walked; a tmpfs mounted beside them is walked."""
    data = tmp_path / "data"
    for folder in ("proc", "volume", "real"):
        (data / folder).mkdir(parents=True)
    (data / "real" / "a.jpg").write_bytes(b"x" * 10)
    (data / "sys").symlink_to("/sys")
    code = ("import json, os, sys; from preflight.io.dataset_walk import Walk; w = Walk(sys.argv[1]); "
            "found = sorted(os.path.relpath(f.name, sys.argv[1]) for f in w); "
            "print(json.dumps([found, dict(w.skipped), w.summary()]))")
    script = (f"mount -t proc proc {data / 'proc'} && mount -t tmpfs -o size=1m tmpfs {data / 'volume'} && "
              f"echo mounted > {data / 'volume' / 'b.jpg'} && {sys.executable} -c '{code}' {data}")
    result = in_mount_namespace(script)
    assert result.returncode == 0, result.stderr
    found, skipped, summary = json.loads(result.stdout)
    if os.stat("/sys").st_dev == os.stat("/").st_dev:
        pytest.skip("/sys is not a mounted sysfs here")
    assert found == ["real/a.jpg", "volume/b.jpg"]
    assert skipped == {"pseudo_fs": 2}
    assert summary in ("2 pseudo filesystems not descended (no dataset lives on them: proc at proc, sysfs at sys)",
                       "2 pseudo filesystems not descended (no dataset lives on them: sysfs at sys, proc at proc)")


def test_a_walk_that_only_sampled_a_large_folder_says_so(tmp_path):
    """A folder of 100 names with a limit of 20 entries keeps 20 evenly spaced ones; taking them all is no whole
    walk: the rest was never looked at."""
    for i in range(100):
        (tmp_path / f"{i:03d}.txt").write_bytes(b"x")
    walk = Walk(str(tmp_path), max_entries=20)
    assert sorted(os.path.basename(f.name) for f in walk) == [f"{i:03d}.txt" for i in range(0, 100, 5)]
    assert walk.stopped == "share" and walk.looked_at == 20
    assert walk.cut() == ("it took an evenly spaced share of each folder larger than its part of the limit of 20 "
                          "entries (divided evenly among the folders at each level, whatever their size), the rest "
                          "was not looked at")


def test_a_tree_below_the_limit_says_its_folders_had_parts_of_it_not_that_they_passed_it(tmp_path):
    """A new user's run measured a checkout (no dataset named): 1425 entries looked at, under a limit of 40000,
    and the note said each folder was "too large for its limit of 40000 entries". The limit is divided evenly
    among the folders at each level: of 4 folders under a limit of 40, the one with 30 files keeps 10."""
    for folder, files in (("big", 30), ("a", 1), ("b", 1), ("c", 1)):
        (tmp_path / folder).mkdir()
        for i in range(files):
            (tmp_path / folder / f"{i:02d}.bin").write_bytes(b"x")
    walk = Walk(str(tmp_path), max_entries=40)
    assert len(list(walk)) == 13 and walk.stopped == "share"
    assert walk.looked_at == 4 + 13 < 40  # the folders and the files kept: 20 of big's files never looked at
    assert walk.cut() == ("it took an evenly spaced share of each folder larger than its part of the limit of 40 "
                          "entries (divided evenly among the folders at each level, whatever their size), the rest "
                          "was not looked at")


def test_a_hard_link_and_a_second_symbolic_link_are_named_as_such(tmp_path):
    """Issue 25: "second link to a file already counted" did not say which kind of link."""
    (tmp_path / "a.jpg").write_bytes(b"x" * 10)
    os.link(tmp_path / "a.jpg", tmp_path / "b.jpg")
    (tmp_path / "z").mkdir()  # a directory's files have their turn after the top's
    (tmp_path / "z" / "c.jpg").symlink_to(tmp_path / "a.jpg")
    walk = Walk(str(tmp_path))
    assert [os.path.basename(f.name) for f in walk] in (["a.jpg"], ["b.jpg"])
    assert walk.skipped == {"hard_link": 1, "symlink_duplicate": 1}
    assert walk.summary() == "1 hard link to a file already counted, 1 symbolic link to a file already counted"


def test_include_and_exclude_globs_and_a_bounded_walk(tmp_path):
    for name in ("a.jpg", "b.jpg", "c.txt", "sub/d.jpg", "sub/skip/e.jpg"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * 10)
    listed, _ = listing(str(tmp_path), 100, include="*.jpg", exclude="sub/skip/*")
    assert [os.path.relpath(f.name, tmp_path) for f in listed] == ["a.jpg", "b.jpg", "sub/d.jpg"]
    two, walk = listing(str(tmp_path), 2, include="*", exclude="")
    # the first the walk reaches: its sorted entries in bit-reversed order (a.jpg, c.txt, b.jpg, sub) span them
    assert [os.path.relpath(f.name, tmp_path) for f in two] == ["a.jpg", "c.txt"]
    assert walk.looked_at <= 2 * WALK_FACTOR and walk.stopped == "max_files"
