"""How long the GPU checks take to fail on a CPU-only machine (target: under 3 s together).

Runs ``preflight run`` on the cuda, transfer and p2p checks (scripts/gpu-smoke.yaml) in a
fresh process ``--runs`` times, and in the same run times ``python -c "import torch"`` —
the cost the CPU-build fast path avoids — so the two can be compared on a noisy machine.
Prints the median and worst wall time of each, the verdict counts and every message's
line count (all must be one line).

    python3 bench/gpu_checks_cpu_only.py [--runs 5]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(command: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), check=False)
    return time.perf_counter() - start, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    gate = [sys.executable, "-m", "preflight", "run", "-c", "scripts/gpu-smoke.yaml", "--json", "-"]
    gate_times, torch_times, report = [], [], {}
    for _ in range(args.runs):
        seconds, out = timed(gate)
        gate_times.append(seconds)
        report = json.loads(out)
        torch_times.append(timed([sys.executable, "-c", "import torch"])[0])
    verdicts = collections.Counter(r["verdict"] for r in report["results"])
    multi_line = [r["id"] for r in report["results"] if "\n" in r["message"]]
    print(f"GPU checks (cuda, transfer, p2p), whole CLI run: median {statistics.median(gate_times):.2f} s, "
          f"worst {max(gate_times):.2f} s over {args.runs} runs")
    print(f"python -c 'import torch' alone:                  median {statistics.median(torch_times):.2f} s, "
          f"worst {max(torch_times):.2f} s")
    print(f"verdicts: {dict(verdicts)}; exit code {report['exit_code']}; multi-line messages: {multi_line or 'none'}")
    return 0 if max(gate_times) < 3 and not multi_line else 1


if __name__ == "__main__":
    sys.exit(main())
