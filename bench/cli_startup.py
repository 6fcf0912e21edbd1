"""Start-up time of the commands people type first, against a bare interpreter, side by side.

Usage: .venv/bin/python bench/cli_startup.py [ROUNDS]   (default 40; the interpreter preflight is installed in)

Each round runs, in an order that rotates from round to round, ``python -c pass``,
``preflight --help``, ``preflight --version`` and ``preflight validate thresholds.yaml``
(the bundled default), each a fresh process of the same interpreter, timed from spawn to
exit. Interleaving keeps a busy machine's load shared by all of them. Two floors are timed
beside them: ``import re`` (what pip's console-script wrapper imports before preflight runs) and
``import yaml, dataclasses, argparse, typing`` (the libraries ``validate`` cannot do without). Targets: ``--help`` and
``--version`` within 1.5x the bare interpreter, ``validate`` within 3x, judged on each
command's fastest run: on a shared machine the slower runs measure the other jobs, not the
command ("the lowest value gives a lower bound for how fast your machine can run the given
code snippet; higher values ... are typically ... caused by other processes interfering",
Python's timeit documentation). The ratio of medians is printed beside it. ``preflight`` is
the console script beside this interpreter (what a user runs), else ``python -m preflight``.
Bytecode is cached as an installed package has it (pip compiles it at install): the
children run without PYTHONDONTWRITEBYTECODE, and the warm-up run writes the caches.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = {"--help": 1.5, "--version": 1.5, "validate": 3.0}


def commands() -> dict[str, list[str]]:
    script = os.path.join(os.path.dirname(sys.executable), "preflight")
    preflight = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "preflight"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "--help": preflight + ["--help"],
        "--version": preflight + ["--version"],
        "validate": preflight + ["validate", os.path.join(ROOT, "thresholds.yaml")],
        # Floors, no targets: pip's console-script wrapper imports re before preflight's code runs,
        # and validate cannot start faster than importing the libraries it parses and builds with.
        "python -c 'import re'": [sys.executable, "-c", "import re"],
        "python -c 'import yaml, ...'": [sys.executable, "-c", "import yaml, dataclasses, argparse, typing"],
    }


ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=ROOT, env=ENV)
    return time.perf_counter() - start


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    runs = commands()
    names = list(runs)
    for name in names:  # warm-up: the page cache holds the interpreter and the package
        timed(runs[name])
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            samples[name].append(timed(runs[name]))
    bare, bare_min = statistics.median(samples["python -c pass"]), min(samples["python -c pass"])
    print(f"{rounds} interleaved rounds, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{' '.join(runs['--help'][:-1])}")
    print(f"{'command':<34} {'median':>8} {'ratio':>6} {'min':>8} {'ratio':>6}  target (on min)")
    failed = False
    for name in names:
        median, fastest = statistics.median(samples[name]), min(samples[name])
        ratio = fastest / bare_min
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<= {target:g}x: {'met' if ratio <= target else 'MISSED'}"
        failed |= target is not None and ratio > target
        label = name if name.startswith("python") else f"preflight {name}" + (" thresholds.yaml" * (name == "validate"))
        print(f"{label:<34} {median * 1000:6.1f}ms {median / bare:5.2f}x {fastest * 1000:6.1f}ms {ratio:5.2f}x  "
              f"{verdict}".rstrip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
