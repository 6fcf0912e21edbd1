from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import run_cli


def _preflight(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "preflight", *args], capture_output=True, text=True, cwd=cwd)


def test_valid_file_lists_instances_and_exits_0(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nchecks:\n  shm:\n    size: {min: 1 GiB}\n  ckpt:\n    check: storage\n")
    completed = _preflight("validate", "-c", str(path))
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [
        f"{path}: valid, 2 checks, 1 threshold",
        "  shm (shm, timeout 120s): size",
        "  ckpt (storage, timeout 120s): no thresholds (measured only)",
    ]


def test_invalid_file_names_the_place_and_the_fix(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nchecks:\n  storage:\n    seq_raed: {min: 1 GB/s}\n")
    completed = _preflight("validate", "-c", str(path))
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr == f"preflight: error: {path}:4:5: unknown key `seq_raed`: did you mean `seq_read`?\n"


def test_overrides_are_validated_too(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nchecks:\n  shm: {}\n")
    completed = _preflight("validate", "-c", str(path), "--set", "shm.allocate=12")
    assert completed.returncode == 2
    assert "--set shm.allocate=12: `shm.allocate`: expected a size with its unit" in completed.stderr


def test_a_malformed_reference_is_one_located_line_and_exit_2(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nchecks:\n  storage:\n    path: ${DATA_DIR-./data\n")
    completed = run_cli("validate", "-c", str(path), env={"DATA_DIR": "/mnt/data"})
    assert (completed.returncode, completed.stdout) == (2, "")
    assert completed.stderr == (f"preflight: error: {path}:4:11: `${{DATA_DIR-./data` is not closed: add `}}`, "
                                f"or write $$ for a literal $\n")


def test_a_required_variable_names_it_and_the_reason(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nchecks:\n  storage:\n    path: /mnt/${DATASET:?name the dataset in DATASET}\n")
    completed = run_cli("validate", "-c", str(path), env={"DATASET": ""})
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr == (f"preflight: error: {path}:4:16: environment variable DATASET is empty: "
                                f"name the dataset in DATASET\n")
    assert run_cli("validate", "-c", str(path), env={"DATASET": "imagenet"}).returncode == 0


def test_the_file_may_be_given_positionally(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nchecks:\n  shm:\n    size: {min: 1 GiB}\n")
    positional, flag = _preflight("validate", str(path)), _preflight("validate", "-c", str(path))
    assert positional.returncode == flag.returncode == 0, positional.stderr
    assert positional.stdout == flag.stdout and positional.stdout.startswith(f"{path}: valid, 1 check,")
    assert _preflight("validate", str(path), "-c", str(path)).returncode == 0  # the same file twice is no conflict


def test_two_different_files_are_a_usage_error(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    for path in (first, second):
        path.write_text("version: 1\nchecks:\n  shm: {}\n")
    completed = _preflight("validate", str(first), "-c", str(second))
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr == (f"preflight: error: two thresholds files, {first} and -c {second}: give one, as "
                                f"`preflight validate FILE` or `-c FILE`\n")


@pytest.mark.parametrize("given, line", [
    ('dataset: "job.data:make"\n    path: /data\n', "path"),
    ('dataset: "job.data:make"\n    include: "*.jpg"\n', "include"),
    ('dataset: "job.data:make"\n    exclude: "val/*"\n', "exclude"),
    ('dataset: "job.data:make"\n    decode: image\n', "decode"),
    ('dataset: "job.data:make"\n    format: tar\n', "format"),
    ("synthetic: true\n    format: tar\n", "format"),
    ("synthetic: true\n    max_files: 50\n", "max_files"),
    ('dataset: "job.data:make"\n    synthetic: true\n', "synthetic"),
])
def test_an_option_the_loader_would_ignore_is_refused_at_its_line(tmp_path, given, line):
    """Issue 13: with the job's dataset, or synthetic samples, the options that choose and read files did
    nothing and the run said nothing. Now validate names the option's place and the way out."""
    path = tmp_path / "t.yaml"
    path.write_text(f"version: 1\nchecks:\n  dataloader:\n    {given}")
    completed = _preflight("validate", "-c", str(path))
    other = given.split(":")[0]
    column = 6 + len(line) + 1  # after "    KEY: "
    assert (completed.returncode, completed.stdout) == (2, "")
    assert completed.stderr == (
        f"preflight: error: {path}:5:{column}: `dataloader.{line}` has no effect while `dataloader.{other}` is set "
        f"({path}:4:{6 + len(other) + 1}): remove `{line}`, or remove `{other}` to use it\n")


def test_a_default_value_given_beside_the_dataset_or_synthetic_is_no_error(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nchecks:\n  dataloader:\n    synthetic: true\n    format: files\n    path: ''\n")
    completed = _preflight("validate", "-c", str(path))
    assert completed.returncode == 0, completed.stderr
    overridden = _preflight("validate", "-c", str(path), "--set", "dataloader.format=tar")
    assert overridden.returncode == 2
    assert "--set dataloader.format=tar: `dataloader.format` has no effect while `dataloader.synthetic` is set" \
        in overridden.stderr
