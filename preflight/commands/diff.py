"""``preflight diff OLD.json NEW.json``: every metric of two runs side by side, each change judged against the noise
between runs.

Prints a table (metric, old, new, ratio, what the change is) and a closing count. Exit 1 when
``--fail-on N%`` is given and a judged metric regressed beyond its noise by more than N%, as
``pytest-benchmark compare --fail`` does; else 0. The noise is that of two runs, not of one:
three standard deviations of their difference, from the metric's run-to-run CV measured on a
busy node (``report.noise.RUN_TO_RUN``, each with its source), each run's repeats and both runs'
samples (``report.noise.band`` has the formula). Judged are rates, latencies and any metric the
user gated, an exact count (GPUs, Xid lines, unreadable files) with no noise band: it changed or it did not;
a fact (no threshold and no rate) is shown, never judged, and so is a figure a run sampled
over a few milliseconds, "too short to compare" (its row's ``short:`` warning, ``compare.short_of``).
A file that is missing or not a preflight report is one ``preflight: error:`` line and exit 2 (raised as
UsageError to the CLI's boundary).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Sequence, TextIO

from preflight.errors import UsageError
from preflight.report.compare import Change, Entry, load, pair
from preflight.units import Dimension, UnitError, format_value, parse_quantity

EXIT_REGRESSED = 1


def main(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    """Compare, print the table, return the exit code (0, or 1 for a regression beyond ``--fail-on``)."""
    stdout = stdout or sys.stdout
    fail_on = parse_fail_on(args.fail_on) if args.fail_on is not None else None
    old, new = load(args.old), load(args.new)
    changes, only_old, only_new = pair(old, new)
    lines = [f"preflight diff: {args.old} ({old.label}) -> {args.new} ({new.label})"]
    lines += table(changes, fail_on)
    for label, ids in (("only in " + args.old, only_old), ("only in " + args.new, only_new)):
        if ids:
            lines.append(f"{label}: {', '.join(ids)}")
    regressed = [c for c in changes if fail_on is not None and c.regressed(fail_on)]
    unsure = [c for c in changes if fail_on is not None and c.cannot_tell(fail_on)]
    lines.append(closing(changes, regressed, fail_on, unsure, args.inconclusive))
    if args.inconclusive == "fail":
        regressed += unsure
    stdout.write("\n".join(lines) + "\n")
    return EXIT_REGRESSED if regressed else 0


def parse_fail_on(text: str) -> float:
    """``10%`` -> 0.10.

    Raises:
        UsageError: not a percentage between 0 and 100.
    """
    try:
        percent = parse_quantity(text, Dimension.PERCENT)
    except UnitError as error:
        raise UsageError(f"--fail-on {text}: {error}: give a percentage, like --fail-on 10%") from None
    if not 0 <= percent < 100:
        raise UsageError(f"--fail-on {text}: give a percentage from 0% to under 100%, like --fail-on 10%")
    return percent / 100


def table(changes: Sequence[Change], fail_on: float | None) -> list[str]:
    """One line per change, columns as wide as their longest cell."""
    rows = [("metric", "old", "new", "ratio", "change")]
    rows += [(c.id, _value(c.old), _value(c.new), f"{c.ratio:.3f}x" if c.ratio is not None else "-", verdict(c, fail_on))
             for c in changes]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    return [f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}  {row[4]}"
            .rstrip() for row in rows]


def _value(entry: Entry) -> str:
    if entry.value is None:
        return "not measured"
    return format_value(entry.value, "" if entry.unit in ("version", "text") else entry.unit)


def verdict(c: Change, fail_on: float | None) -> str:
    """What the change is: ``REGRESSED -23% (noise ±5%)``, ``better +12% (noise ±5%)``, ``within noise (±5%)``,
    ``too short to compare (new: 1 sample of 100 files in 12 ms)``, ``not judged (a fact)``, an exact count's
    ``worse -1 (-12%, an exact count)`` (``_count``); then the verdict's
    change, if any (``pass -> fail``)."""
    if c.short:
        text = f"too short to compare ({c.short})"
    elif fail_on is not None and c.cannot_tell(fail_on):
        text = (f"cannot tell at this noise ({c.ratio - 1:+.0%}, noise ±{c.band:.0%} > --fail-on {fail_on:.0%}): "  # type: ignore[operator]
                + _to_tell(c, fail_on))
    elif c.delta is not None:
        text = _count(c, fail_on)
    elif not c.judged:
        text = "not judged (a fact)" if c.ratio is not None else ("same" if c.old.value == c.new.value else "changed")
    else:
        noise = f"noise ±{c.band:.0%}"
        percent = f"{c.ratio - 1:+.0%}"  # type: ignore[operator]
        if not c.beyond_noise:
            text = f"within noise ({percent}, {noise})"
        elif fail_on is not None and c.regressed(fail_on):
            text = f"REGRESSED {percent} ({noise}, --fail-on {fail_on:.0%})"
        else:
            text = f"{'worse' if c.worse else 'better'} {percent} ({noise})"
    if c.old.verdict != c.new.verdict:
        text += f"; {c.old.verdict} -> {c.new.verdict}"
    return text


def _to_tell(c: Change, fail_on: float) -> str:
    """What would tell: ``a duration 5.9x as long in both runs would tell`` (``Change.times_to_tell``). A multiple of
    the runs' own ``duration``: a report holds the check's wall time, which parts that read their share early
    leave shorter than it."""
    times = c.times_to_tell(fail_on)
    if times is None:
        return "the runs' repeats disagree by more than that: compare runs of a quieter node"
    return f"a duration {math.ceil(times * 10) / 10:g}x as long in both runs would tell"


def _count(c: Change, fail_on: float | None) -> str:
    """An exact count's change: ``same``, ``changed +2 (a fact, not judged)``, ``worse -1 (-12%, an exact count)``,
    ``REGRESSED +3 (from 0, an exact count, --fail-on 10%)``: no noise band, it changed or it did not."""
    delta = c.delta or 0.0
    if not delta:
        return "same"
    amount = f"{delta:+g}"
    if not c.judged:
        return f"changed {amount} (a fact, not judged)"
    old = float(c.old.value)  # type: ignore[arg-type]
    said = f"{delta / abs(old):+.0%}, an exact count" if old else "from 0, an exact count"
    if fail_on is not None and c.regressed(fail_on):
        return f"REGRESSED {amount} ({said}, --fail-on {fail_on:.0%})"
    return f"{'worse' if c.worse else 'better'} {amount} ({said})"


def closing(changes: Sequence[Change], regressed: Sequence[Change], fail_on: float | None,
            unsure: Sequence[Change] = (), inconclusive: str = "pass") -> str:
    """``== 1 regressed beyond 10%, 2 worse, 1 better, 20 within noise, 1 cannot tell (counted as pass), 2 too
    short to compare, 9 not judged; 35 metrics in both runs ==``."""
    judged = [c for c in changes if c.judged and c not in unsure]
    counts = [(f"regressed beyond {fail_on:.0%}" if fail_on is not None else "", len(regressed)),
              ("worse", sum(c.worse for c in judged) - len(regressed)),
              ("better", sum(c.beyond_noise and not c.worse for c in judged)),
              ("within noise", sum(not c.beyond_noise and not c.exact for c in judged)),
              ("same count", sum(not c.beyond_noise and c.exact for c in judged)),
              (f"cannot tell (counted as {inconclusive})", len(unsure)),
              ("too short to compare", sum(bool(c.short) for c in changes)),
              ("not judged", sum(not c.judged and not c.short for c in changes))]
    said = ", ".join(f"{n} {what}" for what, n in counts if n and what)
    return f"== {said or 'nothing'}; {len(changes)} metric{'s' if len(changes) != 1 else ''} in both runs =="
