"""The JSON report's top level says what a pipeline asks first: how many of each verdict, and which ids failed."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from preflight.report import json_report
from tests.report_helpers import make_report, result

RESULTS = [result("seq_read", "fail", value=80.0), result("rand_read", "warn", value=1.0),
           result("size", "pass", instance="shm", value=8.0), result("device_count", "error", instance="cuda"),
           result("free", "info", instance="shm", value=9.0)]


def test_counts_every_verdict_and_lists_the_failed_ids():
    document = json.loads(json_report.render(make_report(RESULTS)))
    assert document["counts"] == {"pass": 1, "fail": 1, "warn": 1, "error": 1, "skip": 0, "info": 1}
    assert document["failed"] == ["storage.seq_read", "cuda.device_count"]  # fail and error: what gates
    assert list(document)[:7] == ["schema", "host", "started", "duration_s", "exit_code", "counts", "failed"]


def test_a_fleets_counts_and_failed_ids_name_the_node():
    reports = [make_report(RESULTS[:3], facts={"node_rank": str(n), "hostname": f"h{n}"}) for n in range(2)]
    document = json.loads(json_report.render_fleet(reports, world_size=16))
    assert document["counts"]["fail"] == 2 and document["counts"]["pass"] == 2
    assert document["failed"] == ["storage.seq_read[node0]", "storage.seq_read[node1]"]


def test_a_config_error_counts_nothing():
    started = datetime(2026, 11, 29, tzinfo=timezone.utc)
    for world_size in (None, 8):
        document = json.loads(json_report.render_config_error("t.yaml", "t.yaml:1:1: bad", {}, started, world_size))
        assert document["failed"] == [] and set(document["counts"].values()) == {0}
