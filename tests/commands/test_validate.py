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


SEVERAL = ("version: 1\nchecks:\n  storage:\n    seq_raed: {min: 1 GB/s}\n    rand_read: {min: 20000 IOPS, "
           "severity: fatal}\n  dataloader:\n    num_workers: 2.5\n  cuda_x: {}\n  shm:\n    size: {min: 8 GB/s}\n")


def _expected_lines(path) -> list[str]:
    return [
        f"{path}:4:5: unknown key `seq_raed`: did you mean `seq_read`?",
        f"{path}:5:44: severity must be `fail` or `warn`, found 'fatal'",
        f"{path}:7:18: `dataloader.num_workers`: expected a whole number or `auto`, found 2.5",
        f"{path}:8:3: unknown check `cuda_x`: did you mean `cuda`? Or add `check: <name>` to make `cuda_x` an "
        f"instance of a known check",
        f"{path}:10:17: `size`: '8 GB/s' is a bandwidth, but a size is expected here (like `8 GiB`)",
        f"preflight: error: 5 errors in {path}: fix each line above (nothing was measured)",
    ]


def test_every_mistake_is_told_in_one_run_each_on_its_own_located_line(tmp_path):
    """Issue 33 case 7: five mistakes took five runs (EvilBit-Labs/opnDossier#32 and NagiosEnterprises/
    nagioscore#388 report the same of their validators). Now one run: a line each, starting FILE:LINE:COL."""
    path = tmp_path / "t.yaml"
    path.write_text(SEVERAL)
    completed = _preflight("validate", str(path))
    assert (completed.returncode, completed.stdout) == (2, "")
    assert completed.stderr.splitlines() == _expected_lines(path)


def test_run_checks_the_config_the_same_way_and_measures_nothing(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SEVERAL)
    completed = run_cli("run", "-c", str(path), "--json", str(tmp_path / "r.json"))
    assert (completed.returncode, completed.stdout) == (2, "")
    assert completed.stderr.splitlines() == _expected_lines(path)
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["results"] == [] and report["error"].splitlines() == _expected_lines(path)[:-1]


@pytest.mark.parametrize("text, lines", [
    # SpigotMC/BungeeCord#2220, PEXPlugins/PermissionsEx#30: "found character '\t' that cannot start any token"
    # left users asking what to do; the tab is named, at its place, with the fix
    ("version: 1\nchecks:\n  storage:\n\tpath: /data\n", [4]),
    # one tab a line is one mistake; every line with one is told in the same run
    ("version: 1\nchecks:\n  storage:\n\tpath: /data\n\tseq_read: {min: 1 GB/s}\n  shm:\n\t\tsize: {min: 1 GiB}\n",
     [4, 5, 7]),
])
def test_a_tab_is_named_as_a_tab_at_its_place(tmp_path, text, lines):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    completed = _preflight("validate", str(path))
    assert (completed.returncode, completed.stdout) == (2, "")
    told = [f"{path}:{line}:1: tab character at {path}:{line}:1: YAML indents with spaces; replace the tab with "
            f"spaces" for line in lines]
    if len(told) == 1:
        assert completed.stderr.splitlines() == [f"preflight: error: {told[0]}"]
    else:
        assert completed.stderr.splitlines() == [*told, f"preflight: error: {len(told)} errors in {path}: fix each "
                                                        f"line above (nothing was measured)"]


def test_a_shared_config_with_merge_keys_is_valid(tmp_path):
    """Issue 33 case 6 (pre-commit/pre-commit-hooks#468, basetenlabs/truss#2653): `<<` was refused. The report's
    two `<<` in one mapping are one `<<: [*foo, *bar]` here, as YAML's unique keys require (and as the error for
    two says)."""
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nchecks:\n  storage: &data\n    path: /tmp\n    seq_read: &fast {min: 1 GB/s}\n"
                    "  shm: &short\n    timeout: 30s\n  checkpoints:\n    <<: [*short, *data]\n    check: storage\n"
                    "    seq_write: *fast\n")
    completed = _preflight("validate", str(path))
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [
        f"{path}: valid, 3 checks, 3 thresholds",
        "  storage (storage, timeout 120s): seq_read",
        "  shm (shm, timeout 30s): no thresholds (measured only)",
        "  checkpoints (storage, timeout 30s): seq_read, seq_write",
    ]
    path.write_text(path.read_text().replace("<<: [*short, *data]", "<<: *short\n    <<: *data"))
    assert _preflight("validate", str(path)).stderr == (
        f"preflight: error: {path}:10:5: a second `<<` in one mapping (the first at {path}:9:5): merge several "
        f"mappings with one `<<: [*first, *second]`\n")
