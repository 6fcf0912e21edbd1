#!/usr/bin/env python3
"""node-problem-detector custom plugin: run preflight's gate on this node and say what NPD should set.

NPD's contract (kubernetes/node-problem-detector, docs/custom_plugin_monitor.md and
pkg/custompluginmonitor/plugin/plugin.go): exit 0 is OK (the rule's condition False), 1 is NonOK
(condition True: a problem), anything else Unknown (condition Unknown); stdout, trimmed and cut at
the monitor's ``max_output_length`` bytes, is the condition's message; past the rule's ``timeout``
NPD kills the plugin's process group and reports Unknown with its own message.

Two modes, two rules of one monitor (preflight-monitor.json), run in that order (concurrency 1):

``gate``: run ``python3 -m preflight run -c CONFIG`` (the Python running this file, the training
    image's, or ``$PREFLIGHT_PYTHON`` where preflight was installed beside it) and map its exit
    status: 0 passed -> 0; 1 the gate failed -> 1, naming the failed ids; 2 a config or usage error
    and 3 an internal error -> 2 and 3, Unknown, never a problem (DESIGN: a configuration error
    never takes a node out of rotation). preflight gets a deadline below NPD's timeout for this
    rule, read from the same monitor file: past it, it is sent SIGTERM (it removes its scratch
    files), then SIGKILL, and the plugin answers 3 with its own message, so NPD's kill never cuts a
    run short without a word. The outcome is written to STATE/verdict.json.
``inconclusive``: 1 when the last gate run could not judge the node (config error, internal error,
    deadline), else 0; its condition lets the Node Readiness Controller keep such a node schedulable
    (see docs/kubernetes.md).

Standard library only; Python 3.9+.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OK, PROBLEM, CONFIG_ERROR, INTERNAL = 0, 1, 2, 3
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str) -> float:
    """Seconds in a Go duration string as NPD parses it (``time.ParseDuration``): "10m", "1h30m", "500ms"."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(number) * _SECONDS[unit] for number, unit in parts)


class Monitor:
    """The bounds NPD puts on this plugin, from the monitor file NPD reads."""

    def __init__(self, path: Path, mode: str) -> None:
        config = json.loads(path.read_text())
        plugin = config["pluginConfig"]
        npd_timeout = go_duration(plugin["timeout"])
        rule = next(r for r in config["rules"] if (r.get("args") or [None])[0] == mode)
        if "timeout" in rule:  # plugin.go: a rule's timeout applies when it is below the global one
            npd_timeout = min(npd_timeout, go_duration(rule["timeout"]))
        self.npd_timeout = npd_timeout
        self.max_output = int(plugin["max_output_length"])
        self.grace = min(15.0, npd_timeout / 10)  # SIGTERM to SIGKILL
        self.deadline = npd_timeout - 3 * self.grace  # our kill and our answer land before NPD's


def message(text: str, limit: int) -> str:
    """One line of at most ``limit`` bytes of UTF-8, cut on a character with "..." when longer."""
    line = " ".join(text.split())
    if len(line.encode()) <= limit:
        return line
    cut = line.encode()[:max(limit - 3, 0)].decode(errors="ignore")
    return cut.rstrip() + "..."


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def run_gate(config: str, monitor: Monitor, state: Path) -> tuple[int, str]:
    """Run preflight once within the monitor's deadline; (exit status for NPD, message)."""
    state.mkdir(parents=True, exist_ok=True)
    report = state / "report.json"
    log = state / "last-run.log"
    report.unlink(missing_ok=True)
    environ = {**os.environ, "PREFLIGHT_TERMINATION_LOG": os.devnull, "NO_COLOR": "1"}
    # The Python that has preflight: this one, or the venv the installer made beside the image's (--venv).
    python = os.environ.get("PREFLIGHT_PYTHON") or sys.executable
    command = [python, "-m", "preflight", "run", "-c", config, "--json", str(report)]
    with open(log, "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=environ, start_new_session=True)  # its own group: we kill all of it
        try:
            code = process.wait(timeout=monitor.deadline)
        except subprocess.TimeoutExpired:
            _kill(process, monitor.grace)
            return INTERNAL, (f"preflight could not judge this node: no verdict within {monitor.deadline:.0f} s, "
                              f"below NPD's {monitor.npd_timeout:.0f} s timeout; killed (log: {log})")
    if code in (0, 1) and report.exists():
        results = json.loads(report.read_text())["results"]
        judged = [r for r in results if r["verdict"] in ("pass", "warn", "fail", "error")]  # not info, skip
        failed = [r["id"] + (f"[{r['device']}]" if r.get("device") else "") for r in results
                  if r["verdict"] in ("fail", "error")]
        if code == 0:
            return OK, f"preflight passed {len(judged)} of {len(judged)} judged"
        return PROBLEM, f"preflight failed {len(failed)} of {len(judged)} judged: {', '.join(failed)}"
    if code == 2:
        return CONFIG_ERROR, f"preflight could not judge this node: config error: {_last_line(log)}"
    return INTERNAL, f"preflight could not judge this node: exit {code}: {_last_line(log)}"


def _kill(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM to preflight's process group, SIGKILL after ``grace`` seconds; reaped either way."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    process.wait()


def _write_state(state: Path, status: int, text: str) -> None:
    outcome = {OK: "passed", PROBLEM: "failed"}.get(status, "inconclusive")
    with tempfile.NamedTemporaryFile("w", dir=state, delete=False, suffix=".tmp") as handle:
        json.dump({"outcome": outcome, "status": status, "message": text, "time": time.time()}, handle)
    os.replace(handle.name, state / "verdict.json")


def main(argv: list[str] | None = None) -> int:
    """The plugin's command line; returns the exit status NPD reads."""
    parser = argparse.ArgumentParser(description="node-problem-detector plugin for preflight")
    parser.add_argument("mode", choices=("gate", "inconclusive"))
    parser.add_argument("--monitor", type=Path, required=True, help="the monitor JSON NPD reads (its timeouts)")
    parser.add_argument("--state", type=Path, required=True, help="a folder the two rules share (an emptyDir)")
    parser.add_argument("--config", help="gate: preflight's thresholds file")
    arguments = parser.parse_args(argv)
    monitor = Monitor(arguments.monitor, arguments.mode)
    if arguments.mode == "gate":
        if not arguments.config:
            status, text = CONFIG_ERROR, "preflight could not judge this node: the gate rule names no --config"
        else:
            status, text = run_gate(arguments.config, monitor, arguments.state)
        _write_state(arguments.state, status, text)
    else:
        try:
            last = json.loads((arguments.state / "verdict.json").read_text())
        except (OSError, ValueError):
            last = {"outcome": "none"}
        if last["outcome"] == "inconclusive":
            status, text = PROBLEM, last["message"]
        else:
            status, text = OK, f"preflight's last run judged this node ({last['outcome']})"
    print(message(text, monitor.max_output))
    return status


if __name__ == "__main__":
    sys.exit(main())
