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
