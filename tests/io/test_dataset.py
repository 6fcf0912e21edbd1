"""The run's dataset (``io.dataset``): its ledger read incrementally, its pass across processes, its one walk.

Issue 35, case 3: the dataloader's pass note accounts for every file of the dataset. After storage's share and the DataLoader's cache-bypass probe, the note said "898 of 898 files read once (101 others
were read by checks before this one)" of a 1000-file dataset: the probe's file was counted nowhere. The run is the
README's (``make-dataset``'s 1000 files, storage then dataloader), on this machine's disk, where O_DIRECT works and
the probe reads a file.
"""

from __future__ import annotations

import builtins
import json
import os
import pickle
import re
from pathlib import Path

import pytest

from preflight.io import dataset as dataset_module
from preflight.io.dataset import Dataset
from tests.helpers import run_cli, write_config

CONFIG = """
version: 1
defaults: {{timeout: 120s, retries: 0}}
checks:
  storage:
    path: {path}
    duration: 2s
    small_files: {{min: 1 files/s}}
  dataloader:
    path: {path}
    duration: 2s
    num_workers: 2
    throughput: {{min: 1 samples/s}}
"""
NOTE = re.compile(r"one pass: (\d+) of (\d+) files read once \((\d+) others were read by checks before this one\)")


def test_the_pass_note_adds_up_to_the_datasets_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    made = run_cli("make-dataset", str(data), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    # the walk skips hidden files (make-dataset's .preflight-dataset.json)
    files = sum(1 for path in data.rglob("*") if path.is_file() and not path.name.startswith("."))
    report = tmp_path / "report.json"
    run = run_cli("run", "-c", str(write_config(tmp_path, CONFIG.format(path=data))), "--json", str(report),
                  cwd=tmp_path, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    note = next(r["note"] for r in json.loads(report.read_text())["results"] if r["id"] == "dataloader.throughput")
    found = NOTE.search(note)
    assert found, note
    read, of, before = map(int, found.groups())
    assert files == 1000 and before > 0 and read <= of, note
    assert of + before == files, note  # every file of the dataset is accounted for: the loader probes none
    assert note.count("one pass:") == 1, note
    assert run.stdout.count("one pass:") == 1, run.stdout  # the table says it once, under its last row (case 4)


def _reading(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes each ``open()`` of the ledger in ``io.dataset`` went on to read, in order."""
    read: list[int] = []
    real = builtins.open

    class Counted:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            self.handle.__enter__()
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def seek(self, offset):
            return self.handle.seek(offset)

        def read(self):
            data = self.handle.read()
            read.append(len(data))
            return data

    monkeypatch.setattr(dataset_module, "open", lambda *a, **k: Counted(real(*a, **k)), raising=False)
    return read


def test_a_windows_cost_is_what_was_appended_since_not_the_100k_names_read_before(tmp_path, monkeypatch):
    names = [f"/data/train/n{i // 1000:05d}/{i:07d}.JPEG" for i in range(100_000)]
    with Dataset.started(str(tmp_path)) as dataset:
        with open(dataset.ledger, "ab") as ledger:  # 100k files read before, by other checks and processes
            ledger.write("".join(name + "\n" for name in names).encode())
        window = [f"/data/val/{i}.JPEG" for i in range(64)]
        assert dataset.fresh(window) == window  # the first look reads the ledger once, whole
        read = _reading(monkeypatch)
        mark = dataset.mark()
        for name in window[:10]:
            dataset.record(name)
        appended = sum(len(name) + 1 for name in window[:10])
        assert dataset.unread_since(window, mark) == window[10:]
        assert dataset.fresh(window) == window[10:] and dataset.touched_count(names[:5] + window[:3]) == 8
        # each look since read only what was appended since it last looked (the ten lines, by unread_since and
        # the counts), never the 100k lines before them
        assert read == [0, appended, appended, 0, 0], read


def test_records_from_a_forked_child_and_failures_are_the_runs_and_the_object_pickles_as_its_ledger(tmp_path):
    with Dataset.started(str(tmp_path)) as dataset:
        dataset.record("/d/a")
        pid = os.fork()
        if pid == 0:  # a DataLoader worker, forked: it records into the same ledger
            dataset.record("/d/b")
            dataset.record_failure("/d/c", "cannot be read: [Errno 5] Input/output error")
            os._exit(0)
        os.waitpid(pid, 0)
        assert dataset.opened() == {"/d/a": 1, "/d/b": 1}
        assert dataset.failures() == {"/d/c": "cannot be read: [Errno 5] Input/output error"}
        assert dataset.failures(["/d/a", "/d/c"]) == {"/d/c": "cannot be read: [Errno 5] Input/output error"}
        spawned = pickle.loads(pickle.dumps(dataset))  # a worker started by spawn gets the same run
        assert spawned.ledger == dataset.ledger and spawned.fresh(["/d/a", "/d/z"]) == ["/d/z"]
        ledger = dataset.ledger
    assert not os.path.exists(ledger) and not os.path.exists(ledger + ".failed")


def test_a_path_is_walked_once_for_each_request_and_the_share_leaves_the_rest(tmp_path, monkeypatch):
    for i in range(40):
        (tmp_path / f"{i:02d}.jpg").write_bytes(b"x" * 10)
    walks = []
    real = dataset_module.listing
    monkeypatch.setattr(dataset_module, "listing", lambda *a: walks.append(a) or real(*a))
    with Dataset.started(str(tmp_path)) as dataset:
        first, _ = dataset.files(str(tmp_path), 100, 30.0, "*.jpg")
        again, _ = dataset.files(str(tmp_path), 100, 30.0, "*.jpg")
        assert len(first) == 40 and first == again and len(walks) == 1
        names = [f.name for f in first]
        assert dataset.share(names, of=40) == names[:25]  # at least MIN_SHARE of a small dataset
        for name in names[:30]:
            dataset.record(name)
        assert dataset.share(names, of=40) == names[30:]


def test_a_private_dataset_goes_with_its_object(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    dataset = Dataset.private()
    ledger = dataset.ledger
    dataset.record("/d/a")
    assert os.path.dirname(ledger) == str(tmp_path) and os.path.exists(ledger)
    del dataset
    assert not os.path.exists(ledger)


def test_a_filesystem_is_written_back_once_a_run_however_many_loaders_ask(tmp_path, monkeypatch):
    """Each loader built (raw and decoded halves, each sweep count) asks before it drops cached pages; a network
    mount pays a round trip for each syncfs, so the run's dataset syncs a filesystem once."""
    synced = []
    monkeypatch.setattr(dataset_module.residency, "written_back", synced.append)
    names = []
    for i in range(3):
        (tmp_path / f"{i}.bin").write_bytes(b"x" * 10)
        names.append(str(tmp_path / f"{i}.bin"))
    with Dataset.started(str(tmp_path)) as dataset:
        for name in names + names:
            dataset.written_back(name)
        dataset.written_back(str(tmp_path / "gone.bin"))  # a vanished file: its reader says why, not this
    assert synced == [names[0]]
