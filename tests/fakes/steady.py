"""A check that reports the value it is given, and writes a scratch directory under `scratch`."""

from preflight.checks.base import Metric, Option
from preflight.measurement import Measurement
from preflight.scratch import scratch_dir
from preflight.units import Dimension

NAME = "steady"
HELP = "reports `value` as its rate"
OPTIONS = (Option("value", Dimension.SAMPLE_RATE, "100 samples/s", "what to report"),
           Option("scratch", "text", "", "parent of a scratch directory to create"))
METRICS = (Metric("rate", "samples/s", True, "the configured value", hint="raise it to {required}"),)


def measure(options, budget):
    if options["scratch"]:
        with scratch_dir(options["scratch"]):
            pass
    return [Measurement("rate", samples=(options["value"],) * 3, unit="samples/s", method="configured")]
