"""A check whose n-th run reports the n-th of `values`: noise, made reproducible.

The run count lives in the file `state` (the worker may be replaced between runs).
"""

import os

from preflight.checks.base import Metric, Option
from preflight.measurement import Measurement

NAME = "sequence"
HELP = "reports the next of `values` on each run"
OPTIONS = (Option("values", "text", "100", "comma-separated samples/s, one per run"),
           Option("state", "text", "", "file counting the runs so far"))
METRICS = (Metric("rate", "samples/s", True, "the next configured value"),)


def measure(options, budget):
    values = [float(v) for v in options["values"].split(",")]
    count = int(open(options["state"]).read() or 0) if os.path.exists(options["state"]) else 0
    with open(options["state"], "w") as handle:
        handle.write(str(count + 1))
    value = values[min(count, len(values) - 1)]
    return [Measurement("rate", samples=(value * 0.99, value, value * 1.01), unit="samples/s", method="sequence")]
