"""The worker process: runs one check at a time for the runner, isolated from it.

Started by ``runner.Worker`` as ``python -m preflight.worker LOGFILE``. It keeps the
original stdout as its private result channel and points fds 1 and 2 at LOGFILE, so
whatever a check (or a C library under it) prints can never corrupt the protocol.

Protocol, one JSON object per line:
    runner -> worker (stdin):  {"module": "preflight.checks.storage", "options": {...},
                                "duration_s": 5.0, "timeout_s": 120.0, "instance": "storage",
                                "metrics": ["seq_read"], "dataset": "/tmp/preflight-pass-x1y2.log"}
    worker -> runner:          {"scratch": "/data/.preflight-scratch-x1y2"}   (zero or more)
                               {"measurements": [...]} or {"error": "ValueError: ..."}
                               (with "config_error": true where it is the config's or the job's code's)
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any, TextIO

from preflight.host import pids
from preflight.io import scratch
from preflight.io.dataset import Dataset
from preflight.checks import base
from preflight.checks.base import Budget
from preflight.checks.usercode import node_fault
from preflight.errors import ConfigMistake

MAX_ERROR = 2000  # characters of an exception's message kept in the report; the log has all of it


def main(log_path: str) -> int:
    channel = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    scratch.on_create = lambda path: _send(channel, {"scratch": path})
    base.on_progress = lambda line: _send(channel, {"progress": line})
    for line in sys.stdin:
        _send(channel, run_job(json.loads(line)))
    return 0


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one check; a Python exception becomes an error reply (a crash is seen by the runner).

    A thread or process the check could not start for a pids limit (EAGAIN) says "pids limit N reached
    (FILE)" and the fix (``pids.explain``), not only "can't start new thread"."""
    limits = pids.read()  # the forks a pids cgroup had refused before the check, to tell its EAGAIN apart
    try:
        check = importlib.import_module(job["module"])
        metrics = job.get("metrics")
        dataset = Dataset.attached(job["dataset"]) if job.get("dataset") else None
        if dataset is not None:
            dataset.reader = job.get("instance", "")  # each fault it meets is recorded as this instance's
        bounds = {metric: tuple(bound) for metric, bound in job.get("bounds", {}).items()}
        budget = Budget(job["duration_s"], job["timeout_s"], None if metrics is None else tuple(metrics),
                        job.get("instance", ""), dataset, bounds, job.get("max_duration_s", 0.0))  # type: ignore[arg-type]
        measurements = check.measure(job["options"], budget)
        return {"measurements": [m.to_dict() for m in measurements]}
    except ConfigMistake as error:  # the config's or the job's own code: say where the config named it
        where = job.get("option_where", {}).get(error.option, "")
        reply: dict[str, Any] = {"error": (f"{where}: " if where else "") + describe(error)}
        fault = node_fault(str(error))
        if fault:  # the job's code failing on the node's I/O or memory is the node's fault: exit 1
            reply["error"] += f" (a fault of the node's, {fault}, not the code's: exit 1)"
        else:
            reply["config_error"] = True
        return reply
    except Exception as error:  # noqa: BLE001  any failure of a check is its result, fail closed
        print(traceback.format_exc(), file=sys.stderr)
        return {"error": pids.explain(error, limits) or describe(error)}


def describe(error: Exception) -> str:
    """One line for the report: the exception's type and message, capped at ``MAX_ERROR`` characters.

    A ``MemoryError`` (an allocation refused under a memory limit such as RLIMIT_AS or a
    container's) says so and names the fix. A mistake of the config's or the job's code (``ConfigMistake``)
    is already one line that names its exception.
    """
    text = " ".join((str(error) if isinstance(error, ConfigMistake) else f"{type(error).__name__}: {error}").split())
    if len(text) > MAX_ERROR:
        text = text[: MAX_ERROR - 30] + f"... [{len(text) - MAX_ERROR + 30} more characters]"
    if isinstance(error, MemoryError):
        text += " (out of memory: raise the memory limit of the container or pod, or lower the check's sizes)"
    return text


def _send(channel: TextIO, message: dict[str, Any]) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
