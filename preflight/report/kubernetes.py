"""Kubernetes: the termination message ``kubectl describe pod`` shows, and the compact verdict.

The kubelet reads the container's ``terminationMessagePath`` (``/dev/termination-log`` by
default) when it exits and shows it as the container's ``Message``; it keeps at most
4096 bytes per container and 12 KiB per pod (Kubernetes docs, "Determine the Reason for
Pod Failure"). We write at most 1 KiB, so an init container's reason survives next to the
others', and only to a file that already exists and is writable: the kubelet creates it,
and outside a pod nothing is created.
"""

from __future__ import annotations

import os
from typing import Mapping

from preflight.checks.subject import no_dataset_fix
from preflight.errors import EXIT_USAGE
from preflight.report import RunReport, tally
from preflight.verdict import Result

TERMINATION_LOG = "/dev/termination-log"
MAX_MESSAGE_BYTES = 1024


def termination_path(explicit: str | None, environ: Mapping[str, str]) -> str:
    """``--termination-log PATH``, else ``$PREFLIGHT_TERMINATION_LOG``, else ``/dev/termination-log``."""
    return explicit or environ.get("PREFLIGHT_TERMINATION_LOG") or TERMINATION_LOG


NAMED_IDS = 10  # failing ids the verdict line names; past that it names this many and counts the rest


def verdict_line(report: RunReport) -> str:
    """The compact last line on stderr: ``preflight: FAILED on node-17: 2 failed, 5 passed (shm.size,
    storage.seq_read)``: every failing id, or the first ``NAMED_IDS`` and how many more (all in the JSON's ``failed``)."""
    if report.exit_code == EXIT_USAGE:  # the config's or the job's code's mistake: its lines, as `validate` says them
        return "\n".join(f"preflight: error: {message}" for message in config_errors(report))
    totals = tally(report.counts(), info=False)
    state = "FAILED" if report.exit_code else "PASSED"
    gating = [r.id for r in report.results if r.verdict in ("fail", "error")]
    shown = gating if len(gating) <= NAMED_IDS else gating[:NAMED_IDS - 2]
    more = f" and {len(gating) - len(shown)} more" if len(shown) < len(gating) else ""
    named = f" ({', '.join(shown)}{more})" if gating else ""
    unnamed = list(dict.fromkeys(r.instance for r in report.results if r.subject == "no_dataset"))
    fix = f"; {no_dataset_fix(*unnamed)}" if unnamed and gating else ""
    return f"preflight: {state} on {report.host}: {totals or 'nothing run'}{named}{fix}"


def config_errors(report: RunReport) -> list[str]:
    """Each distinct mistake of the config's or the job's code that stopped a check (``Result.config_error``), one
    line each (``FILE:LINE:COL: ...: fix``), in the table's order; the rows measured on no dataset named are one
    line for all of them, the fix (``subject.no_dataset_fix``)."""
    unnamed = list(dict.fromkeys(r.instance for r in report.results if r.config_error and r.subject == "no_dataset"))
    lines = [" ".join(r.message.split()) for r in report.results if r.config_error and r.subject != "no_dataset"]
    return list(dict.fromkeys(lines + ([no_dataset_fix(*unnamed)] if unnamed else [])))


def summary(report: RunReport) -> str:
    """One paragraph, at most ``MAX_MESSAGE_BYTES`` of UTF-8: what failed, measured and required."""
    if report.exit_code == EXIT_USAGE:  # not the node's fault: said as such, as a config that cannot load is
        return _cap(f"preflight on {report.host}: a configuration error, the node not judged: "
                    + " ".join(config_errors(report)))
    gating = [r for r in report.results if r.verdict in ("fail", "error")]
    if not gating:
        return _cap(verdict_line(report) + ".")
    judged = [r for r in report.results if r.verdict != "info"]
    parts = [f"preflight FAILED on {report.host}: {len(gating)} of {len(judged)} thresholds failed."]
    parts += [_sentence(result) for result in gating]
    return _cap(" ".join(parts))


def config_error_summary(message: str) -> str:
    return _cap(f"preflight could not start: {message}")


def write(path: str, text: str) -> bool:
    """Write ``text`` to an existing, writable termination-message file; False when there is none."""
    if not os.path.exists(path) or os.path.isdir(path) or not os.access(path, os.W_OK):
        return False
    try:
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
    except OSError:
        return False
    return True


def _sentence(result: Result) -> str:
    text = f"{result.id}: {' '.join(result.message.split())}"
    return text + (f"; fix: {' '.join(result.hint.split())}." if result.hint else ".")


def _cap(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= MAX_MESSAGE_BYTES:
        return text
    marker = " [truncated: see the pod's log]".encode()
    return data[: MAX_MESSAGE_BYTES - len(marker)].decode("utf-8", errors="ignore") + marker.decode()
