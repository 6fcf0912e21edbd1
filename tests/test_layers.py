"""The package's layers: no import runs upward and no module imports itself round a cycle.

From the top: ``cli`` → ``commands`` → ``fleet``/``runner`` → ``report`` → ``verdict`` →
``config`` → ``checks``/``loading``/``training`` → ``host``/``io``/``measurement`` → ``units``/``errors``.
A module may import its own layer or any layer below it. Imports inside functions count too: they are
how the CLI stays fast, not a way round the layers. Within the checks' layer, a check imports no other
check, and the rooms the checks share (``loading``: how samples reach a batch; ``training``: the step)
import none.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "preflight"

# Each top-level part of the package and its layer (0 is the top).
LAYERS = {
    "__main__": 0, "cli": 0,
    "commands": 1,
    "fleet": 2, "runner": 2, "worker": 2,
    "report": 3,
    "verdict": 4,
    "config": 5, "baseline": 5, "yaml_source": 5, "interpolation": 5,
    "checks": 6, "loading": 6, "training": 6,
    "host": 7, "io": 7, "measurement": 7, "sampling": 7,
    "units": 8, "errors": 8, "__init__": 8,
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The preflight modules ``path`` imports (``from a import b`` is ``a.b`` when that is a module)."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names if alias.name.startswith("preflight")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("preflight"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                targets.add(submodule if submodule in modules else node.module)
    return {t for t in targets if t in modules}


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS["__init__"] if len(parts) == 1 else LAYERS[parts[1]]


def test_every_part_of_the_package_has_a_layer():
    parts = {module.split(".")[1] for module in _modules() if "." in module}
    assert parts <= set(LAYERS), f"give these a layer in LAYERS: {sorted(parts - set(LAYERS))}"


def test_no_import_runs_upward():
    modules = _modules()
    upward = [f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
              for module, path in sorted(modules.items()) for target in sorted(_imports(path, modules))
              if _layer(target) < _layer(module)]
    assert upward == []


def test_no_import_cycle():
    modules = _modules()
    graph = {module: _imports(path, modules) - {module} for module, path in modules.items()}
    # A package's __init__ importing its own submodules (a registry) is not a cycle through it.
    graph = {m: {t for t in targets if not m.startswith(t + ".")} for m, targets in graph.items()}
    state: dict[str, str] = {}
    cycles: list[list[str]] = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(trail[trail.index(target):] + [target])
            elif target not in state:
                visit(target, trail + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_package_root_holds_the_pipeline_only():
    root = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(root) <= 13, root
    assert set(root) <= {"__main__", "cli", "config", "yaml_source", "interpolation", "units", "runner", "worker",
                         "verdict", "measurement", "sampling", "errors", "baseline"}


def _check_of(module: str) -> str | None:
    """The check ``module`` belongs to (``preflight.checks.storage.reads`` -> ``storage``); None outside one.

    The checks' shared protocol and helpers (``base``, ``usercode``, ``subject``, ``dataset_path``) are no check."""
    from preflight.checks import CHECKS

    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "checks" and parts[2] in CHECKS else None


def test_no_check_imports_another_check_and_the_shared_rooms_import_none():
    modules = _modules()
    crossing = [f"{module} imports {target}" for module, path in sorted(modules.items())
                for target in sorted(_imports(path, modules))
                if _check_of(target) and _check_of(module) != _check_of(target)
                and (_check_of(module) or module.split(".")[1] in ("loading", "training"))]
    assert crossing == []
