"""The job's own code, named in the config as ``"package.module:callable"``: imported, called, and blamed.

Serves the checks layer (any check that runs user code: the dataloader's ``dataset``). The
code is imported with the config's ``python_path`` directories first on ``sys.path``
(``on_path``), which is restored afterwards, and the modules imported from those directories
are forgotten, so the next check in the same worker starts clean. A failure becomes one line
that names the Python error and the last frames of the user's own files (``blame``), whether
the exception was raised here or re-raised by torch from a DataLoader worker, whose original
traceback only survives as text.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import traceback
from typing import Any, Callable, Iterator, Mapping, Sequence

from preflight.checks.base import UserCodeError
from preflight.errors import ConfigMistake

FRAMES = 2  # user frames quoted, innermost first
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>.+)$')


class UserCodeRaised(ConfigMistake):
    """The job's code raised while a check ran it; ``str()`` is the one line the report shows.

    ``option`` names the option that points at that code (``dataset``), so the report can
    say where the config wrote it (``Instance.option_where``). It is the config's or the job's
    mistake (exit 2), unless ``node_fault`` finds the node's in it (exit 1).
    """


# What the job's code may raise that is the node's fault, not the code's: an I/O error of a device or a mount, a
# network the node cannot reach, a full disk, memory or a pids limit (``errno.errorcode`` names). A
# ``FileNotFoundError``, a ``PermissionError``, a ``KeyError`` or a typo is the job's or its config's, on any node.
NODE_ERRNOS = frozenset({"EIO", "ENXIO", "ENODEV", "ENOMEDIUM", "ESTALE", "EREMOTEIO", "EUCLEAN", "ENOLINK", "ECOMM",
                         "ETIMEDOUT", "ENOTCONN", "ECONNRESET", "ECONNABORTED", "EHOSTDOWN", "EHOSTUNREACH",
                         "ENETDOWN", "ENETUNREACH", "ENOSPC", "ENOMEM", "EAGAIN"})
_ERRNO = re.compile(r"\b\w*(?:Error|Exception): \[Errno (\d+)\]")


def node_fault(message: str) -> str:
    """Why the one line ``message`` (``UserCodeRaised``'s, which quotes the job's exception) is the node's fault:
    ``"EIO"`` for an ``OSError: [Errno 5] ...`` with an errno of ``NODE_ERRNOS``, ``"MemoryError"``, a GPU's error
    (``"CUDA error"``, ``"CUDA out of memory"``), ``"stall"`` for
    the DataLoader's timeout (a worker waiting on a mount, as often as on the code); "" for the job's own mistake.

    Read from the text, because a DataLoader worker's exception reaches the check re-raised by torch with its
    traceback as text and no errno (``blame``).
    """
    import errno

    for number in _ERRNO.findall(message):
        name = errno.errorcode.get(int(number), "")
        if name in NODE_ERRNOS:
            return name
    if re.search(r"\bMemoryError\b", message):
        return "MemoryError"
    device = re.search(r"\b(CUDA out of memory|OutOfMemoryError|CUDA error|NCCL error|CUBLAS_STATUS_\w+|cuDNN error)",
                       message)
    if device:  # a GPU that fails, or is short of memory other processes hold: the node's (cuda, xid checks say more)
        return device.group(1)
    if "DataLoader timed out after" in message:
        return "stall"
    return ""


@contextlib.contextmanager
def on_path(directories: Sequence[str]) -> Iterator[None]:
    """``directories`` first on ``sys.path`` inside the block; afterwards the old path, and the modules
    imported from those directories forgotten."""
    saved, loaded = list(sys.path), set(sys.modules)
    sys.path[:0] = [d for d in directories if d not in sys.path[:len(directories)]]
    importlib.invalidate_caches()  # a directory written since the last import is seen
    try:
        yield
    finally:
        sys.path[:] = saved
        roots = tuple(os.path.join(os.path.realpath(d), "") for d in directories)
        for name in set(sys.modules) - loaded:  # only what the block imported: never preflight's own modules
            origin = getattr(sys.modules[name], "__file__", None) or ""
            if roots and os.path.realpath(origin).startswith(roots):
                del sys.modules[name]


def spec_error(spec: str) -> str:
    """Why ``spec`` is not of the form ``"package.module:name"`` (dotted names on both sides); "" when it is.

    Only the form: whether the module imports is ``load``'s to find out.
    """
    module_name, sep, attribute = spec.partition(":")
    if sep and all(part.isidentifier() for part in (*module_name.split("."), *attribute.split("."))):
        return ""
    return f"expected \"package.module:callable\", found {spec!r}"


def load(spec: str, option: str) -> Callable[..., Any]:
    """The callable that ``spec`` (``"package.module:name"``) names; import it with ``on_path`` around.

    Raises:
        UserCodeError: ``spec`` is malformed, cannot be imported, lacks the name, or is not callable.
    """
    if malformed := spec_error(spec):
        raise UserCodeError(option, malformed)
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
            raise UserCodeError(option, not_found(spec, error.name)) from None
        raise UserCodeError(option, f"cannot import {spec}: {module_name} failed to import ({_one_line(error)}"
                            f"{blame_frames(error)}): install what it needs in this image") from None
    except Exception as error:  # noqa: BLE001  whatever the user's module raises while importing
        raise UserCodeError(option, f"cannot import {spec}: {module_name} raised {_one_line(error)}"
                            f"{blame_frames(error)} while importing: fix the module") from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise UserCodeError(option, f"cannot import {spec}: {module_name} has no `{attribute}`: check the "
                                f"name after the colon")
        target = getattr(target, part)
    if not callable(target):
        raise UserCodeError(option, f"{spec} is a {type(target).__name__}, not callable: name a function or class")
    return target


def not_found(spec: str, name: str, search: Sequence[str] | None = None) -> str:
    """Why ``spec`` cannot be imported when its module ``name`` (or a package above it) is found nowhere, and the
    fix (``missing_part``): the one line ``validate`` (``config.locate_job_code``) and ``run``'s worker both say."""
    hint = missing_part(name, search)
    if "." in name or hint.startswith("no module"):
        return f"cannot import {spec}: {hint}"
    return (f"cannot import {spec}: no module named '{name}' on python_path, in this Python's packages or in the "
            f"working directory: {hint}")


def missing_part(name: str, search: Sequence[str] | None = None) -> str:
    """Which part of the dotted module ``name`` failed to import, and the fix: a module missing from a package
    that imported is a misspelt name, not a missing directory (issue 35), and so is a top-level name close to
    one on the path; only a top-level name like none there asks for its directory on python_path.

    ``search``: the directories a close top-level name is looked for in: by default the job's own, those of
    ``sys.path`` outside this Python's installation (python_path, the working directory), so that a name is
    never "corrected" to an unrelated installed package.
    """
    import difflib
    import pkgutil

    parent, _, leaf = name.rpartition(".")
    if parent and parent in sys.modules:
        package = sys.modules[parent]
        if not hasattr(package, "__path__"):
            return f"`{parent}` is a module, not a package: it holds no module `{leaf}`; fix the name before the colon"
        where = list(package.__path__)
        close = difflib.get_close_matches(leaf, sorted(m.name for m in pkgutil.iter_modules(where)), 1)
        return (f"`{parent}` imported (from {where[0] if where else '?'}) but holds no module `{leaf}`"
                f"{f': did you mean `{parent}.{close[0]}`?' if close else ''} Fix the module's name before the colon")
    top = name.split(".")[0]
    installed = tuple(os.path.join(os.path.realpath(p), "") for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
    folders = [d for d in (sys.path if search is None else search) if d and os.path.isdir(d)
               and (search is not None or not os.path.join(os.path.realpath(d), "").startswith(installed))]
    found = {m.name: getattr(m.module_finder, "path", "") for m in pkgutil.iter_modules(folders)}
    close = difflib.get_close_matches(top, sorted(found), 1)
    if close:
        return (f"no module named `{top}`: did you mean `{close[0]}` (in {found[close[0]]})? Fix the package's name "
                f"before the colon")
    return f"add the directory that holds `{top}` to python_path"


def call(spec: str, option: str, args: Mapping[str, Any], expected: type, wanted: str) -> Any:
    """``spec``'s callable (``load``) called with ``args`` as keyword arguments; its value must be an ``expected``.

    ``option`` names the config key (``"dataset"``), ``wanted`` the expected kind in the error
    (``"torch.nn.Module"``). Call with ``on_path`` around, as ``load``.

    Raises:
        UserCodeError: ``load``'s errors; the callable raised (the message blames its frames);
            or it returned something that is not an ``expected``.
    """
    factory = load(spec, option)
    try:
        value = factory(**args)
    except Exception as error:  # noqa: BLE001  whatever the job's factory raises
        raise UserCodeError(option, f"{spec}(**{option}_args) raised {blame(error)}: fix the factory or "
                            f"{option}_args") from None
    if not isinstance(value, expected):
        kind = type(value)
        raise UserCodeError(option, f"{spec}(**{option}_args) returned {kind.__module__}.{kind.__qualname__}, not "
                            f"{wanted}: name the factory that returns the job's {option}")
    return value


def blame(error: BaseException) -> str:
    """One line: ``ValueError: bad sample 49 (at mypkg/data.py:12 in __getitem__)``.

    A DataLoader worker's exception arrives re-raised by torch with the original traceback
    as text (``Caught ValueError in DataLoader worker process 0. Original Traceback ...``);
    that text is read for the exception's line and frames.
    """
    text = error.args[0] if error.args and isinstance(error.args[0], str) else str(error)  # KeyError quotes str()
    if "Original Traceback" in text and any(map(_FRAME.match, text.splitlines())):
        lines = text.splitlines()
        frames = [(m["file"], int(m["line"]), m["name"]) for m in map(_FRAME.match, lines) if m]
        last = max(i for i, line in enumerate(lines) if _FRAME.match(line))
        rest = [line for line in lines[last + 1:] if not line.startswith("    ")]
        return " ".join(" ".join(rest).split()) + _where(frames)
    return _one_line(error) + blame_frames(error)


def blame_frames(error: BaseException) -> str:
    """`` (at FILE:LINE in NAME, from ...)`` for the innermost frames outside Python's and torch's own files."""
    return _where([(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(error.__traceback__)])


def _where(frames: list[tuple[str, int, str]]) -> str:
    ours = [f for f in frames if not _library(f[0])]
    if not ours:
        return ""
    shown = [f"{_short(path)}:{line} in {name}" for path, line, name in reversed(ours[-FRAMES:])]
    return f" (at {', from '.join(shown)})"


def _library(path: str) -> bool:
    """A frame of Python's, torch's or preflight's own files (not the job's)."""
    parts = path.replace("\\", "/").split("/")
    return (path.startswith("<") or "site-packages" in parts or "dist-packages" in parts
            or path.startswith(_OWN))


_OWN = (os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ""),  # preflight
        os.path.join(os.path.dirname(os.__file__), ""))  # the standard library


def place(path: str, line: int) -> str:
    """``jobpkg/data.py:12``: a place in the job's files, named as its package names it (as ``blame`` names frames)."""
    return f"{_short(path)}:{line}"


def _short(path: str) -> str:
    """The file as its package names it (``mypkg/data.py``): the part below the first sys.path entry holding it."""
    real = os.path.realpath(path)
    for entry in sorted((os.path.realpath(p) for p in sys.path if p), key=len, reverse=True):
        if real.startswith(os.path.join(entry, "")):
            return os.path.relpath(real, entry)
    return "/".join(path.split("/")[-2:])


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())
