"""Delivering a run: a closed stdout is not an error, and each report file is written on its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import REPO, write_config

SHM_ONLY = """
    version: 1
    checks:
      shm:
        path: /dev/shm
        allocate: 1 MiB
        size: {min: 1 MiB}
    """


def _into_a_closed_pipe(command: str, cwd) -> subprocess.CompletedProcess[str]:
    """``preflight COMMAND | true`` with the reader gone before the first write, so every write to
    stdout meets EPIPE (a real pipe whose read end is closed, not a simulation)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "preflight", *command.split()], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=120,
                              env=dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1"))
    finally:
        os.close(write_end)


def test_run_into_a_closed_pipe_still_writes_its_reports_and_exits_with_the_verdict(tmp_path):
    config = write_config(tmp_path, SHM_ONLY)
    done = _into_a_closed_pipe(f"run -c {config} --json {tmp_path / 'r.json'} --junit-xml {tmp_path / 'r.xml'}",
                               tmp_path)
    assert done.returncode == 0, done.stderr
    assert "internal error" not in done.stderr and "BrokenPipe" not in done.stderr
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 0
    assert (tmp_path / "r.xml").read_text().startswith("<?xml")


def test_list_and_validate_into_a_closed_pipe_are_not_internal_errors(tmp_path):
    config = write_config(tmp_path, SHM_ONLY)
    for command in ("list", f"validate -c {config}", "schema"):
        done = _into_a_closed_pipe(command, tmp_path)
        assert done.returncode == 0, (command, done.stderr)
        assert "internal error" not in done.stderr, (command, done.stderr)


def test_a_config_error_on_a_fleet_rank_writes_the_fleet_shape_and_names_the_json_output(tmp_path):
    import io

    from preflight.errors import ConfigError
    from preflight.report.deliver import Destinations, deliver_config_error

    outputs = tmp_path / "output"
    to = Destinations(json=str(tmp_path / "f.json"), termination_log=str(tmp_path / "none"))
    error = ConfigError("f.yaml:3:5", "unknown key `sise`: did you mean `size`?")
    deliver_config_error("f.yaml", error, to, {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(outputs)},
                         io.StringIO(), io.StringIO(), world_size=4)
    document = json.loads((tmp_path / "f.json").read_text())
    assert document == {"schema": 1, "kind": "fleet", "world_size": 4, "exit_code": 2, "error": str(error),
                        "counts": {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0, "info": 0}, "failed": [],
                        "hosts": []}
    assert f"json={tmp_path / 'f.json'}\n" in outputs.read_text()


def test_a_config_error_report_that_cannot_be_written_costs_no_other_report(tmp_path):
    import io

    from preflight.errors import UsageError
    from preflight.report.deliver import Destinations, deliver_config_error

    to = Destinations(json=str(tmp_path / "gone" / "r.json"), prometheus=str(tmp_path / "p.prom"),
                      termination_log=str(tmp_path / "none"))
    stderr = io.StringIO()
    deliver_config_error("t.yaml", UsageError("--only nope: no such check instance"), to, {}, io.StringIO(), stderr)
    assert "preflight_config_error 1" in (tmp_path / "p.prom").read_text()
    assert stderr.getvalue().startswith(f"preflight: error: {tmp_path / 'gone' / 'r.json'}: cannot write the report")
