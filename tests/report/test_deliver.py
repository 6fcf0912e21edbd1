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
