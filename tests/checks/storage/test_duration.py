"""``duration`` is the storage check's measuring time: split between the timed parts that run, and the writes
run only where the configuration judges them (issues 25 and 26).

Asserted on what the check did (the budgets its loops were given, the writes it made, the rows it
returned), never on how long it took, so a busy machine cannot fail them.
"""

from __future__ import annotations

import os

import pytest

from preflight.checks import storage
from preflight.checks.base import Budget
from preflight.checks.storage import measure_io, parts, writes
from tests.helpers import run_check

SMALL_RUN = dict(data_size="16 MiB", write_size="4 MiB", small_file_count=120, rand_depth=4, file_readers=2)
READS = ("seq_read", "rand_read", "small_files")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """150 small files (9 MB) in class folders: seq_read and rand_read read a scratch file beside them."""
    root = tmp_path_factory.mktemp("duration") / "data"
    for index in range(150):
        folder = root / f"class{index % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index}.jpg").write_bytes(os.urandom(60_000 + index))
    os.sync()
    return root


@pytest.fixture
def recorded(monkeypatch):
    """Every sampling budget, continuous run and write the storage check asks for, in order, running them as asked."""
    calls: dict[str, list] = {"sample": [], "run_loops": [], "write_once": [], "fsync_run": []}
    real_sample, real_loops = measure_io.sample, measure_io.run_loops
    real_write, real_fsync = writes.write_once, writes.fsync_run

    def sample(measure_once, budget_s, **kwargs):
        calls["sample"].append(budget_s)
        return real_sample(measure_once, budget_s, **kwargs)

    def run_loops(make_loop, processes, threads, seconds):
        calls["run_loops"].append(seconds)
        return real_loops(make_loop, processes, threads, seconds)

    def write_once(*args):
        calls["write_once"].append(args)
        return real_write(*args)

    def fsync_run(name, seconds):
        calls["fsync_run"].append(seconds)
        return real_fsync(name, seconds)

    monkeypatch.setattr(measure_io, "sample", sample)
    monkeypatch.setattr(measure_io, "run_loops", run_loops)
    monkeypatch.setattr(writes, "write_once", write_once)
    monkeypatch.setattr(writes, "fsync_run", fsync_run)
    return calls


def test_a_configuration_that_judges_reads_only_writes_nothing_and_its_three_parts_get_a_second_each(dataset, recorded):
    measured = run_check("storage", 3.0, judged=READS, path=str(dataset), **SMALL_RUN)
    assert recorded["write_once"] == [] and recorded["fsync_run"] == []  # no scratch writes nobody asked for
    assert "seq_write" not in measured and "fsync_p99" not in measured
    # the facts and every row that shares a judged measurement stay
    for metric in ("filesystem", "free_space", "read_only", "open_files_limit", "unreadable_files", "seq_read",
                   "rand_read", "rand_read_p50", "rand_read_p99", "small_files", "small_files_bandwidth"):
        assert measured[metric].measured, (metric, measured[metric].reason)
    # 3 s over the 3 read parts, warm-ups included: seq_read and small_files sample within 1 s each (in windows
    # of 0.25 s); rand_read runs one continuous 1 s (a 0.25 s ramp, then three 0.25 s windows)
    assert recorded["sample"] == [1.0, 1.0]
    assert recorded["run_loops"].count(1.0) == 1 and set(recorded["run_loops"]) == {0.25, 1.0}


def test_a_judged_write_runs_and_takes_its_share(dataset, recorded):
    measured = run_check("storage", 5.0, judged=(*READS, "fsync_p99"), path=str(dataset), **SMALL_RUN)
    assert measured["fsync_p99"].measured and "seq_write" not in measured
    assert recorded["write_once"] == []  # seq_write is not judged: none of its 4 MiB writes
    assert recorded["fsync_run"] == [pytest.approx(1.25)]  # 5 s over 4 parts, a 0.125 s ramp then 1.125 s
    assert recorded["sample"] == [1.25, 1.25]


def test_every_part_runs_when_nothing_says_which_metrics_are_judged():
    assert parts.timed_parts(Budget(5.0, 60.0)) == ["seq_read", "rand_read", "small_files", "seq_write", "fsync_p99"]
    assert parts.part_s(Budget(5.0, 60.0)) == 1.0
    assert parts.timed_parts(Budget(5.0, 60.0, ("free_space",))) == ["seq_read", "rand_read", "small_files"]


def test_a_duration_below_a_second_per_part_is_raised_to_it_and_the_timing_says_so():
    assert parts.part_s(Budget(1.0, 60.0, READS)) == 1.0  # a warm-up window and 3 windows of 0.25 s
    assert storage.timing({}, Budget(1.0, 60.0, READS)).measuring_s == 3.0
    timing = storage.timing({}, Budget(6.0, 60.0, READS))
    assert timing.measuring_s == 6.0 and timing.bound_s == 12.0 + storage.STARTUP_S
