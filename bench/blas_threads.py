"""The dataloader check against the job's own loop over a BLAS-heavy Dataset, and what one BLAS thread a worker buys.

Usage: python3 bench/blas_threads.py [--rounds 3] [--seconds 4] [--busy 2] [--one-thread-only]

The Dataset does six 120x120 float32 matrix products per sample (a feature transform), loaded by 2 workers in
batches of 32, as issue 42 case 6 built it. Each worker's BLAS starts a thread per core, so 2 workers hold 2 x
cores threads on the job's CPUs. Per round, in fresh processes, in turn: the job's own loop (a DataLoader
iterated for ``--seconds`` after its warm-up) and ``preflight run`` with the dataloader check over the same
Dataset, each with the environment as it is and with OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1, the setting
the check's advice names. Prints each round and the median gate/loop ratio per setting with the median's 90%
distribution-free interval (``measurement.interval``: one round's ratio draws two CPU shares), quiet and with
``--busy`` processes spinning (yes > /dev/null) throughout. Every process starts its own session, as a job
started by its launcher does: where the kernel groups the scheduler by session (sched_autogroup_enabled), a loop
sharing the bench's session with the spinners got a third less CPU than the gate's worker, in its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from typing import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import in_turn  # noqa: E402
from preflight.measurement import interval  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASET = '''
import numpy as np
import torch


class Products(torch.utils.data.Dataset):
    """Six 120x120 matrix products per sample."""

    def __init__(self, n=1_000_000):
        self.n = n
        self.base = np.random.default_rng(0).standard_normal((120, 120)).astype(np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        x = self.base
        for _ in range(6):
            x = x @ self.base
            x /= np.abs(x).max()
        return torch.from_numpy(x[:8, :8].copy())


def products():
    return Products()
'''
LOOP = '''
import sys, time, torch
sys.path.insert(0, sys.argv[1])
from blasjob import products
loader = torch.utils.data.DataLoader(products(), batch_size=32, num_workers=2, shuffle=True)
batches = iter(loader)
for _ in range(4):
    next(batches)
count, start = 0, time.perf_counter()
while time.perf_counter() - start < float(sys.argv[2]):
    count += len(next(batches))
print(count / (time.perf_counter() - start))
'''
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def loop_rate(src: str, seconds: float, env: dict[str, str]) -> float:
    """samples/s of the job's own loop, in a fresh process."""
    done = subprocess.run([sys.executable, "-c", LOOP, src, str(seconds)], capture_output=True, text=True,
                          env={**os.environ, **env}, check=True, timeout=300, start_new_session=True)
    return float(done.stdout.strip().splitlines()[-1])


def gate_rate(config: str, env: dict[str, str]) -> tuple[float, str]:
    """(throughput, its hint) of ``preflight run`` with the dataloader check, in a fresh process."""
    done = subprocess.run([sys.executable, "-m", "preflight", "run", "-c", config, "--format", "json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, start_new_session=True,
                          env={**os.environ, "PREFLIGHT_LOCK": "off", "PYTHONPATH": ROOT, **env})
    row = {r["metric"]: r for r in json.loads(done.stdout)["results"]}["throughput"]
    return float(row["value"]), "advice: set OMP_NUM_THREADS=1" if "OMP_NUM_THREADS=1" in row["note"] else "no advice"


@contextlib.contextmanager
def spinning(count: int) -> Iterator[None]:
    spinners = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, start_new_session=True) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--busy", type=int, default=2, help="spinning processes in the busy rounds")
    parser.add_argument("--one-thread-only", action="store_true",
                        help="only the OPENBLAS/OMP threads 1 setting: more rounds of the comparison that has a rate")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="preflight-blas-") as work:
        os.makedirs(os.path.join(work, "src", "blasjob"))
        with open(os.path.join(work, "src", "blasjob", "__init__.py"), "w") as out:
            out.write(DATASET)
        config = os.path.join(work, "thresholds.yaml")
        with open(config, "w") as out:
            out.write(textwrap.dedent(f"""\
                version: 1
                checks:
                  dataloader:
                    dataset: "blasjob:products"
                    python_path: [{os.path.join(work, "src")}]
                    num_workers: 2
                    batch_size: 32
                    duration: {args.seconds}s
                """))
        print(f"{os.cpu_count()} CPUs; 2 workers, batch 32, six 120x120 float32 products per sample")
        print(f"{'load':6} {'setting':22} {'round':>5} {'loop':>8} {'gate':>8} {'ratio':>6}")
        for load, busy in (("quiet", 0), ("busy", args.busy)):
            with spinning(busy):
                settings = (("as the job runs", {}), ("OPENBLAS/OMP threads 1", ONE_THREAD))
                for setting, env in settings[1:] if args.one_thread_only else settings:
                    ratios, hints = [], set()
                    for run in range(1, args.rounds + 1):
                        loop, (gate, hint) = in_turn(run, lambda: loop_rate(os.path.join(work, "src"),
                                                                            args.seconds, env),
                                                     lambda: gate_rate(config, env))
                        ratios.append(gate / loop)
                        hints.add(hint)
                        print(f"{load:6} {setting:22} {run:5} {loop:8.0f} {gate:8.0f} {gate / loop:6.2f}")
                    middle = statistics.median(ratios)
                    low, high = interval(ratios, middle) or (middle, middle)
                    print(f"{load:6} {setting:22} {'median':>5} {'':8} {'':8} {middle:6.2f}   90% interval "
                          f"{low:.2f}-{high:.2f}   hint: {' | '.join(sorted(hints))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
