"""The time budget of scripts/gpu-smoke.sh: its steps' bounds and its battery's timeouts, added up against its limit.

    python3 scripts/gpu_smoke_budget.py CONFIG LIMIT_S STEP:SECONDS... (one STEP named ``preflight``)

The smoke run must end inside its budget (``LIMIT_S``, the script's ``--budget``, 540 s by default),
whatever the node does: every step of the script is killed at its bound, and the
``preflight`` step's bound must hold the battery's own worst case. ``preflight run`` kills a check at its
``timeout`` and then waits up to ``runner.STUCK_BOUND_S`` for its process group; it starts within
``START_S``. So that step needs, at most, ``START_S + sum(timeout + STUCK_BOUND_S)`` over the battery's
instances (``retries: 0`` and ``repeats: 1``, or each doubles it). And each instance's timeout must
exceed what the check itself expects to take (``checks.base.timing(...).bound_s``), or it times out on a
healthy node. Prints the table; exits 0 when it all fits, 1 naming what does not, 2 on bad arguments.
"""

from __future__ import annotations

import sys

START_S = 20.0  # preflight run's start-up before the first check: imports, config, the node lock, a worker


def main(argv: list[str]) -> int:
    if len(argv) < 3 or not all(":" in step for step in argv[2:]):
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    from preflight import config
    from preflight.checks import CHECKS
    from preflight.checks.base import Budget, timing
    from preflight.runner import STUCK_BOUND_S

    path, limit = argv[0], float(argv[1])
    steps = {name: float(seconds) for name, seconds in (step.split(":", 1) for step in argv[2:])}
    loaded = config.load(path, environ={})
    problems = []
    print(f"{'step or check':40} {'bound s':>8}")
    needed = START_S
    for instance in loaded.instances:
        expected = timing(CHECKS[instance.check], instance.options,
                          Budget(instance.duration_s, instance.timeout_s)).bound_s
        needed += instance.timeout_s + STUCK_BOUND_S
        print(f"  preflight: {instance.name:28} {instance.timeout_s:8.0f}   (expects at most {expected:.0f} s, "
              f"+{STUCK_BOUND_S:.0f} s kill grace)")
        if expected >= instance.timeout_s:
            problems.append(f"{instance.name}: timeout {instance.timeout_s:.0f} s is under the {expected:.0f} s it "
                            f"expects to take: raise it in {path}")
        if instance.retries or instance.repeats > 1:
            problems.append(f"{instance.name}: retries {instance.retries}, repeats {instance.repeats} multiply its "
                            f"time: set retries: 0 and repeats: 1 in {path}")
    print(f"  preflight: start-up {'':19} {START_S:8.0f}")
    if needed > steps.get("preflight", 0):
        problems.append(f"the battery needs up to {needed:.0f} s, more than the preflight step's "
                        f"{steps.get('preflight', 0):.0f} s: lower its timeouts in {path}")
    for name, seconds in steps.items():
        print(f"{name:40} {seconds:8.0f}")
    total = sum(steps.values())
    print(f"{'total':40} {total:8.0f}   (limit {limit:.0f} s = {limit / 60:g} min; preflight's battery at most "
          f"{needed:.0f} of its {steps.get('preflight', 0):.0f} s)")
    if total > limit:
        problems.append(f"the steps add up to {total:.0f} s, over the {limit:.0f} s limit")
    for problem in problems:
        print(f"over budget: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
