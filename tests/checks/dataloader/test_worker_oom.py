"""The dead-worker explanation and batch sizing of the DataLoader loop, in-process: no worker is started.

``explaining_worker_oom`` takes its cgroup watch as an argument, so a stub watch that reports (or
does not report) an OOM kill stands in for the kernel; the real workers and cgroup files are
exercised by the slow ``test_loop.py``. Each message here is the one a user reads, so it is pinned whole.
"""

from __future__ import annotations

import pytest

from preflight.loading import loop
from preflight.loading.loop import WorkerOomKilled, explaining_worker_oom, sizes_or_tensor

DEAD = "DataLoader worker (pid(s) 4242) exited unexpectedly"
EVIDENCE = "under the cgroup memory limit of 1.2 GiB (oom_kill in memory.events rose from 0 to 1)"
OPTIONS = {"num_workers": 2, "prefetch_factor": 3, "batch_size": 16}


class Watch:
    """An OomWatch stand-in: ``evidence`` is what the kernel's count shows; counts how often it is read."""

    def __init__(self, evidence: str) -> None:
        self.text, self.reads = evidence, 0

    def evidence(self) -> str:
        self.reads += 1
        return self.text


def raising(message: str):
    def measure(options, *rest):
        measure.got = (options, rest)
        raise RuntimeError(message)

    return measure


def test_a_dead_worker_with_an_oom_kill_names_the_kill_the_limit_and_each_setting():
    with pytest.raises(WorkerOomKilled) as caught:
        explaining_worker_oom(raising(DEAD), lambda: Watch(EVIDENCE))(OPTIONS, "budget")
    assert str(caught.value) == (
        f"{DEAD}: the kernel OOM-killed a DataLoader worker {EVIDENCE}: raise the container's or pod's memory "
        "limit, or lower num_workers (2), prefetch_factor (3) or batch_size (16)")
    assert str(caught.value.__cause__) == DEAD


def test_auto_workers_are_named_with_the_count_auto_chose(monkeypatch):
    monkeypatch.setattr(loop, "auto_workers", lambda: 7)
    with pytest.raises(WorkerOomKilled) as caught:
        explaining_worker_oom(raising(DEAD), lambda: Watch(EVIDENCE))(dict(OPTIONS, num_workers="auto"), "budget")
    assert "or lower num_workers (auto = 7), prefetch_factor (3) or batch_size (16)" in str(caught.value)


def test_a_dead_worker_without_an_oom_kill_keeps_torchs_error():
    with pytest.raises(RuntimeError) as caught:
        explaining_worker_oom(raising(DEAD), lambda: Watch(""))(OPTIONS, "budget")
    assert type(caught.value) is RuntimeError and str(caught.value) == DEAD


def test_another_runtime_error_passes_through_without_reading_the_count():
    watch = Watch(EVIDENCE)  # the count rose, but this is not a worker's death
    with pytest.raises(RuntimeError) as caught:
        explaining_worker_oom(raising("CUDA error: out of memory"), lambda: watch)(OPTIONS, "budget")
    assert type(caught.value) is RuntimeError and str(caught.value) == "CUDA error: out of memory"
    assert watch.reads == 0


def test_the_wrapped_measure_gets_every_argument_and_its_result_comes_back():
    def measure(options, budget, extra):
        return (options["batch_size"], budget, extra)

    wrapped = explaining_worker_oom(measure, lambda: Watch(EVIDENCE))
    assert wrapped(OPTIONS, "budget", 3) == (16, "budget", 3)
    assert wrapped.__name__ == "measure"


def test_a_sizes_pair_is_taken_as_is_and_a_tensor_by_its_rows_and_bytes():
    import torch  # only here: the rest of this file needs no torch

    assert sizes_or_tensor((5, 640)) == (5, 640)
    # 4 rows of 3 float16 (2 bytes each): 4 samples, 24 bytes; float32 would be 48, a row count of 12 wrong
    assert sizes_or_tensor(torch.zeros(4, 3, dtype=torch.float16)) == (4, 24)
