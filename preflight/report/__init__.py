"""The run's result as every report format sees it, and the atomic file writer they share.

Each format module (``console``, ``junit``, ``json_report``) renders the same ``RunReport``;
none recomputes a statistic or a verdict.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import re
import platform
import socket
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from typing import Mapping, Sequence

from preflight import __version__
from preflight.errors import UsageError
from preflight.verdict import Result, exit_code, said


@dataclass(frozen=True)
class RunReport:
    host: str
    started: datetime
    duration_s: float
    config_path: str
    config_digest: str
    results: tuple[Result, ...]
    facts: Mapping[str, str]  # host facts: versions, driver, GPU names (JUnit suite properties)

    @property
    def exit_code(self) -> int:
        return exit_code(self.results)

    def counts(self) -> Mapping[str, int]:
        """How many results of each verdict, e.g. {"pass": 3, "fail": 1}."""
        return collections.Counter(result.verdict for result in self.results)


# How a count of each verdict reads: "1 error", "2 errors", "1 warning", "3 passed".
_COUNTED = {"fail": ("failed", "failed"), "error": ("error", "errors"), "warn": ("warning", "warnings"),
            "pass": ("passed", "passed"), "skip": ("skipped", "skipped"), "info": ("info", "info")}


def tally(counts: Mapping[str, int], info: bool = True) -> str:
    """``12 failed, 1 error, 2 warnings, 9 passed, 10 info``: each verdict that occurred, in that order."""
    return ", ".join(f"{counts[v]} {words[counts[v] != 1]}" for v, words in _COUNTED.items()
                     if counts.get(v) and (info or v != "info"))


def shown_value(result: Result) -> str:
    """``result``'s value as a person reads it (``verdict.said``): ``982 MB/s``, ``yes`` for ``storage.read_only``."""
    return said(result.value, result.declared, result.unit)


def shown_interval(result: Result) -> str:
    """``result``'s 90 % interval as the table shows it beside the value: ``±4%``, its farther side from the value
    (a median's interval is not symmetric); "" without one."""
    if result.interval is None or not isinstance(result.value, (int, float)) or not result.value:
        return ""
    low, high = result.interval
    return f"±{max(result.value - low, high - result.value) / abs(result.value):.0%}"


def build(config_path: str, config_digest: str, results: Sequence[Result], started: datetime,
          duration_s: float) -> RunReport:
    """Assemble the report; host facts come from ``host_facts`` and the cuda check's results."""
    facts = host_facts(config_path, config_digest)
    gpus: list[str] = []
    for result in results:
        if result.check != "cuda" or result.value is None:
            continue
        if result.metric == "driver_version":
            facts["driver"] = str(result.value)
        elif result.metric == "cuda_driver_version":
            facts["cuda_driver"] = str(result.value)
        elif result.metric == "name":
            facts[f"gpu[{result.device}]"] = str(result.value)
            gpus.append(str(result.value))
    if gpus:
        facts["gpu"] = ", ".join(f"{count}x {name}" for name, count in collections.Counter(gpus).items())
    return RunReport(facts["hostname"], started, duration_s, config_path, config_digest, tuple(results), facts)


def host_facts(config_path: str, config_digest: str = "") -> dict[str, str]:
    """What every report says about the host, without importing torch (config_sha256 is "" for an unreadable
    config)."""
    return {
        "hostname": socket.gethostname(),
        "preflight": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": _package_version("torch"),
        "cuda": _torch_cuda_runtime(),
        "config": config_path,
        "config_sha256": config_digest,
    }


def _torch_cuda_runtime() -> str:
    """``torch.version.cuda`` read from the file: importing torch takes seconds and a report must not."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return "not installed"
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    for location in spec.submodule_search_locations:
        try:
            text = open(os.path.join(location, "version.py"), encoding="utf-8").read()
        except OSError:
            continue
        match = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        return match.group(1) if match else "none (CPU or ROCm build)"
    return "unknown"


def now() -> datetime:
    return datetime.now(timezone.utc)


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename: readers never see half a report.

    Raises:
        UsageError: the destination cannot be written (missing directory, read-only, full).
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(prefix=".preflight-", dir=directory)
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as error:
        raise UsageError(f"{path}: cannot write the report ({error.strerror}): choose a writable path") from None
