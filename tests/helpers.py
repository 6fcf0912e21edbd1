"""The one way tests run a check, a config or the CLI, so every test exercises the real paths."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from preflight.host import cgroup
from preflight.io.dataset import Dataset
from preflight import config
from preflight.checks import CHECKS
from preflight.checks.base import Budget
from preflight.config import coerce_option
from preflight.measurement import Measurement
from preflight.verdict import Outcome, Result, judge
from preflight.yaml_source import Located

REPO = Path(__file__).resolve().parent.parent


# What a row whose figure depends on who reads says when the gate measured it as root with no job's user named
# (issue 42): the runner appends it after the row's own note.
AS_ROOT = "measured as root: not the job's view" if os.geteuid() == 0 else ""


def own_note(note: str) -> str:
    """A row's note without ``AS_ROOT``, which the runner appends to the rows it measured as root."""
    return note.removesuffix(f"; {AS_ROOT}").removesuffix(AS_ROOT) if AS_ROOT else note


def run_check(name: str, duration_s: float = 1.0, *, judged: Sequence[str] | None = None,
              **options: Any) -> dict[str, Measurement]:
    """Measure check ``name`` in-process with its defaults overridden by ``options`` (written as in YAML), as a run
    of its own: no file it reads counts as read by another call (``io.dataset``).

    ``judged`` names the metrics a configuration would judge (``Budget.metrics``; None: all).
    Returns the measurements keyed by metric (``metric[device]`` for per-device ones).
    """
    check = CHECKS[name]
    unknown = set(options) - {option.name for option in check.OPTIONS}
    assert not unknown, f"not options of {name}: {unknown}"
    parsed = {
        option.name: coerce_option(
            option, _located(options[option.name]) if option.name in options else None, option.name
        )
        for option in check.OPTIONS
    }
    with Dataset.started(tempfile.gettempdir()) as dataset:  # a run of its own: its pass over the data starts fresh
        return keyed(check.measure(parsed, Budget(duration_s, 60.0, None if judged is None else tuple(judged),
                                                  dataset=dataset)))


def _located(value: Any) -> Located:
    """``value`` as the YAML loader gives it: every mapping value and list item ``Located`` too."""
    if isinstance(value, dict):
        return Located({key: _located(item) for key, item in value.items()}, "test")
    if isinstance(value, list):
        return Located([_located(item) for item in value], "test")
    return Located(value, "test")


def keyed(measurements: Sequence[Measurement]) -> dict[str, Measurement]:
    """Measurements keyed by metric, ``metric[device]`` for per-device ones."""
    return {m.metric + (f"[{m.device}]" if m.device else ""): m for m in measurements}


def configured(directory: Path, check: str, body: str) -> config.Instance:
    """The one instance of ``check`` configured by the YAML ``body`` (its lines, unindented)."""
    indented = "".join(f"    {line}\n" for line in body.strip().splitlines())
    path = write_config(directory, f"version: 1\nchecks:\n  {check}:\n{indented}")
    return config.load(str(path), environ={}).instances[0]


def judged(directory: Path, check: str, body: str, measurements: Sequence[Measurement]) -> dict[str, Result]:
    """``measurements`` judged against the thresholds in ``body``, keyed by result id (``cuda.name[cuda:0]``)."""
    results = judge(configured(directory, check, body), Outcome(tuple(measurements)))
    return {result.id: result for result in results}


def write_config(directory: Path, text: str, name: str = "thresholds.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def job_package(src: Path, package: str, modules: dict[str, str]) -> Path:
    """Write the job's package ``package`` under ``src`` (made if missing) with ``modules`` (name: source).

    Returns ``src``: the folder a check's ``python_path`` names, as a training job's ``src/`` would be.
    """
    folder = src / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(source)
    return src


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 120, prefix: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """Run ``python -m preflight ARGS`` as a user would, from this checkout.

    The CI's own GitHub Actions and preflight variables are dropped, so a test never writes
    into the real step summary; pass them in ``env`` to test those integrations. The node's
    measuring lock is off, as in conftest.py, unless ``env`` names one. ``prefix`` wraps the command (``memory_limited_cgroup``'s, to run it under a memory limit).
    """
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PREFLIGHT_"))}
    environment = {**inherited, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "PREFLIGHT_LOCK": "off", **(env or {})}
    return subprocess.run([*prefix, sys.executable, "-m", "preflight", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def memory_limited_cgroup(limit_bytes: int) -> Iterator[tuple[Path, list[str]]]:
    """A new memory cgroup under this process's own, limited to ``limit_bytes`` of RAM and no swap.

    Yields its directory and a command prefix that runs a command inside it (``sh`` joins
    it, then execs the command), so the kernel's OOM killer acts on that command and its
    children only, never on the test. Removed afterwards, killing whatever is left in it.
    Skips the test where this process may not make one: not root, no memory controller, or
    cgroup v2 with the controller not enabled for children (``cgroup.subtree_control``).
    """
    own = cgroup.directories("memory")
    v2 = cgroup.unified()
    directory = (own[0] if own else cgroup.CGROUP_ROOT) / f"preflight-test-{os.getpid()}"
    try:
        directory.mkdir()
    except OSError as error:
        pytest.skip(f"cannot create a memory cgroup under {directory.parent} ({error.strerror}): needs root "
                    f"and a mounted memory controller")
    try:
        limits = ("memory.max", "memory.swap.max") if v2 else ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
        if not (directory / limits[0]).exists():
            pytest.skip(f"the memory controller is not enabled for children of {directory.parent} "
                        f"(its cgroup.subtree_control lacks memory)")
        (directory / limits[0]).write_text(str(limit_bytes))
        if (directory / limits[1]).exists():
            (directory / limits[1]).write_text("0" if v2 else str(limit_bytes))
        yield directory, ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(directory)]
    finally:
        _remove_cgroup(directory)


@contextlib.contextmanager
def memory_cgroup_pair(parent_limit: int) -> Iterator[tuple[Path, Path, list[str]]]:
    """A memory cgroup limited to ``parent_limit`` under this process's own, and an unlimited child in it.

    The shape of a Kubernetes pod (the limit) above its container, or a systemd slice above a
    service: the child's own ``memory.max`` reads ``max`` (v1: near 2^63) though the parent's
    binds it. Yields the parent, the child and a command prefix that runs a command in the
    child. Skips as ``memory_limited_cgroup`` does; removed afterwards, child first.
    """
    with memory_limited_cgroup(parent_limit) as (parent, _):
        child = parent / "job"
        if cgroup.unified():
            try:
                (parent / "cgroup.subtree_control").write_text("+memory")
            except OSError as error:
                pytest.skip(f"cannot enable the memory controller below {parent} ({error.strerror})")
        child.mkdir()
        try:
            yield parent, child, ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(child)]
        finally:
            _remove_cgroup(child)


def _remove_cgroup(directory: Path) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY: processes we started there, not yet reaped or still running
            if time.monotonic() > deadline:
                raise
            for pid in (directory / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.1)


def in_mount_namespace(script: str, timeout: float = 120,
                       node_lock: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``sh -c script`` in a private mount namespace, where a test may mount a real tmpfs or bind mount.

    The mounts vanish with the namespace. The node's measuring lock is off (``PREFLIGHT_LOCK=off``, as in
    conftest.py) unless ``node_lock``: the namespace shares the host's /dev/shm and /run/lock, so a run here
    would queue behind every other test's run on the node's lock and its report would say so. Skips the test
    where namespaces are not permitted (not root, no util-linux ``unshare``).
    """
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        reason = probe.stderr.decode().strip() if probe is not None else "no unshare command"
        pytest.skip(f"mount namespaces not permitted here: {reason}")
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **({} if node_lock else {"PREFLIGHT_LOCK": "off"})},
                          timeout=timeout)


def in_read_only_root(script: str, shm: str = "private", writable: Sequence[Path] = (),
                      timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``sh -c script`` with ``/`` read-only, as in a pod with ``readOnlyRootFilesystem: true``.

    ``/dev/shm`` is a fresh ``private`` writable tmpfs (as an emptyDir with ``medium: Memory``)
    or a ``read-only`` one; each of ``writable`` stays writable (as a mounted volume). Only
    per-mount flags change (bind remounts, new tmpfs): the host's filesystems stay writable.
    A run takes the node's measuring lock at its default place only on a ``private`` /dev/shm, which no other
    test shares; with a ``read-only`` one the default would be the host's /run/lock, so the lock is off.
    Skips where mount namespaces are not permitted (see ``in_mount_namespace``).
    """
    options = {"private": "size=1g", "read-only": "ro,size=1m"}[shm]
    volumes = "".join(f"mount --bind {path} {path} && " for path in writable)
    return in_mount_namespace(f"{volumes}mount --bind / / && mount -o remount,bind,ro / && "
                              f"mount -t tmpfs -o {options} tmpfs /dev/shm && {script}", timeout,
                              node_lock=shm == "private")


class Ticks:
    """A ``time`` module whose ``perf_counter`` reads 1, 2, 3 ... : one second per call.

    A loop that reads it 10000 times has run far past every deadline of these tests: it fails
    at once instead of spinning until the test timeout.
    """

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        if self.now > 10_000:
            raise RuntimeError("the loop ran on past its deadline")
        return self.now
