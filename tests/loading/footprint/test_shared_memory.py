"""``dataloader.shm_needed`` / ``shm_headroom``: the /dev/shm the job's batches in flight need, against what is free.

The real case (issue 36): a 64 MiB tmpfs on /dev/shm (Docker's and Kubernetes' default) in a private mount
namespace, a job whose samples are 3x224x224 float32 at batch 64 with 4 workers: the plain torch loop dies
(ENOSPC, "unable to allocate shared memory(shm) for file </torch_...>", a bus error on older torch) or hangs
(a worker's queue feeder thread fails to move a tensor there and the batch never comes: the loop waits for its
DataLoader timeout), and preflight fails the row first, with the size to set, and does not crash itself. With
1 GiB the same job passes. Public reports built as shapes below: MIC-DKFZ/nnUNet#294 (the tensors moved there at
pickling, not by collate), idiap/ESLAM#20 (a mount others fill), bytedance/Protenix#2 (one worker still dies),
ultralytics/ultralytics#26086 (a Dataset's tensor cache moved there when spawned workers start),
embeddings-benchmark/mteb#4747 (frames that view a whole decoded clip send the clip). The model's terms are
measured against a real loop's peak in bench/shm_needed.py.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from preflight.loading.footprint import shared_memory
from tests.helpers import in_mount_namespace, job_package, memory_limited_cgroup, run_check, write_config

SAMPLE = 3 * 224 * 224 * 4  # bytes of one 3x224x224 float32 sample: 602,112
BATCH = 64 * SAMPLE  # 38,535,168 bytes = 38.5 MB = 36.75 MiB
LABELS = 4096  # the batch's 64 int64 labels: one page of their own segment
# 4 workers x prefetch_factor 2, + 2 the training loop holds (no pinning without CUDA): its batch, and the one before
# it while __next__ returns the next (bench/shm_needed.py saw 9.8 batches' worth at once)
IN_FLIGHT = 4 * 2 + 2
SEMS = (3 * 4 + 8) * 4096  # the loader's SemLocks at 4 workers (sem_open: a page each in /dev/shm): 80 KiB
# What the plain loop says when /dev/shm runs out: torch 2.x's ENOSPC (from the worker's collate or, printed, from
# its queue feeder thread), the older "unable to write to file", or the SIGBUS of a page past the mount's end.
DIED = ("No space left on device", "unable to write to file", "Bus error")

JOB = """
import os

import numpy
import torch
from torch.utils.data import Dataset


class Images(Dataset):
    \"\"\"ImageNet-sized float32 samples and an int label, as a vision job's transforms return them.\"\"\"

    def __init__(self, size=2048, shape=(3, 224, 224)):
        self.size, self.shape = size, shape

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return torch.zeros(*self.shape), index % 1000


def images(size=2048):
    return Images(size)


def large():
    \"\"\"3x512x512 float32 samples (3 MiB each), as a structure-prediction job's features (bytedance/Protenix#2).\"\"\"
    return Images(256, (3, 512, 512))


class Growing(Dataset):
    \"\"\"Samples of varying size: the first batch's are a few bytes, every later one's 3x224x224 float32.\"\"\"

    def __len__(self):
        return 2048

    def __getitem__(self, index):
        return torch.zeros(1) if index < 64 else torch.zeros(3, 224, 224)


def growing():
    return Growing()


class Cases(Dataset):
    \"\"\"numpy samples, collated by the job's own function into from_numpy tensors (MIC-DKFZ/nnUNet#294).\"\"\"

    def __len__(self):
        return 2048

    def __getitem__(self, index):
        return numpy.zeros((3, 224, 224), numpy.float32)


def cases():
    return Cases()


def stack(samples):
    \"\"\"The job's collate_fn: a dict of a from_numpy tensor and the keys; torch moves the tensor to /dev/shm only
    when the worker's queue pickles it (reduce_storage), in a feeder thread whose failure never reaches the loop.\"\"\"
    return {"data": torch.from_numpy(numpy.stack(samples)), "keys": [str(i) for i in range(len(samples))]}


class LazyOpen(Dataset):
    \"\"\"Opens its handle on its first __getitem__, as h5py's users are told to, and refuses one another process
    opened: an HDF5 handle inherited across fork reads garbage or fails (pytorch/pytorch#11887,
    torchmd/torchmd-net#84).\"\"\"

    def __init__(self):
        self.opened_in = None

    def __len__(self):
        return 512

    def __getitem__(self, index):
        if self.opened_in is None:
            self.opened_in = os.getpid()
        if self.opened_in != os.getpid():
            raise RuntimeError(f"handle opened in pid {self.opened_in}, read in pid {os.getpid()}")
        return torch.zeros(3, 32, 32)


def lazy():
    return LazyOpen()


class Tokens(Dataset):
    \"\"\"A language model's pre-batched token stream (batch_size=None): 8 MiB of int64 tokens loaded once, each item
    a 16x1024 view of them. torch sends a view by its whole storage, and the worker's first send moves the storage
    to /dev/shm for good: once per worker, not once per batch in flight.\"\"\"

    def __init__(self):
        self.tokens = torch.arange(1 << 20)

    def __len__(self):
        return 64

    def __getitem__(self, index):
        return self.tokens[index * 16384:(index + 1) * 16384].view(16, 1024)


def tokens():
    return Tokens()


class Cached(Dataset):
    \"\"\"Images decoded once into a RAM cache, a 24 MiB uint8 tensor (ultralytics/ultralytics#26086's cache held as a
    tensor), each sample a float copy of one 3x32x32 image in it.\"\"\"

    def __init__(self):
        self.cache = torch.zeros(8192, 3, 32, 32, dtype=torch.uint8)
        self.me = self  # a Dataset that refers to itself: walked once

    def __len__(self):
        return len(self.cache)

    def __getitem__(self, index):
        return self.cache[index].float()


def cached():
    return Cached()


class Videos(Dataset):
    \"\"\"Each sample one clip decoded whole (64 frames of 3x32x32 float32, 768 KiB), of which every 8th frame is
    returned: a view of the clip (embeddings-benchmark/mteb#4747).\"\"\"

    def __len__(self):
        return 512

    def __getitem__(self, index):
        return torch.zeros(64, 3, 32, 32)[::8]


def videos():
    return Videos()


def as_list(samples):
    \"\"\"The job's collate_fn for clips of varying length: the samples as they are, no copy.\"\"\"
    return samples


def token_loader():
    return torch.utils.data.DataLoader(Tokens(), batch_size=None, shuffle=True, num_workers=2, prefetch_factor=2,
                                       pin_memory=False)


def loader():
    \"\"\"The job's own DataLoader, as its training script builds it.\"\"\"
    return torch.utils.data.DataLoader(Images(), batch_size=64, num_workers=4, prefetch_factor=2, shuffle=True)
"""

# The job's own loop, as it trains: its DataLoader with the same settings, each batch held while the next comes. Its
# timeout bounds the wait for a batch a worker could not send (the feeder thread's ENOSPC), which else is for ever.
PLAIN_LOOP = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
from shmjob import data

factory, batch, workers, collate = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
batch = None if batch == "none" else int(batch)
context = collate.pop() if collate and collate[-1] in ("spawn", "forkserver") else None
loader = torch.utils.data.DataLoader(getattr(data, factory)(), batch_size=batch, num_workers=workers,
                                     prefetch_factor=2, shuffle=True, timeout=30,
                                     collate_fn=getattr(data, collate[0]) if collate else None,
                                     multiprocessing_context=context)
for step, batch in enumerate(loader):
    pass
print("epoch done", step + 1, "batches")
"""


def _config(tmp_path: Path, body: str) -> Path:
    """A config of one dataloader instance over the job's package (written under ``tmp_path/src``) with ``body``."""
    src = tmp_path / "src"
    if not src.exists():
        job_package(src, "shmjob", {"data": JOB})
        (tmp_path / "loop.py").write_text(PLAIN_LOOP)
    lines = f"python_path: [{src}]\nduration: 2s\nworker_pools: 1\npin_memory: false\n{textwrap.dedent(body)}"
    return write_config(tmp_path, "version: 1\nchecks:\n  dataloader:\n" + textwrap.indent(lines, "    "))


@pytest.fixture()
def job(tmp_path: Path) -> Path:
    """The config of the issue's job: 3x224x224 float32 samples, batch 64, 4 workers x prefetch_factor 2."""
    return _config(tmp_path, """
        dataset: "shmjob.data:images"
        batch_size: 64
        num_workers: 4
        prefetch_factor: 2
        shm_headroom: {min: 0 %}
        """)


def _shm(size: str, before: str = "") -> str:
    """Shell that mounts a fresh tmpfs of ``size`` at /dev/shm, then runs ``before`` (leftovers written there)."""
    return f"mount -t tmpfs -o size={size} tmpfs /dev/shm && {before + ' && ' if before else ''}"


def _loop(config: Path, size: str, *args: str, before: str = "") -> subprocess.CompletedProcess[str]:
    """The plain loop (``PLAIN_LOOP``: factory, batch size, workers[, collate]) on a /dev/shm of ``size``."""
    root = config.parent
    return in_mount_namespace(_shm(size, before) + f"{sys.executable} {root / 'loop.py'} {root / 'src'} "
                              + " ".join(args), timeout=300)


def _gate(config: Path, size: str, before: str = "", prefix: str = "") -> tuple[subprocess.CompletedProcess[str], dict]:
    """preflight's run of ``config`` on a /dev/shm of ``size`` (``prefix`` before its command), and its results."""
    report = config.parent / "r.json"
    gate = in_mount_namespace(_shm(size, before) + f"NO_COLOR=1 {prefix} {sys.executable} -m preflight run -c "
                              f"{config} --json {report}", timeout=300)
    assert "Traceback" not in gate.stderr + gate.stdout, gate.stderr
    return gate, {r["id"]: r for r in json.loads(report.read_text())["results"]}


def _died(loop: subprocess.CompletedProcess[str]) -> None:
    said = loop.stderr + loop.stdout
    assert loop.returncode != 0 and "epoch done" not in said, said
    assert any(sign in said for sign in DIED), said[-2000:]


def test_a_64_mib_shm_kills_the_plain_loop_and_preflight_fails_the_row_first_with_the_size_to_set(job):
    _died(_loop(job, "64m", "images", "64", "4"))
    gate, results = _gate(job, "64m")
    assert gate.returncode == 1, gate.stderr
    needed, headroom = results["dataloader.shm_needed"], results["dataloader.shm_headroom"]
    assert needed["value"] == IN_FLIGHT * (BATCH + LABELS) + SEMS  # 10 x 38.5 MB + 80 KiB = 367.6 MiB
    assert needed["message"] == "measured 367.6 MiB (no threshold); 64 MiB free of 64 MiB on /dev/shm"
    assert headroom["verdict"] == "fail"
    assert headroom["value"] == pytest.approx(100 * (64 * 2**20 - IN_FLIGHT * (BATCH + LABELS) - SEMS)
                                              / (64 * 2**20))
    assert headroom["message"] == ("measured -474.4%, required >= 0% (367.6 MiB needed, 64 MiB free of 64 MiB on "
                                   "/dev/shm)")
    # The batch size that causes it, the arithmetic, the size to set, and what fits instead (64 MiB over 10 batches
    # of 602 kB samples: 11; one worker's 4 batches of 36.75 MiB would not fit either).
    assert headroom["hint"] == (
        "batch_size 64 needs 367.6 MiB of /dev/shm in flight (10 batches of 36.75 MiB (64 samples): num_workers 4 x "
        "prefetch_factor 2 + 2 the training loop holds (its batch and the one before it), and 80 KiB of the "
        "loader's semaphores) and 64 MiB is free: the job's workers die with a bus error "
        "(or \"unable to write to file </torch_...>\"): start the container with --shm-size=512m, or in Kubernetes "
        "mount an emptyDir with medium: Memory and sizeLimit: 512Mi at /dev/shm (it counts against the pod's memory "
        "limit); or lower batch_size to 11 or num_workers to 0 (the main process loads: nothing passes through "
        "/dev/shm, nothing loads in parallel)")
    assert "one batch loaded as num_workers 0 loads it (in a child process) before any worker" in headroom["method"]
    assert "dataloader.throughput" not in results  # no threshold on it here: its unmeasured row is not judged
    assert json.loads((job.parent / "r.json").read_text())["exit_code"] == 1


def test_a_big_enough_shm_passes_the_same_job_and_its_loop_ends(job):
    loop = _loop(job, "1g", "images", "64", "4")
    assert loop.returncode == 0 and "epoch done 32 batches" in loop.stdout, loop.stderr
    gate, results = _gate(job, "1g")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert results["dataloader.shm_needed"]["value"] == IN_FLIGHT * (BATCH + LABELS) + SEMS
    assert results["dataloader.shm_headroom"]["verdict"] == "pass"
    assert results["dataloader.shm_headroom"]["value"] == pytest.approx(
        100 * (2**30 - IN_FLIGHT * (BATCH + LABELS) - SEMS) / 2**30, abs=0.5)
    assert results["dataloader.throughput"]["value"] > 0  # the pools ran: the loader's figures are measured


def test_the_other_rows_say_why_no_pool_started_and_their_gate_fails_closed(job):
    job.write_text(job.read_text().replace("shm_headroom: {min: 0 %}", "throughput: {min: 1 samples/s}"))
    gate, results = _gate(job, "64m")
    assert gate.returncode == 1
    throughput = results["dataloader.throughput"]
    assert throughput["verdict"] == "fail"
    assert throughput["message"].startswith(
        "could not measure: not measured: the loader's batches in flight need 367.6 MiB of /dev/shm (10 batches of "
        "36.75 MiB (64 samples): num_workers 4 x prefetch_factor 2 + 2 the training loop holds (its batch and the one "
        "before it), and 80 KiB of the loader's semaphores), which has 64 MiB free; its workers would die with a "
        "bus error, as the job's would, so no worker was started: "
        "dataloader.shm_headroom says the size to set")


def test_the_pipeline_check_starts_no_worker_that_would_die_and_names_the_size_to_set(tmp_path):
    # The pipeline check feeds the same loader to the model: on 64 MiB its workers died with a traceback in the row.
    config = write_config(tmp_path, """
        version: 1
        checks:
          pipeline:
            synthetic: true
            model: tiny
            input_shape: [3, 224, 224]
            batch_size: 64
            num_workers: 4
            prefetch_factor: 2
            pin_memory: false
            duration: 0.5s
            samples_per_s: {min: 1 samples/s}
        """)
    gate, results = _gate(config, "64m")
    assert gate.returncode == 1
    fed = next(r for key, r in results.items() if key.startswith("pipeline.samples_per_s"))
    assert fed["verdict"] == "fail"
    assert fed["message"].startswith("could not measure: not measured: the loader's batches in flight need 367.5 MiB "
                                     "of /dev/shm (10 batches of 36.75 MiB (64 samples)")
    assert "--shm-size=512m" in fed["message"] and "sizeLimit: 512Mi" in fed["message"]


def test_a_memory_limit_below_the_free_shm_is_named_beside_it(job):
    """kubernetes/kubernetes#76263: a memory-backed emptyDir shows half the node's RAM whatever its sizeLimit, and
    its pages count against the pod's memory limit: 4 GiB of /dev/shm in a 1.5 GiB memory cgroup."""
    with memory_limited_cgroup(1536 << 20) as (_, prefix):
        gate, results = _gate(job, "4g", prefix=shlex.join(prefix))
    assert gate.returncode == 0, gate.stdout + gate.stderr  # 368 MiB fits both: the row passes, with the note
    assert results["dataloader.shm_needed"]["message"] == (
        "measured 367.6 MiB (no threshold); 4 GiB free of 4 GiB on /dev/shm; the cgroup memory limit, 1.5 GiB, is "
        "below that: the segments' pages count against it, so memory_headroom judges the rest")


def test_the_worker_sweep_leaves_out_the_counts_whose_batches_would_not_fit(tmp_path):
    # 27 samples of 588 KiB: 15.5 MiB a batch; 1 worker holds 4 of them (62 MiB of 64), 2 workers 6 (93 MiB).
    config = _config(tmp_path, """
        dataset: "shmjob.data:images"
        batch_size: 27
        num_workers: 1
        prefetch_factor: 2
        worker_sweep: true
        shm_headroom: {min: 0 %}
        recommended_num_workers: {min: 1, severity: warn}
        """)
    gate, results = _gate(config, "64m")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert results["dataloader.shm_headroom"]["verdict"] == "pass"
    swept = results["dataloader.recommended_num_workers"]
    # one count left: no knee is told from it (issue 42 case 4), and the method says why the other was left out
    assert swept["value"] is None and swept["verdict"] == "warn", swept
    assert "only one worker count could be measured" in swept["message"], swept
    assert "; not swept at 2 workers: their batches in flight would not fit /dev/shm (shm_headroom)" in swept["method"]


# --- public reports of the same kind, built as shapes -----------------------------------------------------------


def test_a_collate_of_from_numpy_tensors_hangs_the_plain_loop_and_is_projected_the_same(tmp_path):
    """MIC-DKFZ/nnUNet#294, ostris/ai-toolkit#515: "unable to write to file </torch_...>" raised in reduce_storage,
    in the worker's queue feeder thread: the tensor goes to /dev/shm when pickled, and the loop waits for ever."""
    config = _config(tmp_path, """
        dataset: "shmjob.data:cases"
        collate_fn: "shmjob.data:stack"
        batch_size: 64
        num_workers: 4
        prefetch_factor: 2
        shm_headroom: {min: 0 %}
        """)
    loop = _loop(config, "64m", "cases", "64", "4", "stack")
    _died(loop)
    assert "DataLoader timed out after 30 seconds" in loop.stderr  # no batch came: the feeder's error never did
    gate, results = _gate(config, "64m")
    assert gate.returncode == 1
    assert results["dataloader.shm_needed"]["value"] == IN_FLIGHT * BATCH + SEMS  # the keys: pickled, 0 bytes
    assert results["dataloader.shm_headroom"]["verdict"] == "fail"


def test_a_mount_others_fill_is_short_by_what_they_hold_and_the_size_to_set_keeps_it(tmp_path):
    """idiap/ESLAM#20: "No space left on device (28)" where other work on the host holds /dev/shm: a 512 MiB mount
    with 320 MiB left there by a job that died fits the issue's 368 MiB job no more than 64 MiB would."""
    config = _config(tmp_path, """
        dataset: "shmjob.data:images"
        batch_size: 64
        num_workers: 4
        prefetch_factor: 2
        shm_headroom: {min: 0 %}
        """)
    leftover = "dd if=/dev/zero of=/dev/shm/torch_4242_1_0 bs=1M count=320 status=none"
    _died(_loop(config, "512m", "images", "64", "4", before=leftover))
    gate, results = _gate(config, "512m", before=leftover)
    assert gate.returncode == 1
    headroom = results["dataloader.shm_headroom"]
    assert headroom["verdict"] == "fail"
    assert headroom["message"].endswith("(367.6 MiB needed, 192 MiB free of 512 MiB on /dev/shm)")
    assert "--shm-size=1g" in headroom["hint"] and "sizeLimit: 1Gi" in headroom["hint"]  # 368 + 320 MiB held
    assert "lower batch_size to 33 or num_workers to 1" in headroom["hint"]


def test_one_worker_still_dies_with_large_samples_and_the_fix_says_num_workers_0_or_the_batch_that_fits(tmp_path):
    """bytedance/Protenix#2: "I tried --data.num_dl_worker 1, it didn't resolve the issue": one worker still holds
    prefetch_factor batches and the loop two; 16 samples of 3x512x512 float32 (48 MiB a batch) x 4 > 64 MiB."""
    config = _config(tmp_path, """
        dataset: "shmjob.data:large"
        batch_size: 16
        num_workers: 1
        prefetch_factor: 2
        shm_headroom: {min: 0 %}
        """)
    _died(_loop(config, "64m", "large", "16", "1"))
    gate, results = _gate(config, "64m")
    assert gate.returncode == 1
    per_batch = 16 * 3 * 512 * 512 * 4 + 4096  # 50,331,648 B of samples and a page of labels
    assert results["dataloader.shm_needed"]["value"] == 4 * per_batch + (3 + 8) * 4096  # and 1 worker's semaphores
    hint = results["dataloader.shm_headroom"]["hint"]
    assert ("(4 batches of 48.01 MiB (16 samples): num_workers 1 x prefetch_factor 2 + 2 the training loop holds "
            "(its batch and the one before it), and 44 KiB of the loader's semaphores)" in hint)
    assert "--shm-size=256m" in hint  # 192 MiB, rounded up to a power of two
    assert hint.endswith("or lower batch_size to 5 or num_workers to 0 (the main process loads: nothing passes "
                         "through /dev/shm, nothing loads in parallel)")


@pytest.mark.parametrize("how", ['loader: "shmjob.data:loader"',  # the job's DataLoader: 4 workers x 2, batch 64
                                 "{synthetic: true, batch_size: 64, num_workers: 4, prefetch_factor: 2, "
                                 "pin_memory: false}"])
def test_the_jobs_own_dataloader_and_synthetic_samples_are_projected_the_same_way(tmp_path, how):
    src = job_package(tmp_path / "src", "shmjob", {"data": JOB})
    settings = how if how.startswith("loader") else "\n".join(
        f"{pair.split(': ')[0]}: {pair.split(': ')[1]}" for pair in how.strip("{}").split(", "))
    body = f"{settings}\npython_path: [{src}]\n" if how.startswith("loader") else f"{settings}\n"
    body += "duration: 2s\nworker_pools: 1\nshm_headroom: {min: 0 %}\n"
    config = write_config(tmp_path, "version: 1\nchecks:\n  dataloader:\n" + textwrap.indent(body, "    "))
    gate = in_mount_namespace(f"mount -t tmpfs -o size=64m tmpfs /dev/shm && NO_COLOR=1 {sys.executable} -m "
                              f"preflight run -c {config} --json {tmp_path / 'r.json'}", timeout=300)
    assert gate.returncode == 1 and "Traceback" not in gate.stderr, gate.stdout + gate.stderr
    results = {r["id"]: r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    labels = LABELS if how.startswith("loader") else 0  # synthetic samples carry no label
    assert results["dataloader.shm_needed"]["value"] == IN_FLIGHT * (BATCH + labels) + SEMS
    assert results["dataloader.shm_headroom"]["verdict"] == "fail"
    assert "--shm-size=512m" in results["dataloader.shm_headroom"]["hint"]


def test_a_later_batch_larger_than_the_first_kills_a_worker_and_the_rows_say_so_not_a_traceback(tmp_path):
    # The first batch is 64 one-float samples, the rest 3x224x224: the projection fits, the run does not. The
    # workers' ENOSPC reaches the main process as the job's Dataset's exception would; the rows name /dev/shm.
    src = job_package(tmp_path / "src", "shmjob", {"data": JOB})
    config = write_config(tmp_path, f"""
        version: 1
        checks:
          dataloader:
            dataset: "shmjob.data:growing"
            python_path: [{src}]
            shuffle: false
            num_workers: 4
            pin_memory: false
            duration: 2s
            worker_pools: 1
            shm_headroom: {{min: 0 %}}
            throughput: {{min: 1 samples/s}}
        """)
    gate = in_mount_namespace(f"mount -t tmpfs -o size=64m tmpfs /dev/shm && NO_COLOR=1 {sys.executable} -m "
                              f"preflight run -c {config} --json {tmp_path / 'r.json'}", timeout=300)
    assert gate.returncode == 1 and "Traceback" not in gate.stderr, gate.stdout + gate.stderr
    results = {r["id"]: r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    for row in ("dataloader.throughput", "dataloader.shm_headroom"):
        assert results[row]["verdict"] == "fail"
        assert results[row]["message"].startswith("could not measure: a DataLoader worker died for want of /dev/shm (")
        assert "No space left on device" in results[row]["message"] or "Bus error" in results[row]["message"]
        assert "needs more than shm_needed projected: raise /dev/shm (docker run --shm-size" in results[row]["message"]


def test_views_of_a_tensor_the_dataset_keeps_count_once_per_worker_and_fit_where_their_loop_does(tmp_path):
    # 2 workers x prefetch 2 of 16x1024 views of an 8 MiB token tensor: each worker moves its copy of the tensor to
    # /dev/shm at its first send and keeps it (16 MiB in all); counted per batch in flight it was 6 x 8 MiB = 48 MiB,
    # and a 32 MiB /dev/shm that the job's own loop runs through failed the gate.
    config = _config(tmp_path, """
        loader: "shmjob.data:token_loader"
        shm_headroom: {min: 0 %}
        """)
    config.write_text(config.read_text().replace("    pin_memory: false\n", ""))  # the job's loader sets it
    loop = _loop(config, "32m", "tokens", "none", "2")
    assert loop.returncode == 0 and "epoch done 64 batches" in loop.stdout, loop.stderr
    gate, results = _gate(config, "32m")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert results["dataloader.shm_needed"]["value"] == 2 * (8 << 20) + (3 * 2 + 8) * 4096
    assert results["dataloader.shm_headroom"]["verdict"] == "pass"
    assert ("6 batches of 0 B (1 samples): num_workers 2 x prefetch_factor 2 + 2 the training loop holds (its batch "
            "and the one before it), 8 MiB of tensors the Dataset keeps (its batches are views of them) x num_workers "
            "2" in results["dataloader.shm_needed"]["method"])


def test_a_tensor_the_dataset_holds_is_moved_to_shm_once_when_spawned_workers_start_and_is_projected(tmp_path):
    """ultralytics/ultralytics#26086: under spawn or forkserver (Python 3.14's default) the DataLoader pickles the
    Dataset to each worker, and torch moves its tensors to /dev/shm at the first one's start: a 24 MiB image cache
    on a 16 MiB /dev/shm kills the loop before its first batch, where its batches of 16 KiB would fit."""
    config = _config(tmp_path, """
        dataset: "shmjob.data:cached"
        batch_size: 16
        num_workers: 2
        prefetch_factor: 2
        multiprocessing_context: spawn
        shm_headroom: {min: 0 %}
        """)
    _died(_loop(config, "16m", "cached", "16", "2", "spawn"))
    gate, results = _gate(config, "16m")
    assert gate.returncode == 1
    assert results["dataloader.shm_needed"]["value"] == (24 << 20) + (3 * 2 + 8) * 4096  # no probe: it would die
    hint = results["dataloader.shm_headroom"]["hint"]
    assert (", 24 MiB of the Dataset's tensors, moved there once as the Dataset is pickled to the workers (spawn, "
            "forkserver)" in hint)
    assert "--shm-size=64m" in hint and hint.endswith("or lower num_workers to 0 (the main process loads: nothing "
                                                      "passes through /dev/shm, nothing loads in parallel)")


def test_frames_that_view_a_whole_decoded_clip_send_the_clip_and_are_projected_so(tmp_path):
    """embeddings-benchmark/mteb#4747: frames picked from a decoded video are a view of it, and torch sends a view by
    its whole storage, so /dev/shm fills with whole clips: 8 clips of 768 KiB a batch (96 KiB of frames) x 6 batches
    in flight is 36 MiB on a 16 MiB /dev/shm. The clip is made per sample, not kept: it counts per batch."""
    config = _config(tmp_path, """
        dataset: "shmjob.data:videos"
        collate_fn: "shmjob.data:as_list"
        batch_size: 8
        num_workers: 2
        prefetch_factor: 2
        shm_headroom: {min: 0 %}
        """)
    _died(_loop(config, "16m", "videos", "8", "2", "as_list"))
    gate, results = _gate(config, "16m")
    assert gate.returncode == 1
    assert results["dataloader.shm_needed"]["value"] == 6 * 8 * 64 * 3 * 32 * 32 * 4 + (3 * 2 + 8) * 4096
    assert results["dataloader.shm_headroom"]["verdict"] == "fail"
    assert "(6 batches of 6 MiB (8 samples)" in results["dataloader.shm_headroom"]["hint"]


# --- the figures, without root --------------------------------------------------------------------------------


def test_one_batch_is_its_tensors_storages_and_a_view_sends_its_whole_storage():
    images = torch.zeros(64, 3, 224, 224)
    assert shared_memory.batch_bytes(images) == BATCH  # 38,535,168: a whole number of pages
    assert shared_memory.batch_bytes((images, torch.arange(64))) == BATCH + LABELS
    assert shared_memory.batch_bytes({"x": images, "same": images[:8], "text": ["a"] * 64}) == BATCH
    assert shared_memory.batch_bytes({"crop": images[:, :, :112]}) == BATCH  # a view: its storage goes whole
    import numpy

    assert shared_memory.batch_bytes([numpy.zeros(1000)]) == 0  # pickled through the pipe, not /dev/shm


def test_a_storage_the_dataset_keeps_is_told_from_one_made_for_the_batch():
    kept = torch.zeros(1 << 20)  # 4 MiB the Dataset holds
    assert shared_memory.split_held(lambda: kept[:1024].view(4, 256)) == (0, 4 << 20)
    assert shared_memory.split_held(lambda: (torch.stack([kept[:256]] * 4), kept[:8])) == (4096, 4 << 20)
    assert shared_memory.split_held(lambda: {"x": torch.zeros(64, 3, 224, 224), "y": [1, 2]}) == (BATCH, 0)
    assert shared_memory.split_held(lambda: None) == (0, 0)


def test_in_flight_is_prefetch_factor_times_workers_and_the_loops_two_batches_unless_pinned():
    assert shared_memory.in_flight(4, 2, pinned=False) == 10
    assert shared_memory.in_flight(4, 2, pinned=True) == 8
    assert shared_memory.in_flight(8, 4, pinned=True) == 32
    assert shared_memory.in_flight(0, None, pinned=False) == 0  # the main process loads: nothing in /dev/shm


@pytest.mark.parametrize(("nbytes", "docker", "kubernetes"), [
    (10 << 20, "64m", "64Mi"), (331 << 20, "512m", "512Mi"), (512 << 20, "512m", "512Mi"),
    ((512 << 20) + 1, "1g", "1Gi"), (int(8.2 * 2**30), "9g", "9Gi")])
def test_the_size_to_set_is_rounded_up_to_a_power_of_two_mib_or_whole_gib(nbytes, docker, kubernetes):
    assert shared_memory.shm_size(nbytes) == (docker, kubernetes)


def test_the_job_dataset_on_this_nodes_shm_is_measured_and_the_files_loader_is_skipped(tmp_path):
    src = job_package(tmp_path / "src", "shmjob", {"data": JOB})
    got = run_check("dataloader", 1.0, dataset="shmjob.data:images", python_path=[str(src)], num_workers=2,
                    prefetch_factor=3, batch_size=16, worker_pools=1)
    pinned = torch.cuda.is_available()
    assert got["shm_needed"].value == (2 * 3 + (0 if pinned else 2)) * (16 * SAMPLE + 4096) + (3 * 2 + 8) * 4096
    assert got["shm_headroom"].measured and got["throughput"].measured
    files = tmp_path / "files"
    files.mkdir()
    for index in range(300):
        (files / f"{index}.bin").write_bytes(b"x" * 1000)
    plain = run_check("dataloader", 1.0, path=str(files), num_workers=1, worker_pools=1)
    assert not plain["shm_needed"].applicable and "dataset:" in plain["shm_needed"].reason


def test_the_probe_leaves_the_jobs_dataset_in_the_main_process_as_its_workers_will_find_it(tmp_path):
    # Loaded in the main process, the probe's batch would open the handle there, and every forked worker would
    # inherit it: the job's own loop never does that, and its Dataset raises on it here.
    src = job_package(tmp_path / "src", "shmjob", {"data": JOB})
    got = run_check("dataloader", 1.0, dataset="shmjob.data:lazy", python_path=[str(src)], num_workers=2,
                    batch_size=16, worker_pools=1, multiprocessing_context="fork")
    assert got["throughput"].measured, got["throughput"].reason
    assert got["shm_needed"].value == ((2 * 2 + (0 if torch.cuda.is_available() else 2)) * 16 * 3 * 32 * 32 * 4
                                       + (3 * 2 + 8) * 4096)


def test_without_workers_nothing_passes_through_shm_and_no_batch_is_loaded_for_it(tmp_path):
    src = job_package(tmp_path / "src", "shmjob", {"data": JOB})
    got = run_check("dataloader", 0.5, dataset="shmjob.data:images", python_path=[str(src)], num_workers=0,
                    batch_size=8, worker_pools=1)
    assert got["shm_needed"].value == 0 and got["shm_headroom"].value == 100.0
    assert got["shm_needed"].method.startswith("num_workers 0: the main process loads every batch, none passes "
                                               "through /dev/shm; DataLoader(batch_size=8, num_workers=0")


def test_a_short_shm_names_what_others_hold_in_the_size_to_set():
    need = shared_memory.Need(BATCH, 64, 4, 2, False, free=8 << 20, size=64 << 20, where="/dev/shm (tmpfs)")
    assert need.short and need.largest_batch() == 1  # 8 MiB over 9 batches: one 602 kB sample each
    # 56 MiB held by others stays held: 368 + 56 MiB is set, rounded up to 512m
    assert "--shm-size=512m" in need.fix()
    assert not need.fits(4) and need.fits(0)

