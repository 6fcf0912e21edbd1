"""The runner tells each check which of its metrics the configuration judges (``Budget.metrics``), so a
costly part only unjudged metrics need can be left out (storage's scratch writes), and its duration."""

from __future__ import annotations

import pytest

from preflight import config, runner
from preflight.checks import CHECKS
from tests.fakes import budgeted
from tests.helpers import write_config


@pytest.fixture(autouse=True)
def fake_check(monkeypatch):
    monkeypatch.setitem(CHECKS, "budgeted", budgeted)


def test_the_worker_gets_the_judged_metrics_and_the_duration(tmp_path):
    text = """
        version: 1
        checks:
          budgeted:
            duration: 2s
            judged: {min: 0}
    """
    loaded = config.load(str(write_config(tmp_path, text)), environ={})
    assert loaded.instances[0].budget.metrics == ("judged",)
    results = {r.metric: r for r in runner.run(loaded)}
    assert results["judged"].value == 1.0  # one metric judged, passed through the worker
    assert results["seconds"].value == 2.0
    assert "unjudged" not in results  # the part only an unjudged metric needs did not run
