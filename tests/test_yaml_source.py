"""yaml_source on its own: every value located at FILE:LINE:COL, each YAML mistake one exact located line, and
``--set`` overrides grafted onto the tree where the flag says.

Locations are counted by hand from the texts below (lines and columns from 1); messages are pinned whole,
because they are what a user reads.
"""

from __future__ import annotations

import pytest

from preflight import yaml_source
from preflight.errors import ConfigError, ConfigErrors, Found
from preflight.yaml_source import MAX_DEPTH, MAX_NODES, Located


def load(text: str, environ: dict[str, str] | None = None) -> Located:
    return yaml_source.load("f.yaml", text, environ or {})


def error_of(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as raised:
        load(text, environ)
    return str(raised.value)


def test_values_keep_where_they_and_their_keys_were_written_and_their_text():
    root = load("a: x${X:-y}\nb: '535.10'\nc: 535.10\nd:\n  e: 1\n")
    assert root == Located({
        "a": Located("xy", "f.yaml:1:4", "xy", "f.yaml:1:1"),  # expanded text is the text "as written"
        "b": Located("535.10", "f.yaml:2:4", "535.10", "f.yaml:2:1"),
        "c": Located(535.1, "f.yaml:3:4", "535.10", "f.yaml:3:1"),  # a float remembers its digits
        "d": Located({"e": Located(1, "f.yaml:5:6", "1", "f.yaml:5:3")}, "f.yaml:5:3", None, "f.yaml:4:1"),
    }, "f.yaml:1:1")
    assert load("- [1, true, null]\n") == Located(
        [Located([Located(1, "f.yaml:1:4", "1"), Located(True, "f.yaml:1:7", "true"),
                  Located(None, "f.yaml:1:13", "null")], "f.yaml:1:3")], "f.yaml:1:1")


def test_key_location_is_the_key_when_known_else_the_value():
    assert Located(1, "f.yaml:2:5").key_location == "f.yaml:2:5"
    assert Located(1, "f.yaml:2:5", key_where="f.yaml:2:1").key_location == "f.yaml:2:1"


@pytest.mark.parametrize("text, message", [
    # the problem and its mark, not the context ("while parsing a flow sequence", at 2:9)
    ("version: 1\nchecks: [1, 2\n", "f.yaml:3:1: invalid YAML: did not find expected ',' or ']'"),
    ("a: b: c\n", "f.yaml:1:5: invalid YAML: mapping values are not allowed in this context"),
    ("a: b\nab\x07c\n", "f.yaml:2:3: invalid YAML: character 7 is not allowed in YAML: remove it (is this a text "
                        "file?)"),
    # a line break at character 0 is counted too, and only those before the character
    ("a: 1\nb: 2\nab\x07c\n\n\n\n", "f.yaml:3:3: invalid YAML: character 7 is not allowed in YAML: remove it (is this "
                                  "a text file?)"),
    ("\nab\x07c\n", "f.yaml:2:3: invalid YAML: character 7 is not allowed in YAML: remove it (is this a text file?)"),
    ("a: 1\n---\nb: 2\n", "f.yaml:2:1: invalid YAML: but found another document"),
    ("", "f.yaml:1:1: the file is empty: it needs `version: 1` and a `checks:` mapping"),
    ("# only a comment\n", "f.yaml:1:1: the file is empty: it needs `version: 1` and a `checks:` mapping"),
    ("a: !!float ''\n", "f.yaml:1:4: invalid float value '': quote it if it is text"),
    ("a: !!timestamp 2001-12-141\n", "f.yaml:1:4: invalid timestamp value '2001-12-141': quote it if it is text"),
    ("a: !foo x\n", "f.yaml:1:4: invalid value 'x': could not determine a constructor for the tag '!foo' in "
                    "\"<unicode string>\", line 1, column 4"),
    ("a: 2026-11-29\n", "f.yaml:1:4: unsupported YAML value '2026-11-29' (date): quote it"),
    ("a: !!binary aGVsbG8=\n", "f.yaml:1:4: unsupported YAML value 'aGVsbG8=' (bytes): quote it"),
    ("a: {b: 1}\nc:\n  <<: 5\n", "f.yaml:3:7: `<<` at f.yaml:3:3 merges mappings: give it one (`<<: *base`) or a "
                                "list of them (`<<: [*a, *b]`), found '5'"),
    # pre-commit/pre-commit-hooks#468 wrote two `<<` in one mapping: keys are unique, so it says how to merge two
    ("a: &a {b: 1}\nc: &c {d: 2}\ne:\n  <<: *a\n  <<: *c\n", "f.yaml:5:3: a second `<<` in one mapping (the first at "
                                                         "f.yaml:4:3): merge several mappings with one "
                                                         "`<<: [*first, *second]`"),
    # a tab where YAML expects indentation is named as a tab, at the tab (libyaml's words differ by place)
    ("a:\n\tb: 1\n", "f.yaml:2:1: tab character at f.yaml:2:1: YAML indents with spaces; replace the tab with spaces"),
    ("a:\n  b: 1\n  \tc: 2\n", "f.yaml:3:3: tab character at f.yaml:3:3: YAML indents with spaces; replace the tab "
                               "with spaces"),
    ("a: |\n  x\n\ty\n", "f.yaml:3:1: tab character at f.yaml:3:1: YAML indents with spaces; replace the tab with "
                        "spaces"),
    ("a:\n  - 1\n\t- 2\n", "f.yaml:3:1: tab character at f.yaml:3:1: YAML indents with spaces; replace the tab with "
                          "spaces"),
    ("a: 1\n1: x\n", "f.yaml:2:1: keys must be text, found '1'"),
    ("a: 1\nb: 2\na: 3\n", "f.yaml:3:1: duplicate key `a` (first written at f.yaml:1:1): keep one"),
    ("a: {b: 1, c: 2, b: 3}\n", "f.yaml:1:17: duplicate key `b` (first written at f.yaml:1:5): keep one"),
])
def test_each_mistake_is_one_located_line(text, message):
    assert error_of(text) == message


@pytest.mark.parametrize("text, message", [
    # plain: the "$" is character 1 of the value at column 4
    ("a: x${X/a}\n", "f.yaml:1:5: `${X/a}`: `/` is not an interpolation operator"),
    # quoted without escapes: one more column for the quote
    ("a: 'x${X/a}'\n", "f.yaml:1:6: `${X/a}`: `/` is not an interpolation operator"),
    ('a: "x${X/a}"\n', "f.yaml:1:6: `${X/a}`: `/` is not an interpolation operator"),
    # an escape or a line break makes the column uncertain: the value's start
    ('a: "\\tx${X/a}"\n', "f.yaml:1:4: `${X/a}`: `/` is not an interpolation operator"),
    ("a: x\n  y${X/a}\n", "f.yaml:1:4: `${X/a}`: `/` is not an interpolation operator"),
    ("k: v\na: x ${UNSET}\n", "f.yaml:2:6: environment variable UNSET is not set: export it or write "
                              "${UNSET:-default}"),
])
def test_an_interpolation_mistake_is_located_at_its_dollar_when_the_source_shows_it(text, message):
    assert error_of(text).startswith(message)


def test_a_document_of_max_nodes_loads_and_one_more_node_is_refused():
    assert len(load("[" + "0," * (MAX_NODES - 1) + "]").value) == MAX_NODES - 1  # the list itself is a node
    # the 20001st node is item 19999 (from 0) at column 2 + 2 * 19999
    assert error_of("[" + "0," * MAX_NODES + "]") == ("f.yaml:1:40000: the document is too large or nested too "
                                                      "deeply (an alias bomb?)")


def nested_mappings(levels: int) -> str:
    """``levels`` mappings, each the value of the one before, one space of indent per level."""
    return "".join(" " * i + f"k{i}:\n" for i in range(levels - 1)) + " " * (levels - 1) + "k: v\n"


def test_block_nesting_to_max_depth_loads_and_one_level_more_is_refused():
    assert MAX_DEPTH == 50
    root = load(nested_mappings(50))
    for i in range(49):
        root = root.value[f"k{i}"]
    assert root.value["k"].value == "v"
    # the 51st mapping's key is at depth 51, on line 51 after 50 spaces
    assert error_of(nested_mappings(51)) == "f.yaml:51:51: the document is too large or nested too deeply (an alias bomb?)"


def test_block_sequences_count_their_depth_too():
    assert load("- " * 50 + "x\n").where == "f.yaml:1:1"  # x inside 50 lists is at depth 50
    # x inside 51 lists is at depth 51, after 51 "- "
    assert error_of("- " * 51 + "x\n") == "f.yaml:1:103: the document is too large or nested too deeply (an alias bomb?)"


def test_flow_nesting_deeper_than_max_depth_is_refused_at_the_bracket_that_crosses_it():
    assert load("a: " + "[" * 50 + "]" * 50).value["a"].where == "f.yaml:1:4"
    message = "nested deeper than 50 levels: a thresholds file needs three or four"
    assert error_of("a: " + "[" * 51 + "]" * 51) == f"f.yaml:1:54: {message}"  # the 51st "[" is character 53
    assert error_of("a: " + "{b: " * 51 + "1" + "}" * 51) == f"f.yaml:1:204: {message}"  # 3 + 50 * 4 before it
    assert error_of("\n" + "[" * 51 + "]" * 51) == f"f.yaml:2:51: {message}"  # a line break at character 0 counts
    # only the line breaks before the bracket count
    assert error_of("a: 1\nb: 2\nc: " + "[" * 51 + "]" * 51 + "\nd: 1\n\n\n") == f"f.yaml:3:54: {message}"


def test_only_brackets_count_as_nesting():
    assert load("a: " + "X" * 60).value["a"].value == "X" * 60
    assert error_of("a: " + "[X" * 51) == ("f.yaml:1:104: nested deeper than 50 levels: a thresholds file needs three "
                                          "or four")  # 3 + 50 * 2 characters before the 51st "["


def test_closing_brackets_lower_the_flow_depth_but_never_below_zero():
    assert len(load("a: [" + "[], " * 60 + "]").value["a"].value) == 60  # 61 "[" but never 3 open at once
    # each "]" closes one level: 27 open, 1 closed, 25 more open is 51
    assert error_of("a: " + "[" * 27 + "]" + "[" * 25) == (
        "f.yaml:1:56: nested deeper than 50 levels: a thresholds file needs three or four")
    # stray closers in a string do not buy extra depth: still refused at the 51st "["
    assert error_of('a: "]]"\nb: ' + "[" * 51 + "]" * 51) == (
        "f.yaml:2:54: nested deeper than 50 levels: a thresholds file needs three or four")


ROOT = "version: 1\nchecks:\n  storage:\n    path: /a\n"


def checks_of(root: Located) -> dict[str, Located]:
    return root.value["checks"].value


def test_an_override_replaces_a_value_located_at_the_flag():
    root = yaml_source.apply_override(load(ROOT), "storage.path=/b", {})
    flag = "--set storage.path=/b"
    assert checks_of(root)["storage"].value["path"] == Located("/b", flag, "/b", flag)
    assert (root.where, root.value["checks"].where) == ("f.yaml:1:1", "f.yaml:3:3")  # the rest keeps its place
    assert root.value["version"] == Located(1, "f.yaml:1:10", "1", "f.yaml:1:1")


def test_an_override_keeps_where_the_keys_it_goes_through_were_written():
    root = yaml_source.apply_override(load(ROOT), "storage.path=/b", {})
    assert root.value["checks"].key_where == "f.yaml:2:1"
    assert checks_of(root)["storage"].key_location == "f.yaml:3:3"  # an unknown check is reported at its name


def test_an_override_reads_its_value_as_yaml_and_keeps_the_text_as_written():
    def leaf(assignment: str, environ: dict[str, str] | None = None) -> Located:
        return checks_of(yaml_source.apply_override(load(ROOT), assignment, environ or {}))["storage"].value["x"]

    assert leaf("storage.x= 535.10 ")[:3] == (535.1, "--set storage.x= 535.10 ", "535.10")
    assert leaf("storage.x=8")[:3] == (8, "--set storage.x=8", "8")
    assert leaf("storage.x=a=b").value == "a=b"  # the first "=" splits
    assert leaf("storage.x=").value == ""
    assert leaf("storage.x=   ")[:3] == ("", "--set storage.x=   ", "")  # blank is empty text, not YAML's null
    assert leaf("storage.x=[1").value == "[1"  # not YAML: taken as text
    assert leaf("storage.x=${X:-d}/y", {})[:3] == ("d/y", "--set storage.x=${X:-d}/y", "d/y")
    assert leaf("storage.x=$X", {"X": "7"}).value == "7"
    assert leaf(" storage.x =1").value == 1  # spaces around the key are not part of it


@pytest.mark.parametrize("assignment, path", [
    ("version=2", ["version"]),
    ("defaults.timeout=1s", ["defaults", "timeout"]),
    ("fleet.timeout=1s", ["fleet", "timeout"]),
    ("checks.shm.size=1", ["checks", "shm", "size"]),
    ("shm.size=1", ["checks", "shm", "size"]),
])
def test_an_override_addresses_the_top_level_keys_and_otherwise_a_check(assignment, path):
    node = root = yaml_source.apply_override(load(ROOT), assignment, {})
    for key in path[:-1]:
        node = node.value[key]
    flag = f"--set {assignment}"
    assert node.value[path[-1]].where == flag
    assert node.value[path[-1]].key_where == flag
    if path[0] != "checks":
        assert path[0] not in checks_of(root)


def test_an_override_creates_the_mappings_it_goes_through():
    root = yaml_source.apply_override(load(ROOT), "shm.size.min=1", {})
    flag = "--set shm.size.min=1"
    assert checks_of(root)["shm"] == Located({"size": Located({"min": Located(1, flag, "1", flag)}, flag)}, flag)
    assert checks_of(root)["storage"].value["path"].value == "/a"


@pytest.mark.parametrize("assignment, message", [
    ("storage.path", "--set storage.path: expected KEY=VALUE with a dotted key, like `storage.path=/mnt/data`"),
    ("=x", "--set =x: expected KEY=VALUE with a dotted key, like `storage.path=/mnt/data`"),
    ("storage..path=x", "--set storage..path=x: expected KEY=VALUE with a dotted key, like `storage.path=/mnt/data`"),
    ("storage.path={a: 1}", "--set storage.path={a: 1}: the value must be a single scalar; set nested keys one at "
                            "a time"),
    ("storage.path=[1, 2]", "--set storage.path=[1, 2]: the value must be a single scalar; set nested keys one at "
                            "a time"),
    ("storage.path.x=1", "--set storage.path.x=1: cannot set `x`: f.yaml:4:11 is not a mapping"),
    ("storage.path.x.y=1", "--set storage.path.x.y=1: cannot set `x.y`: f.yaml:4:11 is not a mapping"),
    ("version.x=1", "--set version.x=1: cannot set `x`: f.yaml:1:10 is not a mapping"),
    ("storage.path=${X}", "--set storage.path=${X}: environment variable X is not set: export it or write "
                          "${X:-default}"),
])
def test_a_bad_override_is_one_line_naming_the_flag(assignment, message):
    with pytest.raises(ConfigError) as raised:
        yaml_source.apply_override(load(ROOT), assignment, {})
    assert str(raised.value) == message


def test_a_merge_key_merges_its_mapping_and_each_value_stays_where_it_was_written():
    root = load("base: &base\n  a: 1\n  b: 2\nderived:\n  <<: *base\n  c: 3\n")
    derived = root.value["derived"].value
    assert list(derived) == ["a", "b", "c"]  # the merged keys where the `<<` stands
    assert derived["a"] == Located(1, "f.yaml:2:6", "1", "f.yaml:2:3", merged_at="f.yaml:5:3")
    assert derived["c"] == Located(3, "f.yaml:6:6", "3", "f.yaml:6:3")
    assert "merged_at" not in repr(derived["c"])  # messages quote values: unchanged where nothing was merged


@pytest.mark.parametrize("text", [
    "base: &base {a: 1, b: 2}\nderived:\n  <<: *base\n  b: 3\n",  # after the `<<`
    "base: &base {a: 1, b: 2}\nderived:\n  b: 3\n  <<: *base\n",  # before it: YAML's rule has no order
    "base: &base {a: 1, b: 2}\nderived: {b: 3, <<: *base}\n",
])
def test_a_key_written_in_the_mapping_wins_over_a_merged_one_and_is_no_duplicate(text):
    # ota-meshi/yaml-eslint-parser#306: `derived: {<<: *base, b: 3}` is {a: 1, b: 3}
    derived = load(text).value["derived"].value
    assert {key: node.value for key, node in derived.items()} == {"a": 1, "b": 3}
    assert derived["b"].merged_at is None


def test_a_list_of_merges_gives_the_earlier_mapping_precedence_and_merges_nest():
    root = load("a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc: &c {<<: *b, z: 3}\n"
                "d:\n  <<: [*a, *c]\n  w: 0\n")
    d = root.value["d"].value
    assert {key: node.value for key, node in d.items()} == {"x": 1, "y": 2, "z": 3, "w": 0}
    assert d["y"].where == "f.yaml:2:17" and d["x"].where == "f.yaml:1:11"
    assert load("a: {<<: {b: 1}}\n").value["a"].value["b"].value == 1  # a mapping written in place merges too
    assert set(load('a: {"<<": 1}\n').value["a"].value) == {"<<"}  # a quoted `<<` is an ordinary key


def test_a_key_written_twice_is_still_a_duplicate_beside_a_merge():
    assert error_of("b: &b {x: 1}\na:\n  <<: *b\n  y: 1\n  y: 2\n") == (
        "f.yaml:5:3: duplicate key `y` (first written at f.yaml:4:3): keep one")


def test_a_merge_of_something_not_a_mapping_says_so_at_it_in_a_list():
    assert error_of("a: &a {x: 1}\nb:\n  <<: [*a, [1]]\n") == (
        "f.yaml:3:12: `<<` at f.yaml:3:3 merges mappings: give it one (`<<: *base`) or a list of them "
        "(`<<: [*a, *b]`), found 'a list'")


def test_every_tab_in_the_file_is_named_in_one_run():
    text = "version: 1\nchecks:\n  storage:\n\tpath: /data\n\tseq_read: {min: 1 GB/s}\n  shm:\n\t\tsize: 1\n"
    with pytest.raises(ConfigErrors) as raised:
        load(text)
    assert str(raised.value).splitlines() == [
        f"f.yaml:{line}:1: tab character at f.yaml:{line}:1: YAML indents with spaces; replace the tab with spaces"
        for line in (4, 5, 7)]  # one line per line: its second tab is the same mistake
    assert load("a: [1,\t2]\nb: x\t# tabs between tokens are YAML's separators\n").value["a"].value[1].value == 2


def test_a_syntax_error_after_a_tab_waits_for_the_next_run():
    # the parser stops at a syntax error; after a tab it may be the tab's doing, so the tab alone is told
    assert error_of("a:\n\tb: 1\nc: [1\n") == ("f.yaml:2:1: tab character at f.yaml:2:1: YAML indents with spaces; "
                                               "replace the tab with spaces")


def test_each_mistake_in_values_is_reported_in_one_run_in_the_file_s_order():
    text = "a: ${UNSET}\nb: !!float ''\nc: 1\nc: 2\n1: x\nd: &d 5\ne: {<<: *d}\n"
    with pytest.raises(ConfigErrors) as raised:
        load(text)
    assert str(raised.value).splitlines() == [
        "f.yaml:1:4: environment variable UNSET is not set: export it or write ${UNSET:-default}",
        "f.yaml:2:4: invalid float value '': quote it if it is text",
        "f.yaml:4:1: duplicate key `c` (first written at f.yaml:3:1): keep one",
        "f.yaml:5:1: keys must be text, found '1'",
        # an alias is the node it names: the value is told where it was written, the `<<` where it was used
        "f.yaml:6:4: `<<` at f.yaml:7:5 merges mappings: give it one (`<<: *base`) or a list of them "
        "(`<<: [*a, *b]`), found '5'",
    ]
    assert raised.value.where == "f.yaml:1:4"  # a caller that reads one error reads the first


def test_a_value_that_failed_stands_as_written_and_its_echoes_are_dropped():
    found = Found()
    root = yaml_source.load("f.yaml", "a: ${UNSET}\n", {}, found)
    assert root.value["a"].value == "${UNSET}" and len(found.errors) == 1
    found.add(ConfigError(root.value["a"].where, "`a`: expected a size, found '${UNSET}'"))  # its echo
    assert len(found.errors) == 1
