"""``preflight validate [FILE]`` (or ``-c FILE``, as ``run`` takes it): load and check a thresholds file exactly as ``run`` would, measuring nothing.

Prints one line per instance (``storage (storage): 1 threshold, timeout 120s``) and exits 0;
an invalid file raises the same ``ConfigError`` as ``run`` (``FILE:LINE:COL: ...``, exit 2), every
mistake the file has at once (``ConfigErrors``, one line each).
Beyond ``run``'s load, it imports the job's own code an instance names (``dataset:``) and
builds it once through the check's ``check_user_code``, never iterating it: a factory that
cannot be imported or returns no Dataset is a ``ConfigError`` at the option's line, and so is
one that does not return within the instance's timeout (a factory waiting on a hung mount).
Where the loader's start method sends each worker a pickled copy (``multiprocessing_context``
spawn or forkserver), what it would send is pickled too (into nothing, tensors skipped): a
Dataset holding a lambda fails the job at its first batch, so validate says so at its line.
(``run`` leaves that code to the worker, under the check's timeout.)
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from typing import Iterator, TextIO

from preflight import config
from preflight.checks import CHECKS
from preflight.checks.base import UserCodeError
from preflight.errors import INVALID, ConfigError, Found, UsageError


def main(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    stdout = stdout or sys.stdout
    given = getattr(args, "file", None)
    if given and args.config and given != args.config:
        raise UsageError(f"two thresholds files, {given} and -c {args.config}: give one, as "
                         f"`preflight validate FILE` or `-c FILE`")
    path = config.resolve_path(given or args.config)
    loaded = config.load(path, args.overrides, baseline=getattr(args, "baseline", None))
    found = Found()  # every instance's job code is checked: one run tells each mistake
    located = [instance for instance in loaded.instances  # located before anything is imported
               if found.attempt(config.locate_job_code, instance) is not INVALID]
    for instance in located:
        found.attempt(check_user_code, instance)
    found.raise_any()
    count = sum(len(instance.thresholds) for instance in loaded.instances)
    stdout.write(f"{path}: valid, {_count(len(loaded.instances), 'check')}, {_count(count, 'threshold')}\n")
    for instance in loaded.instances:
        names = ", ".join(t.metric for t in instance.thresholds) or "no thresholds (measured only)"
        stdout.write(f"  {instance.name} ({instance.check}, timeout {instance.timeout_s:g}s): {names}\n")
    return 0


def _count(number: int, noun: str) -> str:
    """``1 check``, ``2 checks``, ``0 thresholds``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def check_user_code(instance: config.Instance) -> None:
    """Import and build the job's code ``instance`` names, if its check has any (``check_user_code``).

    Raises:
        ConfigError: at the offending option's place (else the instance's), with the Python error.
    """
    hook = getattr(CHECKS[instance.check], "check_user_code", None)
    if hook is None:
        return
    import torch.utils.data  # noqa: F401  preflight's own import is not the job's time (and not the timer's)

    try:
        with _deadline(instance.timeout_s):
            hook(instance.options)
    except UserCodeError as error:
        where = instance.option_where.get(error.option, instance.where)
        raise ConfigError(where, f"{instance.name}.{error.option}: {error}") from None
    except _TimedOut:
        raise ConfigError(instance.where, f"{instance.name}: the job's code did not return within the timeout of "
                          f"{instance.timeout_s:g}s when built once: does its factory wait on a mount or the "
                          f"network? Fix that, or raise {instance.name}.timeout") from None


REPEAT_S = 0.5  # seconds between alarms after the first (``_deadline``)


class _TimedOut(BaseException):  # as KeyboardInterrupt: the job's `except Exception` must not swallow it
    pass


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise ``_TimedOut`` in the block after ``seconds`` (SIGALRM: the main thread, Python code, Unix).

    The alarm repeats every ``REPEAT_S`` until the block exits: code that swallows the first
    ``_TimedOut`` (an import's ``except BaseException``, a C call that drops the signal's error)
    would otherwise leave a factory that never returns running with no alarm left.
    """
    def expire(signum: int, frame: object) -> None:
        raise _TimedOut

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
