from __future__ import annotations

import io

from tests.report_helpers import make_report, result
from preflight.report import console


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_colour_only_on_a_terminal_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert console.use_colour(_Terminal()) and not console.use_colour(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not console.use_colour(_Terminal())
    assert console.use_colour(io.StringIO(), "always") and not console.use_colour(_Terminal(), "never")


def test_colour_codes_only_when_asked():
    report = make_report([result("seq_read", "fail", "measured 1 MB/s, required >= 2 MB/s")])
    assert "\033[" in console.render(report, colour=True)
    assert "\033[" not in console.render(report, colour=False)


def test_unmeasured_metrics_sharing_a_reason_share_one_fix_line():
    no_gpu = "could not measure: no CUDA device: torch 2.13.0+cpu is a CPU build"
    report = make_report([
        result("device_count", "fail", "measured 0, required >= 1", instance="cuda", value=0.0, hint="check --gpus all"),
        result("matmul_error", "fail", no_gpu + "; required <= 0.001", instance="cuda"),
        result("temperature", "warn", no_gpu + "; required <= 85 C", instance="cuda"),
        result("h2d_pinned", "fail", no_gpu + "; required >= 10 GB/s", instance="transfer"),
        result("seq_read", "fail", "could not measure: /data does not exist; required >= 1 MB/s"),
    ])
    fixes = console.render(report).split("what to fix:\n", 1)[1].splitlines()[:-1]
    assert fixes == [
        "  cuda.device_count: measured 0, required >= 1",
        "    fix: check --gpus all",
        f"  cuda.matmul_error, cuda.temperature, transfer.h2d_pinned: {no_gpu}",
        "  storage.seq_read: could not measure: /data does not exist; required >= 1 MB/s",
    ]


def test_a_note_is_printed_once_under_the_rows_that_share_it():
    scratch = "on a scratch file beside the dataset: ./ holds 3 data files (0.06 MB), none of 8 MiB or more"
    report = make_report([
        result("seq_read", "pass", "measured 900 MB/s", value=900.0, note=scratch),
        result("rand_read", "pass", "measured 9000 IOPS", value=9000.0, note=scratch),
        result("small_files", "pass", "measured 900 files/s", value=900.0),
        result("skipped_files", "info", "measured 1", value=1.0, note="1 directory loop"),
    ])
    lines = console.render(report).splitlines()[1:-1]
    assert [line[:16] for line in lines] == ["storage.seq_read", "storage.rand_rea", "    └ seq_read, ",
                                             "storage.small_fi", "storage.skipped_", "    └ 1 director"]
    assert lines[2] == f"    └ seq_read, rand_read: {scratch}"
