"""The job's own Dataset, end to end through the CLI: a real package imported through python_path.

Each test writes a small package under ``tmp_path/src`` (``jobpkg.data``) and a config beside
it naming ``python_path: [src]``, so the import really goes through the config's directory.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from preflight.loading.user import Uncountable, count_batch
from tests.helpers import job_package, run_cli

SAMPLE_S = 0.004  # each sample sleeps this long: one process delivers at most 250 samples/s
SAMPLE_BYTES = 3 * 8 * 8 * 4 + 8  # a 3x8x8 float32 tensor and an int label (collated into int64)
PACKAGE = '''
import time

import torch


class Squares(torch.utils.data.Dataset):
    def __init__(self, n, fail_at=-1):
        self.n, self.fail_at = n, fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        time.sleep({sample_s})
        if index == self.fail_at:
            raise ValueError(f"bad sample {{index}}")
        return torch.full((3, 8, 8), float(index)), index


class Stuck(torch.utils.data.IterableDataset):
    def __iter__(self):
        while True:
            time.sleep(3600)
        yield


def make(n=1000, fail_at=-1):
    return Squares(n, fail_at)


def stuck():
    return Stuck()


def slow_to_build():
    time.sleep(3600)


def swallows_the_first_alarm():
    try:
        time.sleep(3600)
    except BaseException:  # as an import's or a retry loop's catch-all would
        pass
    time.sleep(3600)


def not_a_dataset(n=1000):
    return list(range(n))


def raises():
    return {{}}["label"]


def from_index(index):
    with open(index) as lines:
        return Squares(len(lines.read().split()))
'''.format(sample_s=SAMPLE_S)


def _job(tmp_path: Path, body: str) -> Path:
    job_package(tmp_path / "src", "jobpkg", {"data": PACKAGE})
    path = tmp_path / "thresholds.yaml"
    path.write_text("version: 1\ndefaults: {duration: 1.5s, timeout: 60s}\nchecks:\n  dataloader:\n"
                    + textwrap.indent(textwrap.dedent(body).strip() + "\n", "    "))
    return path


def _run(path: Path, *args: str) -> tuple[int, dict]:
    completed = run_cli("run", "-c", str(path), "--format", "json", *args, cwd=path.parent.parent)
    return completed.returncode, json.loads(completed.stdout)


def test_a_factory_in_the_jobs_package_is_imported_through_python_path_and_measured(tmp_path):
    path = _job(tmp_path, """
        dataset: "jobpkg.data:make"
        dataset_args: {n: 400}
        python_path: [src]
        num_workers: 0
        batch_size: 10
    """)
    assert run_cli("validate", str(path)).returncode == 0
    code, report = _run(path)  # run from elsewhere: python_path is relative to the config file
    results = {r["metric"]: r for r in report["results"]}
    assert code == 0, report
    rate = results["throughput"]["value"]
    assert 0.6 / SAMPLE_S < rate <= 1.02 / SAMPLE_S  # one process, SAMPLE_S per sample: at most 250/s
    assert "over jobpkg.data:make(**dataset_args) (Squares, 400 samples), collate_fn=default_collate" \
        in results["throughput"]["method"]
    assert "tensors delivered to the training loop" in results["bandwidth"]["method"]
    # bandwidth is the batches' tensor bytes: samples/s x bytes per sample, in MB (10^6 B)
    assert results["bandwidth"]["value"] == pytest.approx(rate * SAMPLE_BYTES / 1e6, rel=0.02)


def test_a_factory_that_cannot_be_imported_is_located_at_validate(tmp_path):
    path = _job(tmp_path, """
        dataset: "jobpkg.data:make"
    """)  # no python_path: jobpkg is not importable
    completed = run_cli("validate", str(path), cwd=tmp_path.parent)
    assert completed.returncode == 2 and completed.stdout == ""
    # located, not imported: told before torch loads, without the job's code running in this process
    assert completed.stderr == (f"preflight: error: {path}:5:14: dataloader.dataset: cannot import jobpkg.data:make: "
                                f"no module named 'jobpkg' on python_path, in this Python's packages or in the "
                                f"working directory: add the directory that holds `jobpkg` to python_path\n")


@pytest.mark.parametrize("factory", ["slow_to_build", "swallows_the_first_alarm"])
def test_a_factory_that_does_not_return_is_a_one_line_error_at_validate_after_the_timeout(tmp_path, factory):
    path = _job(tmp_path, f"""
        dataset: "jobpkg.data:{factory}"
        python_path: [src]
        timeout: 1s
    """)
    completed = run_cli("validate", str(path))
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr == (f"preflight: error: {path}:5:5: dataloader: the job's code did not return within "
                                f"the timeout of 1s when built once: does its factory wait on a mount or the "
                                f"network? Fix that, or raise dataloader.timeout\n")


@pytest.mark.parametrize("spec, message", [
    ("jobpkg.data:not_a_dataset", "jobpkg.data:not_a_dataset(**dataset_args) returned builtins.list, not a "
                                  "torch.utils.data.Dataset or IterableDataset"),
    ("jobpkg.data:mkae", "cannot import jobpkg.data:mkae: jobpkg.data has no `mkae`"),
    ("jobpkg.data:time", "jobpkg.data:time is a module, not callable"),
])
def test_a_factory_that_returns_no_dataset_is_a_one_line_error_at_validate(tmp_path, spec, message):
    path = _job(tmp_path, f"""
        dataset: "{spec}"
        python_path: [src]
    """)
    completed = run_cli("validate", str(path))
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"preflight: error: {path}:5:14: dataloader.dataset: {message}")
    assert completed.stderr.count("\n") == 1


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_factory_name_without_its_callable_is_exit_2_before_anything_is_measured(tmp_path, command):
    """`dataset: jobpkg.data` (no ":make") is the config's typo: `run` measured the rest, then failed the node
    with the check's error (exit 1), blocking a good node for a typo. Now both commands stop at the line."""
    path = _job(tmp_path, """
        dataset: "jobpkg.data"
        python_path: [src]
    """)
    completed = run_cli(command, "-c", str(path), cwd=tmp_path)
    assert (completed.returncode, completed.stdout) == (2, "")
    assert completed.stderr == (f"preflight: error: {path}:5:14: `dataloader.dataset`: expected "
                                f"\"package.module:callable\", found 'jobpkg.data'\n")


def test_an_exception_in_getitem_on_the_50th_sample_is_a_config_error_naming_the_jobs_frame(tmp_path):
    """The job's code's bug is its own on every node: exit 2, never a failed node (issue 35)."""
    path = _job(tmp_path, """
        dataset: "jobpkg.data:make"
        dataset_args: {n: 60, fail_at: 49}  # shuffled: every epoch of 60 reaches the 50th sample
        python_path: [src]
        num_workers: 2
        batch_size: 10
    """)
    code, report = _run(path)
    assert code == 2 and report["exit_code"] == 2
    [result] = report["results"]
    line = PACKAGE.splitlines().index('            raise ValueError(f"bad sample {index}")') + 1
    assert result["verdict"] == "error"
    assert (f"{path}:5:14: dataloader.dataset: ValueError: bad sample 49 (at jobpkg/data.py:{line} in "
            f"__getitem__): raised while the DataLoader loaded batches") in result["message"]


def test_a_factory_that_cannot_be_imported_at_run_is_exit_2_with_validates_line(tmp_path):
    """Issue 35: `validate` said exit 2, `run` exit 1 (a failed node) with another wording. Now `run` ends with the
    very line `validate` prints, and exits 2: the config's mistake never takes a node out of rotation."""
    path = _job(tmp_path, """
        dataset: "jobpkg.data:make"
    """)  # no python_path: jobpkg is not importable (run without validate first)
    validated = run_cli("validate", "-c", str(path), cwd=tmp_path)
    completed = run_cli("run", "-c", str(path), "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert (validated.returncode, completed.returncode) == (2, 2), completed.stderr
    assert completed.stderr.splitlines()[-1] == validated.stderr.strip()
    assert "Traceback" not in completed.stderr + completed.stdout
    [result] = json.loads((tmp_path / "r.json").read_text())["results"]
    assert result["verdict"] == "error" and result["message"] == validated.stderr.strip().removeprefix(
        "preflight: error: ")


@pytest.mark.parametrize("spec, line", [
    ("jobpkg.data:mkae", "cannot import jobpkg.data:mkae: jobpkg.data has no `mkae`: check the name after the colon"),
    ("jobpkg.dta:make", "cannot import jobpkg.dta:make: `jobpkg` imported"),
    ("jobpkg.data:raises", "jobpkg.data:raises(**dataset_args) raised KeyError: 'label' (at jobpkg/data.py:"),
])
def test_a_typo_or_a_bug_in_the_jobs_factory_at_run_is_exit_2_never_a_failed_node(tmp_path, spec, line):
    path = _job(tmp_path, f"""
        dataset: "{spec}"
        python_path: [src]
    """)
    completed = run_cli("run", "-c", str(path), cwd=tmp_path)
    assert completed.returncode == 2, completed.stderr
    last = completed.stderr.splitlines()[-1]
    assert last.startswith(f"preflight: error: {path}:5:14: dataloader.dataset: {line}"), last
    assert "Traceback" not in completed.stderr


def test_the_jobs_factory_failing_on_the_nodes_io_is_a_failed_node(tmp_path):
    """An EIO the job's factory meets reading its index file is the node's fault (a bad sector, a lost object):
    exit 1, whatever code raised it. Built for real: the index lies on a FUSE mount whose reads of it fail."""
    from tests import fusefs

    if fusefs.available():
        pytest.skip(fusefs.available())
    data = tmp_path / "data"
    data.mkdir()
    (data / "index.txt").write_text("0\n1\n")
    with fusefs.mounted(str(data), eio=["index.txt"]) as mount:
        path = _job(tmp_path, f"""
            dataset: "jobpkg.data:from_index"
            dataset_args: {{index: {mount}/index.txt}}
            python_path: [src]
        """)
        completed = run_cli("run", "-c", str(path), "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert completed.returncode == 1, completed.stderr
    [result] = json.loads((tmp_path / "r.json").read_text())["results"]
    assert "raised OSError: [Errno 5] Input/output error" in result["message"]
    assert result["message"].endswith("(a fault of the node's, EIO, not the code's: exit 1)")
    assert completed.stderr.splitlines()[-1].startswith("preflight: FAILED on ")


def test_a_config_error_beside_a_node_fault_still_fails_the_node(tmp_path):
    """A storage row the node fails is the node's, whatever mistake another instance holds: exit 1."""
    path = _job(tmp_path, """
        dataset: "jobpkg.data:mkae"
        python_path: [src]
        throughput: {min: 1 samples/s}
    """)
    path.write_text(path.read_text() + "  storage:\n    path: src\n    duration: 1s\n"
                    "    small_files: {min: 1000000 files/s}\n")
    completed = run_cli("run", "-c", str(path), "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    report = json.loads((tmp_path / "r.json").read_text())
    verdicts = {r["id"]: (r["verdict"], r["message"]) for r in report["results"]}
    assert completed.returncode == 1 and report["exit_code"] == 1, completed.stderr
    assert verdicts["dataloader.throughput"][1].startswith(f"{path}:5:14: dataloader.dataset: cannot import")
    assert verdicts["dataloader.throughput"][0] == "error" and verdicts["storage.small_files"][0] == "fail"


def test_an_iterable_dataset_that_hangs_is_a_timeout(tmp_path):
    path = _job(tmp_path, """
        dataset: "jobpkg.data:stuck"
        python_path: [src]
        num_workers: 1
        timeout: 5s
    """)
    code, report = _run(path)
    assert code == 1
    [result] = report["results"]
    assert result["verdict"] == "error" and "timed out after 5s and was killed" in result["message"]


def test_the_factory_runs_only_in_the_worker_at_run(tmp_path):
    # a factory that cannot be imported is the check's error at run (the CLI process never imports it), exit 2
    path = _job(tmp_path, """
        dataset: "jobpkg.data:make"
    """)
    code, report = _run(path)
    assert code == 2
    assert "cannot import jobpkg.data:make: no module named 'jobpkg' on python_path" in report["results"][0]["message"]


@pytest.mark.parametrize("batch, expected", [
    (torch.zeros(7, 3, 4), (7, 7 * 12 * 4)),
    ((torch.zeros(5, 2, dtype=torch.uint8), torch.arange(5)), (5, 10 + 5 * 8)),
    ({"image": torch.zeros(4, 2, dtype=torch.float16), "meta": {"id": torch.arange(4)}}, (4, 16 + 32)),
    ([{"x": torch.zeros(3)}], (3, 12)),  # a list whose first tensor is nested: still that tensor's length
    (torch.tensor(2.0), (1, 4)),  # a 0-d tensor is one sample
    (["a.jpg", "b.jpg"], (2, 0)),  # no tensor: a list of samples
])
def test_count_batch_counts_the_first_tensors_first_dimension_and_every_tensors_bytes(batch, expected):
    assert count_batch(batch) == expected


def test_count_batch_refuses_what_it_cannot_count():
    with pytest.raises(Uncountable, match="make collate_fn return tensors .* or name the job's count, count_samples"):
        count_batch(object())


def test_a_collate_fn_and_a_map_style_dataset_without_len_are_checked_at_validate(tmp_path):
    path = _job(tmp_path, """
        dataset: "jobpkg.data:make"
        collate_fn: "jobpkg.data:no_such_collate"
        python_path: [src]
    """)
    completed = run_cli("validate", str(path))
    assert completed.returncode == 2
    assert (f"{path}:6:17: dataloader.collate_fn: cannot import jobpkg.data:no_such_collate: jobpkg.data has no "
            f"`no_such_collate`") in completed.stderr
    (tmp_path / "src" / "jobpkg" / "data.py").write_text(PACKAGE + "\n\ndef lenless():\n"
                                                        "    return torch.utils.data.Dataset()\n")
    path.write_text(path.read_text().replace("jobpkg.data:make", "jobpkg.data:lenless").replace(
        '    collate_fn: "jobpkg.data:no_such_collate"\n', ""))
    completed = run_cli("validate", str(path))
    assert completed.returncode == 2
    assert "returned a map-style Dataset without __len__, which a DataLoader's sampler needs" in completed.stderr



@pytest.mark.parametrize("check, body, message", [
    ("dataloader", "collate_fn: \"jobpkg.data:collate\"",
     "`dataloader.collate_fn` has no effect: `dataloader.dataset` names the job's code (\"package.module:factory\")"),
    ("dataloader", "dataset_args: {root: /data}", "`dataloader.dataset_args` has no effect: `dataloader.dataset` names"),
    ("dataloader", "python_path: [src]", "remove `python_path`, or set `dataset` to the job's factory"),
    ("model", "model: resnet50\n    model_args: {depth: 50}", "`model.model_args` has no effect: `model.model` names"),
    ("model", "model: tiny\n    python_path: [src]", "`model.python_path` has no effect"),
    ("pipeline", "model: tiny\n    synthetic: true\n    python_path: [src]",
     "`pipeline.python_path` has no effect: neither `pipeline.dataset` nor `pipeline.worker_init_fn` nor "
     "`pipeline.loader` nor `pipeline.model` names the job's code"),
])
def test_an_option_for_the_jobs_code_without_that_code_is_a_config_error(tmp_path, check, body, message):
    """Given without a "package.module:factory" to serve, these options would be silently ignored."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "thresholds.yaml"
    path.write_text(f"version: 1\nchecks:\n  {check}:\n    {body}\n")
    completed = run_cli("validate", str(path))
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
    assert message in completed.stderr and completed.stderr.count("\n") == 1
    assert f"{path}:" in completed.stderr


def test_a_slow_jobs_dataset_is_told_to_profile_its_own_code_not_to_move_the_volume(tmp_path):
    """Issue 25: for the job's own Dataset "use a faster volume" pointed away from its __getitem__."""
    path = _job(tmp_path, """
        dataset: "jobpkg.data:make"
        dataset_args: {n: 400}
        python_path: [src]
        num_workers: 0
        batch_size: 10
        throughput: {min: 100000 samples/s}
    """)
    code, report = _run(path)
    throughput = next(r for r in report["results"] if r["metric"] == "throughput")
    assert code == 1 and throughput["verdict"] == "fail" and throughput["subject"] == "job_dataset"
    assert throughput["hint"].startswith("the job's Dataset delivers ")
    assert "profile one worker" in throughput["hint"] and "faster volume" not in throughput["hint"]


@pytest.mark.parametrize("spec, told", [
    # the package imported from python_path; its module's name is the typo (issue 35)
    ("jobpkg.dta:make", "`jobpkg` imported (from {src}/jobpkg) but holds no module `dta`: did you mean "
                        "`jobpkg.data`? Fix the module's name before the colon"),
    # the package's own name is the typo: its folder is on python_path
    ("jobpkgg.data:make", "no module named `jobpkgg`: did you mean `jobpkg` (in {src})? Fix the package's name "
                          "before the colon"),
])
def test_an_import_error_names_the_part_that_failed_not_python_path(tmp_path, spec, told):
    """Issue 35: "add the directory that holds `myjob` to python_path" when `myjob` was on it and the module name
    was the typo. Told at validate and at run, with the part that failed and the fix."""
    path = _job(tmp_path, f"""
        dataset: "{spec}"
        python_path: [src]
    """)
    told = told.format(src=tmp_path / "src")
    completed = run_cli("validate", str(path), cwd=tmp_path.parent)
    assert completed.returncode == 2 and "python_path" not in completed.stderr.split("working directory", 1)[-1]
    assert completed.stderr.startswith(f"preflight: error: {path}:5:14: ") and completed.stderr.endswith(
        f"{told}\n"), completed.stderr
    code, report = _run(path)
    [result] = report["results"]
    assert code == 2 and result["verdict"] == "error" and told in result["message"], result["message"]
