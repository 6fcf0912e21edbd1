"""A check that fails in the way `mode` names: hang, segfault, exit, raise, or hang after making scratch."""

import ctypes
import os
import time

from preflight.checks.base import Metric, Option
from preflight.scratch import scratch_dir

NAME = "faulty"
HELP = "misbehaves as `mode` says"
OPTIONS = (Option("mode", "choice", "hang", "how to fail", choices=("hang", "segfault", "exit", "raise", "scratch_hang")),
           Option("scratch", "text", "", "parent of the scratch directory for scratch_hang"))
METRICS = (Metric("rate", "samples/s", True, "never measured"),)


def measure(options, budget):
    mode = options["mode"]
    print("about to fail: " + mode, flush=True)
    if mode == "hang":
        time.sleep(3600)
    elif mode == "segfault":
        ctypes.string_at(0)
    elif mode == "exit":
        os._exit(7)
    elif mode == "raise":
        raise ValueError("the fake check broke")
    elif mode == "scratch_hang":
        with scratch_dir(options["scratch"]) as path:
            open(os.path.join(path, "partial.dat"), "wb").write(b"x" * 4096)
            time.sleep(3600)
    return []
