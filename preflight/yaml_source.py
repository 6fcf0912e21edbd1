"""Read a YAML file into plain values that remember where they were written (the config layer).

PyYAML's safe composer, then our walk: every value's ``FILE:LINE:COL``, duplicate keys refused, merge keys resolved in
place, aliases bounded, ``$VAR`` expanded (``interpolation``); ``--set`` values located at the flag.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import yaml

from preflight import interpolation
from preflight.errors import ConfigError, ConfigErrors, Found

# Nodes visited: a real thresholds.yaml has a few hundred, an alias bomb ("billion laughs") billions.
MAX_NODES = 20_000
MAX_DEPTH = 50


OVERRIDE_PREFIX = "--set "  # the `where` of a value given on the command line


class Located(NamedTuple):
    """A value from the config and where it was written (``thresholds.yaml:12:5``)."""

    value: Any  # dict[str, Located] | list[Located] | str | int | float | bool | None
    where: str
    raw: str | None = None  # a scalar exactly as written (versions keep "535.10")
    key_where: str | None = None  # for a mapping's value: where its key was written
    merged_at: str | None = None  # for a value a `<<` merged in: where that `<<` was written

    @property
    def key_location(self) -> str:
        return self.key_where or self.where

    def plain(self) -> Any:
        """This tree's mappings, lists and scalars, where each was written forgotten (a check's default is plain)."""
        def of(item: Any) -> Any:
            return item.plain() if isinstance(item, Located) else item
        if isinstance(self.value, dict):
            return {key: of(child) for key, child in self.value.items()}
        return [of(child) for child in self.value] if isinstance(self.value, list) else self.value

    def __repr__(self) -> str:  # as NamedTuple writes it, `merged_at` only when set (messages quote values)
        fields = [f"{name}={getattr(self, name)!r}" for name in self._fields
                  if name != "merged_at" or self.merged_at is not None]
        return f"Located({', '.join(fields)})"


def load(path: str, text: str, environ: Mapping[str, str], found: Found | None = None) -> Located:
    """Parse ``text`` (the contents of ``path``) into a ``Located`` tree.

    Merge keys follow YAML 1.1 (https://yaml.org/type/merge.html): the mapping's own key wins, then the earlier merged
    mapping. Mistakes in values go to ``found`` and the walk goes on, so one run reports them all; without ``found``
    they are raised at the end.

    Raises:
        ConfigError: invalid YAML (at once: the parser stops there; every tab used for
            indentation is named), a document too large or deep (an alias bomb); without
            ``found``, also duplicate keys, a malformed ``<<``, tags or a malformed ``${...}``, or
            a reference to an unset variable without a default (``ConfigErrors`` when several).
    """
    _refuse_deep_flow(path, text)
    root = _compose(path, text)
    if root is None:
        raise ConfigError(f"{path}:1:1", "the file is empty: it needs `version: 1` and a `checks:` mapping")
    collected = Found() if found is None else found
    try:
        tree = _Walker(path, text, environ, collected).walk(root, depth=0)
    except ConfigError as error:  # too large: nothing after it can be trusted
        collected.add(error)
        collected.raise_any()
        raise
    if found is None:
        collected.raise_any()
    return tree


TAB_FIX = "YAML indents with spaces; replace the tab with spaces"
MAX_TABS = 100  # tabs named in one run, each found by reading again with the one before replaced


def _compose(path: str, text: str) -> yaml.Node | None:
    """PyYAML's safe node tree of ``text``. The parser stops at the first syntax error, except a tab used for
    indentation: the text is read again with leading tabs expanded (to multiples of 8) to name every other tab.

    Raises:
        ConfigError: the syntax error, located; ``ConfigErrors`` for several tabs.
    """
    tabs: list[ConfigError] = []
    root = None
    while len(tabs) < MAX_TABS:
        try:
            root = _compose_once(path, text)
        except _Tab as tab:
            tabs.append(ConfigError(tab.where, f"tab character at {tab.where}: {TAB_FIX}"))
            text = _without_tab(text, tab.index)
            continue
        except ConfigError:
            if not tabs:
                raise
            # else an error the tabs' replacement may have made: the tabs now, the rest on the next run
        break
    if len(tabs) > 1:
        raise ConfigErrors(tabs)
    if tabs:
        raise tabs[0]
    return root


def _without_tab(text: str, index: int) -> str:
    """``text`` with the tab at ``index`` replaced by spaces: with every tab of the whitespace that starts its
    line, as a terminal shows them (to the next multiple of 8), when it is there; else by one space."""
    start = text.rfind("\n", 0, index) + 1
    end = len(text) if text.find("\n", index) < 0 else text.find("\n", index)
    indent = len(text[start:end]) - len(text[start:end].lstrip(" \t"))
    if index < start + indent:
        return text[:start] + text[start:start + indent].expandtabs(8) + text[start + indent:]
    return text[:index] + " " + text[index + 1:]


class _Tab(Exception):
    def __init__(self, where: str, index: int) -> None:
        super().__init__(where)
        self.where, self.index = where, index


def _compose_once(path: str, text: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        if mark is None:
            raise ConfigError(f"{path}:1:1", f"invalid YAML: {error.problem or error.context}") from None
        tab = _tab_at(text, mark.index)
        if tab is not None:
            line = text.count("\n", 0, tab) + 1
            raise _Tab(f"{path}:{line}:{tab - (text.rfind(chr(10), 0, tab) + 1) + 1}", tab) from None
        raise ConfigError(_where(path, mark), f"invalid YAML: {error.problem or error.context}") from None
    except yaml.reader.ReaderError as error:
        line = text.count("\n", 0, error.position) + 1
        column = error.position - (text.rfind("\n", 0, error.position) + 1) + 1
        raise ConfigError(f"{path}:{line}:{column}", f"invalid YAML: character {error.character!r} is not allowed "
                          f"in YAML: remove it (is this a text file?)") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}:1:1", f"invalid YAML: {error}") from None
    except RecursionError:
        raise ConfigError(f"{path}:1:1", "invalid YAML: nested too deeply") from None


def _tab_at(text: str, index: int) -> int | None:
    """The index of the tab a parse error at ``index`` stopped on: that character, or a tab in the
    whitespace that starts its line before it; ``None`` when the error is not a tab's."""
    if index < len(text) and text[index] == "\t":
        return index
    start = text.rfind("\n", 0, index) + 1
    indent = text[start:index]
    if indent and not indent.strip(" \t") and "\t" in indent:
        return start + indent.index("\t")
    return None


def _refuse_deep_flow(path: str, text: str) -> None:
    """Refuse ``[[[[...`` nesting before PyYAML recurses through it (seconds per thousand levels); brackets inside
    quotes count too, far above any real file."""
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


MERGE_TAG = "tag:yaml.org,2002:merge"


class _Walker:
    def __init__(self, path: str, text: str, environ: Mapping[str, str], found: Found) -> None:
        self.path = path
        self.text = text
        self.environ = environ
        self.found = found
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
            value = self._scalar(node, where)
        except ConfigError as error:  # reported; the text as written stands in, its echoes dropped
            self.found.add(error)
            self.found.spoil(where)
            return Located(node.value, where, node.value)
        # text is "as written" once expanded: a version bound `"${DRIVER_MIN:-535.104}"` is 535.104
        return Located(value, where, value if isinstance(value, str) else node.value)

    def _scalar(self, node: yaml.ScalarNode, where: str) -> Any:
        """The scalar's value, ``${...}`` expanded.

        Raises:
            ConfigError: a tag that cannot be constructed, a type a config never holds, or a
                malformed or unset ``${...}`` (located at its ``$``).
        """
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
                return interpolation.expand(value, self.environ)
            except interpolation.InterpolationError as error:
                raise ConfigError(self._where_in(node, error.position), error.message) from None
        if not isinstance(value, (int, float, bool, type(None))):
            raise ConfigError(where, f"unsupported YAML value {node.value!r} ({type(value).__name__}): quote it")
        return value

    def _where_in(self, node: yaml.Node, position: int) -> str:
        """Where character ``position`` of ``node``'s text was written: exact when the source holds the text verbatim
        on one line, else where the value starts."""
        start, source = node.start_mark, self.text[node.start_mark.index:node.end_mark.index]
        quote = 1 if isinstance(node, yaml.ScalarNode) and node.style in ("'", '"') else 0
        if "\n" not in source and source[quote:len(source) - quote] == node.value:
            return f"{self.path}:{start.line + 1}:{start.column + 1 + quote + position}"
        return _where(self.path, start)

    def _mapping(self, node: yaml.MappingNode, depth: int) -> dict[str, Located]:
        """The mapping's keys in the order written, a ``<<``'s merged keys where the ``<<`` stands; a duplicate,
        non-text key or malformed ``<<`` is reported and left out."""
        explicit: dict[str, Located] = {}
        order: list[str | list[dict[str, Located]]] = []  # a key, or where a `<<` puts its mappings
        merge_where = None
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                where = _where(self.path, key_node.start_mark)
                if merge_where is not None:
                    self.found.add(ConfigError(where, f"a second `<<` in one mapping (the first at {merge_where}): "
                                                      f"merge several mappings with one `<<: [*first, *second]`"))
                    continue
                merge_where = where
                order.append(self._merged(value_node, depth + 1, where, _where(self.path, node.start_mark)))
                continue
            key = self.walk(key_node, depth + 1)
            if not isinstance(key.value, str):
                self.found.add(ConfigError(key.where, f"keys must be text, found {key_node.value!r}"))
                self.found.spoil(_where(self.path, node.start_mark))  # "`checks:` is empty" would be its echo
                continue
            if key.value in explicit:
                first = explicit[key.value].key_location
                self.found.add(ConfigError(key.where, f"duplicate key `{key.value}` (first written at {first}): "
                                                      f"keep one"))
                continue
            explicit[key.value] = self.walk(value_node, depth + 1)._replace(key_where=key.where)
            order.append(key.value)
        result: dict[str, Located] = {}
        for entry in order:
            if isinstance(entry, str):
                result[entry] = explicit[entry]
                continue
            for merged in entry:  # an earlier mapping of `<<: [*a, *b]` wins over a later one
                for key, value in merged.items():
                    if key not in explicit and key not in result:
                        result[key] = value._replace(merged_at=merge_where)
        return result

    def _merged(self, node: yaml.Node, depth: int, where: str, owner: str) -> list[dict[str, Located]]:
        """The mappings a ``<<`` at ``where`` merges into the mapping at ``owner``: ``node``, a mapping or a
        list of mappings (anything else is reported, and what ``owner`` then lacks is its echo)."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        merged = []
        for source in sources:
            if isinstance(source, yaml.MappingNode):
                merged.append(self.walk(source, depth).value)
            else:
                shown = source.value if isinstance(source, yaml.ScalarNode) else "a list"
                self.found.add(ConfigError(_where(self.path, source.start_mark), f"`<<` at {where} merges mappings: "
                                           f"give it one (`<<: *base`) or a list of them (`<<: [*a, *b]`), found "
                                           f"{shown!r}"))
                self.found.spoil(owner)
        return merged


def apply_override(root: Located, assignment: str, environ: Mapping[str, str]) -> Located:
    """Return ``root`` with one ``--set KEY.PATH=VALUE`` applied (VALUE read as YAML): ``storage.path=/mnt/x`` sets
    ``checks.storage.path``; ``defaults``, ``fleet`` or ``version`` address the top level.

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
