from __future__ import annotations

from tests.report_helpers import make_report, result
from preflight.report import kubernetes

MISS = "measured 64 MiB, required >= 1 GiB"


def test_summary_names_what_failed_with_measured_and_required():
    report = make_report([result("size", "fail", MISS, instance="shm", hint="mount an emptyDir with medium: Memory"),
                          result("seq_read", "pass", "measured 2 GB/s")])
    text = kubernetes.summary(report)
    assert text == ("preflight FAILED on node-17: 1 of 2 thresholds failed. shm.size: measured 64 MiB, required >= 1 GiB; "
                    "fix: mount an emptyDir with medium: Memory.")


def test_summary_is_capped_at_one_kibibyte_on_a_character_boundary():
    report = make_report([result(f"m{i}", "fail", "measured 1 µs, required <= 0.5 µs " * 5) for i in range(40)])
    text = kubernetes.summary(report)
    assert len(text.encode("utf-8")) <= 1024
    assert text.endswith("[truncated: see the pod's log]")


def test_verdict_line_names_every_failing_id():
    report = make_report([result(f"m{i}", "fail", MISS) for i in range(4)] + [result("ok", "pass")])
    assert kubernetes.verdict_line(report) == (
        "preflight: FAILED on node-17: 4 failed, 1 passed (storage.m0, storage.m1, storage.m2, storage.m3)")
    assert kubernetes.verdict_line(make_report([result("ok", "pass")])) == "preflight: PASSED on node-17: 1 passed"


def test_verdict_line_counts_the_failing_ids_past_ten():
    report = make_report([result(f"m{i}", "fail", MISS) for i in range(12)])
    line = kubernetes.verdict_line(report)
    named = ", ".join(f"storage.m{i}" for i in range(8))
    assert line == f"preflight: FAILED on node-17: 12 failed ({named} and 4 more)"


def test_writes_only_to_an_existing_writable_file(tmp_path):
    missing = tmp_path / "termination-log"
    assert not kubernetes.write(str(missing), "x") and not missing.exists()
    missing.touch()
    assert kubernetes.write(str(missing), "why") and missing.read_text() == "why"
    assert kubernetes.termination_path(None, {"PREFLIGHT_TERMINATION_LOG": "/t"}) == "/t"
    assert kubernetes.termination_path(None, {}) == "/dev/termination-log"


def test_the_verdict_line_counts_in_words():
    report = make_report([result("a", "error"), result("b", "warn"), result("c", "fail"), result("d", "fail"),
                          result("e", "info", value=1.0)])
    assert kubernetes.verdict_line(report) == ("preflight: FAILED on node-17: 2 failed, 1 error, 1 warning "
                                               "(storage.a, storage.c, storage.d)")
