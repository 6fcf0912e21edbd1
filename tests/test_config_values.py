"""config.load's known right values: each mistake's whole one-line message at its FILE:LINE:COL, and every bound
exactly at its edge (repeats 1..20, retries 0..5, retry_margin up to 100%, median_ratio strictly between 0 and 1).

Locations are counted by hand in the texts below; the messages are what a user reads, so they are pinned whole.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from preflight import config
from preflight.errors import ConfigError, UsageError
from tests.helpers import write_config


def load(tmp_path, text, overrides=(), environ=None):
    return config.load(str(write_config(tmp_path, text)), overrides, environ or {})


def message_of(tmp_path, text, overrides=()):
    """The error's message with the file's path written as ``F``."""
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, text, overrides)
    return str(raised.value).replace(str(tmp_path / "thresholds.yaml"), "F")


def instance(tmp_path, body, check="shm", head=""):
    return load(tmp_path, f"version: 1\n{head}checks:\n  {check}: {body}\n").instances[0]


@pytest.mark.parametrize("text, message", [
    ("- 1\n", "F:1:1: the top level must be a mapping of keys to values, found [Located(value=1, where='F:1:3', "
              "raw='1', key_where=None)]"),
    ("checks: {shm: {}}\n", "F:1:1: expected `version: 1` at the top level"),
    ("version: true\nchecks: {shm: {}}\n", "F:1:10: expected `version: 1` at the top level"),
    ("version: 1\n", "F:1:1: missing `checks:`: list the checks to run (see `preflight list`)"),
    ("version: 1\nchecks: {}\n", "F:2:9: `checks:` is empty: add at least one check (see `preflight list`)"),
    ("version: 1\nchecks:\n", "F:2:8: checks must be a mapping of keys to values, found None"),
    ("version: 1\ndefaults: 3\nchecks: {shm: {}}\n", "F:2:11: defaults must be a mapping of keys to values, found 3"),
    ("version: 1\nfleet: 3\nchecks: {shm: {}}\n", "F:2:8: fleet must be a mapping of keys to values, found 3"),
    ("version: 1\nchecks:\n  shm: 3\n", "F:3:8: check `shm` must be a mapping of keys to values, found 3"),
    ("version: 1\nchecks:\n  x: {check: 5}\n", "F:3:14: expected text, found 5"),
    ("version: 1\nchecks:\n  qqqq: {}\n",
     "F:3:3: unknown check `qqqq`: add `check: <name>` to make `qqqq` an instance of a known check"),
    ("version: 1\nchecks:\n  x: {check: qqqq}\n",
     "F:3:14: unknown check `qqqq`: add `check: <name>` to make `x` an instance of a known check"),
    ("version: 1\nchecks:\n  x: {check: storag}\n", "F:3:14: unknown check `storag`: did you mean `storage`? Or add "
                                                   "`check: <name>` to make `x` an instance of a known check"),
    ("version: 1\nchecks:\n  shm: {timeout: 5}\n",
     "F:3:18: `shm.timeout`: expected a duration with its unit like `30s`, found bare number 5"),
    ("version: 1\ndefaults: {timeout: 5}\nchecks:\n  shm: {}\n",
     "F:2:21: `defaults.timeout`: expected a duration with its unit like `30s`, found bare number 5"),
    ("version: 1\nchecks:\n  shm: {duration: -1s}\n", "F:3:19: `shm.duration`: must not be negative, found '-1s'"),
    ("version: 1\nchecks:\n  shm: {required: 1}\n", "F:3:19: `required` must be true or false"),
    ("version: 1\nchecks:\n  shm: {timeout: 0s}\n", "F:3:8: `shm`: timeout and duration must be positive"),
    ("version: 1\nchecks:\n  shm: {duration: 0s}\n", "F:3:8: `shm`: timeout and duration must be positive"),
    ("version: 1\nchecks:\n  shm: {retry_margin: 101%}\n", "F:3:23: `shm.retry_margin` must be at most 100%, found 101%"),
    ("version: 1\ndefaults: {retry_margin: 100.5%}\nchecks:\n  shm: {}\n",
     "F:2:26: `shm.retry_margin` must be at most 100%, found 100.5%"),
    ("version: 1\ndefaults: {severity: block}\nchecks:\n  shm: {}\n", "F:2:22: severity must be `fail` or `warn`, "
                                                                    "found 'block'"),
    ("version: 1\ndefaults: {repeats: 0}\nchecks:\n  shm: {}\n",
     "F:2:21: `shm.repeats` must be a whole number from 1 to 20, found 0"),
    ("version: 1\nchecks:\n  shm: {reqired: true}\n", "F:3:9: unknown key `reqired`: did you mean `required`?"),
    ("version: 1\nchecks:\n  shm: {zzz: 1}\n", "F:3:9: unknown key `zzz`"),
])
def test_instance_mistakes_are_one_exact_located_line(tmp_path, text, message):
    assert message_of(tmp_path, text) == message


@pytest.mark.parametrize("key, value, message", [
    ("repeats", "0", "`shm.repeats` must be a whole number from 1 to 20, found 0"),
    ("repeats", "21", "`shm.repeats` must be a whole number from 1 to 20, found 21"),
    ("repeats", "true", "`shm.repeats` must be a whole number from 1 to 20, found True"),
    ("repeats", "2.0", "`shm.repeats` must be a whole number from 1 to 20, found 2.0"),
    ("retries", "6", "`shm.retries` must be a whole number from 0 to 5, found 6"),
    ("retries", "-1", "`shm.retries` must be a whole number from 0 to 5, found -1"),
])
def test_repeats_and_retries_outside_their_range_are_refused(tmp_path, key, value, message):
    assert message_of(tmp_path, f"version: 1\nchecks:\n  shm: {{{key}: {value}}}\n") == f"F:3:{11 + len(key)}: {message}"


def test_repeats_retries_and_margin_at_their_bounds_are_taken(tmp_path):
    low = instance(tmp_path, "{repeats: 1, retries: 0, retry_margin: 0%}")
    assert (low.repeats, low.retries, low.retry_margin) == (1, 0, 0.0)
    high = instance(tmp_path, "{repeats: 20, retries: 5, retry_margin: 100%}")
    assert (high.repeats, high.retries, high.retry_margin) == (20, 5, 1.0)


def test_instance_defaults_and_the_defaults_section(tmp_path):
    shm = instance(tmp_path, "{}")
    assert (shm.timeout_s, shm.duration_s, shm.required, shm.repeats, shm.retries, shm.retry_margin) == (
        120.0, 5.0, True, 1, 0, 0.10)
    assert shm.where.endswith("thresholds.yaml:3:8") and shm.option_where == {}
    given = instance(tmp_path, "{required: false, path: /x}",
                     head="defaults: {timeout: 2min, duration: 250ms, repeats: 3, retries: 2, retry_margin: 25%}\n")
    assert (given.timeout_s, given.duration_s, given.required, given.repeats, given.retries, given.retry_margin) == (
        120.0, 0.25, False, 3, 2, 0.25)
    assert given.option_where == {"path": str(tmp_path / "thresholds.yaml") + ":4:32"}
    assert instance(tmp_path, "").name == "shm"  # `shm:` with nothing: the check with its defaults


def test_a_default_severity_applies_to_thresholds_without_their_own(tmp_path):
    shm = instance(tmp_path, "{severity: warn, size: {min: 2048 MiB}}")
    assert [(t.metric, t.min, t.max, t.severity) for t in shm.thresholds] == [("size", 2.0, None, "warn")]
    shm = instance(tmp_path, "{size: {max: 512 MiB, severity: warn}}", head="defaults: {severity: fail}\n")
    assert [(t.min, t.max, t.severity) for t in shm.thresholds] == [(None, 0.5, "warn")]
    shm = instance(tmp_path, "{size: {max: 512 MiB}}", head="defaults: {severity: warn}\n")
    assert [t.severity for t in shm.thresholds] == ["warn"]


@pytest.mark.parametrize("fleet, message", [
    ("{timeout: 0s}", "F:2:18: `fleet.timeout` must be positive, like `300s`"),
    ("{backend: glo}", "F:2:18: `fleet.backend` must be one of auto, nccl, gloo, found 'glo': did you mean `gloo`?"),
    ("{backend: mpi}", "F:2:18: `fleet.backend` must be one of auto, nccl, gloo, found 'mpi'"),
    ("{median_ratio: 0}", "F:2:23: `fleet.median_ratio` must be a number between 0 and 1, like 0.5 (flag nodes below "
                          "half the fleet median), found 0"),
    ("{median_ratio: 1}", "F:2:23: `fleet.median_ratio` must be a number between 0 and 1, like 0.5 (flag nodes below "
                          "half the fleet median), found 1"),
    ("{median_ratio: true}", "F:2:23: `fleet.median_ratio` must be a number between 0 and 1, like 0.5 (flag nodes "
                             "below half the fleet median), found True"),
    ("{median_ratio: x}", "F:2:23: `fleet.median_ratio` must be a number between 0 and 1, like 0.5 (flag nodes below "
                          "half the fleet median), found 'x'"),
    ("{severity: x}", "F:2:19: severity must be `fail` or `warn`, found 'x'"),
])
def test_fleet_mistakes_are_one_exact_located_line(tmp_path, fleet, message):
    assert message_of(tmp_path, f"version: 1\nfleet: {fleet}\nchecks: {{shm: {{}}}}\n") == message


def test_fleet_values_just_inside_their_bounds_are_taken(tmp_path):
    text = "version: 1\nfleet: {timeout: 1ms, median_ratio: 0.99, backend: nccl}\nchecks: {shm: {}}\n"
    assert load(tmp_path, text).fleet == config.FleetSettings(0.001, "nccl", 0.99, "fail")
    text = "version: 1\nfleet: {median_ratio: 0.01}\nchecks: {shm: {}}\n"
    assert load(tmp_path, text).fleet == config.FleetSettings(300.0, "auto", 0.01, "fail")


@pytest.mark.parametrize("body, message", [
    ("{synthetic: 1}", "F:3:27: `dataloader.synthetic`: expected true or false, found 1"),
    ("{num_workers: x}", "F:3:29: `dataloader.num_workers`: expected a whole number or `auto`, found 'x'"),
    ("{batch_size: x}", "F:3:28: `dataloader.batch_size`: expected a whole number, found 'x'"),
    ("{batch_size: true}", "F:3:28: `dataloader.batch_size`: expected a whole number, found True"),
    ("{batch_size: 0}", "F:3:28: `dataloader.batch_size` must be at least 1, found 0"),
    ("{format: tra}", "F:3:24: `dataloader.format`: expected one of files, tar, found 'tra': did you mean `tar`?"),
    ("{format: zip}", "F:3:24: `dataloader.format`: expected one of files, tar, found 'zip'"),
    ("{include: null}", "F:3:25: `dataloader.include`: expected text, found None"),
    ("{include: true}", "F:3:25: `dataloader.include`: expected text, found True"),
    ("{include: {a: 1}}", "F:3:25: `dataloader.include`: expected text, found {'a': Located(value=1, where='F:3:29', "
                          "raw='1', key_where='F:3:26')}"),
    ("{samples_per_gpu: x}", "F:3:33: `dataloader.samples_per_gpu`: expected a sample rate like `1000 samples/s`, "
                             "found 'x', or `measured` (the `model` instance's figure)"),
    ("{samples_per_gpu: {from: 1}}", "F:3:33: `dataloader.samples_per_gpu`: expected `measured`, "
                                     "`{from: <model instance>}` or a quantity like `0 samples/s`"),
    ("{samples_per_gpu: {from: ''}}", "F:3:33: `dataloader.samples_per_gpu`: expected `measured`, "
                                      "`{from: <model instance>}` or a quantity like `0 samples/s`"),
    ("{samples_per_gpu: {}}", "F:3:33: `dataloader.samples_per_gpu`: expected `measured`, "
                              "`{from: <model instance>}` or a quantity like `0 samples/s`"),
    ("{samples_per_gpu: {form: m}}", "F:3:34: unknown key `form`: did you mean `from`?"),
    ("{samples_per_gpu: measured}", "F:3:33: `dataloader.samples_per_gpu` reads samples_per_s from a `model` "
                                    "instance, but F has no instance named `model`: add `model:` under checks, or "
                                    "name one with `samples_per_gpu: {from: <instance>}`"),
    ("{samples_per_gpu: {from: dataloader}}", "F:3:33: `dataloader.samples_per_gpu` reads samples_per_s from a "
                                              "`model` instance, but `dataloader` is a `dataloader` instance: add "
                                              "`model:` under checks, or name one with `samples_per_gpu: "
                                              "{from: <instance>}`"),
    ("{synthetic: true, path: /x}", "F:3:39: `dataloader.path` has no effect while `dataloader.synthetic` is set "
                                    "(F:3:27): remove `path`, or remove `synthetic` to use it"),
    ("{dataset: a.b:c, include: '*.jpg'}", "F:3:41: `dataloader.include` has no effect while `dataloader.dataset` is "
                                           "set (F:3:25): remove `include`, or remove `dataset` to use it"),
])
def test_option_mistakes_are_one_exact_located_line(tmp_path, body, message):
    assert message_of(tmp_path, f"version: 1\nchecks:\n  dataloader: {body}\n") == message


def test_a_producer_named_by_a_near_miss_is_suggested(tmp_path):
    text = "version: 1\nchecks:\n  dataloader: {samples_per_gpu: {from: modle}}\n  model1: {check: model}\n"
    assert message_of(tmp_path, text) == (
        "F:3:33: `dataloader.samples_per_gpu` reads samples_per_s from a `model` instance, but F has no instance "
        "named `modle`: add `model:` under checks, or name one with `samples_per_gpu: {from: <instance>}`: did you "
        "mean `model1`?")


def test_a_producer_is_named_as_measured_or_by_instance(tmp_path):
    text = "version: 1\nchecks:\n  dataloader: {samples_per_gpu: measured}\n  model: {}\n"
    assert load(tmp_path, text).instances[0].options["samples_per_gpu"] == {"from": "model", "metric": "samples_per_s"}
    text = "version: 1\nchecks:\n  dataloader: {samples_per_gpu: {from: fast}}\n  fast: {check: model}\n"
    assert load(tmp_path, text).instances[0].options["samples_per_gpu"] == {"from": "fast", "metric": "samples_per_s"}


def test_options_given_with_their_defaults_or_alone_are_not_refused(tmp_path):
    options = instance(tmp_path, "{synthetic: true, path: '', include: '*', format: files}", "dataloader").options
    assert (options["synthetic"], options["path"], options["format"]) == (True, "", "files")
    options = instance(tmp_path, "{synthetic: false, path: /x, num_workers: ' 3 ', gpus: auto}", "dataloader").options
    assert (options["synthetic"], options["path"], options["num_workers"], options["gpus"]) == (False, "/x", 3, "auto")


def test_scratch_dir_inside_the_dataset_is_refused_and_outside_it_is_taken(tmp_path):
    (tmp_path / "data" / "scratch").mkdir(parents=True)
    data = tmp_path / "data"
    text = f"version: 1\nchecks:\n  storage: {{path: {data}, scratch_dir: {data}/scratch}}\n"
    column = 34 + len(str(data))  # after `  storage: {path: ` and `, scratch_dir: `
    assert message_of(tmp_path, text) == (
        f"F:3:{column}: `storage.scratch_dir` ({data}/scratch) is inside `storage.path` ({data}), which preflight "
        f"never writes: choose a directory outside it on the same filesystem, or leave it out to use the one above it")
    assert instance(tmp_path, f"{{path: {data}, scratch_dir: {tmp_path}}}", "storage").options["scratch_dir"] == str(
        tmp_path)


@pytest.mark.parametrize("shape, message", [
    ("[3, 0]", "found [3, 0]"), ("[]", "found []"), ("[true]", "found [True]"), ("'3,x'", "found '3,x'"),
    ("3", "found 3"),
])
def test_a_bad_shape_is_refused(tmp_path, shape, message):
    assert message_of(tmp_path, f"version: 1\nchecks:\n  model: {{input_shape: {shape}}}\n") == (
        "F:3:24: `model.input_shape`: expected a shape, a list of positive whole numbers like [3, 224, 224], "
        + message)


def test_a_shape_is_a_list_or_the_text_that_set_and_the_environment_give(tmp_path):
    assert instance(tmp_path, "{input_shape: [1, 28, 28]}", "model").options["input_shape"] == [1, 28, 28]
    assert instance(tmp_path, "{input_shape: '3, 32,32'}", "model").options["input_shape"] == [3, 32, 32]


@pytest.mark.parametrize("body, message", [
    ("{seq_read: 5}", "F:3:23: `seq_read` is a metric: give it a threshold like {min: 1.5 GB/s}"),
    ("{seq_read: {severity: warn}}", "F:3:23: `seq_read`: a threshold needs `min` or `max`"),
    ("{seq_read: {min: 2 GB/s, max: 1999 MB/s}}", "F:3:23: `seq_read`: min is above max"),
    ("{seq_read: {min: 90% of baseline, max: 80% of baseline}}", "F:3:23: `seq_read`: min is above max"),
    ("{seq_read: {min: 1 GB/s, severity: x}}", "F:3:47: severity must be `fail` or `warn`, found 'x'"),
    ("{seq_read: {min: 90% of baseline}}", "F:3:23: `storage.seq_read` is relative to a baseline, but none is given: "
                                           "pass --baseline FILE or add `baseline: FILE` at the top level (save one "
                                           "with `preflight run --save-baseline FILE`)"),
    ("{seq_read: {min: -1 GB/s}}", "F:3:29: `seq_read`: must not be negative, found '-1 GB/s'"),
])
def test_threshold_mistakes_are_one_exact_located_line(tmp_path, body, message):
    assert message_of(tmp_path, f"version: 1\nchecks:\n  storage: {body}\n") == message


def test_a_version_metric_hint_and_bounds(tmp_path):
    assert message_of(tmp_path, "version: 1\nchecks:\n  cuda: {driver_version: 5}\n") == (
        "F:3:26: `driver_version` is a metric: give it a threshold like {min: 535.104}")
    (threshold,) = instance(tmp_path, "{driver_version: {min: 535, max: '550.54'}}", "cuda").thresholds
    assert (threshold.min, threshold.max) == ("535", "550.54")


def test_equal_min_and_max_are_one_allowed_value(tmp_path):
    (threshold,) = instance(tmp_path, "{seq_read: {min: 1 GB/s, max: 1000 MB/s}}", "storage").thresholds
    assert (threshold.min, threshold.max) == (1000.0, 1000.0)


def test_the_last_override_of_a_threshold_is_where_it_was_set(tmp_path):
    text = "version: 1\nchecks:\n  storage:\n    seq_read: {min: 1 GB/s, max: 9 GB/s}\n"
    loaded = load(tmp_path, text, ["storage.seq_read.min=2 GB/s", "storage.seq_read.max=8 GB/s"])
    (threshold,) = loaded.instances[0].thresholds
    assert (threshold.min, threshold.max, threshold.where) == (2000.0, 8000.0, "--set storage.seq_read.max=8 GB/s")


def test_the_source_and_digest_name_the_file_and_the_overrides(tmp_path):
    text = "version: 1\nchecks:\n  shm: {}\n"
    loaded = load(tmp_path, text, ["shm.path=/a", "shm.timeout=9s"])
    assert loaded.source == b"version: 1\nchecks:\n  shm: {}\nshm.path=/a\0shm.timeout=9s"
    assert loaded.digest == hashlib.sha256(loaded.source).hexdigest()
    assert load(tmp_path, text).digest == "{}".format(hashlib.sha256(text.encode()).hexdigest())


def test_select_keeps_the_file_order_and_the_fleet_and_ignores_blank_ids(tmp_path):
    text = "version: 1\nfleet: {median_ratio: 0.8}\nchecks:\n  shm: {}\n  storage: {}\n  cuda: {}\n"
    loaded = load(tmp_path, text)
    kept = loaded.select([" cuda ", "", "shm"])
    assert ([i.name for i in kept.instances], kept.fleet.median_ratio, kept.path, kept.source) == (
        ["shm", "cuda"], 0.8, loaded.path, loaded.source)
    with pytest.raises(UsageError) as raised:
        loaded.select(["gpu"])
    assert str(raised.value) == f"--only gpu: no such check instance in {loaded.path}"


def test_a_file_that_is_not_utf8_or_not_there_is_one_line(tmp_path):
    path = tmp_path / "thresholds.yaml"
    path.write_bytes(b"version: 1\n\xff\xfe\n")
    with pytest.raises(ConfigError) as raised:
        config.load(str(path), environ={})
    assert str(raised.value) == f"{path}:1:1: the file is not UTF-8 text: is this the right file?"
    with pytest.raises(UsageError) as raised:
        config.load(str(tmp_path / "nope.yaml"), environ={})
    assert str(raised.value) == f"{tmp_path}/nope.yaml: cannot read the config (No such file or directory): check the " \
                                f"thresholds file's path (-c FILE, or validate FILE)"


def test_without_an_environ_the_process_environment_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFLIGHT_TEST_SHM", "/from/env")
    path = write_config(tmp_path, "version: 1\nchecks:\n  shm: {path: $PREFLIGHT_TEST_SHM}\n")
    assert config.load(str(path)).instances[0].options["path"] == "/from/env"


def test_plain_forgets_where_values_were_written_at_every_depth(tmp_path):
    options = instance(tmp_path, "{dataset: 'job.data:make', dataset_args: {a: [1, {b: x}], c: null}}",
                       "dataloader").options
    assert options["dataset_args"] == {"a": [1, {"b": "x"}], "c": None}


def test_a_path_list_from_the_command_line_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "job").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    path = write_config(tmp_path / "job", "version: 1\nchecks:\n  dataloader: {dataset: 'job.data:make'}\n")
    loaded = config.load(str(path), ["dataloader.python_path=."], environ={})
    assert loaded.instances[0].options["python_path"] == [str(tmp_path / "here")]
    with pytest.raises(ConfigError) as raised:
        config.load(str(path), ["dataloader.python_path="], environ={})
    assert str(raised.value) == ("--set dataloader.python_path=: `dataloader.python_path`: expected a list of "
                                 "directories, like [src], found ''")


def baseline_file(tmp_path, seq_read_mb_s):
    path = tmp_path / "base.json"
    path.write_text(json.dumps({"schema": 1, "kind": "preflight-baseline", "values": {
        "storage.seq_read": {"value": seq_read_mb_s, "unit": "MB/s"}, "shm.size": {"value": 1, "unit": "GiB"}}}))
    return str(path)


def test_a_baseline_bound_keeps_its_fraction_and_an_absolute_one_its_value(tmp_path):
    text = "version: 1\nchecks:\n  storage: {seq_read: {min: 90% of baseline, max: 3 GB/s}}\n"
    (threshold,) = config.load(str(write_config(tmp_path, text)), environ={},
                               baseline=baseline_file(tmp_path, 2000)).instances[0].thresholds
    assert (threshold.min, threshold.max, threshold.relative, threshold.baseline) == (
        None, 3000.0, {"min": 0.9}, {"storage.seq_read": 2000.0})
    text = "version: 1\nchecks:\n  storage: {seq_read: {min: 90% of baseline, max: 90% of baseline}}\n"
    (threshold,) = config.load(str(write_config(tmp_path, text)), environ={},
                               baseline=baseline_file(tmp_path, 2000)).instances[0].thresholds
    assert (threshold.min, threshold.max, threshold.relative) == (None, None, {"min": 0.9, "max": 0.9})


def test_an_absolute_threshold_never_reads_the_baseline(tmp_path):
    text = "version: 1\nchecks:\n  storage: {seq_read: {min: 1 GB/s}}\n"
    (threshold,) = config.load(str(write_config(tmp_path, text)), environ={},
                               baseline=str(tmp_path / "missing.json")).instances[0].thresholds
    assert (threshold.min, threshold.relative, threshold.baseline) == (1000.0, {}, {})


def test_an_empty_scratch_dir_means_the_default_and_is_never_called_inside(tmp_path):
    assert instance(tmp_path, "{scratch_dir: ''}", "storage").options["scratch_dir"] == ""  # "" would resolve to "."


def test_the_config_keeps_its_path_and_a_path_with_colons_is_named_whole(tmp_path):
    directory = tmp_path / "a:1:2"
    directory.mkdir()
    path = write_config(directory, "version: 1\nchecks:\n  dataloader: {samples_per_gpu: measured}\n")
    with pytest.raises(ConfigError) as raised:
        config.load(str(path), environ={})
    assert f"but {path} has no instance named `model`" in str(raised.value)
    assert load(tmp_path, "version: 1\nchecks: {shm: {}}\n").path == str(tmp_path / "thresholds.yaml")


def test_a_baseline_key_is_relative_to_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "job").mkdir()
    baseline_file(tmp_path / "job", 1500)
    path = write_config(tmp_path / "job", "version: 1\nbaseline: base.json\nchecks:\n"
                                          "  storage: {seq_read: {min: 50% of baseline}}\n")
    monkeypatch.chdir(tmp_path)
    (threshold,) = config.load(str(path), environ={}).instances[0].thresholds
    assert threshold.baseline == {"storage.seq_read": 1500.0}


def test_a_sub_second_timeout_and_an_option_at_its_maximum_are_taken(tmp_path):
    shm = instance(tmp_path, "{timeout: 500ms, duration: 100ms}")
    assert (shm.timeout_s, shm.duration_s) == (0.5, 0.1)
    assert instance(tmp_path, "{allocate: 100 %}", "cuda").options["allocate"] == 100.0


@pytest.mark.parametrize("body, message", [
    ('name: {match: "H100", max: 1}', "F:4:11: `name`: give either `match` or `min`/`max`, not both"),
    ("ecc_mode: {match: yes}", 'F:4:23: `ecc_mode.match`: YAML reads yes as a boolean: quote it ("yes")'),
])
def test_match_mistakes_are_one_exact_located_line(tmp_path, body, message):
    assert message_of(tmp_path, f"version: 1\nchecks:\n  cuda:\n    {body}\n") == message


def test_a_malformed_version_is_shown_whole(tmp_path):
    assert message_of(tmp_path, "version: 1\nchecks:\n  cuda: {driver_version: {min: X535}}\n") == (
        "F:3:32: `driver_version`: expected a version like \"535.104\", found 'X535'")


def test_a_version_bound_keeps_its_digits_and_loses_stray_quotes(tmp_path):
    (threshold,) = instance(tmp_path, "{driver_version: {min: 535.10, max: \"'550.540'\"}}", "cuda").thresholds
    assert (threshold.min, threshold.max) == ("535.10", "550.540")  # not float 535.1


@pytest.mark.parametrize("check, body, message", [
    ("dataloader", "{dataset_args: {root: /data}}",
     "F:3:30: `dataloader.dataset_args` has no effect: `dataloader.dataset` names the job's code "
     "(\"package.module:factory\"): remove `dataset_args`, or set `dataset` to the job's factory"),
    ("dataloader", "{collate_fn: 'job.data:collate'}",
     "F:3:28: `dataloader.collate_fn` has no effect: `dataloader.dataset` names the job's code "
     "(\"package.module:factory\"): remove `collate_fn`, or set `dataset` to the job's factory"),
    ("model", "{model: resnet18, model_args: {depth: 18}}",
     "F:3:40: `model.model_args` has no effect: `model.model` names the job's code "
     "(\"package.module:factory\"): remove `model_args`, or set `model` to the job's factory"),
    ("pipeline", "{python_path: [.]}",
     "F:3:27: `pipeline.python_path` has no effect: neither `pipeline.dataset` nor `pipeline.worker_init_fn` nor "
     "`pipeline.loader` nor `pipeline.model` names the job's code (\"package.module:factory\"): remove `python_path`, or set `dataset` to the job's factory"),
])
def test_options_for_the_jobs_code_without_it_are_refused_at_their_location(tmp_path, check, body, message):
    assert message_of(tmp_path, f"version: 1\nchecks:\n  {check}: {body}\n") == message


@pytest.mark.parametrize("check, body, option", [
    ("dataloader", "{dataset: 'job.data:make', dataset_args: {root: /data}}", "dataset_args"),
    ("dataloader", "{dataset_args: {}, collate_fn: ''}", "dataset_args"),  # the defaults, written out
    ("model", "{model: 'job.net:build', python_path: [.], model_args: {depth: 18}}", "model_args"),
    ("pipeline", "{model: 'job.net:build', python_path: [.]}", "python_path"),
    ("pipeline", "{dataset: 'job.data:make', python_path: [.]}", "python_path"),
])
def test_options_for_the_jobs_code_beside_it_are_kept(tmp_path, check, body, option):
    options = instance(tmp_path, body, check).options
    assert options[option] == {"dataset_args": {"root": "/data"} if "root" in body else {},
                               "model_args": {"depth": 18}, "python_path": [str(tmp_path)]}[option]


@pytest.mark.parametrize("value, code", [
    ("job.data:make", True), ("make:it", True),  # a malformed path ("job.data") never gets here: coerce_option refuses it
    ("resnet50", False), ("tiny", False), ("XX", False), ("", False), ({}, False), ([], False),
])
def test_a_value_names_the_jobs_code_when_it_has_a_colon(value, code):
    assert config.names_code(value) is code
