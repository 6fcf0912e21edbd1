#!/usr/bin/env python3
"""Slurm HealthCheckProgram: run the preflight gate on this node; drain it on a failure, resume it on a pass.

slurmd runs this as root every ``HealthCheckInterval`` seconds (and once when it starts), with no
arguments, and kills it after 60 s. It runs ``preflight run`` with this interpreter (install it
with the shebang of the Python that has preflight), then:

- gate failed (exit 1): ``scontrol update nodename=NODE state=drain reason="preflight: <failed ids>"``,
  the reason cut to what Slurm keeps (``REASON_CHARS``): the scheduler places no new job on the node;
- gate passed (exit 0): resume the node only when preflight drained it (its reason starts with
  ``preflight:``); a node an administrator (or Slurm itself: "Prolog error", "Kill task failed")
  drained stays drained;
- anything else (exit 2: the thresholds file is wrong; 3: a bug in preflight; no answer in time;
  every failure only "another preflight run was measuring"): the node is left as it is, and the
  log says why. A broken health check must not drain a healthy fleet.

Settings (environment, read from the file slurmd runs, e.g. set in a wrapper):
    PREFLIGHT_HEALTHCHECK_CONFIG  thresholds file (default /etc/preflight/healthcheck.yaml)
    PREFLIGHT_REPORT_DIR          where <node>-healthcheck.json/.xml/.log go (default /var/log/preflight)
    PREFLIGHT_LOCK_WAIT           how long to wait for another run measuring this node (default here: 20s)
    SCONTROL                      the scontrol command (default: scontrol on PATH)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys

from preflight.host.node_lock import BUSY  # the reason of a metric unmeasured only because another run was measuring

PREFIX = "preflight: "
# Slurm keeps a node's reason whole (scontrol and sinfo -R show it all); this cut keeps `sinfo -R`'s
# REASON column and the controller's log line readable. Measured on slurm-wlm 22.05.8: see docs/slurm.md.
REASON_CHARS = 256
RUN_TIMEOUT_S = 50  # slurmd kills the health check at 60 s; leave time to drain or resume


def reason(failed: list[str], limit: int = REASON_CHARS) -> str:
    """``preflight: a, b, c`` within ``limit`` characters; ids that do not fit become ``+N more``."""
    shown: list[str] = []
    for index, name in enumerate(failed):
        rest = len(failed) - index - 1
        candidate = PREFIX + ", ".join([*shown, name]) + (f" +{rest} more" if rest else "")
        if len(candidate) > limit:
            return PREFIX + ", ".join(shown) + f" +{len(failed) - len(shown)} more" if shown \
                else (PREFIX + name)[:limit]
        shown.append(name)
    return PREFIX + ", ".join(shown)


def failed_ids(report: dict) -> tuple[list[str], bool]:
    """The ids of failed or errored results, and whether every one of them failed only for want of the lock."""
    failing = [r for r in report.get("results", []) if r.get("verdict") in ("fail", "error")]
    only_busy = bool(failing) and all(BUSY in r.get("message", "") for r in failing)
    return [r["id"] for r in failing], only_busy


def node_state(scontrol: str, node: str) -> tuple[str, str]:
    """The node's state (``IDLE+DRAIN``) and its reason without Slurm's ``[user@time]`` suffix."""
    shown = subprocess.run([scontrol, "show", "node", node, "-o"], capture_output=True, text=True, timeout=5,
                           check=True).stdout
    state = re.search(r"\bState=(\S+)", shown)
    why = re.search(r"\bReason=(.*?)(?: \[[^\]]*@[^\]]*\])?\s*$", shown)
    return (state.group(1) if state else ""), (why.group(1) if why else "")


def main() -> int:
    config = os.environ.get("PREFLIGHT_HEALTHCHECK_CONFIG", "/etc/preflight/healthcheck.yaml")
    reports = os.environ.get("PREFLIGHT_REPORT_DIR", "/var/log/preflight")
    scontrol = os.environ.get("SCONTROL") or shutil.which("scontrol") or "scontrol"
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    os.makedirs(reports, exist_ok=True)
    base = os.path.join(reports, f"{node}-healthcheck")
    environment = dict(os.environ, NO_COLOR="1")
    environment.setdefault("PREFLIGHT_LOCK_WAIT", "20s")
    with open(base + ".log", "w") as log:
        def say(line: str) -> None:
            print(f"preflight healthcheck on {node}: {line}", file=log, flush=True)

        command = [sys.executable, "-m", "preflight", "run", "-c", config, "--json", base + ".json",
                   "--junit-xml", base + ".xml"]
        try:
            code = subprocess.run(command, stdout=log, stderr=log, env=environment, timeout=RUN_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            say(f"no verdict within {RUN_TIMEOUT_S}s: node left as it is; make the health check's gate faster")
            return 1
        state, why = node_state(scontrol, node)
        if code == 0:
            if "DRAIN" in state and why.startswith(PREFIX):
                subprocess.run([scontrol, "update", f"nodename={node}", "state=resume"], check=True, timeout=10)
                say(f"gate passed: resumed (preflight had drained it: {why})")
            else:
                say(f"gate passed; state {state}" + (f" (drained by someone else: {why})" if "DRAIN" in state else ""))
            return 0
        if code != 1:
            say(f"preflight exited {code} (2: fix {config}; 3: a bug, see the crash log above): node left as it is")
            return code
        with open(base + ".json") as handle:
            failed, only_busy = failed_ids(json.load(handle))
        if only_busy:
            say("another preflight run was measuring this node the whole time: node left as it is")
            return 0
        text = reason(failed)
        if "DRAIN" in state and not why.startswith(PREFIX):
            say(f"gate failed ({text}); already drained by someone else ({why}): their reason is kept")
            return 1
        subprocess.run([scontrol, "update", f"nodename={node}", "state=drain", f"reason={text}"], check=True,
                       timeout=10)
        say(f"gate failed: drained with reason {text!r}; reports: {base}.json, {base}.xml")
        return 1


if __name__ == "__main__":
    sys.exit(main())
