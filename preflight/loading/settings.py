"""The job's DataLoader settings beyond its batches: how workers start and live, seeding, order, waiting.

Loading layer, shared by the dataloader and pipeline checks and ``validate``: each is passed to the DataLoader as the
job passes it (issue 32, case 3); under spawn and forkserver ``unpicklable`` names what a worker could not receive,
before any starts. docs/checks.md ("The job's loader settings, all of them").
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import io
import os
import pickle
import tempfile
import time
import types
from typing import Any, Callable, Mapping

from preflight.checks import usercode
from preflight.checks.base import UserCodeError

PICKLING = ("spawn", "forkserver")  # start methods that send each worker a pickled copy of its arguments
SEARCH_DEPTH = 4  # attribute levels searched for the object that cannot be pickled (``unpicklable``)
SEARCH_WIDTH = 64  # attributes or items searched at each level


def start_method(options: Mapping[str, Any]) -> str:
    """The start method the loader's workers use: ``multiprocessing_context``, or this Python's default."""
    chosen = options.get("multiprocessing_context") or "default"
    if chosen != "default":
        return chosen
    import multiprocessing

    return multiprocessing.get_start_method()


def pickles(options: Mapping[str, Any], workers: int) -> bool:
    """Whether the loader's ``workers`` (0: none, the main process loads) receive pickled copies."""
    return workers > 0 and start_method(options) in PICKLING


def supports_in_order() -> bool:
    """Whether this torch's DataLoader takes ``in_order`` (added in torch 2.6)."""
    import torch.utils.data

    return "in_order" in inspect.signature(torch.utils.data.DataLoader.__init__).parameters


def refuse_unsupported(options: Mapping[str, Any]) -> None:
    """Raise ``UserCodeError`` (option ``in_order``) where this torch lacks a setting the options give."""
    if options.get("in_order", True) is False and not supports_in_order():
        import torch

        raise UserCodeError("in_order", f"in_order: false needs torch >= 2.6, whose DataLoader takes it; this image "
                            f"has torch {torch.__version__}: upgrade torch, or remove in_order (batches then come "
                            f"in order, as this torch delivers them)")


def worker_init(options: Mapping[str, Any]) -> Callable[..., Any] | None:
    """The job's ``worker_init_fn`` (imported: call under ``usercode.on_path``), or None.

    Raises:
        UserCodeError: the name cannot be imported or is not callable.
    """
    spec = options.get("worker_init_fn") or ""
    return usercode.load(spec, "worker_init_fn") if spec else None


class TimedInit:
    """The job's ``worker_init_fn``, timed in each worker, so that a DataLoader timeout it alone causes is told
    apart from a stalled node: the job's loader times out the same way on any node (MPI-Dortmund/tomotwin-cryoet#57).

    Picklable (its function and a log's path), as a spawned worker receives it; each worker appends its start and
    its duration to the log.
    """

    def __init__(self, init: Callable[..., Any], timeout_s: float) -> None:
        handle, self.log = tempfile.mkstemp(prefix="preflight-init-", suffix=".log")
        os.close(handle)
        self.init, self.timeout_s = init, timeout_s
        if not _TIMED:
            atexit.register(lambda: [_remove(timed.log) for timed in _TIMED])
        _TIMED.append(self)  # kept past its DataLoader: the timeout's error is read after the loader is gone

    def __call__(self, worker_id: int) -> None:
        start = time.monotonic()
        _append(self.log, f"{worker_id} started {start}")
        try:
            self.init(worker_id)
        finally:
            _append(self.log, f"{worker_id} took {time.monotonic() - start}")

    def overran(self) -> str:
        """How the init function alone outlasted the DataLoader's timeout in some worker ("took 8.0 s in worker
        0"; "has run 4.9 s in worker 1 and not returned": still running when the timeout struck, most of it, the
        worker's start taking the rest); "" where none did."""
        started: dict[str, float] = {}
        took: dict[str, float] = {}
        with contextlib.suppress(OSError), open(self.log) as handle:
            for line in handle:
                worker, what, value = line.split()
                (started if what == "started" else took)[worker] = float(value)
        for worker, seconds in took.items():
            if seconds >= self.timeout_s:
                return f"took {seconds:.1f} s in worker {worker}"
        now = time.monotonic()
        for worker, start in started.items():
            if worker not in took and now - start >= self.timeout_s / 2:
                return f"has run {now - start:.1f} s in worker {worker} and not returned"
        return ""


_TIMED: list[TimedInit] = []  # the timed init functions of this process's loaders, their logs removed at its exit


def init_overran() -> str:
    """Why the DataLoader timed out where the job's ``worker_init_fn`` alone took longer than its timeout, with the
    figures and the fix; "" where it did not (then the wait is the workers' loading: a stalled node, or the code)."""
    for timed in _TIMED:
        said = timed.overran()
        if said:
            name = getattr(timed.init, "__qualname__", repr(timed.init))
            return (f"the job's worker_init_fn {name} {said}, longer than the DataLoader's timeout of "
                    f"{timed.timeout_s:g} s, so no batch can arrive in time on any node: the job's DataLoader fails "
                    f"the same way: make worker_init_fn faster, or raise the timeout above it")
    return ""


def _append(path: str, line: str) -> None:
    with contextlib.suppress(OSError), open(path, "a") as handle:
        handle.write(line + "\n")


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def generator(options: Mapping[str, Any]) -> Any:
    """One ``torch.Generator`` seeded with ``seed`` (shared by every DataLoader of a run, so each pool continues
    it as the job's next epoch does), or None for ``seed: auto``."""
    seed = options.get("seed", "auto")
    if seed == "auto":
        return None
    import torch

    return torch.Generator().manual_seed(int(seed))


def keywords(options: Mapping[str, Any], workers: int, init: Callable[..., Any] | None,
             rng: Any) -> dict[str, Any]:
    """The DataLoader's keyword arguments these options set, beside batching, workers, pinning and prefetch. Without
    workers, start method, persistence and timeout are left out: torch refuses or ignores them there."""
    arguments: dict[str, Any] = {"worker_init_fn": init, "generator": rng}
    if workers > 0:
        arguments["persistent_workers"] = bool(options.get("persistent_workers", False))
        arguments["timeout"] = float(options.get("loader_timeout") or 0)
        if init is not None and arguments["timeout"] > 0:  # told apart from a stall if the DataLoader times out
            arguments["worker_init_fn"] = TimedInit(init, arguments["timeout"])
        if (options.get("multiprocessing_context") or "default") != "default":
            arguments["multiprocessing_context"] = options["multiprocessing_context"]
    if options.get("in_order", True) is False:
        arguments["in_order"] = False
    return arguments


def describe(options: Mapping[str, Any], workers: int) -> str:
    """The settings that differ from torch's defaults, for the method column (", multiprocessing_context=spawn")."""
    shown = []
    if workers > 0:
        shown.append(f"multiprocessing_context={start_method(options)}")
        if options.get("persistent_workers"):
            shown.append("persistent_workers=True")
        if float(options.get("loader_timeout") or 0):
            shown.append(f"timeout={float(options['loader_timeout']):g}")
    for name in ("worker_init_fn", "sampler"):
        if options.get(name):
            shown.append(f"{name}={options[name]}")
    if options.get("drop_last"):
        shown.append("drop_last=True")
    if options.get("in_order", True) is False:
        shown.append("in_order=False")
    if options.get("seed", "auto") != "auto":
        shown.append(f"generator seeded {options['seed']}")
    return "".join(f", {part}" for part in shown)


def unpicklable(value: Any) -> str:
    """Why ``value`` cannot be pickled as a worker's argument, "" when it can: pickled into nothing (tensors skipped),
    the innermost failing attribute or item named, ``SEARCH_DEPTH`` deep
    (``Squares.transform: the lambda defined at jobpkg/data.py:9 (...)``)."""
    error = _pickling_error(value)
    if error is None:
        return ""
    path, culprit, error = _culprit(value, type(value).__name__, error, SEARCH_DEPTH)
    where = "" if culprit is value and isinstance(value, types.FunctionType) else f"{path}: "
    return f"{where}{_what(culprit)} ({' '.join(f'{type(error).__name__}: {error}'.split())})"


def refuse_unpicklable(options: Mapping[str, Any], workers: int, objects: Mapping[str, Any], blame: str = "") -> None:
    """Raise ``UserCodeError`` naming the first of ``objects`` (option name -> the job's object) that the start method
    must pickle and cannot, with the fix; nothing under fork or without workers. ``blame`` names one option that made
    them all (``loader``).

    Raises:
        UserCodeError: on the option that names the object, or on ``blame``.
    """
    if not pickles(options, workers):
        return
    start = start_method(options)
    chosen = "" if options.get("multiprocessing_context", "default") != "default" else " (this Python's default)"
    for key, value in objects.items():
        if value is None:
            continue
        problem = unpicklable(value)
        if problem:
            option = blame or key
            spec = options.get(option) or ""
            named = (f"{option} {spec}" if spec else option) + (f" (its {key})" if blame else "")
            raise UserCodeError(option, f"{named} contains an object that cannot be pickled ({problem}): under "
                                f"multiprocessing_context {start}{chosen} every worker receives a pickled copy; "
                                f"define it at module level (a lambda or a function defined inside another "
                                f"cannot be pickled), or start workers with fork where the job can")


class _Discard(io.RawIOBase):
    """A file that keeps nothing: the probe's pickles cost no memory."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return memoryview(data).nbytes


def _pickler() -> type:
    import copyreg
    from multiprocessing.reduction import ForkingPickler

    import torch

    skipped = (torch.Tensor, torch.UntypedStorage, torch.storage.TypedStorage)

    class Probe(pickle.Pickler):
        dispatch_table = {**copyreg.dispatch_table, **ForkingPickler._extra_reducers}  # type: ignore[attr-defined]

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, skipped):
                return int, ()
            return NotImplemented

    return Probe


def _pickling_error(value: Any) -> Exception | None:
    try:
        _pickler()(_Discard(), pickle.HIGHEST_PROTOCOL).dump(value)
    except Exception as error:  # noqa: BLE001  whatever pickling raises: AttributeError, PicklingError, TypeError
        return error
    return None


def _culprit(value: Any, path: str, error: Exception, depth: int) -> tuple[str, Any, Exception]:
    """The innermost object below ``value`` (reached by ``path``) whose pickling fails, its path and error."""
    if depth == 0:
        return path, value, error
    for name, child in _children(value):
        failed = _pickling_error(child)
        if failed is not None:
            return _culprit(child, f"{path}{name}", failed, depth - 1)
    return path, value, error


def _children(value: Any) -> list[tuple[str, Any]]:
    """What pickling ``value`` pickles in turn: its attributes, a mapping's values, a sequence's items."""
    if isinstance(value, (types.FunctionType, types.MethodType, type)):
        return [(".__self__", value.__self__)] if isinstance(value, types.MethodType) else []
    if isinstance(value, Mapping):
        return [(f"[{key!r}]", item) for key, item in list(value.items())[:SEARCH_WIDTH]]
    if isinstance(value, (list, tuple)):
        return [(f"[{index}]", item) for index, item in enumerate(value[:SEARCH_WIDTH])]
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict):
        return [(f".{name}", item) for name, item in list(state.items())[:SEARCH_WIDTH]]
    return []


def _what(value: Any) -> str:
    """``the lambda defined at jobpkg/data.py:9``, ``the function make.<locals>.scale defined at ...``, or the type."""
    code = getattr(value, "__code__", None)
    if isinstance(value, types.FunctionType) and code is not None:
        name = "the lambda" if value.__name__ == "<lambda>" else f"the function {value.__qualname__}"
        return f"{name} defined at {usercode.place(code.co_filename, code.co_firstlineno)}"
    kind = type(value)
    return f"a {kind.__module__}.{kind.__qualname__}"
