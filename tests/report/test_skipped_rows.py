"""A SKIP row says why it was skipped, in every report a person reads (issue 35).

A skipped row neither passes nor fails, so "what to fix" never lists it; before, the console table and the HTML
page showed the row's SKIP and nothing else, and only JUnit's ``<skipped message=...>`` said why. The run here is
real: the default files loader (whose batches say nothing of the job's /dev/shm: ``shm_needed`` and
``shm_headroom`` are not applicable) and a ``required: false`` cuda check on this GPU-less host (unmeasurable:
skipped).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.report_helpers import read_junit

FILES_LOADER = "not applicable: the files loader's batches hold sample counts, not the samples' data"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[str, dict, Path]:
    """One real run: (its console text, its JSON results by id, its folder with run.html and run.xml)."""
    folder = tmp_path_factory.mktemp("skipped")
    data = folder / "data"
    data.mkdir()
    for index in range(64):
        (data / f"{index:03d}.bin").write_bytes(bytes([index]) * 4096)
    config = folder / "gate.yaml"
    config.write_text(f"version: 1\ndefaults: {{duration: 1s, timeout: 120s}}\nchecks:\n  dataloader:\n"
                      f"    path: {data}\n    num_workers: 1\n    batch_size: 4\n"
                      f"    shm_needed: {{max: 1 GiB}}\n    shm_headroom: {{min: 10 %}}\n"
                      f"  cuda:\n    required: false\n    memory_total: {{min: 10 GiB}}\n"
                      f"  transfer:\n    required: false\n    h2d_pinned: {{min: 10 GB/s}}\n")
    done = run_cli("run", "-c", str(config), "--json", str(folder / "run.json"), "--html", str(folder / "run.html"),
                   "--junit-xml", str(folder / "run.xml"), env={"COLUMNS": "120"})
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    results = {r["id"]: r for r in json.loads((folder / "run.json").read_text())["results"]}
    return done.stdout, results, folder


def _skipped(results: dict) -> dict:
    return {i: r for i, r in results.items() if r["verdict"] == "skip"}


def test_the_run_skips_the_shm_rows_of_the_files_loader_and_the_cuda_rows_without_a_gpu(run):
    _, results, _ = run
    skipped = _skipped(results)
    assert set(skipped) == {"dataloader.shm_needed", "dataloader.shm_headroom", "cuda.memory_total",
                            "transfer.h2d_pinned"}, sorted(skipped)
    assert skipped["dataloader.shm_headroom"]["message"].startswith(FILES_LOADER)
    assert skipped["transfer.h2d_pinned"]["message"].startswith("could not measure: ")


def test_every_skip_row_on_the_console_is_followed_by_its_reason(run):
    console, results, _ = run
    lines = console.splitlines()
    for result_id, result in _skipped(results).items():
        row = next(n for n, line in enumerate(lines) if line.startswith(result_id + " ") or line == result_id)
        reason = result["message"].split("; required ", 1)[0]
        # the note under the row (or under the last of the rows that share it), wrapped with a hanging indent
        below = next(n for n in range(row + 1, len(lines)) if lines[n].lstrip().startswith("└ "))
        block = [lines[below]] + [line for line in lines[below + 1:] if line.startswith("      ")][:20]
        said = " ".join(line.strip().removeprefix("└ ") for line in block)
        assert reason in said, (result_id, said)
        assert "; required " not in said.split(reason, 1)[1][:12]  # the row already shows the requirement
    # the two shm rows share one reason: said once, naming both
    assert "shm_needed, shm_headroom: " + FILES_LOADER[:40] in " ".join(line.strip() for line in lines)


def test_every_skip_row_on_the_html_page_shows_its_reason_beneath_it(run):
    _, results, folder = run
    page = (folder / "run.html").read_text()
    for result_id, result in _skipped(results).items():
        reason = result["message"].split("; required ", 1)[0]
        start = page.index(f'data-id="{result_id}"')
        details = re.search(r'<tr class="more">(.*?)</tr>', page[start:])
        assert details is not None
        # its own details row, or the one above it when both skipped for one reason
        before = page.rfind('<tr class="more">', 0, start)
        said = details.group(1) + page[before:start]
        assert reason.replace("'", "&#x27;") in said, result_id


def test_junit_carries_the_reason_in_skipped_message(run):
    _, results, folder = run
    document = read_junit(folder / "run.xml")
    skipped = {}
    for suite in document:
        for case in suite:
            for outcome in case.result:
                if type(outcome).__name__ == "Skipped":
                    skipped[f"{case.classname.removeprefix('preflight.')}.{case.name}"] = outcome.message
    for result_id, result in _skipped(results).items():
        assert skipped[result_id] == result["message"], result_id
