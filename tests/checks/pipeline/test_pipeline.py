"""The pipeline check on the CPU: input_bound rises toward 100 % behind a throttled loader and stays low when it keeps up.

The loader's rate is fixed by ``sample_delay`` (each file read sleeps that long, one process),
so the end-to-end figure is known; the model's own figure is measured in the same run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.checks import dataloader, model, pipeline
from preflight.checks.model.step import Window
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


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return job_package(tmp_path / "src", "jobpkg", {"wide": WIDE})


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


def _pair(alone: float, fed: float) -> tuple[Window, Window]:
    return Window(alone, (1.0,)), Window(fed, (1.0,))


def test_input_bound_is_the_median_share_of_step_time_lost_per_pair_of_windows():
    pairs = [_pair(100, 25), _pair(200, 40), _pair(50, 20), _pair(100, 110), _pair(80, 40)]
    fed = Measurement("samples_per_s", samples=tuple(p[1].samples_per_s for p in pairs), unit="samples/s",
                      device="cuda:0")
    bound = input_bound(pairs, fed)
    # per pair: 75, 80, 60, 0 (faster than the model alone is noise, never negative), 50
    assert sorted(bound.samples) == [0.0, 50.0, 60.0, 75.0, 80.0]
    assert bound.value == 60.0 and bound.unit == "%" and bound.device == "cuda:0"
    assert "median of 5 pairs (medians: 40 samples/s / 100 samples/s)" in bound.method


def test_a_loader_with_nothing_to_read_still_measures_the_model(tmp_path):
    results = run_check("pipeline", 0.3, path=str(tmp_path / "absent"), model="tiny", input_shape=[3, 16, 16],
                        batch_size=2)
    assert results["model_samples_per_s[cpu]"].value > 0
    for name in ("samples_per_s[cpu]", "input_bound[cpu]"):
        assert results[name].value is None
        assert results[name].reason == f"{tmp_path / 'absent'} does not exist: mount the dataset or set pipeline.path"


def test_the_options_are_the_dataloaders_and_the_models_each_declared_once():
    names = [option.name for option in pipeline.OPTIONS]
    assert len(names) == len(set(names))
    loader = {o.name for o in dataloader.OPTIONS} - set(pipeline.LOADER_ONLY)
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


def test_gpus_torch_counts_but_cannot_open_are_not_stood_in_for_by_the_cpu(monkeypatch, tmp_path):
    from tests.host.test_gpu import MIG_ASSERT, a_cuda_build_that_counts_gpus_it_cannot_open

    a_cuda_build_that_counts_gpus_it_cannot_open(monkeypatch, RuntimeError(MIG_ASSERT))
    results = run_check("pipeline", 0.3, path=str(tmp_path), model="tiny", input_shape=[3, 16, 16], batch_size=2)
    assert sorted(results) == ["input_bound", "model_samples_per_s", "samples_per_s"]
    assert all(m.value is None and "set CUDA_VISIBLE_DEVICES to one MIG UUID" in m.reason for m in results.values())
