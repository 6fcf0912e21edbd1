"""The CLI under faults it cannot prevent: signals mid-check, and report destinations that refuse writes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from tests.helpers import REPO, in_mount_namespace, in_read_only_root, write_config
from tests.report_helpers import read_junit

LONG_STORAGE = """
version: 1
checks:
  storage:
    path: {data}
    data_size: 32 MiB
    duration: 60s
    timeout: 90s
    seq_read: {{min: 1 MB/s}}
  shm:
    size: {{min: 1 MiB}}
"""


def start_cli(*args, cwd):
    environment = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1")
    return subprocess.Popen([sys.executable, "-m", "preflight", *args], cwd=cwd, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_scratch_file(parent, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for directory in parent.glob(".preflight-scratch-*"):
            target = directory / "seq_read.dat"
            if target.exists() and target.stat().st_size > 0:
                return directory
        time.sleep(0.05)
    raise AssertionError("the storage check never wrote its scratch file")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_check_removes_scratch_and_writes_a_partial_report(tmp_path, signum):
    data = tmp_path / "data"
    data.mkdir()
    config = write_config(tmp_path, LONG_STORAGE.format(data=data))
    junit, report = tmp_path / "out.xml", tmp_path / "out.json"
    process = start_cli("run", "-c", str(config), "--json", str(report), "--junit-xml", str(junit), cwd=tmp_path)
    scratch = wait_for_scratch_file(tmp_path)  # beside the dataset, never inside it
    started = time.monotonic()
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert process.returncode == 1, stderr  # documented: the interrupted check is an error, the gate fails
    assert not scratch.exists() and not list(tmp_path.glob(".preflight-scratch-*")) and os.listdir(data) == []
    assert "Traceback" not in stderr
    results = {r["id"]: r for r in json.loads(report.read_text())["results"]}
    name = signal.Signals(signum).name
    assert results["storage.seq_read"]["verdict"] == "error"
    assert results["storage.seq_read"]["message"].endswith(f"interrupted by {name}")
    assert results["shm.size"]["verdict"] == "error"
    assert results["shm.size"]["message"].endswith(f"not run: interrupted by {name}")
    read_junit(junit)  # valid against junit-10.xsd, interrupted or not
    errors = ET.parse(junit).getroot().iter("error")
    assert {e.get("message").rsplit(": ", 1)[-1] for e in errors} == {f"interrupted by {name}"}
    assert "ERROR" in stdout and "storage.seq_read" in stdout  # the console table too


def unshare_prefix():
    """A command prefix giving a private mount namespace, or None where this machine allows none."""
    for prefix in (["unshare", "-m"], ["unshare", "-rm"]):
        if shutil.which("unshare") and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    return None


def run_with_tiny_mount(tmp_path, setup, *args):
    """Run the CLI with a 64 KiB tmpfs mounted at tmp_path/mnt in a private mount namespace."""
    prefix = unshare_prefix()
    if prefix is None:
        pytest.skip("needs a private mount namespace (unshare -m as root, or -rm with user namespaces)")
    mount = tmp_path / "mnt"
    mount.mkdir()
    command = " ".join(["mount -t tmpfs -o size=64k tmpfs", str(mount), "&&", setup, "&&",
                        sys.executable, "-m preflight", *args,
                        f"; code=$?; ls -A {mount} > {tmp_path}/listing; exit $code"])  # seen before unmount
    environment = dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1")
    return subprocess.run([*prefix, "sh", "-c", command], cwd=tmp_path, env=environment, capture_output=True,
                          text=True, timeout=120), mount


SHM_ONLY = """
version: 1
checks:
  shm:
    allocate: 1 MiB
    size: {min: 1 MiB}
"""


def test_a_full_report_destination_is_a_one_line_error_after_the_table_and_costs_no_other_report(tmp_path):
    config = write_config(tmp_path, SHM_ONLY)
    fill = f"(dd if=/dev/zero of={tmp_path}/mnt/fill bs=4k 2>/dev/null; true)"
    result, mount = run_with_tiny_mount(tmp_path, fill, "run", "-c", str(config), "--json",
                                        f"{tmp_path}/mnt/report.json", "--junit-xml", str(tmp_path / "report.xml"))
    assert result.returncode == 2, result.stderr
    assert "shm.size" in result.stdout and "PASS" in result.stdout  # the table was printed before the write
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"preflight: error: {tmp_path}/mnt/report.json: cannot write the report (No space left on " \
                   f"device): choose a writable path"
    assert "Traceback" not in result.stderr
    assert (tmp_path / "listing").read_text().split() == ["fill"]  # no partial report, no temp file
    read_junit(tmp_path / "report.xml")  # the JUnit report on another disk was still written, whole


def test_a_read_only_report_destination_is_refused_before_measuring(tmp_path):
    config = write_config(tmp_path, SHM_ONLY)
    result, mount = run_with_tiny_mount(tmp_path, f"mount -o remount,ro {tmp_path}/mnt", "run", "-c", str(config),
                                        "--junit-xml", f"{tmp_path}/mnt/report.xml")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"preflight: error: {tmp_path}/mnt/report.xml: directory {tmp_path}/mnt is not writable "
        f"(read-only file system): choose a writable path")
    assert result.stdout == ""  # nothing was measured, so there is no table


# A read-only root filesystem (Kubernetes readOnlyRootFilesystem: true): /tmp is not writable, so the
# worker logs and a crash log must find another place, or the run must stop with the fix named.

def run_under_a_read_only_root(tmp_path, preflight_args, shm="private", writable=(), python="-m preflight"):
    """``python -m preflight ARGS`` (or ``python PYTHON ARGS``) where / is read-only and TMPDIR unset.

    ``tmp_path/out`` and ``writable`` stay writable; ``/dev/shm/r.json`` is copied to ``out`` and
    ``ls -A /dev/shm`` written to ``out/shm`` before the namespace, and its /dev/shm, are gone."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    script = (f"{sys.executable} {python} {preflight_args}; code=$?; "
              f"cp /dev/shm/r.json {out}/ 2>/dev/null; ls -A /dev/shm > {out}/shm; exit $code")
    return in_read_only_root(script, shm, [out, *writable]), out


def test_a_read_only_root_runs_with_worker_logs_on_dev_shm_and_leaves_nothing_there(tmp_path):
    config = write_config(tmp_path, SHM_ONLY)
    result, out = run_under_a_read_only_root(tmp_path, f"run -c {config} --only shm --json /dev/shm/r.json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    verdicts = {r["id"]: r["verdict"] for r in json.loads((out / "r.json").read_text())["results"]}
    assert verdicts == {"shm.size": "pass", "shm.free": "info", "shm.world_writable": "info", "shm.allocatable": "info"}
    # The worker's log was removed; the node's measuring lock stays, as a lock file does, for the next run to open.
    assert (out / "shm").read_text().split() == ["preflight.lock", "r.json"]


def test_a_read_only_root_and_dev_shm_put_worker_logs_beside_the_report(tmp_path):
    data = tmp_path / "data"  # a writable volume for the shm check to measure, /dev/shm being read-only
    data.mkdir()
    config = write_config(tmp_path, SHM_ONLY.replace("allocate: 1 MiB", f"path: {data}\n    allocate: 1 MiB"))
    result, out = run_under_a_read_only_root(tmp_path, f"run -c {config} --json {tmp_path}/out/r.json",
                                             shm="read-only", writable=[data])
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    verdicts = {r["id"]: r["verdict"] for r in json.loads((out / "r.json").read_text())["results"]}
    assert verdicts == {"shm.size": "pass", "shm.free": "info", "shm.world_writable": "info", "shm.allocatable": "info"}
    # the worker's log went here, the one writable candidate, and was removed
    assert sorted(os.listdir(out)) == ["r.json", "shm"]


def test_nothing_writable_is_one_line_naming_the_fix_with_nothing_measured(tmp_path):
    config = write_config(tmp_path, SHM_ONLY)
    result, out = run_under_a_read_only_root(tmp_path, f"run -c {config} --json -", shm="read-only")
    assert result.returncode == 2
    assert result.stdout == ""  # nothing measured, no half-written report
    [line] = result.stderr.splitlines()
    assert line.startswith("preflight: error: no writable temporary directory (TMPDIR unset; tried /tmp (read-only "
                           "file system), ")
    assert line.endswith("/dev/shm (read-only file system)): mount an emptyDir at /tmp (readOnlyRootFilesystem: "
                         "true) or set TMPDIR to a writable directory")


def test_a_read_only_tmpdir_on_a_writable_root_falls_back_as_tempfile_does(tmp_path):
    config = write_config(tmp_path, SHM_ONLY)
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    script = (f"mount -t tmpfs -o ro,size=1m tmpfs {read_only} && TMPDIR={read_only} "
              f"{sys.executable} -m preflight run -c {config} --json {tmp_path}/r.json")
    result = in_mount_namespace(script)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 0


def with_a_bug(module, name):
    """Python arguments running the CLI with ``module.name`` dividing by zero: a stand-in for a bug in preflight."""
    return (f"-c 'import sys, {module}; {module}.{name} = lambda *a, **k: 1 / 0; "
            f"from preflight import cli; sys.exit(cli.main())'")


def test_a_crash_log_goes_beside_the_report_when_nothing_else_is_writable(tmp_path):
    config = write_config(tmp_path, SHM_ONLY)
    result, out = run_under_a_read_only_root(tmp_path, f"run -c {config} --json {tmp_path}/out/r.json",
                                             shm="read-only", python=with_a_bug("preflight.runner", "run"))
    assert result.returncode == 3
    [line] = result.stderr.splitlines()[1:]  # after the "1 check from ..." progress line
    assert line.startswith(f"preflight: internal error: ZeroDivisionError('division by zero') (crash log: {out}/"
                           f"preflight-crash-")
    [log] = out.glob("preflight-crash-*.log")
    assert log.read_text().rstrip().endswith("ZeroDivisionError: division by zero")
    assert not (out / "r.json").exists()


def test_a_crash_with_nowhere_to_write_its_log_is_still_one_line_naming_where_and_exit_3(tmp_path):
    bug = with_a_bug("preflight.commands.validate", "main")
    result, out = run_under_a_read_only_root(tmp_path, "validate", shm="read-only", python=bug)
    assert result.returncode == 3
    [line] = result.stderr.splitlines()
    assert line.startswith("preflight: internal error: ZeroDivisionError('division by zero') (at <string>:1 in "
                           "<lambda>; no crash log: no writable temporary directory (TMPDIR unset; tried /tmp ")
    assert line.endswith("or set TMPDIR to a writable directory)")
