"""Read a YAML file into plain values that remember where they were written.

PyYAML's safe composer builds the node tree (no arbitrary objects); we walk it
ourselves so that every value carries its ``FILE:LINE:COL``, duplicate keys are an
error instead of a silent overwrite, aliases cannot expand into a bomb, and
environment references in strings (``$VAR``, ``${VAR:-default}`` and the rest of Docker
Compose's forms, see ``interpolation``) are expanded, a mistake in one located at its
``$``. ``--set`` overrides become nodes located at the flag that set them.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import yaml

from preflight import interpolation
from preflight.errors import ConfigError

# A safe bound on nodes visited: a real thresholds.yaml has a few hundred; an alias bomb
# ("billion laughs") has billions.
MAX_NODES = 20_000
MAX_DEPTH = 50


OVERRIDE_PREFIX = "--set "  # the `where` of a value given on the command line


class Located(NamedTuple):
    """A value from the config and where it was written (``thresholds.yaml:12:5``)."""

    value: Any  # dict[str, Located] | list[Located] | str | int | float | bool | None
    where: str
    raw: str | None = None  # a scalar exactly as written (versions keep "535.10")
    key_where: str | None = None  # for a mapping's value: where its key was written

    @property
    def key_location(self) -> str:
        return self.key_where or self.where


def load(path: str, text: str, environ: Mapping[str, str]) -> Located:
    """Parse ``text`` (the contents of ``path``) into a ``Located`` tree.

    Raises:
        ConfigError: invalid YAML, duplicate keys, tags or aliases that expand too far,
            a malformed ``${...}``, or a reference to an unset variable without a default.
    """
    _refuse_deep_flow(path, text)
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = _where(path, mark) if mark else f"{path}:1:1"
        raise ConfigError(where, f"invalid YAML: {error.problem or error.context}") from None
    except yaml.reader.ReaderError as error:
        line = text.count("\n", 0, error.position) + 1
        column = error.position - (text.rfind("\n", 0, error.position) + 1) + 1
        raise ConfigError(f"{path}:{line}:{column}", f"invalid YAML: character {error.character!r} is not allowed "
                          f"in YAML: remove it (is this a text file?)") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}:1:1", f"invalid YAML: {error}") from None
    except RecursionError:
        raise ConfigError(f"{path}:1:1", "invalid YAML: nested too deeply") from None
    if root is None:
        raise ConfigError(f"{path}:1:1", "the file is empty: it needs `version: 1` and a `checks:` mapping")
    return _Walker(path, text, environ).walk(root, depth=0)


def _refuse_deep_flow(path: str, text: str) -> None:
    """Refuse ``[[[[...`` nesting before PyYAML recurses through it (seconds per thousand levels).

    Brackets inside quotes count too: no real thresholds file comes near the bound.
    """
    depth = 0
    for position, character in enumerate(text):
        if character in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, position) + 1
                column = position - (text.rfind("\n", 0, position) + 1) + 1
                raise ConfigError(f"{path}:{line}:{column}", f"nested deeper than {MAX_DEPTH} levels: "
                                  f"a thresholds file needs three or four")
        elif character in "]}":
            depth = max(0, depth - 1)


class _Walker:
    def __init__(self, path: str, text: str, environ: Mapping[str, str]) -> None:
        self.path = path
        self.text = text
        self.environ = environ
        self.visited = 0
        self.constructor = yaml.constructor.SafeConstructor()

    def walk(self, node: yaml.Node, depth: int) -> Located:
        self.visited += 1
        where = _where(self.path, node.start_mark)
        if self.visited > MAX_NODES or depth > MAX_DEPTH:
            raise ConfigError(where, "the document is too large or nested too deeply (an alias bomb?)")
        if isinstance(node, yaml.MappingNode):
            return Located(self._mapping(node, depth), where)
        if isinstance(node, yaml.SequenceNode):
            return Located([self.walk(item, depth + 1) for item in node.value], where)
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError as error:
            raise ConfigError(where, f"invalid value {node.value!r}: {error}") from None
        except Exception:  # noqa: BLE001  PyYAML's constructors on malformed tagged scalars raise anything:
            # AttributeError for `!!timestamp 2001-12-141`, IndexError for an empty `!!float`
            raise ConfigError(where, f"invalid {node.tag.rsplit(':', 1)[-1]} value {node.value!r}: "
                              f"quote it if it is text") from None
        if isinstance(value, str):
            try:
                value = interpolation.expand(value, self.environ)
            except interpolation.InterpolationError as error:
                raise ConfigError(self._where_in(node, error.position), error.message) from None
        elif not isinstance(value, (int, float, bool, type(None))):
            raise ConfigError(where, f"unsupported YAML value {node.value!r} ({type(value).__name__}): quote it")
        # text is "as written" once expanded: a version bound `"${DRIVER_MIN:-535.104}"` is 535.104
        return Located(value, where, value if isinstance(value, str) else node.value)

    def _where_in(self, node: yaml.Node, position: int) -> str:
        """Where character ``position`` of ``node``'s text was written.

        Exact when the source holds the text verbatim on one line (plain, or quoted without
        escapes); otherwise where the value starts.
        """
        start, source = node.start_mark, self.text[node.start_mark.index:node.end_mark.index]
        quote = 1 if isinstance(node, yaml.ScalarNode) and node.style in ("'", '"') else 0
        if "\n" not in source and source[quote:len(source) - quote] == node.value:
            return f"{self.path}:{start.line + 1}:{start.column + 1 + quote + position}"
        return _where(self.path, start)

    def _mapping(self, node: yaml.MappingNode, depth: int) -> dict[str, Located]:
        result: dict[str, Located] = {}
        key_wheres: dict[str, str] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise ConfigError(_where(self.path, key_node.start_mark), "merge keys (`<<`) are not supported")
            key = self.walk(key_node, depth + 1)
            if not isinstance(key.value, str):
                raise ConfigError(key.where, f"keys must be text, found {key_node.value!r}")
            if key.value in result:
                first = key_wheres[key.value]
                raise ConfigError(key.where, f"duplicate key `{key.value}` (first written at {first}): keep one")
            key_wheres[key.value] = key.where
            result[key.value] = self.walk(value_node, depth + 1)._replace(key_where=key.where)
        return result


def apply_override(root: Located, assignment: str, environ: Mapping[str, str]) -> Located:
    """Return ``root`` with one ``--set KEY.PATH=VALUE`` applied (VALUE is read as YAML).

    ``storage.path=/mnt/x`` sets ``checks.storage.path``; a first key of ``defaults``,
    ``fleet`` or ``version`` addresses the top level instead.

    Raises:
        ConfigError: no ``=``, an empty key, a path through a non-mapping, or an environment
            reference ``interpolation.expand`` refuses.
    """
    where = f"{OVERRIDE_PREFIX}{assignment}"
    key_text, sep, value_text = assignment.partition("=")
    keys = key_text.strip().split(".")
    if not sep or not all(keys):
        raise ConfigError(where, "expected KEY=VALUE with a dotted key, like `storage.path=/mnt/data`")
    if keys[0] not in ("defaults", "version", "fleet", "checks"):
        keys = ["checks", *keys]
    try:
        parsed = yaml.safe_load(value_text) if value_text.strip() else ""
    except yaml.YAMLError:
        parsed = value_text
    if isinstance(parsed, str):
        try:
            parsed = interpolation.expand(parsed, environ)
        except interpolation.InterpolationError as error:
            raise ConfigError(where, error.message) from None
    if isinstance(parsed, (dict, list)):
        raise ConfigError(where, "the value must be a single scalar; set nested keys one at a time")
    leaf = Located(parsed, where, parsed if isinstance(parsed, str) else value_text.strip())
    return _set(root, keys, leaf, where)


def _set(node: Located, keys: list[str], leaf: Located, where: str) -> Located:
    if not isinstance(node.value, dict):
        raise ConfigError(where, f"cannot set `{'.'.join(keys)}`: {node.where} is not a mapping")
    head, rest = keys[0], keys[1:]
    children = dict(node.value)
    if rest:
        child = children.get(head, Located({}, where))
        children[head] = _set(child, rest, leaf, where)
    else:
        children[head] = leaf._replace(key_where=where)
    return node._replace(value=children)  # keeps where its key was written, for errors about the key


def _where(path: str, mark: yaml.Mark) -> str:
    return f"{path}:{mark.line + 1}:{mark.column + 1}"
