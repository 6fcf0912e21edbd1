"""Mutation score per module from mutmut's stored results: ``python3 scripts/mutation_score.py``.

Reads ``mutmut results --all true`` (one ``module.x_function__mutmut_N: status`` line per
mutant) and prints, per module, killed / survived / no tests and the score: killed (timeouts
count as killed, as mutmut does: the mutant hung the tests) over every mutant. "No tests" (a
function no selected test reaches) counts as not killed: it is a gap in the tests, not an
excuse. With ``--survivors`` it lists the survivors too, for the docs' table of explanations.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys

LINE = re.compile(r"^\s*(?P<module>[\w.]+)\.x_?(?P<function>\w+?)__mutmut_(?P<number>\d+): (?P<status>.+)$")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--survivors", action="store_true", help="list every surviving mutant")
    args = parser.parse_args()
    done = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], capture_output=True,
                          text=True)
    if done.returncode:
        print(f"mutation_score: mutmut results failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return 2
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    survivors = []
    for line in done.stdout.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        status = match["status"].strip()
        counts[match["module"]][status] += 1
        if status == "survived":
            survivors.append(line.strip().rsplit(":", 1)[0])
    if not counts:
        print("mutation_score: no results: run `mutmut run` first (scripts/mutation.sh)", file=sys.stderr)
        return 2
    print(f"{'module':<40} {'mutants':>7} {'killed':>7} {'survived':>8} {'no tests':>8} {'score':>6}")
    total = collections.Counter()
    for module in sorted(counts):
        c = counts[module]
        total.update(c)
        print(_row(module, c))
    print(_row("all", total))
    if args.survivors:
        print("\nsurvivors:")
        print("\n".join(f"  {name}" for name in survivors))
    return 0


def _row(name: str, c: collections.Counter[str]) -> str:
    killed = c["killed"] + c["timeout"]
    mutants = sum(c.values())
    score = f"{killed / mutants:.0%}" if mutants else "-"
    return f"{name:<40} {mutants:>7} {killed:>7} {c['survived']:>8} {c['no tests']:>8} {score:>6}"


if __name__ == "__main__":
    sys.exit(main())
