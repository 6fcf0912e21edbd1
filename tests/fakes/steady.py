"""A check that reports the value it is given, writes a scratch directory under `scratch`, and
says in the file `tempdir_to` where Python's tempfile puts its files in the worker."""

import tempfile

from preflight.checks.base import Metric, Option
from preflight.measurement import Measurement
from preflight.io.scratch import scratch_dir
from preflight.units import Dimension

NAME = "steady"
HELP = "reports `value` as its rate"
OPTIONS = (Option("value", Dimension.SAMPLE_RATE, "100 samples/s", "what to report"),
           Option("scratch", "text", "", "parent of a scratch directory to create"),
           Option("tempdir_to", "text", "", "file to write the worker's tempfile.gettempdir() to"))
METRICS = (Metric("rate", "samples/s", True, "the configured value", hint="raise it to {required}"),)


def measure(options, budget):
    if options["scratch"]:
        with scratch_dir(options["scratch"]):
            pass
    if options["tempdir_to"]:
        with tempfile.NamedTemporaryFile(), open(options["tempdir_to"], "w") as out:  # as a library's own would be
            out.write(tempfile.gettempdir())
    return [Measurement("rate", samples=(options["value"],) * 3, unit="samples/s", method="configured")]
