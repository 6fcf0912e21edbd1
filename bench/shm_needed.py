"""The dataloader check's /dev/shm projection (``dataloader.shm_needed``) against a real training loop's peak.

Usage: sudo python3 bench/shm_needed.py [--batches 300] [--step-ms 5] [--warmup-s 1.0] [--shm-size 2g] [--only NAME]

Needs root: the bench re-runs itself under ``unshare -m`` with a fresh tmpfs mounted on /dev/shm, so that no other
process's shared memory counts. For each shape below (a job package written to a scratch folder: its Dataset, and
for ``view`` its own DataLoader):

1. the projection: ``preflight run`` of one dataloader instance over that Dataset (``dataset: jobs.shapes:NAME``,
   the shape's batch_size / num_workers / prefetch_factor / pin_memory) or DataLoader (``loader:``), its JSON
   report's ``dataloader.shm_needed`` value in bytes;
2. the real peak: a plain training loop in a fresh process over a DataLoader with the same settings and Dataset
   (``--batches`` batches, shuffled; its first step held ``--warmup-s`` as a real first step is, by CUDA's and the
   allocator's warm-up or torch.compile, then each batch held ``--step-ms`` as a training step holds it), while a
   thread here reads ``statvfs("/dev/shm")`` every 1 ms: used = (f_blocks - f_bfree) x f_frsize, less what was
   used before the loop started; the largest over the run ("peak"), and the largest after the loop's first
   2 x prefetch_factor x num_workers batches ("steady": a loop that never stalls again).

Target: the projection is never below the observed peak (the gate must fail before the job dies) and at most 25%
above it (tight enough to gate on): 1.00 <= projected / peak <= 1.25 for every shape.

Shapes: ``f32`` 3x224x224 float32 and an int label, batch 64, 4 workers x prefetch 2; ``f32_pin`` the same with
pin_memory=True (on a node without CUDA torch ignores it, DataLoader's "no accelerator is found" warning, and
preflight's projection does the same: the row checks that both agree); ``u8`` uint8 3x224x224, batch 128, 2 workers
x prefetch 4; ``dict`` samples {"image": float32 3x224x224, "label": int64 tensor}, batch 32, 3 workers x prefetch 2;
``view`` a language model's pre-batched token stream (batch_size=None): each batch is a 16x1024 view of the
32 MiB int64 token tensor the Dataset loaded, 2 workers x prefetch 2; ``spawn`` a Dataset holding a 32 MiB uint8
RAM cache of 3x64x64 images (ultralytics/ultralytics#26086), batch 32 of float copies, 2 workers x prefetch 2,
multiprocessing_context=spawn.

What the first runs missed, and the model in preflight/loading/footprint/shared_memory.py now counts:

- 2 batches the loop holds, not 1 (``u8`` and ``dict`` peaked at prefetch x workers + 2 batches, ``f32`` at 9.8):
  torch/utils/data/dataloader.py ``_MultiProcessingDataLoaderIter._next_data`` hands the batch to
  ``_process_data``, which calls ``_try_put_index`` (the next index goes to a worker) before ``__next__`` returns,
  while the loop's variable still holds the previous batch; a worker's ``posix_fallocate`` of its next segment
  (c10/core/MapAllocator.cpp) can meet the page-by-page freeing of the last.
- the loader's semaphores: multiprocessing's ``SemLock`` is a glibc ``sem_open``, a page in /dev/shm each; 3 per
  ``Queue`` (one index queue per worker, the result queue) and 5 for the workers' done ``Event``: (3 x workers + 8)
  pages, measured at 11, 14 and 20 pages for 1, 2 and 4 workers.
- ``view``: torch sends a tensor by its whole storage (torch/multiprocessing/reductions.py, ``reduce_tensor`` ->
  ``reduce_storage`` -> ``storage._share_fd_cpu_()``), and ``_share_fd_cpu_`` on a storage not yet shared moves it
  into a new shared-memory segment in place (torch/csrc/StorageSharing.cpp, ``THPStorage_shareFd``:
  ``at::new_shm_fd_storage``, copy, ``set_data_ptr_noswap``). So the first batch a worker sends moves its copy of
  the Dataset's whole token tensor to /dev/shm, where it stays (the Dataset holds it), and every later batch is a
  view of a storage already shared: once per worker, not once per batch in flight (5 x 32 MiB was projected where
  the loop holds 2 x 32 MiB). A storage still alive once the measured batch is dropped is the Dataset's.
- ``spawn``: the DataLoader pickles the Dataset to each spawned (or forkserver: Python 3.14's default) worker with
  multiprocessing's ForkingPickler, whose torch reductions move the Dataset's tensors to /dev/shm in the main
  process at the first worker's start, once (9.1 MiB was projected where the loop held 41.1 MiB: the gate passed a
  job whose /dev/shm its cache fills).

The projection is the most the loader holds, which it holds whenever the loop stalls long enough for the workers to
fill their prefetch (the first step always does); ``--step-ms 0 --warmup-s 0`` shows a loop that never stalls.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 2**20
INSIDE = "PREFLIGHT_SHM_BENCH_INSIDE"  # set in the re-run under unshare -m


class Shape(NamedTuple):
    """One job: its Dataset (``dataset``, a factory in the job package) or DataLoader (``loader``), and its settings."""

    name: str
    dataset: str  # factory in jobs.shapes
    batch_size: int | None  # None: the Dataset's items are whole batches (the loader's own, ``loader`` set)
    workers: int
    prefetch: int
    pin: bool
    loader: str = ""  # factory in jobs.shapes returning the job's DataLoader (for batch_size=None)
    context: str = ""  # the DataLoader's multiprocessing_context; empty: this Python's default (fork)


SHAPES = (
    Shape("f32", "images", 64, 4, 2, False),
    Shape("f32_pin", "images", 64, 4, 2, True),
    Shape("u8", "images_u8", 128, 2, 4, False),
    Shape("dict", "records", 32, 3, 2, False),
    Shape("view", "tokens", None, 2, 2, False, loader="token_loader"),
    Shape("spawn", "cached", 32, 2, 2, False, context="spawn"),
)

JOB = '''
import torch
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    """ImageNet-sized samples and an int label, as a vision job's transforms return them."""

    def __init__(self, dtype=torch.float32, size=100_000):
        self.dtype, self.size = dtype, size

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return torch.full((3, 224, 224), index % 251, dtype=self.dtype), index % 1000


def images():
    return Images()


def images_u8():
    return Images(torch.uint8)


class Records(Dataset):
    """A dict per sample: the image and its label, both tensors."""

    def __len__(self):
        return 100_000

    def __getitem__(self, index):
        return {"image": torch.full((3, 224, 224), float(index % 7)), "label": torch.tensor(index % 1000)}


def records():
    return Records()


class Tokens(Dataset):
    """A language model's pre-batched token stream: the tokens loaded once (32 MiB of int64), each item one
    16x1024 batch, a view of them (used with batch_size=None)."""

    def __init__(self, tokens=4 << 20, batch=16, context=1024):
        self.tokens = torch.randint(0, 50_000, (tokens,))
        self.batch, self.context = batch, context

    def __len__(self):
        return self.tokens.numel() // (self.batch * self.context)

    def __getitem__(self, index):
        span = self.batch * self.context
        return self.tokens[index * span:(index + 1) * span].view(self.batch, self.context)


def tokens():
    return Tokens()


class Cached(Dataset):
    """Images decoded once into a RAM cache, a 32 MiB uint8 tensor (as ultralytics' cache="ram"), each sample a
    float32 copy of one 3x64x64 image in it."""

    def __init__(self):
        self.cache = torch.zeros(2730, 3, 64, 64, dtype=torch.uint8)

    def __len__(self):
        return len(self.cache)

    def __getitem__(self, index):
        return self.cache[index].float(), index % 1000


def cached():
    return Cached()


def token_loader(num_workers=2, prefetch_factor=2, pin_memory=False):
    return DataLoader(Tokens(), batch_size=None, shuffle=True, num_workers=num_workers,
                      prefetch_factor=prefetch_factor, pin_memory=pin_memory)
'''

# The job's own loop: its DataLoader with the shape's settings, the first step held as a warm-up, then each batch
# held step_ms; it prints "steady" once the first 2 x prefetch x workers batches are done, and "done N" at the end.
LOOP = '''
import sys, time, warnings
sys.path.insert(0, sys.argv[1])
import torch
from jobs import shapes

dataset, loader, batch, workers, prefetch, pin = sys.argv[2], sys.argv[3], sys.argv[4], *map(int, sys.argv[5:8])
batches, step_s, warmup_s, context = int(sys.argv[8]), float(sys.argv[9]), float(sys.argv[10]), sys.argv[11] or None
warnings.simplefilter("ignore")  # pin_memory without an accelerator says so; the row says it
if loader:
    loader = getattr(shapes, loader)(num_workers=workers, prefetch_factor=prefetch, pin_memory=bool(pin))
else:
    loader = torch.utils.data.DataLoader(getattr(shapes, dataset)(), batch_size=int(batch), shuffle=True,
                                         num_workers=workers, prefetch_factor=prefetch, pin_memory=bool(pin),
                                         multiprocessing_context=context)
print("start", flush=True)
steady = 2 * prefetch * workers
for step, held in enumerate(loader):
    time.sleep(warmup_s if step == 0 else step_s)
    if step + 1 == steady:
        print("steady", flush=True)
    if step + 1 == batches:
        break
print("done", step + 1, flush=True)
'''


def shm_used(path: str = "/dev/shm") -> int:
    """Bytes in use on the filesystem at ``path``: statvfs (f_blocks - f_bfree) x f_frsize (tmpfs counts the pages
    its files hold, unlinked ones still open or mapped included)."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class Peak:
    """A thread reading ``used()`` every ``every_s``: the largest value, and the largest since ``mark()``."""

    def __init__(self, used=shm_used, every_s: float = 0.001) -> None:
        self.used, self.every_s = used, every_s
        self.peak = self.since_mark = 0
        self.samples = 0
        self._marked = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            value = self.used()
            self.samples += 1
            self.peak = max(self.peak, value)
            if self._marked:
                self.since_mark = max(self.since_mark, value)
            time.sleep(self.every_s)

    def start(self) -> "Peak":
        self._thread.start()
        return self

    def mark(self) -> None:
        self._marked = True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def ratio(projected: float, peak: float) -> float:
    """projected / peak; infinite where nothing was seen in /dev/shm but something was projected, 1.0 for 0 / 0."""
    if peak <= 0:
        return 1.0 if projected <= 0 else float("inf")
    return projected / peak


def within_target(projected: float, peak: float, above: float = 0.25) -> bool:
    """The bench's target: never below the observed peak, at most ``above`` (25%) over it."""
    return 1.0 <= ratio(projected, peak) <= 1.0 + above


def config_text(shape: Shape, src: str) -> str:
    """The preflight config of one dataloader instance over ``shape``'s Dataset (or DataLoader) in ``src``."""
    if shape.loader:
        job = (f'loader: "jobs.shapes:{shape.loader}"\n'
               f"loader_args: {{num_workers: {shape.workers}, prefetch_factor: {shape.prefetch}, "
               f"pin_memory: {str(shape.pin).lower()}}}\n")
    else:
        job = (f'dataset: "jobs.shapes:{shape.dataset}"\nbatch_size: {shape.batch_size}\n'
               f"num_workers: {shape.workers}\nprefetch_factor: {shape.prefetch}\n"
               f"pin_memory: {str(shape.pin).lower()}\n"
               + (f"multiprocessing_context: {shape.context}\n" if shape.context else ""))
    body = job + f"python_path: [{src}]\nduration: 1s\nworker_pools: 1\nshm_headroom: {{min: 0 %}}\n"
    return "version: 1\nchecks:\n  dataloader:\n" + textwrap.indent(body, "    ")


def projected(shape: Shape, src: str, scratch: str) -> tuple[float, str]:
    """(``dataloader.shm_needed`` in bytes, its method) from ``preflight run`` of ``shape``'s config."""
    path, report = os.path.join(scratch, f"{shape.name}.yaml"), os.path.join(scratch, f"{shape.name}.json")
    with open(path, "w") as handle:
        handle.write(config_text(shape, src))
    env = dict(os.environ, PYTHONPATH=ROOT, PREFLIGHT_LOCK="off", NO_COLOR="1")
    done = subprocess.run([sys.executable, "-m", "preflight", "run", "-c", path, "--json", report], env=env,
                          capture_output=True, text=True, timeout=600)
    if not os.path.exists(report):
        raise SystemExit(f"bench: preflight run wrote no report for {shape.name} (exit {done.returncode}): "
                         f"{done.stderr.strip()[-500:]}")
    with open(report) as handle:
        rows = {r["id"]: r for r in json.load(handle)["results"]}
    row = rows["dataloader.shm_needed"]
    if row.get("value") is None:
        raise SystemExit(f"bench: {shape.name}: shm_needed not measured: {row.get('message')}")
    return float(row["value"]), row.get("method", "")


def observed(shape: Shape, src: str, batches: int, step_s: float, warmup_s: float) -> tuple[int, int, int]:
    """(peak, steady peak, samples read) of /dev/shm's used bytes over the plain loop, less the use before it."""
    base = shm_used()
    peak = Peak(lambda: shm_used() - base).start()
    loop = subprocess.Popen([sys.executable, "-c", LOOP, src, shape.dataset, shape.loader, str(shape.batch_size),
                             str(shape.workers), str(shape.prefetch), str(int(shape.pin)), str(batches), str(step_s),
                             str(warmup_s), shape.context], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    said = []
    for line in loop.stdout:
        said.append(line.strip())
        if line.startswith("steady"):
            peak.mark()
    loop.wait()
    peak.stop()
    if loop.returncode != 0 or not said or not said[-1].startswith("done"):
        raise SystemExit(f"bench: the loop of {shape.name} failed (exit {loop.returncode}): "
                         f"{loop.stderr.read().strip()[-800:]}")
    return peak.peak, peak.since_mark, peak.samples


def inside(args: argparse.Namespace) -> int:
    """The bench proper, in the private mount namespace with its own /dev/shm."""
    import torch

    shapes = [s for s in SHAPES if not args.only or s.name in args.only]
    print(f"torch {torch.__version__}, CUDA {'yes' if torch.cuda.is_available() else 'no'}; /dev/shm a fresh "
          f"{args.shm_size} tmpfs; loop: {args.batches} batches, first step {args.warmup_s:g} s, then "
          f"{args.step_ms:g} ms a step; statvfs every 1 ms")
    print(f"{'shape':<8} {'batch':>5} {'w x p':>6} {'pin':>4} {'projected':>10} {'peak':>10} {'ratio':>6} "
          f"{'steady':>10} {'ratio':>6} {'reads':>6}  target")
    ok = True
    scratch = tempfile.mkdtemp(prefix="preflight-shm-bench-")
    try:
        src = os.path.join(scratch, "src")
        os.makedirs(os.path.join(src, "jobs"))
        open(os.path.join(src, "jobs", "__init__.py"), "w").close()
        with open(os.path.join(src, "jobs", "shapes.py"), "w") as handle:
            handle.write(JOB)
        for shape in shapes:
            need, _ = projected(shape, src, scratch)
            peak, steady, reads = observed(shape, src, args.batches, args.step_ms / 1000, args.warmup_s)
            met = within_target(need, peak)
            ok &= met
            pin = "yes" if shape.pin else "no"
            if shape.pin and not torch.cuda.is_available():
                pin = "off*"
            print(f"{shape.name:<8} {shape.batch_size or '-':>5} {f'{shape.workers} x {shape.prefetch}':>6} "
                  f"{pin:>4} {need / MiB:>8.1f}Mi {peak / MiB:>8.1f}Mi {ratio(need, peak):>6.3f} "
                  f"{steady / MiB:>8.1f}Mi {ratio(need, steady):>6.3f} {reads:>6}  {'met' if met else 'MISSED'}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if any(s.pin for s in shapes) and not torch.cuda.is_available():
        print("* pin_memory=True without CUDA: torch's DataLoader ignores it (no accelerator), and so does the "
              "projection; the pinned model (no batch held by the loop) is not measured here")
    print(f"target 1.00 <= projected / peak <= 1.25 on every shape: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300, help="batches the plain loop takes")
    parser.add_argument("--step-ms", type=float, default=5.0, help="ms the loop holds each batch after the first")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="s the loop holds its first batch")
    parser.add_argument("--shm-size", default="2g", help="size of the fresh tmpfs on /dev/shm")
    parser.add_argument("--only", nargs="*", choices=[s.name for s in SHAPES], help="these shapes only")
    args = parser.parse_args()
    if os.environ.get(INSIDE):
        return inside(args)
    if os.geteuid() != 0 or not shutil.which("unshare"):
        raise SystemExit("bench: needs root and util-linux unshare (a private mount namespace with its own /dev/shm)")
    script = (f"mount -t tmpfs -o size={args.shm_size} tmpfs /dev/shm && exec {sys.executable} "
              f"{os.path.abspath(__file__)} {' '.join(sys.argv[1:])}")
    return subprocess.run(["unshare", "-m", "sh", "-c", script], env=dict(os.environ, **{INSIDE: "1"})).returncode


if __name__ == "__main__":
    sys.exit(main())
