"""The HTML report in a real headless Chromium: it renders without console errors, says its verdict, has one row
per metric, and a 64-node fleet page stays under 2 MB and renders in under 2 s.

The node page comes from a real run (``preflight run --html`` over a dataset ``make-dataset`` wrote:
shm, storage and the cuda check, which fails on a machine without a GPU and so shows the fixes);
the fleet page is that run's results on 64 nodes, one of them slow, compared by the real merge.
A 1280 px screenshot of each page is kept in ``$PREFLIGHT_TEST_ARTIFACTS`` (default
``build/test-artifacts``); with ``PREFLIGHT_UPDATE_SCREENSHOT=1`` the node page's also replaces
``docs/html-report.png``, the picture in the README. Skipped, with the reason, without Chromium.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from preflight.config import FleetSettings
from preflight.report import html
from preflight.report.merge import _with_comparisons
from preflight.verdict import Result
from tests import browser
from tests.helpers import REPO, run_cli
from tests.report_helpers import make_report

BINARY, WHY_NOT = browser.find()
pytestmark = pytest.mark.skipif(BINARY is None, reason=WHY_NOT)

ARTIFACTS = Path(os.environ.get("PREFLIGHT_TEST_ARTIFACTS") or REPO / "build" / "test-artifacts")
README_SCREENSHOT = REPO / "docs" / "html-report.png"
NODES = 64


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> tuple[Path, dict]:
    """A real run's page and JSON report: shm, storage and cuda over a 200-file dataset."""
    directory = tmp_path_factory.mktemp("html")
    data = directory / "imagenet-sample"
    made = run_cli("make-dataset", str(data), "--classes", "4", "--per-class", "50", cwd=directory)
    assert made.returncode == 0, made.stderr
    page, report = directory / "preflight.html", directory / "preflight.json"
    done = run_cli("run", "--only", "cuda,shm,storage", "--set", "storage.duration=1s", "--html", str(page),
                   "--json", str(report), cwd=directory, env={"DATA_DIR": str(data)}, timeout=240)
    assert done.returncode in (0, 1), done.stderr
    return page, json.loads(report.read_text())


@pytest.fixture(scope="module")
def chromium():
    with browser.Page(BINARY, width=1280) as page:
        yield page


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def _render_ms(page: browser.Page) -> float:
    """Navigation start to the load event, or to the first contentful paint when that came later."""
    return page.evaluate("""(() => {
        const nav = performance.getEntriesByType('navigation')[0];
        const paints = performance.getEntriesByType('paint').map(p => p.startTime);
        return Math.max(nav.loadEventEnd, ...paints);
    })()""")


def test_the_node_page_renders_its_verdict_and_one_row_per_metric(real_run, chromium):
    page, report = real_run
    chromium.open(str(page))
    assert chromium.console == []
    verdict = "preflight FAILED" if report["exit_code"] else "preflight PASSED"
    assert chromium.evaluate("document.getElementById('verdict').textContent") == verdict
    assert chromium.evaluate("document.getElementById('node').textContent") == report["host"]
    rows = chromium.evaluate("[...document.querySelectorAll('tr.result')].map(r => r.dataset.id)")
    assert rows == [r["id"] for r in report["results"]]
    drawn = chromium.evaluate("[...document.querySelectorAll('tr.result')].filter(r => r.querySelector('svg.bar'))"
                              ".map(r => r.dataset.id)")
    assert "storage.seq_read" in drawn and "shm.size" in drawn  # measured against a threshold: a bar
    seen = chromium.evaluate("document.querySelector('[data-id=\"storage.seq_read\"] .badge').textContent")
    assert seen == {"dataset": "dataset", "scratch_on_dataset_fs": "scratch, dataset's device"}[
        next(r for r in report["results"] if r["id"] == "storage.seq_read")["subject"]]
    width = chromium.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280  # nothing spills sideways at 1280 px
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "html-report-node.png"
    chromium.screenshot(str(shot), width=1280, max_height=2400)
    assert _png_size(shot)[0] == 1280
    if os.environ.get("PREFLIGHT_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, README_SCREENSHOT)


def _results_of(report: dict) -> list[Result]:
    fields = {f.name for f in dataclasses.fields(Result)}
    out = []
    for r in report["results"]:
        kept = {k: v for k, v in r.items() if k in fields and k != "attempts"}
        kept.update(samples=tuple(r["samples"]), runs=tuple(r["runs"]), warnings=tuple(r["warnings"]),
                    subject=r["subject"] or "")
        out.append(Result(**kept))
    return out


def test_a_64_node_fleet_page_is_under_2_mb_renders_in_2_s_and_names_the_slow_node(real_run, chromium, tmp_path):
    _, report = real_run
    results = _results_of(report)
    nodes = []
    for node in range(NODES):
        scale = 0.3 if node == 17 else 1 + node / 1000  # node 17 reads at 30% of the others
        scaled = [dataclasses.replace(r, value=r.value * scale, samples=tuple(s * scale for s in r.samples))
                  if r.check == "storage" and isinstance(r.value, float) else r for r in results]
        nodes.append(make_report(scaled, facts={"hostname": f"gpu-{node:03}", "node_rank": str(node),
                                                "ranks": f"{node * 8}-{node * 8 + 7}"}))
    fleet = _with_comparisons(nodes, FleetSettings(median_ratio=0.5))
    page = tmp_path / "fleet.html"
    html.write(str(page), fleet, world_size=NODES * 8)
    assert page.stat().st_size < 2_000_000, page.stat().st_size
    chromium.open(str(page))
    assert chromium.console == []
    assert _render_ms(chromium) < 2000
    assert chromium.evaluate("document.getElementById('verdict').textContent").startswith("preflight ")
    assert chromium.evaluate("document.querySelectorAll('table.grid tbody tr').length") == NODES
    stragglers = chromium.evaluate("[...document.querySelectorAll('td.straggler')].map(c => c.title.split(' ')[0])")
    assert stragglers and set(stragglers) == {"node17"}
    metrics = chromium.evaluate("[...document.querySelectorAll('#metrics ~ table tr.result')].map(r => r.dataset.id)")
    columns = chromium.evaluate("document.querySelectorAll('table.grid thead th[scope=col]').length")
    assert len(metrics) == columns and "storage.seq_read" in metrics
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "html-report-fleet.png"
    chromium.screenshot(str(shot), width=1280, max_height=1400)
    assert _png_size(shot)[0] == 1280
