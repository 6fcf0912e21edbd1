from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
import yaml

from preflight import config
from preflight.checks import CHECKS
from preflight.commands import schema
from preflight.errors import ConfigError

VALIDATOR = jsonschema.Draft7Validator(schema.build())


def _both(tmp_path, text):
    """(schema accepts, config accepts) for the same file."""
    path = tmp_path / "t.yaml"
    path.write_text(text)
    by_schema = VALIDATOR.is_valid(yaml.safe_load(text))
    try:
        config.load(str(path), environ={})
        by_config = True
    except ConfigError:
        by_config = False
    return by_schema, by_config


def test_schema_is_valid_draft_07():
    jsonschema.Draft7Validator.check_schema(schema.build())
    assert schema.build()["$schema"] == "http://json-schema.org/draft-07/schema#"


def test_bundled_thresholds_validate():
    document = yaml.safe_load(config.bundled_path().read_text())
    assert list(VALIDATOR.iter_errors(document)) == []


def test_every_check_option_and_metric_is_in_the_schema():
    definitions = schema.build()["definitions"]
    assert set(definitions) == set(CHECKS)
    for name, check in CHECKS.items():
        keys = set(definitions[name]["properties"])
        assert {o.name for o in check.OPTIONS} <= keys
        assert {m.name for m in check.METRICS} <= keys


@pytest.mark.parametrize("text, accepted", [
    ("version: 1\nchecks:\n  storage:\n    seq_raed: {min: 1 GB/s}\n", False),  # unknown key
    ("version: 1\nchecks:\n  storage:\n    seq_read: {min: 1 GiB}\n", False),  # a size where a bandwidth goes
    ("version: 1\nchecks:\n  storage:\n    seq_read: {min: 1000}\n", False),  # bare number
    ("version: 1\nchecks:\n  storage:\n    seq_read: {severity: warn}\n", False),  # no bound
    ("version: 2\nchecks:\n  storage: {}\n", False),
    ("version: 1\nextra: 1\nchecks:\n  storage: {}\n", False),
    ("version: 1\nchecks:\n  ckpt:\n    check: storage\n    path: /tmp\n    seq_read: {min: 1.5 GB/s}\n", True),
    ("version: 1\nchecks:\n  ckpt:\n    check: storage\n    throughput: {min: 1 samples/s}\n", False),
    ("version: 1\ndefaults: {timeout: 30s, severity: warn}\nchecks:\n  cuda:\n"
     "    driver_version: {min: \"535.104\"}\n    device_count: {min: 1}\n", True),
    ("version: 1\nchecks:\n  dataloader:\n    num_workers: auto\n    batch_size: 0\n", False),
    ("version: 1\nchecks:\n  dataloader:\n    num_workers: 4\n    pin_memory: false\n", True),
    ("version: 1\nchecks:\n  shm:\n    allocate: 512 MiB\n    size: {min: 8 GiB, max: 1 TiB}\n", True),
    ("version: 1\nchecks:\n  cuda:\n    name: {match: \"H100|H200\", severity: warn}\n", True),
    ("version: 1\nchecks:\n  cuda:\n    name: {min: 1}\n", False),  # text takes a regex, not a bound
    ("version: 1\nchecks:\n  cuda:\n    device_count: {match: \"1\"}\n", False),  # match is for text
    ("version: 1\nchecks:\n  cuda:\n    matmul_size: 64\n    memory_allocatable: {min: 90 %}\n", True),
    # environment references, expanded with nothing set
    ("version: 1\nchecks:\n  storage:\n    seq_read: {min: \"${BW-1 GB/s}\"}\n", True),
    ("version: 1\nchecks:\n  storage:\n    seq_read: {min: \"$$1 GB/s\"}\n", False),  # $$ is a literal $
    ("version: 1\nchecks:\n  dataloader:\n    num_workers: ${WORKERS:-auto}\n", True),
    ("version: 1\nchecks:\n  cuda:\n    driver_version: {min: \"${DRIVER_MIN:-535.104}\"}\n", True),
])
def test_schema_and_config_agree(tmp_path, text, accepted):
    assert _both(tmp_path, text) == (accepted, accepted)


def test_cli_prints_the_schema_without_importing_torch():
    code = ("import sys; from preflight.cli import main; rc = main(['schema']); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(completed.stdout) == schema.build()


@pytest.mark.parametrize("text, accepted", [
    ('dataset: "pkg.mod:make"\n    dataset_args: {root: /data, size: 224}\n    python_path: [src]\n', True),
    ('dataset: "pkg.mod:make"\n    python_path: src\n', True),  # one directory, as --set gives it
    ("python_path: src\n", False),  # no job's code to import: refused, not ignored
    ("dataset_args: {root: /data}\n", False),
    ("dataset_args: {}\n    collate_fn: \"\"\n", True),  # the defaults, written out
    ("dataset_args: [1, 2]\n", False),
    ("python_path: [1]\n", False),
    ('dataset: "pkg.mod:make"\n    path: /data\n', False),  # ignored with the job's dataset: refused
    ('dataset: "pkg.mod:make"\n    path: ""\n    format: files\n', True),  # the defaults, written out
    ("synthetic: true\n    format: tar\n", False),
    ("synthetic: false\n    format: tar\n    decode: image\n", True),
    # the job's loader settings (issue 32, case 3), and its own DataLoader beside which they are refused
    ("multiprocessing_context: spawn\n    persistent_workers: true\n    drop_last: true\n    seed: 7\n", True),
    ("multiprocessing_context: thread\n", False),
    ("loader_timeout: 30s\n    in_order: false\n    shuffle: false\n", True),
    ("loader_timeout: 30\n", False),  # a duration needs its unit
    ("seed: -1\n", False),
    ('worker_init_fn: "pkg.mod:init"\n    python_path: [src]\n', True),
    ('sampler: "pkg.mod:evens"\n', False),  # a sampler samples the job's dataset: none named
    ('dataset: "pkg.mod:make"\n    sampler: "pkg.mod:evens"\n    shuffle: false\n', False),
    ('loader: "pkg.mod:make_loader"\n    loader_args: {n: 64}\n    python_path: [src]\n', True),
    ('loader: "pkg.mod:make_loader"\n    batch_size: 32\n', False),
    ('loader: "pkg.mod:make_loader"\n    batch_size: 64\n', True),  # the default, written out
    ('loader: "pkg.mod:make_loader"\n    dataset: "pkg.mod:make"\n', False),
    ("loader_args: {n: 64}\n", False),
])
def test_the_job_dataset_options_agree_with_config(tmp_path, text, accepted):
    (tmp_path / "src").mkdir()
    assert _both(tmp_path, f"version: 1\nchecks:\n  dataloader:\n    {text}") == (accepted, accepted)


def test_the_examples_validate_against_the_schema():
    from tests.helpers import REPO

    for path in sorted((REPO / "examples").rglob("thresholds*.yaml")):
        assert list(VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))) == [], path


def _errors(text):
    return list(VALIDATOR.iter_errors(yaml.safe_load(text)))


@pytest.mark.parametrize("text, validator, says", [
    ("version: 1\nchecks:\n  storage:\n    seq_raed: {min: 1 GB/s}\n", "additionalProperties", "'seq_raed' was unexpected"),
    ("version: 1\nchecks:\n  ckpt:\n    check: storage\n    seq_raed: {min: 1 GB/s}\n", "additionalProperties",
     "'seq_raed' was unexpected"),
    ("version: 1\nchecks:\n  storge: {}\n", "required", "'check' is a required property"),
    ("version: 1\nchecks:\n  x: {check: storge}\n", "enum", "'storge' is not one of"),
])
def test_a_typo_gets_a_message_an_editor_can_show(text, validator, says):
    """Issue 25: through the schema a typo read "is not valid under any of the given schemas"."""
    (error,) = _errors(text)
    assert error.validator == validator and says in error.message, error.message


@pytest.mark.parametrize("text, says", [
    ("version: 1\nchecks:\n  storage:\n    seq_read: {min: 1 GiB}\n",
     "expected a bandwidth like `1.5 GB/s` (units: B/s, kB/s, KiB/s, MB/s, MiB/s, GB/s, GiB/s, TB/s, TiB/s), "
     "or `90% of baseline`"),
    ("version: 1\nchecks:\n  dataloader:\n    throughput: {min: 1000 img/s}\n", "(units: samples/s)"),
    ("version: 1\ndefaults: {timeout: 2 minutes}\nchecks:\n  shm: {}\n", "expected a duration like"),
])
def test_a_bad_unit_names_the_dimension_and_its_units(text, says):
    (error,) = _errors(text)
    assert error.validator == "pattern" and says in error.schema["patternErrorMessage"], error.schema
