"""The pipeline's worker sweep: input_bound at 1, 2, 4, ... workers and the fewest where it reaches its floor.

Both cases are made of sleeps, so they hold on this busy 2-CPU machine: load only lengthens a sleep,
which lowers a rate, never raises it. A reader that sleeps 10 ms per sample (``sample_delay``) feeds a
model whose step sleeps 5 ms: one worker delivers a batch of two every 20 ms or more, so the step waits
three quarters of its time for data, and a second worker halves the wait (to half the time): a gap of 25
points that a busy machine's noise does not close (a 2 ms step left 10 points, and four test processes
on two cores once read 73% at one worker and 82% at two). A model whose step sleeps 50 ms, fed
random samples that take a worker well under a millisecond a batch, waits for nothing at one worker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from preflight.checks import pipeline
from preflight.checks.base import Budget
from preflight.checks.dataloader.sweep import Curve, counts
from preflight.checks.pipeline import measuring, sweep
from preflight.host.cpus import available_cpus
from tests.helpers import job_package, run_check

SLEEPY = '''
import time

from torch import nn


class Sleepy(nn.Module):
    """A step whose time is a sleep in forward: its rate holds whatever else the machine runs."""

    def __init__(self, step_s, num_classes):
        super().__init__()
        self.step_s = step_s
        self.head = nn.Linear(3 * 8 * 8, num_classes)

    def forward(self, x):
        time.sleep(self.step_s)
        return self.head(x.flatten(1))


def make(step_s, num_classes=10):
    return Sleepy(step_s, num_classes)
'''
MODEL = {"model": "jobpkg.sleepy:make", "input_shape": [3, 8, 8], "num_classes": 10, "batch_size": 2}

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return job_package(tmp_path / "src", "jobpkg", {"sleepy": SLEEPY})


def _curve(note: str) -> dict[int, int]:
    """``input_bound at 1, 2 workers: 89%, 78%; ...`` as {1: 89, 2: 78}."""
    found = re.search(r"input_bound at ([\d, ]+) workers: ([\d%, ]+);", note)
    assert found, note
    return dict(zip(map(int, found[1].split(", ")), (int(b.rstrip("%")) for b in found[2].split(", "))))


def test_a_loader_that_waits_on_each_sample_is_told_to_raise_num_workers(files, src):
    # 6 s: each count's windows are then 150 ms (7 batches at one worker), up to ten pairs of them, where 3 s gave
    # 75 ms windows, and a busy stretch of the machine during the two-worker pairs once read 55% at one worker and
    # 63% at two. Sleeping costs no CPU; the wider windows cost 3 s of this test's wall time.
    rows = run_check("pipeline", 6.0, path=str(files), sample_delay="10ms", num_workers=1, worker_sweep=True,
                     python_path=[str(src)], model_args={"step_s": 0.005}, **MODEL)
    recommended = rows["recommended_num_workers[cpu]"]
    knee = int(recommended.value)  # type: ignore[arg-type]
    curve = _curve(recommended.note)
    assert list(curve) == counts(1, available_cpus()) and len(curve) >= 2, recommended.note
    # One worker leaves the 5 ms step waiting 15 ms of every 20 (75%); a second halves the wait (50%). Load
    # lengthens the step's own time too; measured 68% -> 33% idle, 73% -> 33% beside two busy loops.
    most = max(curve)
    assert curve[1] > 40 and curve[most] < curve[1], recommended.note
    if knee > 1:
        assert recommended.hint == (f"raise num_workers from 1 to {knee}: input_bound {curve[1]}% -> "
                                    f"{curve[knee]}%"), recommended.note
    else:  # under heavy load the two counts' windows overlapped: the noise rule (unit-tested) keeps 1, and says so
        floor = min(curve, key=curve.__getitem__)
        assert recommended.hint == (f"num_workers 1 is within the noise of input_bound's floor ({curve[floor]}% at "
                                    f"{floor}): their windows overlap here; a longer duration can tell them apart")
    assert "measured on the CPU" in recommended.note and "swept at" in recommended.method
    assert rows["input_bound[cpu]"].value > 50  # the check's own windows, at the configured one worker


def test_a_slow_model_fed_by_a_fast_loader_is_at_its_floor_with_one_worker(src):
    # A 50 ms step: one worker, two batches ahead (prefetch_factor 2), has 50 ms to be scheduled for each batch it
    # makes in well under a millisecond. With a 10 ms step, four test processes and two busy loops on two cores
    # kept it off the CPU long enough to read 39%, 20%, 25% at 1, 2, 4 workers (CI run 50). Sleeps cost no CPU.
    rows = run_check("pipeline", 4.0, synthetic=True, num_workers=4, worker_sweep=True, python_path=[str(src)],
                     model_args={"step_s": 0.05}, **MODEL)
    recommended = rows["recommended_num_workers[cpu]"]
    assert recommended.value == 1, recommended.note
    assert list(_curve(recommended.note)) == counts(4, available_cpus())
    assert recommended.hint.startswith("more workers than 1 gain nothing here and cost memory: input_bound "), \
        recommended.hint


def test_the_sweep_is_a_phase_that_shares_duration_with_the_checks_own_windows(monkeypatch):
    measured: list[tuple[int, float]] = []  # (kinds of step, seconds each kind was given) per interleaved run
    real = measuring.interleaved

    def recorded(steps, device, budget):
        measured.append((len(steps), budget.duration_s))
        return real(steps, device, budget)

    monkeypatch.setattr(measuring, "interleaved", recorded)
    rows = run_check("pipeline", 0.6, synthetic=True, num_workers=2, worker_sweep=True, model="tiny",
                     input_shape=[3, 16, 16], num_classes=10, batch_size=2)
    swept = counts(2, available_cpus())
    assert rows["recommended_num_workers[cpu]"].value in swept
    assert measured[0] == (2, pytest.approx(0.3))  # the check's own windows: half of duration
    assert measured[1:] == [(2, pytest.approx(0.3 / len(swept)))] * len(swept)  # the sweep's half, shared by count
    assert sum(seconds for _, seconds in measured) == pytest.approx(0.6)
    assert pipeline.phases({"worker_sweep": True}) == 2 and pipeline.phases({"worker_sweep": False}) == 1


def test_the_knee_is_where_input_bound_reaches_its_floor_and_the_hint_says_what_raising_gains():
    # rates are 100 % - input_bound of each pair of windows: input_bound 60 %, 24 %, 5 % at 1, 2, 4 workers
    falling = Curve((1, 2, 4), (40.0, 76.0, 95.0), ((38.0, 42.0), (74.0, 78.0), (93.0, 97.0)))
    raise_to = sweep.recommended(falling, 1, "cuda:0", 60.0, "m")
    assert raise_to.value == 4 and raise_to.device == "cuda:0"
    assert raise_to.note == ("input_bound at 1, 2, 4 workers: 60%, 24%, 5%; raise num_workers from 1 to 4: "
                             "input_bound 60% -> 5%")
    # num_workers 0 loads in the training process: the sweep starts at 1, the check's own figure is the 'from'
    assert sweep.recommended(falling, 0, "cpu", 83.0, "m").hint == "raise num_workers from 0 to 4: input_bound 83% -> 5%"
    assert sweep.recommended(falling, 4, "cpu", 5.0, "m").hint == "num_workers 4 is where input_bound reaches its floor"


def test_counts_whose_pairs_overlap_the_floors_are_within_its_noise():
    # the lowest input_bound is at 2 workers (5 %), but 1 worker's pairs reach the floor's: no gain from a second
    flat = Curve((1, 2, 4), (93.0, 95.0, 94.0), ((90.0, 97.0), (92.0, 98.0), (91.0, 97.0)))
    fewer = sweep.recommended(flat, 4, "cpu", 6.0, "m")
    assert fewer.value == 1
    assert fewer.hint == ("more workers than 1 gain nothing here and cost memory: input_bound 7% at 1 is within the "
                          "noise of its floor (5% at 2)")
    lowest = Curve((1, 2), (95.0, 94.0), ((92.0, 98.0), (91.0, 97.0)))
    assert sweep.recommended(lowest, 2, "cpu", 6.0, "m").hint == ("more workers than 1 gain nothing here and cost "
                                                                  "memory: input_bound is at its floor, 5%, with 1")


def test_a_configured_count_whose_pairs_overlap_a_lower_floor_says_so_not_that_it_is_the_floor():
    # A busy machine: one worker's median keeps 37%, two workers' 77%, but one of the first's pairs reached 90%.
    overlapping = Curve((1, 2), (37.0, 77.0), ((20.0, 90.0), (70.0, 84.0)))
    assert sweep.recommended(overlapping, 1, "cpu", 63.0, "m").hint == (
        "num_workers 1 is within the noise of input_bound's floor (23% at 2): their windows overlap here; a longer "
        "duration can tell them apart")


def test_each_counts_figure_is_the_median_of_its_pairs_as_input_bounds_value(monkeypatch):
    monkeypatch.setattr(sweep, "available_cpus", lambda: 2.0)
    shares = {1: (10.0, 50.0, 20.0), 2: (90.0, 80.0, 85.0)}  # 100 % - input_bound of each pair
    given: list[float] = []

    def fed_share_at(workers: int, share: Budget) -> tuple[float, ...]:
        given.append(share.duration_s)
        return shares[workers]

    recommended = sweep.measure(fed_share_at, 2, Budget(1.0, 60.0), "cpu", 15.0, "m")
    # medians 20 and 85 (the mean of 1's pairs, 27, would read 73 %)
    assert recommended.note == "input_bound at 1, 2 workers: 80%, 15%; num_workers 2 is where input_bound reaches its floor"
    assert given == [0.5, 0.5]  # an equal share of the sweep's budget per count
