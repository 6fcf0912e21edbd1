"""A GPU for scripts/gpu-smoke.sh on a CPU-only machine: the seam's fakes behind preflight's torch and NVML halves.

tests/scripts/test_gpu_smoke.py puts this folder on PYTHONPATH. Python imports ``sitecustomize``
at start-up in every process the script starts, preflight's check workers too (the runner hands
them its sys.path), and this one only registers an import hook: when ``preflight.host.gpu`` is
imported, its ``TorchCuda`` becomes ``tests.fakes.gpu.FakeCuda`` (one healthy H200), and when
``preflight.host.nvml`` is, its ``library`` returns a ``FakeNvml`` of that H200. Everything
above the seam (the checks, the runner, the report, the script) is the real code.

``FAKE_GPU_MATMUL_ERROR``: the error text the smoke matmul raises, as torch raises a CUDA error
(a RuntimeError) on a GPU that enumerates but cannot compute.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any, Callable


def _cuda() -> Any:
    from tests.fakes.gpu import FakeCuda

    fault = os.environ.get("FAKE_GPU_MATMUL_ERROR")
    return FakeCuda(matmul=RuntimeError(fault)) if fault else FakeCuda()


def _nvml() -> Any:
    from tests.fakes.gpu import FakeNvml

    return FakeNvml()


def _fake_torch_half(module: ModuleType) -> None:
    module.TorchCuda = _cuda  # type: ignore[attr-defined]


def _fake_nvml_half(module: ModuleType) -> None:
    module.library = _nvml  # type: ignore[attr-defined]


PATCHES: dict[str, Callable[[ModuleType], None]] = {"preflight.host.gpu": _fake_torch_half,
                                                     "preflight.host.nvml": _fake_nvml_half}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds the modules of ``PATCHES`` as Python would, and patches each once it has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _AfterImport())
