"""A check that reports the budget the runner gave it: its duration, and how many of its metrics were judged."""

from preflight.checks.base import Metric
from preflight.measurement import Measurement

NAME = "budgeted"
HELP = "reports its budget"
OPTIONS = ()
METRICS = (Metric("seconds", "s", True, "the budget's duration_s"),
           Metric("judged", "", True, "how many metrics the budget names; -1 for None (all)"),
           Metric("unjudged", "", True, "never judged: measured only when the budget asks for every metric"))


def measure(options, budget):
    judged = -1.0 if budget.metrics is None else float(len(budget.metrics))
    results = [Measurement("seconds", budget.duration_s, "s", method="budget"),
               Measurement("judged", judged, "", method="budget")]
    if budget.wants("unjudged"):
        results.append(Measurement("unjudged", 1.0, "", method="budget"))
    return results
