"""``preflight run`` end to end through the CLI, with the CI and Kubernetes integrations.

Configs use the ``shm`` check only (no torch import, well under a second per instance);
every JUnit file written here goes through ``read_junit`` (junit-10.xsd + junitparser).
"""

from __future__ import annotations

import json
from pathlib import Path

import junitparser

from tests.helpers import run_cli
from tests.report_helpers import read_junit

FAST = "defaults: {duration: 0.1s, timeout: 30s}\n"


def _preflight(*args, env=None):
    return run_cli("run", *args, env=env)


def _config(directory: Path, body: str, name: str = "thresholds.yaml") -> Path:
    path = directory / name
    path.write_text("version: 1\n" + FAST + "checks:\n" + body)
    return path


def test_passing_run_with_format_json_keeps_stdout_pure(tmp_path):
    path = _config(tmp_path, "  shm:\n    allocate: 1 MiB\n    size: {min: 1 MiB}\n")
    completed = _preflight("-c", str(path), "--format", "json", "--junit-xml", str(tmp_path / "r.xml"))
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    assert data["exit_code"] == 0 and [r["id"] for r in data["results"] if r["verdict"] == "pass"] == ["shm.size"]
    assert completed.stderr.splitlines()[-1].startswith("preflight: PASSED on ")
    document = read_junit(tmp_path / "r.xml")
    assert [(c.classname, c.name, c.is_passed) for s in document for c in s] == [("preflight.shm", "size", True)]


def test_failing_run_in_github_actions_writes_summary_outputs_and_capped_annotations(tmp_path):
    instances = "".join(f"  shm{i}:\n    check: shm\n    allocate: 1 MiB\n    size: {{min: 1 PiB}}\n"
                        f"    free: {{min: 1000 TiB}}\n    allocatable: {{min: 1 TiB}}\n" for i in range(4))
    instances = instances.replace("1 PiB", "1024 TiB")
    odd = tmp_path / "odd, dir:1"
    odd.mkdir()
    path = _config(odd, instances, name="gate%.yaml")
    summary, outputs, termination = tmp_path / "summary.md", tmp_path / "output", tmp_path / "termination-log"
    termination.touch()
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs),
           "GITHUB_WORKSPACE": str(tmp_path), "PREFLIGHT_TERMINATION_LOG": str(termination)}
    junit_path, prom = tmp_path / "junit.xml", tmp_path / "preflight.prom"
    completed = _preflight("-c", str(path), "--junit-xml", str(junit_path), "--prometheus", str(prom), env=env)
    assert completed.returncode == 1, completed.stderr
    stderr = completed.stderr.splitlines()
    errors = [line for line in stderr if line.startswith("::error ")]
    assert len(errors) == 10
    assert errors[0].startswith("::error file=odd%2C dir%3A1/gate%25.yaml,line=7,col=5,"
                                "title=preflight%3A shm0.size fail::measured ")
    assert "preflight: 2 more errors not annotated (GitHub shows 10 per step); see the job summary" in stderr
    assert stderr[-1].startswith("preflight: FAILED on ") and "12 failed" in stderr[-1]
    table = summary.read_text()
    assert table.startswith("### ❌ preflight failed on ") and table.count("| ❌ fail |") == 12
    assert f"junit-xml={junit_path}\n" in outputs.read_text()
    assert "passed=false\nfailed=12\nwarnings=0\nexit-code=1\n" in outputs.read_text()
    message = termination.read_text()
    assert len(message.encode()) <= 1024
    assert message.startswith("preflight FAILED on ") and "12 of 12 thresholds failed. shm0.size: measured " in message
    assert "shm0.size: measured " in message and "required >= 1024 TiB" in message
    document = read_junit(junit_path)
    assert sum(isinstance(c.result[0], junitparser.Failure) for s in document for c in s) == 12
    assert "preflight_threshold_met{" in prom.read_text() and "preflight_passed 0" in prom.read_text()


def test_error_and_skip_reach_junit(tmp_path):
    body = ("  hung:\n    check: shm\n    timeout: 0.01s\n    size: {min: 1 GiB}\n"
            "  optional:\n    check: shm\n    path: /nonexistent/shm\n    required: false\n    size: {min: 1 GiB}\n")
    completed = _preflight("-c", str(_config(tmp_path, body)), "--junit-xml", str(tmp_path / "r.xml"))
    assert completed.returncode == 1
    cases = {c.classname: c.result[0] for s in read_junit(tmp_path / "r.xml") for c in s}
    assert isinstance(cases["preflight.hung"], junitparser.Error) and "timed out" in cases["preflight.hung"].message
    assert isinstance(cases["preflight.optional"], junitparser.Skipped)


def test_config_error_still_writes_junit_github_and_termination_message(tmp_path):
    path = _config(tmp_path, "  storage:\n    seq_raed: {min: 1 GB/s}\n")
    summary, outputs, termination = tmp_path / "summary.md", tmp_path / "output", tmp_path / "termination-log"
    termination.touch()
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs),
           "GITHUB_WORKSPACE": str(tmp_path), "PREFLIGHT_TERMINATION_LOG": str(termination)}
    completed = _preflight("-c", str(path), "--junit-xml", str(tmp_path / "r.xml"), env=env)
    expected = f"{path}:5:5: unknown key `seq_raed`: did you mean `seq_read`?"
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.splitlines()[-1] == f"preflight: error: {expected}"
    assert completed.stderr.splitlines()[0] == (
        "::error file=thresholds.yaml,line=5,col=5,title=preflight%3A invalid config::" + expected)
    (case,) = [c for s in read_junit(tmp_path / "r.xml") for c in s]
    assert isinstance(case.result[0], junitparser.Error) and case.result[0].message == expected
    assert termination.read_text() == f"preflight could not start: {expected}"
    assert "passed=false" in outputs.read_text() and expected.replace("`", "'") in summary.read_text()


def test_several_config_mistakes_are_one_annotation_each_at_its_place(tmp_path):
    path = _config(tmp_path, "  storage:\n    seq_raed: {min: 1 GB/s}\n  shm:\n    sise: {min: 1 GiB}\n")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(tmp_path)}
    completed = _preflight("-c", str(path), env=env)
    assert completed.returncode == 2
    told = [f"{path}:5:5: unknown key `seq_raed`: did you mean `seq_read`?",
            f"{path}:7:5: unknown key `sise`: did you mean `size`?"]
    assert completed.stderr.splitlines() == [
        "::error file=thresholds.yaml,line=5,col=5,title=preflight%3A invalid config::" + told[0],
        "::error file=thresholds.yaml,line=7,col=5,title=preflight%3A invalid config::" + told[1],
        *told, f"preflight: error: 2 errors in {path}: fix each line above (nothing was measured)"]


def test_a_config_error_replaces_every_requested_report_so_none_keeps_the_last_good_verdict(tmp_path):
    reports = {"json": tmp_path / "r.json", "junit-xml": tmp_path / "r.xml", "prometheus": tmp_path / "p.prom"}
    flags = [item for flag, path in reports.items() for item in (f"--{flag}", str(path))]
    path = _config(tmp_path, "  shm:\n    allocate: 1 MiB\n    size: {min: 1 MiB}\n")
    assert _preflight("-c", str(path), *flags).returncode == 0
    assert "preflight_passed 1" in reports["prometheus"].read_text()  # the last good run's

    path = _config(tmp_path, "  shm:\n    sise: {min: 1 MiB}\n")
    completed = _preflight("-c", str(path), *flags)
    expected = f"{path}:5:5: unknown key `sise`: did you mean `size`?"
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.splitlines() == [f"preflight: error: {expected}"]
    document = json.loads(reports["json"].read_text())
    assert (document["schema"], document["exit_code"], document["error"], document["results"]) == (1, 2, expected, [])
    assert document["config"]["path"] == str(path) and document["facts"]["hostname"] == document["host"]
    prom = reports["prometheus"].read_text()
    assert "preflight_passed 0\n" in prom and "preflight_config_error 1\n" in prom
    assert "preflight_shm_" not in prom and "preflight_threshold_met" not in prom  # no stale measurement either
    (case,) = [c for s in read_junit(reports["junit-xml"]) for c in s]
    assert case.result[0].type == "ConfigError"

    completed = _preflight("-c", str(path), "--format", "json")  # stdout carries the JSON report, as it asked
    assert completed.returncode == 2 and json.loads(completed.stdout)["error"] == expected


def test_annotations_name_the_config_relative_to_the_workspace_when_run_from_a_subfolder(tmp_path):
    # The workspace is the repository root; the job runs `preflight run -c thresholds.yaml` from ci/.
    ci = tmp_path / "ci"
    ci.mkdir()
    _config(ci, "  shm:\n    allocate: 1 MiB\n    size: {min: 1024 TiB}\n")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(tmp_path)}
    completed = run_cli("run", "-c", "thresholds.yaml", cwd=ci, env=env)
    assert completed.returncode == 1, completed.stderr
    assert "::error file=ci/thresholds.yaml,line=6,col=5,title=preflight%3A shm.size fail::" in completed.stderr
    _config(ci, "  shm:\n    sise: {min: 1 GiB}\n")
    completed = run_cli("run", "-c", "thresholds.yaml", cwd=ci, env=env)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.startswith("::error file=ci/thresholds.yaml,line=5,col=5,title=preflight%3A invalid config::")


def test_unwritable_report_path_fails_before_measuring(tmp_path):
    path = _config(tmp_path, "  shm: {}\n")
    completed = _preflight("-c", str(path), "--prometheus", str(tmp_path / "missing" / "p.prom"))
    assert completed.returncode == 2
    assert completed.stderr == (f"preflight: error: {tmp_path}/missing/p.prom: directory {tmp_path}/missing does not "
                                "exist: create it or choose another path\n")
