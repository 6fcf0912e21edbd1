from __future__ import annotations

import io

from tests.report_helpers import make_report, result
from preflight.report import github

MISS = "measured 180 MB/s, required >= 200 MB/s"


def test_annotation_escapes_data_and_properties():
    line = github.annotation("error", "a: b, c", "50% done\r\nnext", "/ws/dir,x/t:1.yaml:12:5", workspace="/ws")
    assert line == "::error file=dir%2Cx/t%3A1.yaml,line=12,col=5,title=a%3A b%2C c::50%25 done%0D%0Anext"


def test_annotation_without_a_line_has_no_file():
    assert github.annotation("error", "t", "m", "--set storage.path=/x") == "::error title=t::m"


def test_annotations_are_capped_at_ten_per_level_then_counted():
    results = [result(f"m{i}", "fail", MISS, where=f"t.yaml:{i + 1}:3") for i in range(13)]
    results += [result("w", "warn", "measured 3 GiB, required >= 4 GiB", where="t.yaml:40:3")]
    lines = github.annotations(make_report(results))
    errors = [line for line in lines if line.startswith("::error ")]
    assert len(errors) == 10 and errors[0].startswith("::error file=t.yaml,line=1,col=3,")
    assert "preflight: 3 more errors not annotated" in lines[10]
    assert lines[11].startswith("::warning file=t.yaml,line=40,col=3,")
    assert len(lines) == 12


def test_summary_is_a_markdown_table_with_escaped_cells():
    results = [result("seq_read", "fail", MISS, value=180.0, unit="MB/s", required=">= 200 MB/s",
                      hint="move | to NVMe"),
               result("size", "pass", "ok", instance="shm", value=8.0, unit="GiB", required=">= 1 GiB")]
    text = github.summary(make_report(results))
    assert text.startswith("### ❌ preflight failed on `node-17`")
    assert "| `storage.seq_read` | ❌ fail | 180 MB/s | >= 200 MB/s | measured 180 MB/s, required >= 200 MB/s; fix: move \\| to NVMe |" in text
    assert "| `shm.size` | ✅ pass | 8 GiB | >= 1 GiB |  |" in text
    assert "1 fail, 1 pass in 1.2s" in text


def test_outputs_count_failures_and_errors_and_name_the_reports():
    report = make_report([result("a", "fail", MISS), result("b", "error", "crashed"), result("c", "pass")])
    assert github.outputs(report, "out/junit.xml", "-") == {
        "passed": "false", "failed": "2", "warnings": "0", "exit-code": "1", "junit-xml": "out/junit.xml", "json": "",
        "html": ""}
    assert github.format_outputs({"a": "x\ny", "b": "1"}) == "a=x y\nb=1\n"


def test_publish_appends_to_the_runner_files(tmp_path):
    summary, outputs = tmp_path / "summary.md", tmp_path / "output"
    summary.write_text("earlier step\n")
    log = io.StringIO()
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs)}
    github.publish(make_report([result("a", "fail", MISS, where="t.yaml:3:5")]), env, log, None, None)
    assert summary.read_text().startswith("earlier step\n### ❌ preflight failed")
    assert "passed=false\nfailed=1\n" in outputs.read_text()
    assert log.getvalue().startswith("::error file=t.yaml,line=3,col=5,title=preflight%3A storage.a fail::")
    assert github.active(env) and not github.active({"GITHUB_ACTIONS": "false"})


def test_a_relative_config_path_is_made_relative_to_the_workspace(tmp_path, monkeypatch):
    # The workspace is the repository root; preflight runs from its ci/ folder with `-c thresholds.yaml`.
    (tmp_path / "ci").mkdir()
    monkeypatch.chdir(tmp_path / "ci")
    line = github.annotation("error", "t", "m", "thresholds.yaml:3:5", workspace=str(tmp_path))
    assert line == "::error file=ci/thresholds.yaml,line=3,col=5,title=t::m"
    assert github.annotation("error", "t", "m", "../thresholds.yaml:3:5", workspace=str(tmp_path)).startswith(
        "::error file=thresholds.yaml,line=3,")
    # Without a workspace (not in GitHub Actions) the path stays as the user wrote it.
    assert github.annotation("error", "t", "m", "thresholds.yaml:3:5").startswith("::error file=thresholds.yaml,")


def test_a_workspace_behind_a_symlink_still_places_the_annotation(tmp_path, monkeypatch):
    (tmp_path / "real" / "ci").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path / "real" / "ci")
    line = github.annotation("error", "t", "m", "thresholds.yaml:3:5", workspace=str(tmp_path / "link"))
    assert line.startswith("::error file=ci/thresholds.yaml,line=3,")


def test_a_config_outside_the_workspace_keeps_its_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "ws").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    line = github.annotation("error", "t", "m", "t.yaml:3:5", workspace=str(tmp_path / "ws"))
    assert line.startswith(f"::error file={github.escape_property(str(tmp_path / 'elsewhere' / 't.yaml'))},line=3,")


def test_the_summary_and_outputs_name_the_html_page():
    report = make_report([result("a", "fail", MISS)])
    text = github.summary(report, "preflight-report.html")
    assert "The whole report, each metric against its threshold with its samples: `preflight-report.html`" in text
    assert "`preflight-report.html`" not in github.summary(report)
    assert github.outputs(report, None, None, "preflight-report.html")["html"] == "preflight-report.html"
