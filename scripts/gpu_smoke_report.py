"""Read preflight's JSON report for scripts/gpu-smoke.sh: print its rows, errors first, and why the smoke test fails.

    python3 scripts/gpu_smoke_report.py REPORT.json PROBLEMS.tsv

The smoke test runs GPU code to see it work, so it fails on every row that is an ``error`` (a
check crashed or timed out), that failed its threshold, or that was not measured, a ``warn``
threshold's unmeasured row included. It passes a ``skip`` (the GPU has no such reading: no
ECC, one GPU for p2p) and a measured ``warn`` (a hot GPU still computes). Rows of one instance
that share one message (a crash gives each metric of its check the same one) are one reason,
named by the first row and how many more. PROBLEMS.tsv gets one line per reason, errors first:
``error<TAB>error in ID[ and N more]: MESSAGE`` or ``problem<TAB>(not measured|failed): ID...: MESSAGE``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

ORDER = {"error": 0, "fail": 1, "warn": 2, "skip": 3, "info": 4, "pass": 5}
UNMEASURED = "could not measure: "


def table(results: list[dict[str, Any]]) -> list[str]:
    """One line per row, errors first, then by verdict (sorted() keeps the report's order within one)."""
    lines = []
    for r in sorted(results, key=lambda r: ORDER.get(r["verdict"], 6)):
        value = "-" if r["value"] is None else f"{r['value']} {r['unit']}".strip()
        verdict = r["verdict"].upper() if r["verdict"] == "error" else r["verdict"]
        shown = r["verdict"] in ("error", "fail") or _unmeasured(r)
        lines.append(f"{verdict:<5} {r['id']:<48} {value}{'  ' + r['message'] if shown else ''}")
    return lines


def reasons(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(kind, text) for each reason the smoke test fails: ``error`` first, then ``problem``, in report order."""
    grouped: dict[tuple[str, str, str], list[str]] = {}  # (label, instance, message) -> row ids
    for r in results:
        if r["verdict"] == "error":
            grouped.setdefault(("error in", r["instance"], r["message"]), []).append(r["id"])
    for r in results:
        if _unmeasured(r):
            key = ("not measured:", r["instance"], r["message"].removeprefix(UNMEASURED))
            grouped.setdefault(key, []).append(r["id"])
        elif r["verdict"] == "fail":
            grouped.setdefault(("failed:", r["instance"], r["message"]), []).append(r["id"])
    out = []
    for (label, _, message), ids in grouped.items():
        more = f" and {len(ids) - 1} more" if len(ids) > 1 else ""
        out.append(("error" if label == "error in" else "problem", f"{label} {ids[0]}{more}: {message}"))
    return out


def _unmeasured(r: dict[str, Any]) -> bool:
    """A row judged against a threshold with nothing measured (a skip is a reading the GPU does not have)."""
    return r["value"] is None and r["verdict"] in ("fail", "warn")


def main(report: str, problems: str) -> int:
    with open(report, encoding="utf-8") as file:
        results = json.load(file)["results"]
    print("\n".join(table(results)))
    with open(problems, "w", encoding="utf-8") as file:
        file.writelines(f"{kind}\t{text}\n" for kind, text in reasons(results))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} REPORT.json PROBLEMS.tsv")
    sys.exit(main(*sys.argv[1:]))
