"""The pipeline check on the CPU: input_bound rises toward 100 % behind a throttled loader and stays low when it keeps up.

The loader's rate is fixed by ``sample_delay`` (each file read sleeps that long, one process),
so the end-to-end figure is known; the model's own figure is measured in the same run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.errors import ConfigMistake
from preflight.checks import dataloader, model, pipeline
from preflight.loading import options as loading_options
from preflight.training.step import Window
from preflight.checks.pipeline.measuring import input_bound
from preflight.measurement import Measurement
from tests.helpers import job_package, run_check, run_cli, write_config

DELAY_S = 0.1  # per sample: one process reads at most 10 samples/s
WIDE = '''
from torch import nn


def make(width=48, num_classes=10):
    """Conv layers wide enough that a step outweighs making its batch of 3x32x32 samples."""
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.Conv2d(width, width, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))


def not_a_model():
    return 42
'''


SLOW = '''
import time

import torch


class Volume(torch.utils.data.Dataset):
    """Samples behind a volume that takes ``latency_s`` a read, holding the worker without using a CPU."""

    def __init__(self, latency_s):
        self.latency_s = latency_s

    def __len__(self):
        return 100_000

    def __getitem__(self, index):
        time.sleep(self.latency_s)
        return torch.zeros(3, 8, 8), index % 10


class Step(torch.nn.Module):
    """A model whose step takes ``step_s`` of wall time, as a GPU's step does to the host waiting on it."""

    def __init__(self, step_s, num_classes=10):
        super().__init__()
        self.step_s = step_s
        self.head = torch.nn.Linear(3, num_classes)

    def forward(self, inputs):
        time.sleep(self.step_s)
        return self.head(inputs.mean(dim=(2, 3)))


def volume(latency_s):
    return Volume(latency_s)


def model(step_s):
    return Step(step_s)
'''


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return job_package(tmp_path / "src", "jobpkg", {"wide": WIDE, "slow": SLOW})


def test_a_throttled_loader_makes_the_step_input_bound(files):
    results = run_check("pipeline", 0.5, path=str(files), sample_delay=f"{DELAY_S * 1e3:g}ms", num_workers=0,
                        batch_size=2, model="tiny", input_shape=[3, 32, 32], num_classes=10)
    fed, alone, bound = (results[f"{name}[cpu]"] for name in ("samples_per_s", "model_samples_per_s", "input_bound"))
    # one process sleeping DELAY_S per sample: at most 10 samples/s, whatever the model does (the lower bound is
    # loose: the cold reads share this machine's disk with whatever else runs on it)
    assert 0.2 / DELAY_S < fed.value <= 1.02 / DELAY_S, fed
    assert alone.value > fed.value
    assert 50 < bound.value <= 100 and bound.unit == "%"
    assert "over 120 files under" in fed.method and "the step trains on its on-device batch" in fed.method
    assert "measured on the CPU" in bound.note


def test_synthetic_samples_that_keep_up_leave_the_step_compute_bound(src):
    results = run_check("pipeline", 1.0, synthetic=True, num_workers=0, batch_size=16, model="jobpkg.wide:make",
                        python_path=str(src), input_shape=[3, 32, 32], num_classes=10)
    fed, alone, bound = (results[f"{name}[cpu]"] for name in ("samples_per_s", "model_samples_per_s", "input_bound"))
    # the median of the pairs: one window pair caught by load moves it not (a throttled loader reads 50-100)
    assert bound.value < 40, (bound, fed, alone)
    assert "synthetic 3x32x32 float32 samples" in fed.method
    assert "each batch's 3x32x32 tensor fed to the model" in fed.method
    assert bound.stats.n == alone.stats.n == fed.stats.n >= 5  # one input_bound per pair of interleaved windows


def _pair(alone: float, fed: float, wait_ms: float | None = None) -> tuple[Window, Window]:
    return Window(alone, (1.0,)), Window(fed, (1.0,), wait_ms)


def test_input_bound_on_a_gpu_is_the_median_share_of_step_time_lost_per_pair_of_windows():
    pairs = [_pair(100, 25), _pair(200, 40), _pair(50, 20), _pair(100, 110), _pair(80, 40)]
    fed = Measurement("samples_per_s", samples=tuple(p[1].samples_per_s for p in pairs), unit="samples/s",
                      device="cuda:0")
    bound = input_bound(pairs, fed, "cuda:0")
    # per pair: 75, 80, 60, 0 (faster than the model alone is noise, never negative), 50
    assert sorted(bound.samples) == [0.0, 50.0, 60.0, 75.0, 80.0]
    assert bound.value == 60.0 and bound.unit == "%" and bound.device == "cuda:0"
    assert "1 - end-to-end / model-alone samples/s, per pair of interleaved windows, median of 5 pairs (medians: " \
           "40 samples/s / 100 samples/s)" in bound.method
    # lightly-ai/lightly-train#749: on CUDA the host's wait for the next batch holds the queued kernels' time too
    # (it reported 60 % waiting where the GPU waited 10 %): a GPU's rule never reads it
    waited = [_pair(100, 90, wait_ms=0.6)] * 5
    assert input_bound(waited, fed, "cuda:0").samples == pytest.approx((10.0,) * 5)


def test_input_bound_on_the_cpu_is_the_fed_windows_measured_wait_not_what_the_workers_cpu_use_slowed():
    # each fed window: two steps of 40 + 60 ms, of which wait_ms was spent waiting for the batch; the fed step runs
    # at half the model's rate alone (the workers take the CPU's cores), which the GPU rule would count as 50 %
    pairs = [
        (Window(200.0, (40.0,)), Window(100.0, (40.0, 60.0), wait)) for wait in (8.0, 12.0, 10.0, 30.0, 0.0)]
    fed = Measurement("samples_per_s", samples=(100.0,) * 5, unit="samples/s", device="cpu")
    bound = input_bound(pairs, fed, "cpu")
    assert sorted(bound.samples) == [0.0, 8.0, 10.0, 12.0, 30.0]  # wait / (40 + 60) ms, in %
    assert bound.value == 10.0 and bound.device == "cpu"
    assert bound.method.startswith("the fed steps' host time waiting for the next batch (and its copy) / the fed "
                                   "window's time (the CPU: the workers share its cores with the step), per pair")
    assert input_bound(pairs, fed, "cuda:0").value == 50.0  # the same windows judged by the GPU's rule


def test_settling_takes_the_prefetched_batches_without_training_on_them_then_steps_on_new_ones():
    from preflight.loading.source import Counted, Loader
    from preflight.checks.pipeline import measuring

    handed: list[int] = []  # the batches the loader gave, by number
    stepped: list[int] = []  # which batch was the latest handed out at each training step

    def batches():
        number = 0
        while True:
            number += 1
            handed.append(number)
            yield [number]

    def step(inputs=None) -> int:
        stepped.append(handed[-1])
        return 1

    loader = Loader("m", 2, None, None, lambda: Counted(batches(), lambda batch: (len(batch), 0)))
    feed = measuring.Feed(loader, step, (3, 8, 8), prefetched=4)  # type: ignore[arg-type]  # 2 workers x 2
    feed.settle()
    # the 4 batches made while the model ran alone (1-4) are taken untrained: stepping on them would give the
    # workers that time to make the window's first batches ahead; then 4 untimed steps, each on a new batch
    assert handed == list(range(1, 9)) and stepped == [5, 6, 7, 8]
    assert feed() == 1 and stepped[-1] == 9  # the window's first step trains on the next batch
    feed.settle()  # after a window that ended inside a round of the 2 workers' batches: one step more, to its end
    assert stepped[-5:] == [14, 15, 16, 17, 18] and feed.epochs.position == 18


def test_settling_an_epoch_of_fewer_batches_than_workers_ends_at_the_epoch_and_a_round_is_the_epochs_batches():
    """A small dataset under many workers (256 files in batches of 64 under 11 workers: 4 batches an epoch) hung
    here: the round of 11 never came, since each epoch starts counting again, and draining the queue started
    epochs of batches that were never prefetched."""
    from preflight.loading.source import Counted, Loader
    from preflight.checks.pipeline import measuring

    epochs: list[list[int]] = []  # the batches each epoch handed out

    class Epochs:  # a DataLoader of 3 batches an epoch: each iter() starts a new one, as a fresh pool of workers
        def __iter__(self):
            epochs.append([])
            for number in range(3):
                epochs[-1].append(number)
                yield [number]

    loader = Loader("m", 8, None, None, lambda: Counted(Epochs(), lambda batch: (len(batch), 0)))
    feed = measuring.Feed(loader, lambda inputs=None: 1, (3, 8, 8), prefetched=16)  # type: ignore[arg-type]
    feed.settle()
    # draining took the first epoch's 3 batches and stopped at its end; the 16 untimed steps took epochs 2-6 and
    # one batch of epoch 7; the round, learned at epoch 1's end, is the epoch's 3 batches: settling ends with it
    assert [len(e) for e in epochs] == [3] * 7
    assert (feed.round_steps, feed.epochs.position, feed.epochs.epochs) == (3, 3, 7)
    feed.settle()  # epoch 7 is spent: nothing is drained, and no epoch is started for it
    assert [len(e) for e in epochs] == [3] * 13 and (feed.epochs.position, feed.epochs.epochs) == (3, 13)


def test_a_fed_window_runs_whole_rounds_of_the_workers_batches(monkeypatch):
    from types import SimpleNamespace

    from preflight.training import step as step_module
    from preflight.training.step import HostTimeline, window

    now = [0.0]

    class Fed:  # three workers' batches, each step 100 ms of a fake clock
        round_steps = 3

        def __call__(self) -> int:
            now[0] += 0.1
            return 2

    monkeypatch.setattr(step_module, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    # 0.35 s is past after 4 steps, but a round of the workers' batches ends after 6: a window cut at 4 would keep
    # the round's wait for the first of its batches without the two that came with it
    taken = window(Fed(), HostTimeline(), 0.35)
    assert len(taken.step_ms) == 6 and taken.samples_per_s == pytest.approx(12 / 0.6)


def test_a_window_counts_what_its_step_says_it_waited_and_the_feed_counts_only_its_wait_for_the_batch(monkeypatch):
    from types import SimpleNamespace

    from preflight.loading.source import Counted, Loader
    from preflight.training.step import HostTimeline, window
    from preflight.checks.pipeline import measuring

    now = [0.0]  # a fake host clock: the loader's next batch takes 7 ms of it, the training step 30 ms

    def batches():
        while True:
            now[0] += 0.007
            yield [1, 2, 3]

    class Step:
        def __call__(self, inputs=None) -> int:
            now[0] += 0.030
            return 3

    monkeypatch.setattr(measuring, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    loader = Loader("m", 0, None, None, lambda: Counted(batches(), lambda batch: (len(batch), 0)))
    feed = measuring.Feed(loader, Step(), (3, 8, 8))  # type: ignore[arg-type]
    for _ in range(4):
        assert feed() == 3
    assert feed.waited_ms == pytest.approx(4 * 7.0)  # the steps' 120 ms are not waiting
    assert "the step trains on its on-device batch after each batch arrives" in feed.fed

    class Counting:  # a step that reports a running total of its waits: 2.5 ms a call
        waited_ms = 100.0

        def __call__(self) -> int:
            self.waited_ms += 2.5
            return 1

    counted = window(Counting(), HostTimeline(), 0.0)  # one call: a window is at least one step
    assert counted.wait_ms == 2.5 and len(counted.step_ms) == 1
    assert window(lambda: 1, HostTimeline(), 0.0).wait_ms is None  # the model alone waits for nothing


def test_a_loader_with_nothing_to_read_still_measures_the_model(tmp_path):
    (tmp_path / "empty").mkdir()
    results = run_check("pipeline", 0.3, path=str(tmp_path / "empty"), model="tiny", input_shape=[3, 16, 16],
                        batch_size=2)
    assert results["model_samples_per_s[cpu]"].value > 0
    for name in ("samples_per_s[cpu]", "input_bound[cpu]"):
        assert results[name].value is None
        assert results[name].reason.startswith(f"no readable files under {tmp_path / 'empty'} match include=")
    with pytest.raises(ConfigMistake, match=r"^pipeline\.path: .* does not exist on this node: set pipeline\.path"):
        run_check("pipeline", 0.3, path=str(tmp_path / "absent"), model="tiny", input_shape=[3, 16, 16],
                  batch_size=2)  # a path that is not there is the config's mistake (issue 35): exit 2 at run


def test_the_options_are_the_dataloaders_and_the_models_each_declared_once():
    names = [option.name for option in pipeline.OPTIONS]
    assert len(names) == len(set(names))
    loader = {o.name for o in loading_options.OPTIONS}  # the dataloader's, less its emulation and pools
    assert loader < {o.name for o in dataloader.OPTIONS}
    assert set(names) == loader | {o.name for o in model.OPTIONS}
    shared = {o.name: o for o in pipeline.OPTIONS}
    assert shared["batch_size"].default == 64 and "training step's batch" in shared["batch_size"].help


def test_a_bad_model_in_a_pipeline_is_a_config_error_at_validate(src):
    path = write_config(src.parent, 'version: 1\nchecks:\n  pipeline:\n    synthetic: true\n'
                                    '    model: "jobpkg.wide:not_a_model"\n    python_path: [src]\n')
    completed = run_cli("validate", str(path))
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
    assert completed.stderr == (f"preflight: error: {path}:5:12: pipeline.model: jobpkg.wide:not_a_model"
                                f"(**model_args) returned builtins.int, not a torch.nn.Module: name the factory that "
                                f"returns the job's model\n")


def test_batches_prefetched_while_the_model_ran_alone_are_not_counted_as_fed(files):
    # one worker sleeping DELAY_S per sample makes at most 1 / DELAY_S samples/s; between fed windows it fills its
    # prefetch queue (2 batches) while the model runs alone, and a fed window that counted those would beat that
    results = run_check("pipeline", 0.5, path=str(files), sample_delay=f"{DELAY_S * 1e3:g}ms", num_workers=1,
                        prefetch_factor=2, batch_size=2, model="tiny", input_shape=[3, 32, 32], num_classes=10)
    fed = results["samples_per_s[cpu]"]
    # A sleep only ever overshoots, so load lowers the worker's rate, never raises it; but a fed window of one step
    # opens on a batch the worker began during the model's step before it, so it lasts 2 x DELAY_S less that step
    # (10.1/s seen, more when load slows the model). Counting the two prefetched batches reads 4 samples in a 0.1 s
    # window, 40/s: the bounds keep a wide margin below that.
    assert 0.2 / DELAY_S < fed.value <= 1.25 / DELAY_S, fed
    assert max(fed.samples) <= 2 / DELAY_S, fed.samples


def test_a_fed_window_finds_no_batches_the_workers_made_during_untimed_steps(src):
    # kenshohara/3D-ResNets-PyTorch#252, mozilla/TTS#407: with N workers, a round of N batches arrives together, then
    # the loop waits; a window that opens on batches made ahead of it counts them without their wait. Two workers
    # make a batch of 4 in 4 x 25 ms: 80 samples/s at most (a sleep only overshoots), under a step of 30 ms (133/s).
    # Settling by training on the 8 prefetched batches took 8 steps, in which the workers made the window's first
    # batches ahead of it: 100-110 samples/s here (windows of 0.2 s), where a training loop gets 80.
    results = run_check("pipeline", 2.0, dataset="jobpkg.slow:volume", dataset_args={"latency_s": 0.025},
                        python_path=str(src), num_workers=2, prefetch_factor=4, batch_size=4,
                        model="jobpkg.slow:model", model_args={"step_s": 0.03}, input_shape=[3, 8, 8], num_classes=10)
    fed, alone, bound = (results[f"{name}[cpu]"] for name in ("samples_per_s", "model_samples_per_s", "input_bound"))
    assert 20 < fed.value <= 1.2 * 80, fed  # 75-80 seen
    assert alone.value <= 4 / 0.03 and alone.value > fed.value
    assert bound.value > 15, bound  # the step waits 40 of each 100 ms for the next round of batches


def test_gpus_torch_counts_but_cannot_open_are_not_stood_in_for_by_the_cpu(monkeypatch, tmp_path):
    from tests.host.test_gpu import MIG_ASSERT, a_cuda_build_that_counts_gpus_it_cannot_open

    a_cuda_build_that_counts_gpus_it_cannot_open(monkeypatch, RuntimeError(MIG_ASSERT))
    results = run_check("pipeline", 0.3, path=str(tmp_path), model="tiny", input_shape=[3, 16, 16], batch_size=2)
    assert sorted(results) == ["input_bound", "model_samples_per_s", "samples_per_s"]
    assert all(m.value is None and "set CUDA_VISIBLE_DEVICES to one MIG UUID" in m.reason for m in results.values())
