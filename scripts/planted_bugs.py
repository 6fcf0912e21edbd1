"""Plant each bug of issue 17's list, one at a time, and show that a fast test fails on it.

    python3 scripts/planted_bugs.py [--only NAME]

Each bug is a realistic one-line mistake in the measuring and judging core (a unit factor, a
flipped comparison, a mean for a median, a dropped warm-up, a missing O_DIRECT). The script
copies the working tree to a temporary directory, runs the module's fast tests there once
unchanged (they must pass), then applies each bug alone and runs the same tests, which must
fail. It prints one line per bug and exits 1 if any bug survives. About a minute on 2 CPUs.

The mutation run (``scripts/mutation.sh``) covers the same modules exhaustively; this list is
the reviewer's hand-planted one, kept so that each of those bugs stays caught by name.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent


class Bug(NamedTuple):
    name: str
    path: str  # relative to the repository
    before: str  # exact text, found once in the file
    after: str
    tests: tuple[str, ...]


BUGS = (
    Bug("units: us factor 1e-6 -> 1e-3", "preflight/units.py",
        'Unit("us", Dimension.DURATION, 1e-6)', 'Unit("us", Dimension.DURATION, 1e-3)', ("tests/test_units.py",)),
    Bug("units: ns factor 1e-9 -> 1e-6", "preflight/units.py",
        'Unit("ns", Dimension.DURATION, 1e-9)', 'Unit("ns", Dimension.DURATION, 1e-6)', ("tests/test_units.py",)),
    Bug("units: h factor 3600 -> 60", "preflight/units.py",
        'Unit("h", Dimension.DURATION, 3600)', 'Unit("h", Dimension.DURATION, 60)', ("tests/test_units.py",)),
    Bug("units: TB missing", "preflight/units.py",
        '    Unit("TB", Dimension.SIZE, 1e12), Unit("TB/s", Dimension.BANDWIDTH, 1e12),\n', "", ("tests/test_units.py",)),
    Bug("units: W read as a temperature", "preflight/units.py",
        'Unit("W", Dimension.POWER, 1)', 'Unit("W", Dimension.TEMPERATURE, 1)', ("tests/test_units.py",)),
    Bug("units: C read as a power", "preflight/units.py",
        'Unit("C", Dimension.TEMPERATURE, 1)', 'Unit("C", Dimension.POWER, 1)', ("tests/test_units.py",)),
    Bug("measurement: Stats median -> mean", "preflight/measurement.py",
        "median = statistics.median(ordered)", "median = statistics.fmean(ordered)", ("tests/test_measurement.py",)),
    Bug("storage: random loop opens without O_DIRECT", "preflight/checks/storage/reads.py",
        "return open_uncached(name, self.bypass)", "return os.open(name, os.O_RDONLY)",
        ("tests/checks/storage/test_reads.py",)),
    Bug("dataloader: warm-up batches not excluded", "preflight/loading/loop.py",
        "puller.skip(workers * WARMUP_BATCHES_PER_WORKER)", "puller.skip(0)",
        ("tests/loading/test_loop_windows.py",)),
    Bug("gpu: elapsed_time read as seconds", "preflight/host/gpu.py",
        "(start.elapsed_time(end) / 1e3)", "start.elapsed_time(end)", ("tests/host/test_gpu.py",)),
    Bug("gpu: GB/s computed with 2**30", "preflight/host/gpu.py",
        "(start.elapsed_time(end) / 1e3) / 1e9", "(start.elapsed_time(end) / 1e3) / 2**30", ("tests/host/test_gpu.py",)),
    Bug("interpolation: a set-but-empty variable ignores ${VAR:-default}", "preflight/interpolation.py",
        'missing = value is None or (value == "" and operator.startswith(":"))', "missing = value is None",
        ("tests/test_interpolation.py",)),
    Bug("config: unknown keys under defaults accepted", "preflight/config.py",
        "        _reject_unknown(given, tuple(DEFAULTS))\n", "", ("tests/test_config.py",)),
    Bug("collective: all-reduce busbw factor 2(n-1)/n -> (n-1)/n", "preflight/checks/collective.py",
        '{"allreduce": 2 * (ranks - 1) / ranks,', '{"allreduce": (ranks - 1) / ranks,',
        ("tests/checks/test_collective.py",)),
    Bug("collective: time maxed over ranks, not averaged", "preflight/checks/collective.py",
        'return _reduce(seconds, "sum") / _world()', 'return _reduce(seconds, "max")',
        ("tests/checks/test_collective.py",)),
    Bug("verdict: a value exactly at min fails", "preflight/verdict.py",
        "key(value) < key(threshold.min)", "key(value) <= key(threshold.min)", ("tests/test_verdict.py",)),
    Bug("verdict: a value exactly at max fails", "preflight/verdict.py",
        "key(value) > key(threshold.max)", "key(value) >= key(threshold.max)", ("tests/test_verdict.py",)),
)


def pytest(copy: Path, tests: tuple[str, ...]) -> int:
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    return subprocess.run(command, cwd=copy, capture_output=True).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the bugs whose name contains this text")
    args = parser.parse_args()
    bugs = [bug for bug in BUGS if not args.only or args.only in bug.name]
    with tempfile.TemporaryDirectory(prefix="preflight-planted-") as scratch:
        copy = Path(scratch) / "repo"
        shutil.copytree(REPO, copy, symlinks=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "mutants", "__pycache__", "*.egg-info", ".pytest_cache"))
        where = subprocess.run([sys.executable, "-c", "import preflight; print(preflight.__file__)"], cwd=copy,
                               capture_output=True, text=True).stdout.strip()
        if not where.startswith(str(copy)):
            print(f"planted_bugs: the copy imports preflight from {where}, not from {copy}", file=sys.stderr)
            return 2
        for tests in sorted({bug.tests for bug in bugs}):
            if pytest(copy, tests):
                print(f"planted_bugs: {' '.join(tests)} fails without any bug: fix that first", file=sys.stderr)
                return 2
        survived = 0
        for bug in bugs:
            source = copy / bug.path
            original = source.read_text()
            if original.count(bug.before) != 1:
                print(f"planted_bugs: {bug.path} no longer holds {bug.before!r} once: update this list",
                      file=sys.stderr)
                return 2
            source.write_text(original.replace(bug.before, bug.after))
            start = time.monotonic()
            caught = pytest(copy, bug.tests) != 0
            source.write_text(original)
            survived += not caught
            print(f"{'caught  ' if caught else 'SURVIVED'}  {bug.name:<66} {' '.join(bug.tests)} "
                  f"({time.monotonic() - start:.1f}s)")
    print(f"{len(bugs) - survived} of {len(bugs)} planted bugs caught by a fast test")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
