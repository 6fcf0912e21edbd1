"""Wall time of the default gate's storage and dataloader checks, as a user runs them.

Usage: python3 bench/default_battery.py [DATA_DIR]   (default: the working directory)

Runs ``python3 -m preflight run --only storage,dataloader`` with the bundled
thresholds.yaml (worker start, torch import, scratch data, every metric) three times and
prints each instance's duration and the whole command's wall time. Target: under 30 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    data = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    env = dict(os.environ, DATA_DIR=data, PYTHONPATH=ROOT)
    print(f"default battery (storage + dataloader) on DATA_DIR={data}")
    for run in range(1, 4):
        with tempfile.NamedTemporaryFile(suffix=".json") as report:
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "preflight", "run", "-c", os.path.join(ROOT, "thresholds.yaml"),
                                   "--only", "storage,dataloader", "--json", report.name],
                                  env=env, capture_output=True, text=True)
            wall = time.perf_counter() - start
            results = json.load(open(report.name))["results"]
        per_instance = {}
        for result in results:
            per_instance[result["instance"]] = result["duration_s"]
        parts = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in per_instance.items())
        verdicts = sorted({r["verdict"] for r in results})
        print(f"run {run}: {wall:.1f}s wall ({parts}); exit {done.returncode}; verdicts {verdicts}; "
              f"{'under' if wall < 30 else 'OVER'} the 30 s target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
