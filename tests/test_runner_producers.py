"""Checks that read other checks: ``dataloader.samples_per_gpu: measured`` takes the ``model`` instance's figure.

The runner runs the producer first whatever the file's order, fills the consumer's option with the
producer's judged figure (or why there is none), and reports in config order. Config refuses a
producer that is missing or of another check, at the option's line.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from preflight import config, runner
from preflight.errors import ConfigError
from preflight.measurement import Measurement
from preflight.verdict import Outcome, Result
from tests import datasets
from tests.helpers import run_cli, write_config

CONSUMER_FIRST = """
version: 1
defaults: {duration: 0.5s}
checks:
  dataloader:
    synthetic: true
    num_workers: 0
    batch_size: 8
    gpus: 2
    samples_per_gpu: measured
    throughput_vs_required: {min: 0.001 %}
  shm: {}
  model:
    model: tiny
    input_shape: [3, 32, 32]
    batch_size: 8
"""


def _loaded(tmp_path, text: str) -> config.Config:
    return config.load(str(write_config(tmp_path, text)), environ={})


def test_the_producer_runs_first_and_the_rest_keep_their_order(tmp_path):
    instances = _loaded(tmp_path, CONSUMER_FIRST).instances
    assert [i.name for i in runner.ordered(instances)] == ["model", "dataloader", "shm"]
    assert instances[0].options["samples_per_gpu"] == {"from": "model", "metric": "samples_per_s"}


def _rate(value: float | None, device: str = "cuda:0") -> Measurement:
    return Measurement("samples_per_s", value, "samples/s", device, reason="" if value else "no GPU for bf16")


def _failed(device: str) -> Result:
    return Result("model", "model", "samples_per_s", "fail", "measured 90, required >= 100", device=device, value=90.0)


@pytest.mark.parametrize("done, expected", [
    ({"model": ([], Outcome((_rate(700.0), _rate(812.5, "cuda:1"), Measurement("step_time_p50", 3.0, "ms"))))},
     {"value": 812.5, "source": "model.samples_per_s, fastest of 2 devices"}),
    ({}, {"reason": "the `model` instance did not run (left out with --only?): run both"}),
    ({"model": ([], Outcome(error="timed out after 120s"))},
     {"reason": "the `model` instance errored: timed out after 120s"}),
    ({"model": ([_failed("cuda:1")], Outcome((_rate(700.0), _rate(90.0, "cuda:1"))))},
     {"reason": "`model.samples_per_s[cuda:1]` failed: measured 90, required >= 100"}),
    ({"model": ([], Outcome((_rate(700.0), _rate(None, "cuda:1"))))},
     {"reason": "`model.samples_per_s[cuda:1]` was not measured: no GPU for bf16"}),
])
def test_the_consumer_gets_the_fastest_devices_figure_or_why_there_is_none(tmp_path, done, expected):
    consumer = _loaded(tmp_path, CONSUMER_FIRST).instances[0]
    resolved = runner.resolve(consumer, done)
    assert resolved.options["samples_per_gpu"] == {"from": "model", "metric": "samples_per_s", **expected}
    assert consumer.options["samples_per_gpu"] == {"from": "model", "metric": "samples_per_s"}  # not mutated


def test_the_required_rate_is_the_models_figure_from_the_same_run(tmp_path):
    # On a dataset: synthetic samples cannot pass a dataset threshold (issue 21), and the share is one.
    data = datasets.imagenet(tmp_path / "train", classes=2, per_class=50)
    path = write_config(tmp_path, CONSUMER_FIRST.replace("synthetic: true", f"path: {data}"))
    completed = run_cli("run", "-c", str(path), "--format", "json")
    results = json.loads(completed.stdout)["results"]
    assert [r["instance"] for r in results][:2] == ["dataloader", "dataloader"]  # config order, though model ran first
    by_id = {r["id"]: r for r in results}
    share, throughput = by_id["dataloader.throughput_vs_required"], by_id["dataloader.throughput"]
    model_rate = by_id["model.samples_per_s[cpu]"]["value"]
    # throughput / (the model's samples/s per GPU x 2 GPUs), in %
    assert share["value"] == pytest.approx(100 * throughput["value"] / (2 * model_rate), rel=1e-6)
    assert "/GPU (model.samples_per_s, fastest of 1 device) x 2 GPUs = " in share["message"]
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed here")
def test_a_producer_that_cannot_measure_fails_its_consumer_with_the_reason(tmp_path):
    path = write_config(tmp_path, CONSUMER_FIRST.replace("model: tiny", "model: resnet50"))
    completed = run_cli("run", "-c", str(path), "--format", "json", "--only", "dataloader,model")
    by_id = {r["id"]: r for r in json.loads(completed.stdout)["results"]}
    share = by_id["dataloader.throughput_vs_required"]
    assert share["verdict"] == "fail" and share["value"] is None
    assert "samples_per_gpu: model.samples_per_s is not available: `model.samples_per_s[cpu]` was not measured: " \
        "model: resnet50 needs torchvision" in share["message"]
    assert "needs torchvision" in share["message"]
    assert completed.returncode == 1


@pytest.mark.parametrize("body, fragment", [
    ("dataloader:\n    samples_per_gpu: measured",
     "6:22: `dataloader.samples_per_gpu` reads samples_per_s from a `model` instance, but {path} has no instance "
     "named `model`: add `model:` under checks"),
    ("dataloader:\n    samples_per_gpu: {from: shm}",
     "6:22: `dataloader.samples_per_gpu` reads samples_per_s from a `model` instance, but `shm` is a `shm` instance"),
    ("dataloader:\n    samples_per_gpu: fast",
     "6:22: `dataloader.samples_per_gpu`: expected a sample rate like `1000 samples/s`, found 'fast', or `measured` "
     "(the `model` instance's figure)"),
])
def test_a_producer_that_is_not_there_is_a_config_error_at_the_option(tmp_path, body, fragment):
    path = write_config(tmp_path, f"version: 1\nchecks:\n  shm: {{}}\n  model_bf16: {{check: model}}\n  {body}\n")
    with pytest.raises(ConfigError) as raised:
        config.load(str(path), environ={})
    assert str(raised.value).startswith(f"{path}:" + fragment.format(path=path)), str(raised.value)


def test_a_named_producer_validates(tmp_path):
    path = write_config(tmp_path, "version: 1\nchecks:\n  model_bf16: {check: model, precision: bf16}\n"
                                  "  dataloader:\n    samples_per_gpu: {from: model_bf16}\n")
    loaded = config.load(str(path), environ={})
    assert runner.producers(loaded.instances[1]) == ["model_bf16"]
