"""Issue 35, case 3: the dataloader's pass note accounts for every file of the dataset.

After storage's share and the DataLoader's cache-bypass probe, the note said "898 of 898 files read once (101 others
were read by checks before this one)" of a 1000-file dataset: the probe's file was counted nowhere. The run is the
README's (``make-dataset``'s 1000 files, storage then dataloader), on this machine's disk, where O_DIRECT works and
the probe reads a file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from preflight.host.fsinfo import filesystem_of
from tests.helpers import run_cli, write_config

import pytest

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
NOTE = re.compile(r"one pass: (\d+) of (\d+) files read once \((\d+) others were read by checks before this one, "
                  r"(\d+) read by this check's probe of the page-cache bypass \(O_DIRECT\)\)")


def test_the_pass_note_adds_up_to_the_datasets_files_and_names_the_probe(tmp_path: Path) -> None:
    if filesystem_of(str(tmp_path)).memory_backed:
        pytest.skip(f"{tmp_path} is memory-backed: no O_DIRECT probe reads a file there")
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
    read, of, before, probed = map(int, found.groups())
    assert files == 1000 and probed == 1 and before > 0 and read <= of, note
    assert of + before + probed == files, note  # every file of the dataset is accounted for
    assert note.count("one pass:") == 1, note
    assert run.stdout.count("one pass:") == 1, run.stdout  # the table says it once, under its last row (case 4)
