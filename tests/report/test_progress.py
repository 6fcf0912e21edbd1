from __future__ import annotations

import io

from tests.report_helpers import result
from preflight.config import Instance
from preflight.report.progress import Progress

INSTANCE = Instance("storage", "storage", {}, (), 120.0, 5.0, True, "t.yaml:3:3")


def test_terminal_progress_redraws_one_line_with_elapsed_of_timeout_then_the_outcome():
    stream = io.StringIO()
    progress = Progress(stream, live=True)
    progress(INSTANCE, None)
    progress(INSTANCE, [result("seq_read", "fail"), result("x", "pass")])
    text = stream.getvalue()
    assert text.startswith("\r\033[K  storage: 0s of 120s timeout")
    assert text.endswith("\r\033[K  storage: done in 0.0s: 1 fail, 1 pass\n")


def test_log_progress_is_one_line_per_start_and_end():
    stream = io.StringIO()
    progress = Progress(stream)  # a StringIO is no terminal
    progress(INSTANCE, None)
    progress(INSTANCE, [])
    progress.close()
    assert stream.getvalue() == "  running storage (timeout 120s) ...\n  storage: done in 0.0s\n"
