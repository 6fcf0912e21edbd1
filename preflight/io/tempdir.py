"""Where preflight's own temporary files go (worker logs, crash logs), on a node that may allow few writes.

io layer. Beyond ``tempfile``'s places, /dev/shm and the reports' directories (``readOnlyRootFilesystem: true``).
"""

from __future__ import annotations

import os
import tempfile
from typing import Iterable, Mapping

from preflight.errors import UsageError

# tempfile.gettempdir()'s POSIX order, without the working directory: often the job's code or data.
ENVIRONMENT = ("TMPDIR", "TEMP", "TMP")
SYSTEM = ("/tmp", "/var/tmp", "/usr/tmp")
SHARED_MEMORY = "/dev/shm"


def choose(report_paths: Iterable[str | None] = (), environ: Mapping[str, str] = os.environ) -> str:
    """The first writable of: TMPDIR (as ``tempfile.gettempdir`` looks for it), /dev/shm, the reports' directories
    (``report_paths``; None and ``-`` ignored), proven by creating a file.

    Raises:
        UsageError: none is writable; the message names every place tried and the fix.
    """
    tried: list[str] = []
    for directory in candidates(report_paths, environ):
        try:
            probe(directory)
        except OSError as error:
            tried.append(f"{directory} ({reason(error)})")
            continue
        return directory
    variable = next((f"{name}={environ[name]}" for name in ENVIRONMENT if environ.get(name)), "TMPDIR unset")
    raise UsageError(f"no writable temporary directory ({variable}; tried {', '.join(tried)}): mount an emptyDir "
                     f"at /tmp (readOnlyRootFilesystem: true) or set TMPDIR to a writable directory")


def candidates(report_paths: Iterable[str | None] = (), environ: Mapping[str, str] = os.environ) -> list[str]:
    """The directories ``choose`` tries, in order, each once."""
    found = [environ[name] for name in ENVIRONMENT if environ.get(name)] + [*SYSTEM, SHARED_MEMORY]
    found += [os.path.dirname(os.path.abspath(path)) for path in report_paths if path and path != "-"]
    return list(dict.fromkeys(os.path.abspath(directory) for directory in found))


def probe(directory: str) -> None:
    """Create and remove a file in ``directory``: ``access()`` says yes to root on a read-only filesystem.

    Raises:
        OSError: the file could not be created (read-only, missing, full, not a directory).
    """
    handle, path = tempfile.mkstemp(prefix=".preflight-probe-", dir=directory)
    os.close(handle)
    os.unlink(path)


def reason(error: OSError) -> str:
    """``read-only file system``: an OSError's cause in the lower case a one-line message uses."""
    return (error.strerror or type(error).__name__).lower()
