"""The kinds of option a check declares (``Option.kind``), one row each: its parser, JSON Schema and name in ``list``.

As fio declares each option once in a table, ``KINDS`` is read by ``config.coerce_option``, ``preflight schema``
and ``preflight list`` alike (a quantity of any ``units.Dimension`` is one row): a new kind is one row here.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, NamedTuple, Protocol

from preflight.checks import usercode
from preflight.checks.base import Option, OptionKind
from preflight.errors import ConfigError, suggest
from preflight.units import UNITS, Dimension, UnitError, example, parse_quantity, with_article

# A "$" (after an even run of "$$", each a literal "$") starting $NAME or ${NAME...
ENV_REFERENCE = {"type": "string", "pattern": r"(^|[^$])(\$\$)*\$\{?[A-Za-z_]",
                 "description": "expanded from the environment before validation"}
# The job's code, "package.module:callable" (usercode.spec_error; ASCII names here, as JSON Schema's \w).
CODE_SPEC = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"
_NUMBER = r"[+]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?"
_RELATIVE = r"^\s*(\d+(\.\d*)?|\.\d+)\s*%\s*of\s+baseline\s*$"


class Located(Protocol):
    """A value as the config wrote it, and where: ``yaml_source.Located``, which lives a layer above the checks."""

    value: Any
    where: str

    def plain(self) -> Any: ...


class Kind(NamedTuple):
    """One kind of option, as config reads it, an editor checks it and ``list`` names it."""

    # (option, node, label, base) -> the value a check receives, or UnitError (said at the option) or a located
    # ConfigError; relative paths start at ``base``, which ``config.coerce_option`` chooses.
    parse: Callable[[Option, Located, str, str], Any]
    schema: Callable[[Option], dict[str, Any]]  # draft-07; ``commands.schema`` adds `measured`, help and default
    shown: Callable[[Option, bool], str]  # (option, markdown): `list`'s column, or docs/configuration.md's


def quantity(dimension: Dimension, relative: bool = False) -> dict[str, Any]:
    """The schema of a quantity of ``dimension`` as units.parse_quantity reads it (``relative``: or ``90% of
    baseline``). One ``pattern``, not an ``anyOf`` of forms, so that an editor names the units a bad one missed
    (``patternErrorMessage``, shown by yaml-language-server) instead of "not valid under any of the given schemas"."""
    symbols = sorted((s for s, u in UNITS.items() if u.dimension is dimension and s), key=len, reverse=True)
    unit = "(" + "|".join(re.escape(s) for s in symbols) + ")" if symbols else ""
    forms = [rf"^\s*{_NUMBER}\s*{unit}\s*$", ENV_REFERENCE["pattern"]] + ([_RELATIVE] if relative else [])
    units = ", ".join(sorted(symbols, key=lambda s: (UNITS[s].factor, s))) or "a plain number"
    said = f"{with_article(dimension.value)} like `{example(dimension)}` (units: {units})" + (
        ", or `90% of baseline`" if relative else "")
    found: dict[str, Any] = {"type": "string", "pattern": "|".join(f"(?:{form})" for form in forms),
                             "patternErrorMessage": f"expected {said}; a $VAR or ${{VAR:-default}} is expanded first",
                             "examples": [example(dimension)]}
    if dimension is Dimension.COUNT:
        found.update(type=["number", "string"], minimum=0)
    return found


def _text(option: Option, node: Located, label: str, base: str) -> str:
    if node.value is None or isinstance(node.value, (bool, dict, list)):
        raise UnitError(f"expected text, found {node.value!r}")
    return str(node.value)


def _path(option: Option, node: Located, label: str, base: str) -> str:
    path = _text(option, node, label, base)
    if not path and option.default != "":  # "" names no dataset (checks.subject)
        raise UnitError("expected a path, found an empty string")
    return path


def _choice(option: Option, node: Located, label: str, base: str) -> str:
    choice = _text(option, node, label, base)
    if choice not in option.choices:
        raise UnitError(f"expected one of {', '.join(option.choices)}, found {choice!r}"
                        f"{suggest(choice, option.choices)}")
    return choice


def _code(option: Option, node: Located, label: str, base: str) -> str:
    """The job's code, ``"package.module:callable"``, or a built-in name (``choices``), or "" where that is the
    default: a malformed one is refused before anything is imported (``usercode.spec_error``)."""
    spec = _text(option, node, label, base)
    if spec not in option.choices and (spec or option.default) and usercode.spec_error(spec):
        names = f"{', '.join(option.choices)} or " if option.choices else ""
        raise UnitError(f"expected {names}\"package.module:callable\", found {spec!r}{suggest(spec, option.choices)}")
    return spec


def _bool(option: Option, node: Located, label: str, base: str) -> bool:
    if not isinstance(node.value, bool):
        raise UnitError(f"expected true or false, found {node.value!r}")
    return node.value


def _int(option: Option, node: Located, label: str, base: str, expected: str = "a whole number") -> int:
    value = int(node.value) if isinstance(node.value, str) and node.value.strip().isdigit() else node.value
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnitError(f"expected {expected}, found {value!r}")
    return value


def _int_or_auto(option: Option, node: Located, label: str, base: str) -> int | str:
    return "auto" if node.value == "auto" else _int(option, node, label, base, "a whole number or `auto`")


def _mapping(option: Option, node: Located, label: str, base: str) -> dict[str, Any]:
    """Keys to plain YAML values, passed on as they are (``dataset_args``)."""
    if not isinstance(node.value, dict):
        raise UnitError(f"expected a mapping of names to values, like {{root: /data, size: 224}}, found {node.value!r}")
    return node.plain()


def _shape(option: Option, node: Located, label: str, base: str) -> list[int]:
    """A tensor shape: ``[3, 224, 224]``, or ``"3,224,224"`` as ``--set`` and ``${VAR}`` give it."""
    value = node.plain()
    parts = value.split(",") if isinstance(value, str) else value
    if isinstance(parts, list) and parts and all(isinstance(p, int) and not isinstance(p, bool) or
                                                 isinstance(p, str) and p.strip().isdigit() for p in parts):
        shape = [int(p) for p in parts]
        if all(size > 0 for size in shape):
            return shape
    raise UnitError(f"expected a shape, a list of positive whole numbers like [3, 224, 224], found {value!r}")


def _paths(option: Option, node: Located, label: str, base: str) -> list[str]:
    """A list of directories (or one, as ``--set`` gives it), each made absolute from ``base`` (``python_path``)."""
    found = []
    for entry in node.value if isinstance(node.value, list) else [node]:
        given, where = getattr(entry, "value", entry), getattr(entry, "where", node.where)  # a default is plain
        if not isinstance(given, str) or not given:
            raise ConfigError(where, f"`{label}`: expected a list of directories, like [src], found {given!r}")
        directory = os.path.normpath(os.path.join(base, os.path.expanduser(given)))
        if not os.path.isdir(directory):
            raise ConfigError(where, f"`{label}`: {given} ({directory}) is not a directory: paths here "
                              f"are relative to the config file's directory ({base})")
        found.append(directory)
    return found


def _whole(option: Option) -> dict[str, Any]:
    bounds = {"minimum": option.minimum, "maximum": option.maximum}
    whole = {"type": "integer", **{key: bound for key, bound in bounds.items() if bound is not None}}
    return {"anyOf": [whole, {"type": "string", "pattern": r"^\s*\d+\s*$"}, ENV_REFERENCE]}


def _code_schema(option: Option) -> dict[str, Any]:
    """A built-in name, "" where that is the default, or the job's "package.module:callable"."""
    names = [*option.choices, *([""] if option.default == "" else [])]
    return {"anyOf": [{"enum": names}, {"type": "string", "pattern": CODE_SPEC}, ENV_REFERENCE]}


def _code_shown(option: Option, markdown: bool) -> str:
    if markdown:
        return " \\| ".join([*option.choices, "package.module:callable"])
    return "callable" + " or name" * bool(option.choices)  # the help names the built-in ones


def _quantity_shown(option: Option, markdown: bool) -> str:
    dimension: Dimension = option.kind  # type: ignore[assignment]
    if not markdown:
        return dimension.value
    return "number" if dimension is Dimension.COUNT else f"{dimension.value} (`{example(dimension)}`)"


_PATHS = {"anyOf": [{"type": "array", "items": {"type": "string", "minLength": 1}}, {"type": "string", "minLength": 1}]}
_SHAPE = {"anyOf": [{"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
                    {"type": "string", "pattern": r"^\s*\d+(\s*,\s*\d+)*\s*$"}, ENV_REFERENCE]}
# Each row: how config parses the kind, its JSON Schema, and its name in `list` (plain) and in the docs (markdown).
KINDS: dict[OptionKind, Kind] = {
    "path": Kind(_path, lambda o: {"type": "string", "minLength": 1 if o.default != "" else 0}, lambda o, md: "path"),
    "paths": Kind(_paths, lambda o: _PATHS, lambda o, md: "list of paths"),
    "text": Kind(_text, lambda o: {"type": "string", "minLength": 0}, lambda o, md: "text"),
    "int": Kind(_int, _whole, lambda o, md: "int"),
    "int_or_auto": Kind(_int_or_auto, lambda o: {"anyOf": [*_whole(o)["anyOf"], {"const": "auto"}]},
                        lambda o, md: "int or auto"),
    "bool": Kind(_bool, lambda o: {"type": "boolean"}, lambda o, md: "bool"),
    "choice": Kind(_choice, lambda o: {"anyOf": [{"enum": list(o.choices)}, ENV_REFERENCE]},
                   lambda o, md: (" \\| " if md else "|").join(o.choices)),
    "mapping": Kind(_mapping, lambda o: {"type": "object"}, lambda o, md: "mapping"),
    "shape": Kind(_shape, lambda o: _SHAPE, lambda o, md: "list of ints"),
    "code": Kind(_code, _code_schema, _code_shown),
    **dict.fromkeys(Dimension, Kind(lambda o, node, label, base: parse_quantity(node.value, o.kind),  # type: ignore
                                    lambda o: quantity(o.kind), _quantity_shown)),  # type: ignore[arg-type]
}


def shown(option: Option, markdown: bool = False) -> str:
    """``option``'s kind as ``list`` shows it (``markdown``: as docs/configuration.md does), `measured` included."""
    measured = (" or `measured`" if markdown else " or measured") if option.measured_by else ""
    return KINDS[option.kind].shown(option, markdown) + measured
