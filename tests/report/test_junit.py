from __future__ import annotations

import junitparser
import pytest

from tests.report_helpers import make_report, read_junit, result
from preflight.report import junit

MISS = "measured 180 MB/s, required >= 200 MB/s"


def _write(tmp_path, results, **kwargs):
    path = tmp_path / "report.xml"
    junit.write(str(path), [make_report(results, **kwargs)])
    return path


def _cases(document):
    return {(case.classname, case.name): case for suite in document for case in suite}


def test_passing_run_is_valid_and_every_case_has_a_time(tmp_path):
    path = _write(tmp_path, [result("seq_read", "pass", "measured 2080 MB/s, required >= 200 MB/s",
                                    duration_s=0.0)])
    document = read_junit(path)
    case = _cases(document)[("preflight.storage", "seq_read")]
    assert case.result == [] and case._elem.get("time") == "0.000"
    assert b"disabled" not in path.read_bytes()


def test_miss_error_and_skip_map_to_failure_error_and_skipped(tmp_path):
    results = [
        result("seq_read", "fail", MISS, unit="MB/s", hint="move the dataset to local NVMe", where="t.yaml:20:5",
               duration_s=6.123456),
        result("throughput", "error", "dataloader check did not finish: timed out after 120s", instance="dataloader"),
        result("h2d_pinned", "skip", "could not measure: no CUDA device; required >= 10 GB/s", instance="transfer"),
        result("free", "warn", "measured 3 GiB, required >= 4 GiB", instance="shm"),
        result("allocatable", "info", "measured 1 GiB (no threshold)", instance="shm"),
    ]
    document = read_junit(_write(tmp_path, results))
    cases = _cases(document)
    failure = cases[("preflight.storage", "seq_read")].result[0]
    assert isinstance(failure, junitparser.Failure) and failure.type == "ThresholdNotMet"
    assert failure.message == MISS
    assert failure.text.splitlines()[:3] == [MISS, "fix: move the dataset to local NVMe", "threshold: t.yaml:20:5"]
    assert "driver 550.54.15" in failure.text and "gpu 8x NVIDIA H100 80GB HBM3" in failure.text
    assert cases[("preflight.storage", "seq_read")]._elem.get("time") == "6.123"
    assert isinstance(cases[("preflight.dataloader", "throughput")].result[0], junitparser.Error)
    assert isinstance(cases[("preflight.transfer", "h2d_pinned")].result[0], junitparser.Skipped)
    assert cases[("preflight.shm", "free")].result == []  # a warning does not gate, so it is no failure
    assert ("preflight.shm", "allocatable") not in cases  # info results are not tests
    suite = next(iter(document))
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (4, 1, 1, 1)


def test_duplicate_names_are_made_unique_for_gitlab(tmp_path):
    results = [result("seq_read", "pass"), result("seq_read", "fail", MISS), result("seq_read", "pass")]
    document = read_junit(_write(tmp_path, results))
    assert sorted(_cases(document)) == [("preflight.storage", "seq_read"), ("preflight.storage", "seq_read #2"),
                                        ("preflight.storage", "seq_read #3")]


def test_host_facts_are_suite_properties(tmp_path):
    document = read_junit(_write(tmp_path, [result("seq_read", "pass")]))
    suite = next(iter(document))
    properties = {p.name: p.value for p in suite.properties()}
    assert properties["driver"] == "550.54.15" and properties["cuda"] == "12.4"
    assert properties["gpu"] == "8x NVIDIA H100 80GB HBM3" and properties["config_sha256"] == "ab" * 32
    assert suite._elem.get("hostname") == "node-17"


HOSTILE = [
    "\x1b[31mred\x1b[0m and \x00\x07\x0b\x1f controls",
    "closing ]]> a CDATA & <tags> \"quotes\" 'apostrophes'",
    b"invalid utf-8 \xff\xfe\xc3\x28 bytes".decode("utf-8", errors="surrogateescape"),
    "lone surrogate \ud800 and \ufffe\uffff non-characters",
    "x" * 3_000_000,
]


@pytest.mark.parametrize("text", HOSTILE, ids=["ansi-controls", "cdata-markup", "invalid-utf8", "surrogates", "3MB"])
def test_hostile_text_is_sanitised_and_capped(tmp_path, text):
    results = [result("seq_read", "fail", text, hint=text, warnings=(text,)),
               result("throughput", "error", text, instance=text[:50])]
    path = _write(tmp_path, results, facts={"hostname": text, "driver": text})
    document = read_junit(path)
    assert path.stat().st_size < 200_000
    failure = [c for s in document for c in s if c.result and isinstance(c.result[0], junitparser.Failure)][0]
    body = failure.result[0].text
    assert "\x1b" not in body and "\x00" not in body
    assert len(failure.result[0].message) <= junit.MAX_ATTRIBUTE
    if "]]>" in text:
        assert "]]> a CDATA & <tags>" in body


def test_clean_cuts_long_text_and_says_how_much():
    text = junit.clean("y" * 50_000, limit=1000)
    assert len(text) == 1000 and text.endswith("more characters]")
    assert junit.clean(b"ok \xff") == "ok \ufffd"


def test_config_error_document_has_one_error_case(tmp_path):
    path = tmp_path / "config.xml"
    facts = {"hostname": "node-17", "torch": "2.4.0"}
    from datetime import datetime, timezone

    data = junit.render_config_error("t.yaml", "t.yaml:4:3: unknown key `seq_raed`: did you mean `seq_read`?",
                                     facts, datetime.now(timezone.utc))
    path.write_bytes(data)
    document = read_junit(path)
    (case,) = [c for s in document for c in s]
    assert (case.classname, case.name) == ("preflight.config", "config")
    error = case.result[0]
    assert isinstance(error, junitparser.Error) and error.type == "ConfigError"
    assert "did you mean `seq_read`" in error.message and "did you mean `seq_read`" in error.text


def test_a_fleets_cases_name_their_node_so_no_node_hides_another(tmp_path):
    # GitLab and Jenkins key testcases by classname + name over the whole file, not per suite.
    nodes = [make_report([result("seq_read", "pass"), result("temperature", "fail", "measured 91 C, required <= 85 C",
                                                              instance="cuda", device="cuda:0")],
                         facts={"hostname": f"node-{n}", "node_rank": str(n)}) for n in range(2)]
    path = tmp_path / "fleet.xml"
    junit.write(str(path), nodes, fleet=True)
    document = read_junit(path)  # also asserts every (classname, name) is unique in the file
    assert [sorted(_cases_of(suite)) for suite in document] == [
        [("preflight.cuda", "temperature[node0/cuda:0]"), ("preflight.storage", "seq_read[node0]")],
        [("preflight.cuda", "temperature[node1/cuda:0]"), ("preflight.storage", "seq_read[node1]")]]


def test_a_single_node_keeps_its_names_and_repeats_across_suites_are_still_unique(tmp_path):
    reports = [make_report([result("seq_read", "pass")], facts={"hostname": f"node-{n}"}) for n in range(2)]
    path = tmp_path / "two.xml"
    junit.write(str(path), reports[:1])
    assert list(_cases(read_junit(path))) == [("preflight.storage", "seq_read")]
    junit.write(str(path), reports)  # not a fleet: no node to name, the #2 suffix still keeps them apart
    assert list(_cases(read_junit(path))) == [("preflight.storage", "seq_read"), ("preflight.storage", "seq_read #2")]


def _cases_of(suite):
    return {(case.classname, case.name): case for case in suite}


def test_what_each_figure_was_measured_on_is_in_the_case_output_and_the_json(tmp_path):
    """Issue 21: the subject of every result reaches each report; junit-10.xsd has no testcase
    <properties>, so JUnit carries it in the case's system-out, and the file still validates."""
    import json

    from preflight.report import json_report

    results = [result("seq_read", "fail", "measured 498 MB/s, required >= 200 MB/s; measured on scratch data on "
                      "another filesystem or device than the dataset's: not the dataset, so it cannot pass",
                      subject="scratch_elsewhere"),
               result("small_files", "pass", subject="dataset"), result("size", "pass", instance="shm")]
    path = tmp_path / "r.xml"
    junit.write(str(path), [make_report(results)])
    cases = {case.name: case for suite in read_junit(path) for case in suite}
    assert ("subject: scratch_elsewhere (scratch data on another filesystem or device than the dataset's)"
            in cases["seq_read"].system_out.splitlines())
    assert "subject: dataset (the dataset's own files)" in cases["small_files"].system_out.splitlines()
    assert "subject:" not in cases["size"].system_out
    shown = json.loads(json_report.render(make_report(results)))
    assert [r["subject"] for r in shown["results"]] == ["scratch_elsewhere", "dataset", None]
