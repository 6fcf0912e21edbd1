"""The HTML page's content, without a browser: what each row says and draws, the fleet grid's colours, the CLI flag.

tests/report/test_html_browser.py renders the same pages in Chromium.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from preflight.config import FleetSettings
from preflight.report import html
from preflight.report.heatmap import Cell, colour, margin
from preflight.report.merge import _with_comparisons
from preflight.report.svg import WIDTH, Axis
from tests.helpers import run_cli, write_config
from tests.report_helpers import make_report, result


class _Rows(HTMLParser):
    """The ``tr.result`` rows (their ``data-id``) and every URL-bearing attribute of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.urls: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.add(tag)
        if tag == "tr" and "result" in (attributes.get("class") or "").split():
            self.ids.append(attributes["data-id"])
        self.urls += [value for name, value in attrs if name in ("src", "href", "xlink:href", "action") and value]


def _parse(page: str) -> _Rows:
    parser = _Rows()
    parser.feed(page)
    return parser


RESULTS = [
    result("seq_read", "pass", "measured 982 MB/s, required >= 200 MB/s", value=982.0, unit="MB/s",
           threshold={"min": 200.0}, required=">= 200 MB/s", samples=(975.0, 982.0, 990.0), subject="dataset",
           method="O_DIRECT, 1024 KiB blocks, 4 readers", duration_s=9.7),
    result("rand_read", "warn", "measured 4000 IOPS, required >= 5000 IOPS", value=4000.0, unit="IOPS",
           threshold={"min": 5000.0}, required=">= 5000 IOPS", samples=(3000.0, 4000.0, 5200.0), subject="dataset",
           hint="use a faster volume", warnings=("noisy: interquartile range is 55% of the median over 3 samples",),
           duration_s=9.7),
    result("small_files", "fail", "measured 400 files/s, required >= 500 files/s; measured on synthetic samples",
           value=400.0, unit="files/s", threshold={"min": 500.0}, required=">= 500 files/s", subject="synthetic",
           note="on 50 generated files", duration_s=9.7),
    result("size", "pass", value=8.0, unit="GiB", instance="shm", threshold={"min": 1.0}, required=">= 1 GiB"),
    result("name", "info", value="NVIDIA H100", unit="text", instance="cuda", device="cuda:0"),
    result("device_count", "error", "cuda check did not finish: timed out after 120s", instance="cuda",
           required=">= 1", threshold={"min": 1.0}),
]


def test_axis_is_linear_from_zero_within_a_decade_and_log_over_decades():
    linear = Axis.fit([982.0, 200.0, 975.0])
    assert not linear.log and linear.low == 0 and linear.high == 1200  # 1080 rounded up to 1.2 x 10^3
    assert linear.x(600.0) == WIDTH / 2
    log = Axis.fit([57664.0, 5000.0])
    assert log.log and (log.low, log.high) == (1000.0, 100000.0)
    assert log.x(10000.0) == WIDTH / 2  # one decade of two
    assert log.ticks() == [1000.0, 10000.0, 100000.0]
    assert Axis.fit([0.0, 0.0]).high == 1.0 and Axis.fit([]) is None


def test_node_page_has_the_verdict_one_row_per_result_and_nothing_to_fetch():
    page = html.render([make_report(RESULTS)])
    parsed = _parse(page)
    assert parsed.ids == [r.id for r in RESULTS]
    assert parsed.urls == [f"#r-{r.id}" for r in RESULTS if r.verdict in ("fail", "error", "warn")]  # in-page links
    assert "script" not in parsed.tags and "img" not in parsed.tags and "link" not in parsed.tags
    assert "default-src 'none'" in page  # the CSP: a slip that fetches anything is a console error, not a request
    assert '<h1 id="verdict">preflight FAILED</h1>' in page
    assert '<span id="node">node-17</span> · <span id="started">2026-11-29 15:00:00 UTC</span>' in page
    assert '<p id="counts">1 failed, 1 error, 1 warning, 2 passed, 1 info</p>' in page


def _row(page: str, result_id: str) -> str:
    start = page.index(f'data-id="{result_id}"')
    return page[start:page.index('<tr class="result', start)]


def test_a_row_draws_value_threshold_and_samples_on_one_axis_and_says_what_it_measured():
    page = html.render([make_report(RESULTS)])
    row = _row(page, "storage.seq_read")
    assert "<title>982 MB/s against &gt;= 200 MB/s</title>" in row
    assert row.count("<circle") == 3  # one dot per sample
    assert 'x1="70.0"' in row  # the 200 MB/s mark on the 0-1200 axis: 420 px x 200/1200
    assert "linear scale, 0 to 1.2 GB/s · 3 samples" in row
    assert '<span class="badge ok" title="the dataset&#x27;s own files">dataset</span>' in row
    assert "method: O_DIRECT, 1024 KiB blocks, 4 readers" in row
    assert 'id="c-storage"><h2>storage <small>9.7 s · measured on</small>' in page  # the check's duration, once
    noisy = _row(page, "storage.rand_read")
    assert "⚠ noisy: interquartile range is 55% of the median over 3 samples" in noisy
    assert '<p class="fix">fix: use a faster volume</p>' in noisy
    assert "method:" not in noisy  # none given
    synthetic = _row(page, "storage.small_files")
    assert '<span class="badge no" title="synthetic samples, not the dataset">synthetic</span>' in synthetic
    assert "<p>on 50 generated files</p>" in synthetic


def test_unmeasured_text_flag_and_lone_fact_rows_draw_nothing_and_say_why():
    page = html.render([make_report(RESULTS + [
        result("read_only", "info", value=0.0), result("skipped_files", "info", value=3.0)])])
    assert "<svg" not in _row(page, "storage.read_only") and ">no<" in _row(page, "storage.read_only")
    lone = page.index('data-id="storage.skipped_files"')
    assert "<svg" not in page[lone:page.index("</tr>", lone)]
    assert "<svg" not in _row(page, "cuda.name[cuda:0]") and "NVIDIA H100" in _row(page, "cuda.name[cuda:0]")
    errored = page[page.index('data-id="cuda.device_count"'):]
    assert "not run" in errored and "<svg" not in errored.split("</tr>")[0]
    assert "cuda check did not finish: timed out after 120s" in errored


def test_margin_is_relative_to_the_bound_in_the_metrics_direction():
    assert margin(result("a", "pass", value=150.0, threshold={"min": 100.0})) == pytest.approx(0.5)
    assert margin(result("a", "fail", value=80.0, threshold={"min": 100.0})) == pytest.approx(-0.2)
    assert margin(result("a", "pass", value=5.0, threshold={"max": 10.0})) == pytest.approx(0.5)
    assert margin(result("a", "fail", value=12.0, threshold={"max": 10.0})) == pytest.approx(-0.2)
    assert margin(result("a", "fail", value=3.0, threshold={"max": 0.0})) == -1.0
    assert margin(result("a", "info", value=3.0)) is None


def _fleet(nodes: int, slow: int) -> list:
    reports = []
    for node in range(nodes):
        rate = 500.0 if node == slow else 1000.0 + node
        reports.append(make_report([
            result("seq_read", "pass", value=rate, unit="MB/s", threshold={"min": 200.0}, required=">= 200 MB/s",
                   samples=(rate,)),
            result("size", "fail" if node == 1 else "pass", value=0.5 if node == 1 else 8.0, unit="GiB",
                   instance="shm", threshold={"min": 1.0}, required=">= 1 GiB", hint="start with --shm-size=8g"),
        ], facts={"hostname": f"host{node}", "node_rank": str(node), "ranks": str(node)}))
    return _with_comparisons(reports, FleetSettings(median_ratio=0.8))


def test_fleet_grid_colours_by_margin_and_outlines_the_straggler():
    reports = _fleet(4, slow=2)
    page = html.render(reports, world_size=32)
    assert '<h1 id="verdict">preflight FAILED</h1>' in page and "4 nodes, 32 ranks" in page
    grid = page[page.index('<table class="grid">'):page.index("</table>", page.index('<table class="grid">'))]
    assert grid.count("<tr data-node=") == 4 and grid.count("<td") == 8  # 4 nodes x 2 metrics
    stragglers = re.findall(r'<td class="straggler" data-verdict="(\w+)"[^>]*title="(node\d)', grid)
    assert stragglers == [("fail", "node2")]  # 500 MB/s meets >= 200 MB/s but is 0.5x the fleet median
    across = _parse(page[page.index('id="metrics"'):]).ids
    assert across == ["storage.seq_read", "shm.size"]
    assert "1 of 4 missed" in _row(page, "storage.seq_read") and "fix: start with --shm-size=8g" in page


def test_a_miss_is_red_and_deeper_room_is_deeper_green():
    def cell(value, verdict):
        return Cell(result("a", verdict, value=value, threshold={"min": 100.0}), None)

    red = colour(cell(50.0, "fail"))
    assert int(red[1:3], 16) > int(red[3:5], 16)  # more red than green
    just, twice = colour(cell(105.0, "pass")), colour(cell(200.0, "pass"))
    assert int(twice[3:5], 16) < int(just[3:5], 16)  # deeper green: further from white


def test_run_writes_the_page_and_a_config_error_replaces_it(tmp_path):
    config = write_config(tmp_path, """
        version: 1
        checks:
          shm:
            allocate: 1 MiB
            size: {min: 1 MiB}
    """)
    page = tmp_path / "report.html"
    done = run_cli("run", "-c", str(config), "--html", str(page), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert _parse(text).ids == ["shm.size", "shm.free", "shm.world_writable", "shm.allocatable"]
    assert '<h1 id="verdict">preflight PASSED</h1>' in text
    config.write_text("version: 1\nchecks:\n  shm:\n    sise: {min: 1 GiB}\n")
    done = run_cli("run", "-c", str(config), "--html", str(page), cwd=tmp_path)
    assert done.returncode == 2
    text = page.read_text()
    assert "preflight could not start" in text and "unknown key `sise`" in text and 'class="result' not in text


def test_a_zero_that_passes_its_max_0_is_drawn_in_the_pass_colour_not_only_as_the_shaded_miss_zone():
    """A new user's trial: xid_drain, unreadable_files and unreadable_samples at 0 against {max: 0} looked all pink."""
    from preflight.report.svg import COLOURS, MIN_BAR, Axis, bar

    drawn = bar(Axis(0.0, 1.0, False), 0.0, {"max": 0.0}, "pass", "0 against <= 0")
    assert f'width="{MIN_BAR}" height' in drawn and f'fill="{COLOURS["pass"]}"' in drawn
