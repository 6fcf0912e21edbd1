"""``preflight make-dataset``: the ImageNet-shaped dataset README's run command measures."""

from __future__ import annotations

import json

from preflight.io.dataset_walk import Walk
from tests.helpers import run_cli


def test_it_writes_class_folders_of_110_kb_files_that_the_walk_counts_as_samples(tmp_path):
    target = tmp_path / "imagenet" / "train"
    done = run_cli("make-dataset", str(target), "--classes", "4", "--per-class", "30")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{target}: wrote 120 files of ~110 kB in 4 ImageNet-style class folders")
    assert sorted(p.name for p in target.iterdir()) == [".preflight-dataset.json", "n01440764", "n01440765",
                                                        "n01440766", "n01440767"]
    files = list(Walk(str(target)))  # the marker is hidden: not a sample
    assert len(files) == 120
    assert {f.size for f in files} == {110_000 + k * 512 for k in range(7)}
    assert len({(tmp_path / f.name).read_bytes()[:64] for f in files}) == 120  # no two files alike
    assert json.loads((target / ".preflight-dataset.json").read_text()) == {
        "classes": 4, "per_class": 30, "sample_bytes": 110_000}


def test_a_second_run_with_the_same_shape_changes_nothing_and_another_shape_is_refused(tmp_path):
    target = tmp_path / "train"
    assert run_cli("make-dataset", str(target), "--classes", "2", "--per-class", "3").returncode == 0
    before = {p: p.stat().st_mtime_ns for p in target.rglob("*")}
    again = run_cli("make-dataset", str(target), "--classes", "2", "--per-class", "3")
    assert again.returncode == 0 and "already holds 6 files" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in target.rglob("*")} == before
    other = run_cli("make-dataset", str(target), "--classes", "3", "--per-class", "3")
    assert other.returncode == 2 and other.stdout == ""
    assert other.stderr.strip() == (f"preflight: error: make-dataset: {target} is not empty and was not written by "
                                    f"make-dataset with this shape: name a new or empty directory (nothing was changed)")
    assert {p: p.stat().st_mtime_ns for p in target.rglob("*")} == before


def test_user_mistakes_are_one_line_and_exit_2(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep me")
    for args, fragment in (([str(tmp_path / "file")], "is a file: name a new or empty directory"),
                           ([str(tmp_path / "full")], "is not empty and was not written by make-dataset"),
                           ([str(tmp_path / "new"), "--per-class", "0"], "--per-class must be at least 1, found 0")):
        done = run_cli("make-dataset", *args)
        assert done.returncode == 2 and fragment in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert (tmp_path / "full" / "mine.txt").read_text() == "keep me" and not (tmp_path / "new").exists()
