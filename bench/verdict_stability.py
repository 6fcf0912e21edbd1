"""verdict_stability: the same node, the same answer, for the bundled DataLoader and storage gates.

Usage: python3 bench/verdict_stability.py [--runs 20] [--checks dataloader,storage] [--factors 0.75,1.0,1.33]
                                          [--loads quiet,busy] [--classes 100] [--per-class 100] [--dir DIR]
       (as root it drops the page cache before every run; else each file's pages are dropped with fadvise)

Issue 44: a DataLoader gate at 300 samples/s read 305, 146, 168, 296, 296, 282 in six cold runs, PASS once
and FAIL five times. This bench puts each gate's threshold near, below and above what the node really gives
and counts the answers. It writes an ImageNet-shaped dataset (``preflight make-dataset``: --classes x
--per-class files of ~110 kB, 10,000 by default, so a gate's pass does not end inside its measuring time) in
a scratch directory on the working directory's filesystem (or --dir), then, per load (quiet, and busy: two
``yes > /dev/null`` held throughout, ``founding_table.busy(2)``) and per gate:

- measures the node's plain-loop rate on the same files under the same load, the median of 3 cold passes:
  dataloader: a plain torch DataLoader (the bundled batch_size and prefetch_factor; num_workers auto is the
  count the gate chose in a calibration run under the same load, ``gate_settings``; shuffled) over every file,
  each read whole with ``open().read()``, samples/s after its first batch; storage: every file read whole with O_DIRECT by ``file_readers`` loops (processes x threads as the
  check splits them: ``small_files.file_loop``, the plain loop of bench/dataloader_vs_plain.py), files/s;
- runs ``preflight run -c CONFIG --only CHECK --json FILE`` --runs times per threshold factor (factors
  interleaved run by run), the page cache dropped before each. CONFIG is ``version: 1``, ``defaults:
  {retries: 0}`` and the bundled thresholds.yaml's block for the check, unchanged but for ``max_files``
  (every file, as the plain loop reads) and the ``min`` of its main figure, set at factor x the plain rate:
  dataloader ``throughput`` (samples/s); storage ``small_files`` (files/s), not ``seq_read``: on a dataset of ~110 kB files the bundled gate's seq_read streams a scratch
  file beside it, while small_files reads the dataset's own files, as the plain loop does (docs/checks.md,
  "Datasets it understands"). Its bundled ``severity: warn`` stays, so a miss there is a ``warn`` row.

A row is marginal when its JSON ``marginal`` is non-null; else PASS on verdict ``pass``, FAIL on ``fail`` or
``warn`` (a miss at severity warn), error otherwise. Per setting (gate x factor x load) it prints the counts,
the median figure over the plain rate, and the median wall time of one run. Targets: at 0.75x and 1.33x no
flips (a flip: a decided run against its setting's majority); at 1.0x every run marginal or all agree.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import run_preflight, scratch_root  # noqa: E402
from bench.founding_table import busy, drop_caches  # noqa: E402
from preflight import config  # noqa: E402
from preflight.checks.storage.measure_io import MAX_AUTO_PROCESSES  # noqa: E402
from preflight.checks.storage.small_files import file_loop  # noqa: E402
from preflight.host.cpus import auto_workers  # noqa: E402
from preflight.io.dataset_walk import DataFile  # noqa: E402
from preflight.io.parallel import run_loops  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = {"dataloader": ("throughput", "samples/s"), "storage": ("small_files", "files/s")}
PLAIN_PASSES = 3

PLAIN_LOADER = textwrap.dedent("""\
    import os, sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class Files(Dataset):  # the job's own reader: each sample one file, read whole, buffered
        def __init__(self, paths):
            self.paths = paths
        def __len__(self):
            return len(self.paths)
        def __getitem__(self, index):
            with open(self.paths[index], "rb") as handle:
                return len(handle.read())

    paths = sorted(os.path.join(d, n) for d, _, names in os.walk(sys.argv[1]) for n in names)
    batch, workers, prefetch = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    loader = DataLoader(Files(paths), batch_size=batch, num_workers=workers, shuffle=True,
                        prefetch_factor=prefetch if workers else None, pin_memory=torch.cuda.is_available())
    first, after_first = None, 0
    for sizes in loader:
        if first is None:
            first = time.perf_counter()
        else:
            after_first += len(sizes)
    print(after_first / (time.perf_counter() - first))
""")


def data_files(data: str) -> list[DataFile]:
    """Every file under ``data``, with its size."""
    return [DataFile(os.path.join(d, n), os.path.getsize(os.path.join(d, n)))
            for d, _, names in os.walk(data) for n in sorted(names)]


def cold(data: str) -> None:
    """Drop the page cache (root), else each file's clean pages (``posix_fadvise(DONTNEED)``)."""
    if os.geteuid() == 0:
        drop_caches()
        return
    os.sync()
    for f in data_files(data):
        fd = os.open(f.name, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def bundled_block(check: str) -> dict[str, Any]:
    """The check's block in the bundled thresholds.yaml, as written (``${DATA_DIR:-}`` left for the run)."""
    return yaml.safe_load(Path(config.bundled_path()).read_text())["checks"][check]


def plain_loader(data: str, block: dict[str, Any]) -> float:
    """One cold epoch of a plain DataLoader with the bundled settings: samples/s after its first batch."""
    workers = auto_workers() if str(block.get("num_workers", "auto")) == "auto" else int(block["num_workers"])
    cold(data)
    done = subprocess.run([sys.executable, "-c", PLAIN_LOADER, data, str(block.get("batch_size", 64)),
                           str(workers), str(block.get("prefetch_factor", 2))], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench: the plain DataLoader failed: {done.stderr[-500:]}")
    return float(done.stdout.split()[-1])


def plain_storage(data: str, block: dict[str, Any]) -> float:
    """One cold pass reading every file whole with O_DIRECT, ``file_readers`` loops as the check splits them:
    files/s."""
    files, loops = data_files(data), int(block.get("file_readers", 8))
    processes = min(loops, MAX_AUTO_PROCESSES)
    threads = max(1, round(loops / processes))
    cold(data)
    tally = run_loops(file_loop(files, processes * threads, "O_DIRECT"), processes, threads, 600.0)
    return tally.ops / tally.elapsed_s


PLAIN: dict[str, Callable[[str, dict[str, Any]], float]] = {"dataloader": plain_loader, "storage": plain_storage}


def gate_settings(check: str, block: dict[str, Any], data: str, configs: str) -> dict[str, Any]:
    """``block`` with ``num_workers: auto`` replaced by the count the gate chose in one calibration run: ``auto``
    follows the loader's CPU share (a cold read waits, so it takes more workers than 70 % of the CPUs), and a
    plain loop with fewer workers read 1.2-1.6x below the gate."""
    if check != "dataloader" or str(block.get("num_workers", "auto")) != "auto":
        return block
    if os.geteuid() == 0:
        drop_caches()
    done = run_preflight("-c", write_config(configs, check, block, 1.0), "--only", check, data_dir=data)
    row = next(r for r in done.report["results"] if r["id"] == "dataloader.throughput")
    chosen = re.search(r"num_workers=(\d+)", row["method"])
    if chosen is None:
        raise SystemExit(f"bench: the gate's method names no num_workers: {row['method']}")
    print(f"dataloader: the gate's num_workers auto is {chosen[1]} here", file=sys.stderr, flush=True)
    return {**block, "num_workers": int(chosen[1])}


def write_config(where: str, check: str, block: dict[str, Any], threshold: float) -> str:
    """A thresholds file: ``version: 1``, ``defaults: {retries: 0}``, the bundled block with only the main
    figure's ``min`` replaced by ``threshold``."""
    metric, unit = FIGURES[check]
    bound = block.get(metric)
    block = {**block, metric: {**(bound if isinstance(bound, dict) else {}), "min": f"{threshold:.6g} {unit}"}}
    path = os.path.join(where, f"{check}-{threshold:.0f}.yaml")
    Path(path).write_text(yaml.safe_dump({"version": 1, "defaults": {"retries": 0}, "checks": {check: block}},
                                         sort_keys=False))
    return path


def outcome(row: dict[str, Any]) -> str:
    """PASS, FAIL, marginal or error for one JSON row."""
    if row.get("marginal"):
        return "marginal"
    if row.get("value") is None:
        return "error"
    return {"pass": "PASS", "fail": "FAIL", "warn": "FAIL"}.get(row["verdict"], "error")


def flips(outcomes: list[str]) -> int:
    """Decided runs against the setting's majority decided verdict (0 when they all agree)."""
    decided = Counter(o for o in outcomes if o in ("PASS", "FAIL"))
    return sum(decided.values()) - max(decided.values(), default=0)


def cv(values: list[float]) -> float:
    """The coefficient of variation of ``values`` (sample standard deviation / mean); 0 for fewer than two."""
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per gate, factor and load")
    parser.add_argument("--checks", default="dataloader,storage")
    parser.add_argument("--factors", default="0.75,1.0,1.33", help="thresholds as factors of the plain rate")
    parser.add_argument("--loads", default="quiet,busy", help="quiet, busy (two busy loops throughout)")
    parser.add_argument("--classes", type=int, default=100, help="class folders of the dataset")
    parser.add_argument("--per-class", type=int, default=100, help="files in each class folder")
    parser.add_argument("--dir", help="where the scratch directory lives (default: the working directory)")
    args = parser.parse_args()
    checks, loads = args.checks.split(","), args.loads.split(",")
    factors = [float(f) for f in args.factors.split(",")]
    if set(checks) - set(FIGURES) or set(loads) - {"quiet", "busy"}:
        parser.error(f"--checks takes {','.join(FIGURES)}, --loads quiet,busy")
    table = []
    with scratch_root(args.dir) as scratch, tempfile.TemporaryDirectory(prefix="preflight-vs-") as configs:
        data = os.path.join(scratch, "imagenet")
        subprocess.run([sys.executable, "-m", "preflight", "make-dataset", data, "--classes", str(args.classes),
                        "--per-class", str(args.per_class)], check=True, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=ROOT))
        print(f"verdict stability: {args.classes * args.per_class} files of ~110 kB (make-dataset), {args.runs} "
              f"runs per setting; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; page cache "
              f"{'dropped' if os.geteuid() == 0 else 'fadvised away'} before each run", flush=True)
        for load in loads:
            with busy(2 if load == "busy" else 0):
                for check in checks:
                    # every file, as the plain loop reads: the bundled max_files (10,000) would hold the gate to
                    # the first files the walk reached, a smaller and more local set than the plain loop's
                    whole = {**bundled_block(check), "max_files": args.classes * args.per_class}
                    block = gate_settings(check, whole, data, configs)
                    plain = statistics.median(PLAIN[check](data, block) for _ in range(PLAIN_PASSES))
                    paths = {f: write_config(configs, check, block, f * plain) for f in factors}
                    metric, unit = FIGURES[check]
                    print(f"{check} {load}: plain rate {plain:.0f} {unit}", file=sys.stderr, flush=True)
                    got: dict[float, list[tuple[str, float | None, float]]] = {f: [] for f in factors}
                    for run in range(1, args.runs + 1):
                        for factor in factors:
                            if os.geteuid() == 0:
                                drop_caches()
                            done = run_preflight("-c", paths[factor], "--only", check, data_dir=data)
                            row = next(r for r in done.report["results"] if r["id"] == f"{check}.{metric}")
                            got[factor].append((outcome(row), row["value"], done.wall_s))
                            value = "-" if row["value"] is None else f"{row['value']:.0f}"
                            if row.get("interval"):
                                value += f" ({row['interval'][0]:.0f} to {row['interval'][1]:.0f})"
                            print(f"{check} {load} {factor:g}x run {run}: {value} {unit} "
                                  f"{got[factor][-1][0]} ({done.wall_s:.1f} s)", file=sys.stderr, flush=True)
                    table += [(check, metric, unit, load, plain, f, got[f]) for f in factors]
    print(f"{'gate':10} {'figure':12} {'load':5} {'plain':>7} {'factor':>6} {'threshold':>9} {'PASS':>4} "
          f"{'FAIL':>4} {'marg':>4} {'err':>3} {'flips':>5} {'median/plain':>12} {'cv':>6} {'wall':>6}")
    flipped = marginal_ends = 0
    agree = True
    for check, metric, unit, load, plain, factor, runs in table:
        outcomes = [o for o, _, _ in runs]
        counts, values = Counter(outcomes), [v for _, v, _ in runs if v is not None]
        ratio = f"{statistics.median(values) / plain:.2f}" if values else "-"
        print(f"{check:10} {metric:12} {load:5} {plain:7.0f} {factor:5g}x {factor * plain:9.0f} {counts['PASS']:4} "
              f"{counts['FAIL']:4} {counts['marginal']:4} {counts['error']:3} {flips(outcomes):5} {ratio:>12} "
              f"{cv(values):6.1%} {statistics.median(w for _, _, w in runs):5.1f}s")
        if abs(factor - 1.0) < 1e-9:
            agree &= flips(outcomes) == 0 and not counts["error"]
        else:
            flipped += flips(outcomes)
            marginal_ends += counts["marginal"]
    print("(plain: the node's own plain-loop rate under the same load, in the figure's unit; median/plain: the "
          "gate's median figure over it; cv: the figure's run-to-run CV; wall: median seconds of one `preflight run`)")
    pooled: dict[tuple[str, str], list[float]] = {}
    for check, metric, _, load, _, _, runs in table:
        pooled.setdefault((f"{check}.{metric}", load), []).extend(v for _, v, _ in runs if v is not None)
    print("run-to-run CV of each gate's figure over all its runs a load (measurement.RUN_TO_RUN holds the largest): "
          + ", ".join(f"{metric} {load} {cv(values):.1%} ({len(values)} runs)"
                      for (metric, load), values in pooled.items()))
    print(f"at {' and '.join(f'{f:g}x' for f in factors if abs(f - 1.0) >= 1e-9) or '(none)'}: flips {flipped} "
          f"(target 0), {marginal_ends} marginal; at 1.0x: every run marginal or all agree: "
          f"{'yes' if agree else 'no'}")
    return 0 if flipped == 0 and agree else 1


if __name__ == "__main__":
    sys.exit(main())
