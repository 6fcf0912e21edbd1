"""The job's DataLoader settings (issue 32, case 3): each one the job passes changes what the gate measures.

Built for real: a job package under ``tmp_path/src`` whose Dataset holds a lambda or a module-level
function, loaded as the config says (spawn or fork), through the CLI; and ``loader_for`` over the job's
Dataset in this process, where each setting's effect is observed in the batches or in the marker files
that the job's ``worker_init_fn`` writes from each worker.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest
import torch

from preflight.checks import usercode
from preflight.checks.base import UserCodeError
from preflight.loading import settings, user
from preflight.loading.source import Source, loader_for
from tests.helpers import job_package, run_cli

PACKAGE = '''
import json
import os
import sys
import time

import torch


class Scaled(torch.utils.data.Dataset):
    """The job's Dataset: sample i is scale(a tensor of i), and its index."""

    def __init__(self, n, scale):
        self.n, self.scale = n, scale

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return self.scale(torch.full((4,), float(index))), index


def double(x):
    return x * 2


def with_lambda(n=256):
    return Scaled(n, lambda x: x * 2)  # the job's bug under spawn: a lambda cannot be pickled


def at_module_level(n=256):
    return Scaled(n, double)


def cache_localname(directory):  # webdataset/webdataset#361: a closure made by a function
    def f(x):
        return x + len(directory)
    return f


def with_closure(n=256):
    return Scaled(n, cache_localname("/tmp/_wids_cache"))


collate_first = lambda batch: batch[0]  # HazyResearch/cartridges#20: a lambda collate (module level, still local)


class Compose:  # torchvision.transforms.Compose's shape: a list of callables
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for transform in self.transforms:
            x = transform(x)
        return x


def get_loaders_from_params(n=256):  # catalyst-team/catalyst#1024, pytorch/xla#1554: a lambda among the transforms
    return Scaled(n, Compose([double, lambda x: x + 1]))


def evens(dataset):
    return list(range(0, len(dataset), 2))


class Slow(Scaled):
    def __getitem__(self, index):
        time.sleep(3)
        return super().__getitem__(index)


def slow(n=64):
    return Slow(n, double)


def make_loader(n=64, workers=1, context="spawn", fixed=True):
    """The job's own DataLoader, as its training script builds it."""
    dataset = at_module_level(n) if fixed else with_lambda(n)
    return torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=workers, drop_last=True,
                                       multiprocessing_context=context if workers else None,
                                       persistent_workers=workers > 0)


def images_loader(n=64):
    """A loader of 3x32x32 images and labels, as a pipeline's model takes them."""
    dataset = torch.utils.data.TensorDataset(torch.rand(n, 3, 32, 32), torch.zeros(n, dtype=torch.long))
    return torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True)


def slow_init(worker_id):
    """A worker_init_fn that loads a vocabulary for 3 s (MPI-Dortmund/tomotwin-cryoet#57: 8 s against timeout=5)."""
    time.sleep(3)


def mark(worker_id):
    """worker_init_fn: one file per worker started, saying who started it and with which seed."""
    info = torch.utils.data.get_worker_info()
    name = os.path.join(os.environ["MARKS"], f"{os.getpid()}-{worker_id}")
    with open(name, "w") as out:
        json.dump({"worker": worker_id, "seed": info.seed,
                   "forked": "preflight.loading.source" in sys.modules}, out)
'''


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return job_package(tmp_path / "src", "jobpkg", {"data": PACKAGE})


@pytest.fixture
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder where ``jobpkg.data:mark`` writes one file per worker started (``MARKS``)."""
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("MARKS", str(folder))
    return folder


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "thresholds.yaml"
    path.write_text("version: 1\ndefaults: {duration: 1s, timeout: 120s}\nchecks:\n  dataloader:\n"
                    + textwrap.indent(textwrap.dedent(body).strip() + "\n", "    "))
    return path


def _run(path: Path, marks: Path | None = None) -> tuple[int, dict[str, dict]]:
    env = {"MARKS": str(marks)} if marks else None
    completed = run_cli("run", "-c", str(path), "--format", "json", cwd=path.parent, env=env, timeout=240)
    report = json.loads(completed.stdout)
    return completed.returncode, {r["metric"]: r for r in report["results"]}


def _marks(directory: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(directory.iterdir())]


# The case itself: a Dataset holding a lambda under spawn fails the job; the gate says so, and why.

SPAWNED = """
    dataset: "jobpkg.data:{factory}"
    python_path: [src]
    multiprocessing_context: spawn
    num_workers: 1
    worker_pools: 1
    batch_size: 8
    throughput: {{min: 1 samples/s}}
"""
PICKLING = ("dataloader.dataset: dataset jobpkg.data:{factory} contains an object that cannot be pickled "
            "(Scaled.scale: {what} defined at jobpkg/data.py:{line} (AttributeError: Can't pickle local object "
            "'{qualname}')): under multiprocessing_context spawn every worker receives a pickled copy; define it at "
            "module level (a lambda or a function defined inside another cannot be pickled), or start workers "
            "with fork where the job can")


def _says(message: str, qualname: str) -> re.Pattern[str]:
    """``message`` as a pattern whose pickling error may be any Python's wording of it: 3.11's "AttributeError:
    Can't pickle local object 'f.<locals>.<lambda>'", 3.14's "PicklingError: Can't pickle local object <function
    f.<locals>.<lambda> at 0x...>"."""
    head, _, rest = message.partition("(AttributeError: ")
    tail = rest.partition(f"'{qualname}')")[2]
    return re.compile(re.escape(head) + r"\((\w+\.)*\w+Error: Can't pickle [^()]*" + re.escape(qualname)
                      + r"[^()]*\)" + re.escape(tail))


@pytest.mark.parametrize("factory, what, line, qualname", [
    ("with_lambda", "the lambda", 28, "with_lambda.<locals>.<lambda>"),
    ("with_closure", "the function cache_localname.<locals>.f", 36, "cache_localname.<locals>.f"),  # webdataset#361
])
def test_a_dataset_that_cannot_be_pickled_under_spawn_is_the_rows_error_naming_the_object_and_the_fix(
        tmp_path, src, factory, what, line, qualname):
    path = _config(tmp_path, SPAWNED.format(factory=factory))
    message = PICKLING.format(factory=factory, what=what, line=line, qualname=qualname)
    code, results = _run(path)
    assert code == 2  # the job's code's mistake, as validate says: never a failed node
    row = results["throughput"]
    assert row["verdict"] == "error"
    assert _says(message, qualname).search(row["message"]), row["message"]  # after the config's place
    assert f"{path}:5:14" in row["message"] and "Traceback" not in row["message"] and "preflight/" not in row["message"]
    # validate builds the dataset (as it already did) and pickles it, as the start method will: exit 2 at its line
    completed = run_cli("validate", str(path), cwd=tmp_path)
    assert completed.returncode == 2 and completed.stdout == ""
    assert _says(f"preflight: error: {path}:5:14: {message}\n", qualname).fullmatch(completed.stderr), completed.stderr


def test_the_same_dataset_under_fork_is_measured(tmp_path, src):
    """Fork sends no pickled copy: the lambda is the job's to keep, and the gate does not refuse it."""
    path = _config(tmp_path, SPAWNED.format(factory="with_lambda").replace("spawn", "fork"))
    assert run_cli("validate", str(path), cwd=tmp_path).returncode == 0
    code, results = _run(path)
    assert code == 0 and results["throughput"]["verdict"] == "pass", {k: results["throughput"].get(k) for k in ("message", "samples", "warnings", "stopped")}
    assert "multiprocessing_context=fork" in results["throughput"]["method"]


def test_a_module_level_dataset_under_spawn_is_measured_by_spawned_workers(tmp_path, src, marks):
    path = _config(tmp_path, SPAWNED.format(factory="at_module_level") + '    worker_init_fn: "jobpkg.data:mark"\n')
    assert run_cli("validate", str(path), cwd=tmp_path).returncode == 0
    code, results = _run(path, marks)
    assert code == 0 and results["throughput"]["verdict"] == "pass", {k: results["throughput"].get(k) for k in ("message", "samples", "warnings", "stopped")}
    assert results["throughput"]["value"] > 0
    assert "multiprocessing_context=spawn" in results["throughput"]["method"]
    started = _marks(marks)
    assert started and all(not m["forked"] for m in started)  # spawned: none inherited preflight's modules


@pytest.mark.parametrize("persistent", [True, False])
def test_persistent_workers_reach_the_spawned_pool(tmp_path, src, marks, persistent):
    """The setting is the DataLoader's: with it, the one worker the pool spawned serves the whole measurement
    (each fresh iterator of the job's next epoch would reuse it; test_persistent_workers_keep_one_pool_... shows
    that on the loader itself). Without it, a loader restarted at an epoch's end spawns its workers again, each
    importing torch: a 64-sample epoch under spawn read at 37 samples/s against 2,962 with persistent workers
    here, when the loop still restarted epochs inside its windows."""
    body = SPAWNED.format(factory="at_module_level") + f"""    worker_init_fn: "jobpkg.data:mark"
    persistent_workers: {str(persistent).lower()}
"""
    code, results = _run(_config(tmp_path, body), marks)
    assert code == 0, results["throughput"]
    started = _marks(marks)
    assert started and all(not m["forked"] for m in started)
    assert ("persistent_workers=True" in results["throughput"]["method"]) is persistent
    if persistent:
        assert len(started) == 1


def test_a_batch_later_than_loader_timeout_is_the_error_of_loader_timeout_as_it_is_the_jobs(tmp_path, src):
    path = _config(tmp_path, SPAWNED.format(factory="slow").replace("spawn", "fork") + "    loader_timeout: 0.5s\n")
    code, results = _run(path)
    row = results["throughput"]
    assert code == 1 and row["verdict"] == "error"
    assert row["message"].endswith(f"{path}:12:21: dataloader.loader_timeout: DataLoader timed out after 0.5 "
                                   f"seconds: no batch came from the workers within the DataLoader's timeout, and "
                                   f"the job's DataLoader raises the same: find what stalls a worker (a hung mount, "
                                   f"a slow __getitem__), or raise the timeout (a fault of the node's, stall, "
                                   f"not the code's: exit 1)")


def test_tomotwin_57_a_worker_init_fn_slower_than_loader_timeout_is_the_jobs_setting_exit_2(tmp_path, src):
    """The job's own loader fails after its timeout on every node: its setting, exit 2 naming both figures, not a
    stalled node (exit 1 would drain a healthy one from a Slurm prolog)."""
    body = (SPAWNED.format(factory="at_module_level").replace("spawn", "fork")
            + '    worker_init_fn: "jobpkg.data:slow_init"\n    loader_timeout: 1s\n')
    path = _config(tmp_path, body)
    code, results = _run(path)
    row = results["throughput"]
    assert code == 2 and row["verdict"] == "error", row
    assert re.search(r"dataloader\.worker_init_fn: the job's worker_init_fn slow_init has run [01]\.\d s in worker 0 "
                     r"and not returned, longer than the DataLoader's timeout of 1 s, so no batch can arrive in time "
                     r"on any node: the job's DataLoader fails the same way: make worker_init_fn faster, or raise "
                     r"the timeout above it", row["message"]), row["message"]
    assert "a fault of the node's" not in row["message"]


def test_a_lambda_collate_fn_under_spawn_is_the_error_of_collate_fn(tmp_path, src):
    """HazyResearch/cartridges#20: DataLoader(collate_fn=lambda ..., num_workers=1) dies at its first batch
    under spawn; a lambda bound to a module-level name cannot be pickled by name either."""
    path = _config(tmp_path, SPAWNED.format(factory="at_module_level") + '    collate_fn: "jobpkg.data:collate_first"\n')
    completed = run_cli("validate", str(path), cwd=tmp_path)
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"preflight: error: {path}:12:17: dataloader.collate_fn: collate_fn "
                                       f"jobpkg.data:collate_first contains an object that cannot be pickled "
                                       f"(the lambda defined at jobpkg/data.py:45 ")


def test_the_settings_were_refused_as_unknown_keys_before(tmp_path, src):
    """Each is now an option of the check, in its table (the docs and the JSON schema are generated from it)."""
    from preflight.checks import dataloader, pipeline

    names = {o.name for o in dataloader.OPTIONS}
    wanted = {"multiprocessing_context", "persistent_workers", "worker_init_fn", "drop_last", "loader_timeout",
              "in_order", "seed", "shuffle", "sampler"}
    assert wanted <= names and wanted <= {o.name for o in pipeline.OPTIONS}


# Each setting observed on the loader the checks build, over the job's Dataset in this process.

def _job(src: Path, factory: str = "at_module_level", n: int = 10, **options: object):
    base = {"num_workers": 0, "pin_memory": False, "batch_size": 4, "prefetch_factor": 2, "count_samples": "",
            "python_path": [str(src)], "dataset": f"jobpkg.data:{factory}", "dataset_args": {"n": n},
            "collate_fn": "", "sampler": "", "worker_init_fn": ""}
    base.update(options)
    job = user.build(base)
    return loader_for(base, Source(None, "job", "", "job_dataset", job))


def _epoch(built) -> tuple[list[int], int]:
    """The indices one epoch of a fresh DataLoader delivers, and the samples its count says."""
    counted = built.fresh()
    indices, samples = [], 0
    for batch in counted.dataloader:
        indices += batch[1].tolist()
        samples += counted.count(batch)[0]
    return indices, samples


@pytest.mark.parametrize("drop_last, samples", [(False, 10), (True, 8)])
def test_drop_last_drops_the_short_batch_from_each_epoch_and_from_the_count(src, drop_last, samples):
    with usercode.on_path([str(src)]):
        indices, counted = _epoch(_job(src, drop_last=drop_last))
    assert len(indices) == counted == samples


def test_a_seed_fixes_the_order_and_the_workers_seeds_as_the_jobs_generator_does(src, marks):
    orders, seeds = [], []
    with usercode.on_path([str(src)]):
        for seed in (7, 7, "auto"):
            for marker in marks.iterdir():
                marker.unlink()
            built = _job(src, n=64, seed=seed, num_workers=2, worker_init_fn="jobpkg.data:mark")
            orders.append(_epoch(built)[0])
            seeds.append(sorted(m["seed"] for m in _marks(marks)))
    assert orders[0] == orders[1] != orders[2]
    assert seeds[0] == seeds[1] != seeds[2] and len(set(seeds[0])) == 2  # one seed per worker, reproduced


def test_shuffle_false_reads_in_order_and_a_sampler_picks_the_indices(src):
    with usercode.on_path([str(src)]):
        assert _epoch(_job(src, shuffle=False))[0] == list(range(10))
        indices, counted = _epoch(_job(src, shuffle=False, sampler="jobpkg.data:evens"))
    assert indices == [0, 2, 4, 6, 8] and counted == 5


@pytest.mark.parametrize("persistent, pools", [(True, 1), (False, 3)])
def test_persistent_workers_keep_one_pool_across_epochs_and_without_it_each_epoch_starts_one(
        src, marks, persistent, pools):
    with usercode.on_path([str(src)]):
        built = _job(src, num_workers=2, persistent_workers=persistent, worker_init_fn="jobpkg.data:mark")
        loader = built.fresh().dataloader
        for _ in range(3):  # three epochs of the job's one DataLoader
            assert len([batch for batch in loader]) == 3
        del loader
    assert len(_marks(marks)) == 2 * pools  # each worker started writes its own marker


def test_in_order_and_the_loaders_timeout_reach_the_dataloader(src):
    with usercode.on_path([str(src)]):
        built = _job(src, num_workers=1, in_order=False, loader_timeout=0.5)
    loader = built.fresh().dataloader
    assert loader.in_order is False and loader.timeout == 0.5
    assert "timeout=0.5, in_order=False" in built.method


def test_in_order_on_a_torch_without_it_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(settings, "supports_in_order", lambda: False)
    settings.refuse_unsupported({"in_order": True})  # the default asks nothing of torch
    with pytest.raises(UserCodeError, match=r"in_order: false needs torch >= 2.6, whose DataLoader takes it; this "
                                            r"image has torch .*: upgrade torch, or remove in_order"):
        settings.refuse_unsupported({"in_order": False})


def test_a_lambda_among_a_datasets_transforms_is_named_by_its_path(src):
    """catalyst-team/catalyst#1024 (and pytorch/xla#1554): "Can't pickle local object
    'get_loaders_from_params.<locals>.<lambda>'" from a lambda in a Compose of transforms, under spawn."""
    options = {"num_workers": 2, "multiprocessing_context": "spawn", "python_path": [str(src)],
               "dataset": "jobpkg.data:get_loaders_from_params", "dataset_args": {}, "collate_fn": "",
               "count_samples": "", "sampler": "", "worker_init_fn": "", "in_order": True}
    with pytest.raises(UserCodeError) as raised:
        user.check_user_code(options)
    assert raised.value.option == "dataset"
    qualname = "get_loaders_from_params.<locals>.<lambda>"
    assert _says("dataset jobpkg.data:get_loaders_from_params contains an object that cannot be pickled (Scaled.scale."
                 "transforms[1]: the lambda defined at jobpkg/data.py:59 (AttributeError: Can't pickle local object "
                 f"'{qualname}')): under multiprocessing_context spawn", qualname).match(str(raised.value))
    settings.refuse_unpicklable({**options, "multiprocessing_context": "fork"}, 2, {"dataset": raised})  # fork: none
    with usercode.on_path([str(src)]):  # no workers: nothing is pickled either
        settings.refuse_unpicklable(options, 0, {"dataset": user.build(options).dataset})


@pytest.mark.parametrize("chosen, default, says", [
    ("forkserver", "fork", "under multiprocessing_context forkserver every worker"),
    ("default", "spawn", "under multiprocessing_context spawn (this Python's default) every worker"),  # macOS
    ("default", "forkserver", "under multiprocessing_context forkserver (this Python's default) every worker"),  # 3.14
])
def test_every_start_method_that_pickles_is_probed_the_default_included(monkeypatch, chosen, default, says):
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: default)
    with pytest.raises(UserCodeError, match=re.escape(says)):
        settings.refuse_unpicklable({"multiprocessing_context": chosen, "worker_init_fn": "job.x:init"}, 1,
                                    {"worker_init_fn": lambda worker: None})
    settings.refuse_unpicklable({"multiprocessing_context": "fork"}, 1, {"worker_init_fn": lambda worker: None})


def test_the_probe_pickles_no_tensor_and_names_the_innermost_object():
    big = torch.utils.data.TensorDataset(torch.zeros(256, 1024, 1024, dtype=torch.uint8))  # 256 MiB, never copied
    assert settings.unpicklable(big) == ""
    nested = {"transforms": [abs, lambda x: x]}
    assert settings.unpicklable(nested).startswith("dict['transforms'][1]: the lambda defined at ")


def test_our_own_file_samples_are_read_under_spawn_with_the_jobs_worker_init_fn(tmp_path, src, marks):
    """Preflight's own Dataset over files is sent to spawned workers too: it must pickle. The job's
    worker_init_fn runs in each of them (python_path serves it without a dataset: it is the job's code)."""
    data = tmp_path / "data"
    for folder in range(4):
        (data / f"c{folder}").mkdir(parents=True)
        for index in range(40):
            (data / f"c{folder}" / f"{index}.bin").write_bytes(os.urandom(4096))
    path = _config(tmp_path, f"""
        path: {data}
        multiprocessing_context: spawn
        num_workers: 1
        worker_pools: 1
        worker_init_fn: "jobpkg.data:mark"
        python_path: [src]
        throughput: {{min: 1 samples/s}}
    """)
    assert run_cli("validate", str(path), cwd=tmp_path).returncode == 0
    code, results = _run(path, marks)
    assert code == 0 and results["throughput"]["verdict"] == "pass", {k: results["throughput"].get(k) for k in ("message", "samples", "warnings", "stopped")}
    assert "multiprocessing_context=spawn" in results["throughput"]["method"]
    assert "worker_init_fn=jobpkg.data:mark" in results["throughput"]["method"]
    started = _marks(marks)
    assert started and all(not m["forked"] and m["worker"] == 0 for m in started)

