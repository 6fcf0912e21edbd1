import os
import time

import pytest

from preflight import config, runner
from preflight.checks import CHECKS
from tests.fakes import faulty, steady
from tests.helpers import write_config


@pytest.fixture(autouse=True)
def fake_checks(monkeypatch):
    monkeypatch.setitem(CHECKS, "steady", steady)
    monkeypatch.setitem(CHECKS, "faulty", faulty)


def run(tmp_path, text):
    loaded = config.load(str(write_config(tmp_path, text)), environ={})
    return {result.id: result for result in runner.run(loaded)}


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
    assert time.monotonic() - start < 1 + 5


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
