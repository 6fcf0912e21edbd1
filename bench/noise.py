"""How stable is the gate? Run the bundled storage and dataloader checks N times and print each metric's CV.

The coefficient of variation (stdev / mean of the per-run values, each run's value being
the median its check compares) is the figure MLPerf Storage and fio users quote for
run-to-run stability; the target is under 10% per metric. Each run goes through the real
runner (a worker process per run, as ``preflight run`` does) over a generated dataset of
ImageNet-sized files (~110 kB each, the mean JPEG size of ImageNet-1k's training set).

    python3 bench/noise.py [--runs 10] [--files 512] [--data DIR] [--set KEY=VALUE ...]

The machine's load average is printed before and after: on a shared machine, quote it
with the numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from preflight import config, runner  # noqa: E402

FILE_BYTES = 110_000


def make_dataset(directory: Path, files: int) -> None:
    for index in range(files):
        (directory / f"sample-{index:05}.jpg").write_bytes(os.urandom(FILE_BYTES))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--files", type=int, default=512, help="files in the generated dataset")
    parser.add_argument("--data", help="an existing dataset directory instead of a generated one")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="as `preflight run --set`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="preflight-noise-", dir=".") as generated:
        data = args.data or generated
        if not args.data:
            make_dataset(Path(generated), args.files)
        loaded = config.load(str(config.bundled_path()), args.overrides, environ={"DATA_DIR": data})
        loaded = loaded.select(["storage", "dataloader"])
        print(f"load average before: {os.getloadavg()}; {os.cpu_count()} CPUs; dataset {data}")
        values: dict[str, list[float]] = {}
        methods: dict[str, str] = {}
        for number in range(1, args.runs + 1):
            start = time.monotonic()
            results = runner.run(loaded)
            line = []
            for result in results:
                if isinstance(result.value, float):
                    values.setdefault(result.id, []).append(result.value)
                    methods[result.id] = result.method
                    line.append(f"{result.id}={result.value:.1f} {result.unit}")
                elif result.verdict == "error":
                    line.append(f"{result.id}=ERROR {result.message}")
            print(f"run {number:2}: {', '.join(line)} ({time.monotonic() - start:.1f}s)", flush=True)
        print(f"load average after: {os.getloadavg()}")
        print(f"{'metric':28} {'n':>3} {'mean':>10} {'stdev':>9} {'CV':>7}  verdict (target CV < 10%)")
        worst = 0.0
        for metric, series in values.items():
            mean = statistics.fmean(series)
            stdev = statistics.stdev(series) if len(series) > 1 else 0.0
            cv = stdev / mean if mean else (0.0 if stdev == 0 else float("inf"))  # a constant 0 is stable
            worst = max(worst, cv)
            print(f"{metric:28} {len(series):3} {mean:10.1f} {stdev:9.1f} {cv:7.1%}  {'ok' if cv < 0.10 else 'TOO NOISY'}")
        for metric, method in methods.items():
            print(f"  {metric}: {method}")
    return 0 if worst < 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
