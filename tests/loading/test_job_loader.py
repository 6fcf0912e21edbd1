"""The job's own DataLoader (``loader: "package.module:factory"``), measured as that object (issue 32, case 3).

The job's package is ``test_settings``'s: ``make_loader`` builds a DataLoader under spawn over a Dataset
holding a module-level function, or a lambda; ``images_loader`` one a pipeline's model can take.
"""

from __future__ import annotations

import pytest

from preflight.checks import usercode
from preflight.loading import job_loader
from preflight.loading.source import Source, loader_for
from tests.loading.test_settings import _config, _run, _says, src  # noqa: F401  src: the fixture
from tests.helpers import run_check, run_cli

LOADER = """
    loader: "jobpkg.data:make_loader"
    loader_args: {{fixed: {fixed}}}
    python_path: [src]
    worker_pools: 1
    throughput: {{min: 1 samples/s}}
"""


def test_the_jobs_own_loader_under_spawn_is_measured_as_it_is(tmp_path, src):
    path = _config(tmp_path, LOADER.format(fixed="true"))
    assert run_cli("validate", str(path), cwd=tmp_path).returncode == 0
    code, results = _run(path)
    row = results["throughput"]
    assert code == 0 and row["verdict"] == "pass", row
    assert row["method"].startswith("the job's DataLoader(batch_size=4, num_workers=1, pin_memory=False, "
                                    "prefetch_factor=2, multiprocessing_context=spawn, persistent_workers=True, "
                                    "drop_last=True, sampler=SequentialSampler, collate_fn=default_collate) from "
                                    "jobpkg.data:make_loader(**loader_args), over Scaled (64 samples), samples "
                                    "counted from the batch sampler's indices")
    assert row["subject"] == "job_dataset"


def test_the_jobs_own_loader_that_cannot_pickle_its_dataset_is_the_error_of_loader(tmp_path, src):
    path = _config(tmp_path, LOADER.format(fixed="false"))
    message = ("dataloader.loader: loader jobpkg.data:make_loader (its dataset) contains an object that cannot be "
               "pickled (Scaled.scale: the lambda defined at jobpkg/data.py:28 (AttributeError: Can't pickle local "
               "object 'with_lambda.<locals>.<lambda>')): under multiprocessing_context spawn every worker receives "
               "a pickled copy; define it at module level")
    qualname = "with_lambda.<locals>.<lambda>"
    completed = run_cli("validate", str(path), cwd=tmp_path)
    assert completed.returncode == 2 and _says(f"preflight: error: {path}:5:13: {message}", qualname).match(
        completed.stderr), completed.stderr
    code, results = _run(path)
    assert code == 2 and results["throughput"]["verdict"] == "error"  # the job's code's mistake, as validate says
    assert _says(f"{path}:5:13: {message}", qualname).search(results["throughput"]["message"])


@pytest.mark.parametrize("option", ["batch_size: 32", "num_workers: 2", "multiprocessing_context: fork",
                                    "persistent_workers: true", "seed: 3", "dataset: \"jobpkg.data:make\"",
                                    "worker_sweep: true"])
def test_a_setting_beside_the_jobs_own_loader_is_refused_not_overridden(tmp_path, src, option):
    path = _config(tmp_path, LOADER.format(fixed="true") + f"    {option}\n")
    completed = run_cli("validate", str(path), cwd=tmp_path)
    name = option.split(":")[0]
    assert completed.returncode == 2
    assert (f"`dataloader.{name}` has no effect while `dataloader.loader` is set ({path}:5:13): remove `{name}`, "
            f"or remove `loader` to use it") in completed.stderr


def test_the_jobs_own_loader_is_counted_by_its_own_batch_sampler_epoch_after_epoch(src):
    options = {"loader": "jobpkg.data:make_loader", "loader_args": {"n": 10, "workers": 2, "context": "fork"},
               "python_path": [str(src)], "count_samples": ""}
    with usercode.on_path([str(src)]):
        made, job = job_loader.build(options)
        built = loader_for(options, Source(None, job_loader.describe(options, made), "", "job_dataset",
                                           job._replace(loader=made)))
        counted = built.fresh()
        assert counted.dataloader is made and built.workers == 2  # the job's object, not a copy
        for _ in range(2):  # drop_last: 10 samples in batches of 4 are 8 a epoch, from persistent workers
            assert sum(counted.count(batch)[0] for batch in counted.dataloader) == 8


def test_the_pipeline_check_feeds_the_model_from_the_jobs_own_loader(src):
    results = run_check("pipeline", 0.5, loader="jobpkg.data:images_loader", python_path=str(src), model="tiny",
                        input_shape=[3, 32, 32], num_classes=10)
    fed = results["samples_per_s[cpu]"]
    assert fed.measured and fed.value > 0, fed
    assert fed.method.startswith("the job's DataLoader(batch_size=8, num_workers=0, pin_memory=False, "
                                 "prefetch_factor=None, drop_last=False, sampler=RandomSampler")
    assert "each batch's 3x32x32 tensor fed to the model" in fed.method
