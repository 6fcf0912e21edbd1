"""A real sequential reader of `path`, with an explicit throttle: the seam for "a slower node".

Each sample reads the whole file in 1 MiB chunks and returns MB/s (10^6 bytes/s), as the
storage check does but without bypassing the page cache (this is about gating, not
storage). With `throttle` set, it sleeps after each chunk so its cumulative rate stays
at or under that bandwidth: the token-bucket idea of fio's --rate.
"""

import time

from preflight.checks.base import Metric, Option
from preflight.measurement import Measurement
from preflight.sampling import sample
from preflight.units import Dimension

NAME = "reader"
HELP = "reads `path` and reports MB/s, slowed to `throttle` if given"
OPTIONS = (Option("path", "path", ".", "file to read"),
           Option("throttle", Dimension.BANDWIDTH, "0 B/s", "cap on the read rate; 0 = none"))
METRICS = (Metric("read_bw", "MB/s", True, "sequential read throughput of `path`"),)
CHUNK = 1 << 20


def measure(options, budget):
    cap = options["throttle"]

    def one_pass():
        start, total = time.perf_counter(), 0
        with open(options["path"], "rb", buffering=0) as handle:
            while chunk := handle.read(CHUNK):
                total += len(chunk)
                if cap:
                    behind = total / cap - (time.perf_counter() - start)
                    if behind > 0:
                        time.sleep(behind)
        return total / (time.perf_counter() - start) / 1e6

    taken = sample(one_pass, budget.duration_s)
    return [Measurement("read_bw", samples=taken.values, unit="MB/s", method="buffered reads, 1 MiB",
                        stopped=taken.stopped)]
