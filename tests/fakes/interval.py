"""A check that appends when its measuring began and ended (pid, wall-clock start and end) to `log`,
holding `hold` seconds in between: two runs' lines show whether their measuring overlapped."""

import os
import time

from preflight.checks.base import Metric, Option
from preflight.measurement import Measurement
from preflight.units import Dimension

NAME = "interval"
HELP = "records its measuring interval in `log`"
OPTIONS = (Option("log", "text", "", "file to append `pid start end` to"),
           Option("hold", Dimension.DURATION, "2s", "how long the measurement lasts"))
METRICS = (Metric("rate", "samples/s", True, "1 sample per second of holding"),)


def measure(options, budget):
    start = time.time()
    time.sleep(options["hold"])
    end = time.time()
    with open(options["log"], "a") as log:
        log.write(f"{os.getpid()} {start} {end}\n")
    return [Measurement("rate", samples=(1.0,) * 3, unit="samples/s", method="slept")]
