import json
import os
import re
import subprocess
import sys
import time

import pytest

from preflight.host import cgroup
from preflight import config, runner
from preflight.checks import CHECKS
from preflight.report import build, json_report, junit, now
from tests.fakes import faulty, sequence, steady
from tests.report_helpers import read_junit
from tests.helpers import REPO, in_read_only_root, memory_limited_cgroup, write_config


@pytest.fixture(autouse=True)
def fake_checks(monkeypatch):
    monkeypatch.setitem(CHECKS, "steady", steady)
    monkeypatch.setitem(CHECKS, "faulty", faulty)
    monkeypatch.setitem(CHECKS, "sequence", sequence)


def run(tmp_path, text, temp_dir=None):
    loaded = config.load(str(write_config(tmp_path, text)), environ={})
    return {result.id: result for result in runner.run(loaded, temp_dir=temp_dir)}


@pytest.mark.parametrize(
    "mode, fragment",
    [
        ("hang", "timed out after 2s and was killed"),
        ("segfault", "killed by SIGSEGV (segmentation fault); last output: about to fail: segfault"),
        ("exit", "worker exited with status 7 without a result"),
        ("raise", "ValueError: the fake check broke"),
    ],
)
def test_a_faulty_check_is_an_error_and_the_others_still_run(tmp_path, mode, fragment):
    results = run(tmp_path, f"""
        version: 1
        checks:
          before: {{check: steady, value: 50 samples/s, rate: {{min: 10 samples/s}}}}
          bad: {{check: faulty, mode: {mode}, timeout: 2s, rate: {{min: 1 samples/s}}}}
          after: {{check: steady, value: 5 samples/s, rate: {{min: 10 samples/s}}}}
        """)
    assert results["before.rate"].verdict == "pass"
    assert results["before.rate"].value == 50
    assert results["bad.rate"].verdict == "error"
    assert fragment in results["bad.rate"].message
    assert results["after.rate"].verdict == "fail"  # the replacement worker measured it for real
    assert results["after.rate"].hint == "raise it to >= 10 samples/s"


def test_a_hang_is_killed_at_its_timeout(tmp_path):
    start = time.monotonic()
    results = run(tmp_path, """
        version: 1
        checks:
          bad: {check: faulty, mode: hang, timeout: 1s, rate: {min: 1 samples/s}}
        """)
    assert results["bad.rate"].verdict == "error"
    assert time.monotonic() - start < 1 + 15  # the timeout, plus a fresh worker's start on a busy machine


def test_a_hung_child_of_a_check_dies_with_it_at_the_timeout(tmp_path):
    start = time.monotonic()
    results = run(tmp_path, f"""
        version: 1
        checks:
          bad: {{check: faulty, mode: hang_child, scratch: {tmp_path}, timeout: 2s, rate: {{min: 1 samples/s}}}}
        """)
    assert results["bad.rate"].verdict == "error" and "timed out after 2s" in results["bad.rate"].message
    assert time.monotonic() - start < 2 + 15
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return  # gone: killed with the worker's process group, and reaped
        try:
            if open(f"/proc/{child}/stat").read().split(") ")[1].startswith("Z"):
                return  # killed; a zombie until init reaps it
        except FileNotFoundError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the hung child {child} outlived the killed check")


def test_scratch_of_a_killed_check_is_removed(tmp_path):
    parent = tmp_path / "scratch"
    parent.mkdir()
    results = run(tmp_path, f"""
        version: 1
        checks:
          bad: {{check: faulty, mode: scratch_hang, scratch: {parent}, timeout: 2s}}
          good: {{check: steady, scratch: {parent}}}
        """)
    assert results["bad"].verdict == "error"  # no thresholds: one error result for the instance
    assert results["good.rate"].verdict == "info"
    assert os.listdir(parent) == []


def test_scratch_on_a_mount_that_does_not_answer_is_left_and_named_and_the_rest_removed_by_a_child(tmp_path):
    """The runner never touches the filesystem under test itself: an rmtree on a dead mount would hold it forever."""
    dead, alive = tmp_path / "dead", tmp_path / "alive"
    kept_dir, gone_dir = dead / ".preflight-scratch-a1", alive / ".preflight-scratch-b2"
    not_ours = alive / "data"
    for directory in (kept_dir, gone_dir, not_ours):
        directory.mkdir(parents=True)
        (directory / "x").write_text("x")
    kept = runner._remove_scratch([str(kept_dir), str(gone_dir), str(not_ours)], [str(dead)])
    assert kept == [str(kept_dir)]
    assert kept_dir.exists() and not gone_dir.exists() and not_ours.exists()  # only scratch it named is removed


def test_out_of_memory_under_a_real_memory_limit_is_an_error_and_the_worker_is_replaced(tmp_path):
    results = run(tmp_path, """
        version: 1
        checks:
          bad: {check: faulty, mode: oom, timeout: 20s, rate: {min: 1 samples/s}}
          after: {check: steady, value: 50 samples/s, rate: {min: 10 samples/s}}
        """)
    assert results["bad.rate"].verdict == "error"
    assert "MemoryError: Unable to allocate 2.00 GiB" in results["bad.rate"].message
    assert "out of memory: raise the memory limit" in results["bad.rate"].message
    assert results["after.rate"].verdict == "pass"  # the limit died with nothing: `after` had memory to run


# The runner and its worker in one memory cgroup, as in a container: the runner's own count sees the kill.
RUN_FAKES = """
import json, sys
from preflight import config, runner
from preflight.checks import CHECKS
from tests.fakes import faulty, steady
CHECKS.update(faulty=faulty, steady=steady)
print(json.dumps({r.id: [r.verdict, r.message] for r in runner.run(config.load(sys.argv[1], environ={}))}))
"""


def test_a_real_kernel_oom_kill_is_named_as_one_with_the_limit_and_the_worker_is_replaced(tmp_path):
    path = write_config(tmp_path, """
        version: 1
        checks:
          bad: {check: faulty, mode: cgroup_oom, timeout: 30s, rate: {min: 1 samples/s}}
          after: {check: steady, value: 50 samples/s, rate: {min: 10 samples/s}}
        """)
    with memory_limited_cgroup(256 << 20) as (directory, prefix):
        done = subprocess.run([*prefix, sys.executable, "-c", RUN_FAKES, str(path)], cwd=REPO, capture_output=True,
                              text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))
        counter = "memory.events" if cgroup.unified() else "memory.oom_control"
        kills = re.search(r"^oom_kill (\d+)$", (directory / counter).read_text(), re.M)
    results = json.loads(done.stdout)
    assert kills and kills[1] == "1"  # the kernel's own count: one OOM kill in this cgroup
    assert results["bad.rate"] == ["error", (
        f"faulty check did not finish: killed by SIGKILL: the kernel OOM-killed the check's process under the "
        f"cgroup memory limit of 256 MiB (oom_kill in {counter} rose from 0 to 1); raise the container's or pod's "
        f"memory limit, or lower the check's sizes; last output: about to fail: cgroup_oom")]
    assert results["after.rate"][0] == "pass"


def test_a_kill_like_the_oom_killer_names_the_likely_cause(tmp_path):
    results = run(tmp_path, """
        version: 1
        checks:
          bad: {check: faulty, mode: sigkill, rate: {min: 1 samples/s}}
          after: {check: steady, value: 50 samples/s, rate: {min: 10 samples/s}}
        """)
    assert "killed by SIGKILL (out of memory? see `dmesg`" in results["bad.rate"].message
    assert results["after.rate"].verdict == "pass"


def test_megabytes_of_output_neither_block_the_worker_nor_flood_the_report(tmp_path):
    start = time.monotonic()
    results = run(tmp_path, """
        version: 1
        checks:
          bad: {check: faulty, mode: spew, timeout: 30s, rate: {min: 1 samples/s}}
          after: {check: steady, value: 50 samples/s, rate: {min: 10 samples/s}}
        """)
    message = results["bad.rate"].message
    assert results["bad.rate"].verdict == "error"
    assert "RuntimeError: mmmm" in message and "more characters]" in message
    assert len(message) < 2200
    assert results["after.rate"].verdict == "pass"
    assert time.monotonic() - start < 30


def noisy(tmp_path, values, settings, threshold="{min: 100 samples/s}"):
    state = tmp_path / "runs"
    results = run(tmp_path, f"""
        version: 1
        checks:
          noisy: {{check: sequence, values: "{values}", state: {state}, {settings}, rate: {threshold}}}
        """)
    return results["noisy.rate"], int(state.read_text())


def test_repeats_judge_the_median_of_the_runs_and_keep_every_sample(tmp_path):
    result, runs = noisy(tmp_path, "120,10,110", "repeats: 3")
    assert runs == 3
    # one disturbed run cannot fail the gate; the runs' spread (10 to 120) straddles 100, so it is marginal
    assert result.verdict == "warn" and result.value == 110 and result.marginal
    assert result.runs == (120, 10, 110)
    assert len(result.samples) == 9 and min(result.samples) == 10 * 0.99
    assert any("interquartile range of the 3 runs" in w for w in result.warnings)


def test_a_narrow_miss_is_re_measured_and_the_earlier_attempt_is_recorded(tmp_path):
    result, runs = noisy(tmp_path, "95,105", "retries: 2, retry_margin: 10%")
    assert runs == 2
    assert result.verdict == "pass" and result.value == 105
    assert [(a.value, a.verdict) for a in result.attempts] == [(95, "fail")]
    assert result.message.endswith("after 1 retry: earlier 95 samples/s (fail)")


def test_a_clear_miss_is_not_retried(tmp_path):
    result, runs = noisy(tmp_path, "80,105", "retries: 2, retry_margin: 10%")
    assert runs == 1 and result.verdict == "fail" and result.attempts == ()


def test_retries_run_out_and_the_last_miss_fails(tmp_path):
    result, runs = noisy(tmp_path, "95,96,97,150", "retries: 2, repeats: 1")
    assert runs == 3
    assert result.verdict == "fail" and result.value == 97
    assert [a.value for a in result.attempts] == [95, 96]


def test_a_max_threshold_retries_above_its_bound(tmp_path):
    result, runs = noisy(tmp_path, "105,90", "retries: 1", threshold="{max: 100 samples/s}")
    assert runs == 2 and result.verdict == "pass"


def test_json_and_junit_record_every_run_attempt_and_sample(tmp_path):
    result, _ = noisy(tmp_path, "95,95,95,101,120,110", "repeats: 3, retries: 1")
    assert result.verdict == "pass" and result.value == 110
    report = build("t.yaml", "0", [result], now(), 1.0)
    [entry] = json_report.to_dict(report)["results"]
    assert entry["runs"] == [101, 120, 110]
    assert len(entry["samples"]) == 9
    assert entry["attempts"] == [{"value": 95, "verdict": "fail", "samples": [94.05, 95, 95.95] * 3}]
    junit.write(str(tmp_path / "report.xml"), [report])
    read_junit(tmp_path / "report.xml")  # still valid against junit-10.xsd
    xml = (tmp_path / "report.xml").read_text()
    assert "runs (samples/s, median judged): 101, 120, 110" in xml
    assert "attempt 1 (fail, re-measured): 95.0 samples/s; samples: 94.05, 95, 95.95, 94.05" in xml


def test_workers_keep_their_logs_and_temporary_files_in_the_directory_given_and_leave_none(tmp_path):
    room = tmp_path / "room"
    room.mkdir()
    results = run(tmp_path, f"""
        version: 1
        checks:
          bad: {{check: faulty, mode: segfault, rate: {{min: 1 samples/s}}}}
          good: {{check: steady, tempdir_to: {tmp_path}/seen, rate: {{min: 1 samples/s}}}}
        """, temp_dir=str(room))
    assert "last output: about to fail: segfault" in results["bad.rate"].message  # its log was read from room
    assert results["good.rate"].verdict == "pass"
    assert (tmp_path / "seen").read_text() == str(room)  # TMPDIR for the check and the libraries under it
    assert os.listdir(room) == []


def test_every_runner_test_passes_under_a_read_only_root_with_an_unwritable_tmpdir(tmp_path):
    """This file's tests once more where / (so /tmp, and TMPDIR=/tmp) is read-only and /dev/shm a writable
    tmpfs, as in a pod with readOnlyRootFilesystem: true. pytest's own files go to a tmpfs (its
    --basetemp; --capture=sys, as fd capture needs temporary files), so what meets TMPDIR is the runner."""
    pytest_command = (f"{sys.executable} -m pytest -q -p no:cacheprovider --capture=sys --basetemp={tmp_path}/basetemp "
                      f"-k 'not under_a_read_only_root' tests/test_runner.py")  # not this test again
    result = in_read_only_root(f"mount -t tmpfs -o size=256m tmpfs {tmp_path} && "
                               f"TMPDIR=/tmp PYTHONDONTWRITEBYTECODE=1 {pytest_command}", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
