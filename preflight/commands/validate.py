"""``preflight validate [FILE]`` (or ``-c FILE``, as ``run`` takes it): load and check a thresholds file exactly as ``run`` would, measuring nothing.

Prints one line per instance (``storage (storage): 1 threshold, timeout 120s``) and exits 0;
an invalid file raises the same ``ConfigError`` as ``run`` (``FILE:LINE:COL: ...``, exit 2).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from preflight import config
from preflight.errors import UsageError


def main(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    stdout = stdout or sys.stdout
    given = getattr(args, "file", None)
    if given and args.config and given != args.config:
        raise UsageError(f"two thresholds files, {given} and -c {args.config}: give one, as "
                         f"`preflight validate FILE` or `-c FILE`")
    path = config.resolve_path(given or args.config)
    loaded = config.load(path, args.overrides, baseline=getattr(args, "baseline", None))
    count = sum(len(instance.thresholds) for instance in loaded.instances)
    stdout.write(f"{path}: valid, {len(loaded.instances)} checks, {count} thresholds\n")
    for instance in loaded.instances:
        names = ", ".join(t.metric for t in instance.thresholds) or "no thresholds (measured only)"
        stdout.write(f"  {instance.name} ({instance.check}, timeout {instance.timeout_s:g}s): {names}\n")
    return 0
