"""A check that fails in the way `mode` names, for real: nothing here is simulated by the runner.

Modes: hang, segfault, exit (os._exit), raise, scratch_hang (hang after making scratch),
oom (allocate past a real RLIMIT_AS memory limit), cgroup_oom (join the memory cgroup
`cgroup`, if given, and allocate past its limit: the kernel's OOM killer ends it), sigkill (what that
killer sends, sent by hand), hang_child (a child that ignores SIGTERM, as a stuck DataLoader
worker, writes its pid to `scratch`/child.pid, then the check waits on it forever), spew (print megabytes on stdout, stderr and raw fds, then raise a megabyte message).
"""

import ctypes
import os
import resource
import signal
import sys
import time

from preflight.checks.base import Metric, Option
from preflight.io.scratch import scratch_dir

NAME = "faulty"
HELP = "misbehaves as `mode` says"
MODES = ("hang", "segfault", "exit", "raise", "scratch_hang", "oom", "cgroup_oom", "sigkill", "spew", "hang_child")
OPTIONS = (Option("mode", "choice", "hang", "how to fail", choices=MODES),
           Option("scratch", "text", "", "parent of the scratch directory for scratch_hang"),
           Option("cgroup", "text", "", "memory cgroup directory to join in cgroup_oom mode"))
METRICS = (Metric("rate", "samples/s", True, "never measured"),)

OOM_LIMIT = 1 << 30  # address space the worker may use in `oom` mode
SPEW_BYTES = 8 << 20  # per stream in `spew` mode


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
    elif mode == "oom":
        import numpy

        resource.setrlimit(resource.RLIMIT_AS, (OOM_LIMIT, resource.getrlimit(resource.RLIMIT_AS)[1]))
        numpy.ones(2 * OOM_LIMIT, dtype=numpy.uint8)  # touched pages, as a real batch buffer would be
    elif mode == "cgroup_oom":
        import numpy

        if options["cgroup"]:
            with open(os.path.join(options["cgroup"], "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
        numpy.ones(2 * OOM_LIMIT, dtype=numpy.uint8)
    elif mode == "hang_child":
        child = os.fork()
        if child == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
        with open(os.path.join(options["scratch"], "child.pid"), "w") as handle:
            handle.write(str(child))
        os.waitpid(child, 0)
    elif mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "spew":
        line = "spew " * 200 + "\n"
        for _ in range(SPEW_BYTES // len(line)):
            sys.stdout.write(line)
            sys.stderr.write(line)
        os.write(1, b"\x1b[31m\xff\xfe raw bytes ]]> \x00\n" * 1000)
        raise RuntimeError("m" * (1 << 20))
    return []
