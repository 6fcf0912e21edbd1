"""The model check on the CPU: the job's own model through python_path, bf16 autocast, channels_last, bad factories.

The job's package (``jobpkg.net``) is written under ``tmp_path/src``. Its models record what
their forward saw (the autocast dtype, the memory format) in a file named by ``model_args``,
so the tests prove the option reached the step, not only that a number came back. The CUDA
paths (events, GradScaler, bf16 support) run for real in scripts/gpu-smoke.sh.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import numpy
import pytest
import torch

from preflight.checks.base import Budget
from preflight.training import build
from preflight.checks.model import measuring
from preflight.training import timed
from preflight.training import step as step_module
from tests.helpers import job_package, run_check, run_cli, write_config

SLEEP_S = 0.008  # the sleeping model's forward: a step takes at least this long
PACKAGE = '''
import time

import torch
from torch import nn


class Net(nn.Module):
    """A few conv and linear layers; writes its first forward's dtype and memory format to ``record``."""

    def __init__(self, record="", width=8, num_classes=10, sleep_s=0.0):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.Conv2d(width, width, 3, stride=2))
        self.head = nn.Linear(width, num_classes)
        self.record, self.sleep_s = record, sleep_s

    def forward(self, x):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        features = self.conv(x)
        if self.record:
            with open(self.record, "w") as out:
                out.write(f"{{features.dtype}} channels_last={{x.is_contiguous(memory_format=torch.channels_last)}}")
            self.record = ""
        return self.head(features.mean((2, 3)))


def make(**kwargs):
    return Net(**kwargs)


def not_a_model():
    return "a string"


def broken():
    return {{}}["missing"]
'''.format()


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return job_package(tmp_path / "src", "jobpkg", {"net": PACKAGE})


def _job(src: Path, duration_s: float = 0.6, **options):
    defaults = {"model": "jobpkg.net:make", "python_path": str(src), "input_shape": [3, 16, 16], "batch_size": 8,
                "num_classes": 10}
    return run_check("model", duration_s, **{**defaults, **options})


def test_the_jobs_model_is_trained_on_the_cpu_and_its_rate_agrees_with_its_step_time(src):
    results = _job(src, model_args={"sleep_s": SLEEP_S})
    rate, p50, p99 = (results[f"{name}[cpu]"] for name in ("samples_per_s", "step_time_p50", "step_time_p99"))
    # Each step sleeps SLEEP_S in forward, then a tiny backward and SGD step: never less than the sleep. The
    # ceiling only has to catch a wrong unit (s, us) or a window timed as one step; a busy machine stretches
    # the few ms on top of the sleep, so it is not a tight bound.
    assert SLEEP_S * 1e3 <= p50.value < SLEEP_S * 1e3 * 4 + 20, p50
    assert p99.value >= p50.value and p50.unit == p99.unit == "ms"
    # samples/s is batch / step time: 8 / p50, not 1 / p50 (steps counted as samples), within the spread of a
    # shared machine (the rate is the windows' mean, p50 a median)
    assert 0.4 * 8 / (p50.value / 1e3) < rate.value < 2.5 * 8 / (p50.value / 1e3), (rate, p50)
    assert rate.unit == "samples/s" and rate.stats.n >= 3
    assert "measured on the CPU: no CUDA device" in rate.note
    assert rate.method.startswith("jobpkg.net:make fp32, batch 8 x 3x16x16 synthetic on cpu, SGD step")
    assert "host clock (CPU)" in rate.method


class _Stepper:
    """A step of ``first_s`` for the first ``slow`` calls, then ``then_s``, on a fake host clock: a known warm-up,
    timed exactly however busy the machine is."""

    def __init__(self, slow: int, first_s: float, then_s: float) -> None:
        self.calls, self.slow, self.first_s, self.then_s = 0, slow, first_s, then_s
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def __call__(self) -> int:
        self.calls += 1
        self.now += self.first_s if self.calls <= self.slow else self.then_s
        return 10


def test_warm_up_steps_are_discarded_and_the_rate_is_samples_over_step_time(monkeypatch):
    step = _Stepper(slow=timed.WARMUP_STEPS, first_s=0.1, then_s=0.004)
    monkeypatch.setattr(step_module, "time", step)  # window() and HostTimeline read step.perf_counter
    windows, stopped = timed.timed(step, "cpu", Budget(0.5, 60))
    rows = {m.metric: m for m in measuring.step_rows(windows, stopped, "cpu", "fake")}
    # the three 100 ms warm-up steps are in no window: every timed step is one of 4 ms
    assert rows["step_time_p99"].value == rows["step_time_p50"].value == pytest.approx(4.0)
    assert rows["samples_per_s"].value == pytest.approx(10 / 0.004)  # 10 samples per 4 ms step
    assert len(windows) >= 5 and all(w.samples_per_s == pytest.approx(2500) for w in windows), stopped


def test_percentiles_interpolate_between_ranks_as_numpy_does():
    values = list(numpy.random.default_rng(7).exponential(5.0, 301))
    for q in (50, 99):
        assert measuring.percentile(values, q) == pytest.approx(numpy.percentile(values, q))
    assert measuring.percentile(list(range(1, 101)), 99) == pytest.approx(99.01)


@pytest.mark.parametrize("precision, dtype", [("fp32", "torch.float32"), ("bf16", "torch.bfloat16")])
def test_precision_runs_the_step_under_cpu_autocast(src, tmp_path, precision, dtype):
    record = tmp_path / "seen.txt"
    results = _job(src, 0.3, precision=precision, model_args={"record": str(record)})
    assert results["samples_per_s[cpu]"].value > 0
    assert record.read_text() == f"{dtype} channels_last=False"
    assert f"jobpkg.net:make {precision}," in results["samples_per_s[cpu]"].method


def test_channels_last_puts_the_input_in_nhwc(src, tmp_path):
    record = tmp_path / "seen.txt"
    results = _job(src, 0.3, channels_last=True, model_args={"record": str(record)})
    assert results["step_time_p50[cpu]"].value > 0
    assert record.read_text() == "torch.float32 channels_last=True"
    assert ", channels_last," in results["samples_per_s[cpu]"].method


def test_channels_last_on_a_flat_input_is_unmeasurable_with_the_fix(src):
    results = _job(src, 0.3, channels_last=True, input_shape=[64])
    assert results["samples_per_s[cpu]"].value is None
    assert results["samples_per_s[cpu]"].reason.startswith("channels_last needs an image input_shape (C, H, W)")


def test_the_built_in_tiny_model_runs_without_torchvision():
    results = run_check("model", 0.3, model="tiny", input_shape=[3, 32, 32], batch_size=4)
    assert results["samples_per_s[cpu]"].value > 0
    assert results["samples_per_s[cpu]"].method.startswith("tiny fp32, batch 4 x 3x32x32")


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed here")
def test_resnet50_without_torchvision_is_unmeasurable_and_names_the_fix():
    results = run_check("model", 0.3, model="resnet50")
    assert {m.value for m in results.values()} == {None}
    assert results["samples_per_s[cpu]"].reason.startswith("model: resnet50 needs torchvision (No module named")
    assert results["step_time_p99[cpu]"].reason.endswith(build.vision_fix(torch.__version__))


@pytest.mark.parametrize("version, line", [
    ("2.13.0+cpu", "pip install --no-deps 'torchvision==0.28.*' pillow (built for torch 2.13.0+cpu; --no-deps keeps "
                   "this torch)"),
    ("2.9.1+cu126", "pip install --no-deps 'torchvision==0.24.*' pillow (built for torch 2.9.1+cu126; --no-deps "
                    "keeps this torch)"),
    ("2.0.1", "pip install --no-deps 'torchvision==0.15.*' pillow (built for torch 2.0.1; --no-deps keeps this torch)"),
    ("3.0.0", "pip install --no-deps torchvision==<the release built for it> pillow (built for torch 3.0.0; "
              "--no-deps keeps this torch)"),
])
def test_the_torchvision_fix_names_the_release_built_for_this_torch_and_never_replaces_it(version, line):
    assert build.vision_fix(version) == line


def test_resnet18_from_torchvision_trains_a_step():
    pytest.importorskip("torchvision")
    results = run_check("model", 0.5, model="resnet18", input_shape=[3, 64, 64], batch_size=2, num_classes=10)
    assert results["samples_per_s[cpu]"].value > 0
    assert results["step_time_p50[cpu]"].value > 0


@pytest.mark.parametrize("body, message", [
    ('model: "jobpkg.net:make"', "model.model: cannot import jobpkg.net:make: no module named 'jobpkg' on "
                                 "python_path, in this Python's packages or in the working directory: add the "
                                 "directory that holds `jobpkg` to python_path"),
    ('model: "jobpkg.net:not_a_model"\n    python_path: [src]',
     "model.model: jobpkg.net:not_a_model(**model_args) returned builtins.str, not a torch.nn.Module: name the "
     "factory that returns the job's model"),
    ('model: "jobpkg.net:broken"\n    python_path: [src]',
     "model.model: jobpkg.net:broken(**model_args) raised KeyError: 'missing' (at jobpkg/net.py:"),
])
def test_a_bad_model_is_a_one_line_error_at_validate(src, body, message):
    path = write_config(src.parent, f"version: 1\nchecks:\n  model:\n    {body}\n")
    completed = run_cli("validate", str(path), cwd=src.parent.parent)
    assert completed.returncode == 2 and completed.stdout == "", completed.stderr
    assert completed.stderr.startswith(f"preflight: error: {path}:4:12: {message}"), completed.stderr
    assert len(completed.stderr.splitlines()) == 1 and "Traceback" not in completed.stderr


def test_a_good_factory_and_a_built_in_name_validate(src):
    path = write_config(src.parent, 'version: 1\nchecks:\n  model:\n    model: "jobpkg.net:make"\n'
                                    '    python_path: [src]\n    model_args: {width: 4}\n'
                                    '  resnet:\n    check: model\n    input_shape: [3, 96, 96]\n')
    completed = run_cli("validate", str(path))
    assert completed.returncode == 0, completed.stderr


@pytest.mark.parametrize("value", ["[3, 0, 224]", "[3, 224.5]", "224", "[]", "'3 x 224'"])
def test_a_bad_input_shape_is_a_config_error(tmp_path, value):
    path = write_config(tmp_path, f"version: 1\nchecks:\n  model:\n    input_shape: {value}\n")
    completed = run_cli("validate", str(path))
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"preflight: error: {path}:4:18: `model.input_shape`: expected a shape, a "
                                       f"list of positive whole numbers like [3, 224, 224], found "), completed.stderr


def test_a_run_through_the_cli_judges_the_model_per_device(tmp_path):
    path = write_config(tmp_path, "version: 1\ndefaults: {duration: 0.5s}\nchecks:\n  model:\n    model: tiny\n"
                                  "    input_shape: [3, 32, 32]\n    batch_size: 4\n"
                                  "    samples_per_s: {min: 1 samples/s}\n    step_time_p99: {max: 10 s}\n")
    completed = run_cli("run", "-c", str(path), "--format", "json")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    results = {r["id"]: r for r in json.loads(completed.stdout)["results"]}
    assert set(results) == {"model.samples_per_s[cpu]", "model.step_time_p50[cpu]", "model.step_time_p99[cpu]"}
    assert results["model.samples_per_s[cpu]"]["verdict"] == "pass" and results["model.samples_per_s[cpu]"]["value"] > 1


@pytest.mark.parametrize("major, reason", [
    (7, "cuda:0 has no bf16 Tensor Cores (bf16 needs compute capability 8.0, Ampere, or newer): use fp16"),
    (8, ""),
], ids=["volta-emulated", "ampere"])
def test_bf16_counts_only_when_the_gpu_has_it_not_when_torch_can_emulate_it(monkeypatch, major, reason):
    # torch 2.13's own is_bf16_supported over a faked device: compute capability `major`, on which a bf16 tensor
    # can be created (as on a V100), the probe behind its default including_emulation=True
    from types import SimpleNamespace

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(major=major, minor=0))
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)
    monkeypatch.setattr(torch.cuda, "_exchange_device", lambda index: 0)  # torch.cuda.device(0), on no real device
    monkeypatch.setattr(torch.cuda, "_maybe_exchange_device", lambda index: 0)
    assert torch.cuda.is_bf16_supported() is True  # what the default answers, emulation counted
    options = {"channels_last": False, "input_shape": [3, 32, 32], "precision": "bf16"}
    assert timed.unsupported(options, "cuda:0") == reason


def test_gpus_torch_counts_but_cannot_open_are_not_stood_in_for_by_the_cpu(monkeypatch):
    # pytorch/pytorch#131650 (MIG on, CUDA_VISIBLE_DEVICES unset): torch counts 2 GPUs and cannot open them; the
    # model must not be trained on the CPU and judged as if that were the node's rate
    from tests.host.test_gpu import MIG_ASSERT, a_cuda_build_that_counts_gpus_it_cannot_open

    a_cuda_build_that_counts_gpus_it_cannot_open(monkeypatch, RuntimeError(MIG_ASSERT))
    results = run_check("model", 0.3, model="tiny", input_shape=[3, 32, 32], batch_size=4)
    assert sorted(results) == ["samples_per_s", "step_time_p50", "step_time_p99"]
    assert all(m.value is None and m.reason.startswith("torch counts 2 GPUs but CUDA could not open cuda:0")
               for m in results.values())
