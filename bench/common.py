"""What the benches share: a scratch directory on the filesystem under test, a check's options as a user
leaves them, rounds that alternate who goes first, the budget that gives each storage part N seconds, and
``preflight run`` through the CLI with its JSON report, over the README's sample dataset."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator, NamedTuple, TypeVar

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from preflight.checks import CHECKS  # noqa: E402
from preflight.checks.base import Budget  # noqa: E402
from preflight.checks.storage.parts import timed_parts  # noqa: E402
from preflight.config import coerce_option  # noqa: E402

A = TypeVar("A")
B = TypeVar("B")


@contextlib.contextmanager
def scratch_root(where: str | None = None) -> Iterator[str]:
    """A new hidden directory in ``where`` (default: the working directory, so the bench measures its
    filesystem), removed with everything in it when the block ends, however it ends."""
    root = tempfile.mkdtemp(prefix=".preflight-bench-", dir=where or os.getcwd())
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def defaults(check: str, **given: Any) -> dict[str, Any]:
    """``check``'s options at their defaults, parsed as the config parses them, then ``given`` (parsed values)."""
    options = {o.name: coerce_option(o, None, o.name) for o in CHECKS[check].OPTIONS}
    unknown = set(given) - set(options)
    if unknown:
        raise SystemExit(f"bench: not options of {check}: {sorted(unknown)}")
    return {**options, **given}


def in_turn(run: int, first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
    """Round ``run``'s pair, back to back: ``first`` goes first in odd rounds, ``second`` in even ones, so that
    the machine's other load, and any favour to whoever runs first after the other, fall on both alike."""
    if run % 2:
        a = first()
        return a, second()
    b = second()
    return first(), b


def alternating(rounds: int, first: Callable[[], A], second: Callable[[], B],
                after: Callable[[int, A, B], None] = lambda run, a, b: None) -> list[tuple[A, B]]:
    """``rounds`` rounds of ``in_turn``; the figure compared is then the median of the rounds' paired ratios.
    Returns each round's (first's, second's) result; ``after(round, a, b)`` runs after each round (to print it)."""
    results = []
    for run in range(1, rounds + 1):
        results.append(in_turn(run, first, second))
        after(run, *results[-1])
    return results


def per_storage_part(seconds: float, timeout_s: float = 600.0) -> Budget:
    """A storage budget giving each of its timed parts ``seconds`` (``duration`` is split between them)."""
    return Budget(seconds * len(timed_parts(Budget(seconds, timeout_s))), timeout_s)


class Run(NamedTuple):
    """One ``preflight run`` through the CLI: its wall time, exit status and JSON report."""

    wall_s: float
    exit_code: int
    report: dict[str, Any]

    def instance_s(self) -> dict[str, float]:
        """Each instance's own wall time, as the report gives it (from its job sent to its answer)."""
        return {result["instance"]: result["duration_s"] for result in self.report["results"]}


def run_preflight(*args: str, data_dir: str) -> Run:
    """``python -m preflight run ARGS --json FILE`` with ``DATA_DIR=data_dir``, this checkout first on the path."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, DATA_DIR=data_dir, PYTHONPATH=root)
    with tempfile.TemporaryDirectory(prefix="preflight-bench-") as temp:
        report = os.path.join(temp, "report.json")
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "preflight", "run", *args, "--json", report], env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        if not os.path.exists(report):
            raise SystemExit(f"bench: preflight run {' '.join(args)} wrote no report (exit {done.returncode}): "
                             f"{done.stderr.strip()[-500:]}")
        with open(report) as handle:
            return Run(wall, done.returncode, json.load(handle))


def imagenet_sample(where: str) -> str:
    """The README's dataset: ``preflight make-dataset`` (1000 files of ~110 kB in 10 class folders) in ``where``."""
    data = os.path.join(where, "imagenet-sample")
    subprocess.run([sys.executable, "-m", "preflight", "make-dataset", data], check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return data
