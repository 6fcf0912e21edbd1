"""The option-kind table: each kind parses what a user writes, its JSON Schema fragment agrees, and ``list`` names it."""

from __future__ import annotations

import re

import jsonschema
import pytest

from preflight import yaml_source
from preflight.checks import CHECKS
from preflight.checks.base import Option
from preflight.checks.option_kinds import KINDS, shown
from preflight.commands import list_checks
from preflight.errors import ConfigError
from preflight.units import Dimension, UnitError, example

CHOICE = Option("read", "choice", "fadvise", "h", choices=("fadvise", "direct"))
CODE = Option("model", "code", "tiny", "h", choices=("tiny", "resnet50"))

# kind: (option, written well, parsed, written badly, the error's words, list's column, the docs' column)
CASES = {
    "path": (Option("p", "path", "/data", "h"), "/data", "/data", "''", "expected a path, found an empty string",
             "path", "path"),
    "paths": (Option("p", "paths", [], "h"), "[src]", ["{base}/src"], "[1]", "expected a list of directories",
              "list of paths", "list of paths"),
    "text": (Option("p", "text", "", "h"), "abc", "abc", "~", "expected text, found None", "text", "text"),
    "int": (Option("p", "int", 1, "h"), "'8'", 8, "x", "expected a whole number, found 'x'", "int", "int"),
    "int_or_auto": (Option("p", "int_or_auto", "auto", "h"), "auto", "auto", "1.5",
                    "expected a whole number or `auto`, found 1.5", "int or auto", "int or auto"),
    "bool": (Option("p", "bool", False, "h"), "true", True, "'yes'", "expected true or false, found 'yes'",
             "bool", "bool"),
    "choice": (CHOICE, "direct", "direct", "drect", "did you mean `direct`?", "fadvise|direct",
               "fadvise \\| direct"),
    "mapping": (Option("p", "mapping", {}, "h"), "{root: /data, sizes: [224]}", {"root": "/data", "sizes": [224]},
                "[1]", "expected a mapping of names to values", "mapping", "mapping"),
    "shape": (Option("p", "shape", [3, 224, 224], "h"), "'3,32, 32'", [3, 32, 32], "[3, 0]", "expected a shape",
              "list of ints", "list of ints"),
    "code": (CODE, "job.net:build", "job.net:build", "job.net", "expected tiny, resnet50 or \"package.module:callable\"",
             "callable or name", "tiny \\| resnet50 \\| package.module:callable"),
    Dimension.SIZE: (Option("p", Dimension.SIZE, "1 GiB", "h"), "2 GiB", 2 * 1024 ** 3, "2 parsecs",
                     "unknown unit 'parsecs'", "size", "size (`8 GiB`)"),
}


def written(text: str) -> yaml_source.Located:
    """``text`` as the config's YAML gives it: a located node."""
    return yaml_source.load("t.yaml", f"v: {text}\n", {}).value["v"]


def test_every_kind_has_a_case_and_every_declared_option_a_row():
    assert set(CASES) | set(Dimension) == set(KINDS)
    assert [(name, o.name) for name, c in CHECKS.items() for o in c.OPTIONS if o.kind not in KINDS] == []


@pytest.mark.parametrize("kind", CASES)
def test_each_kind_parses_what_a_user_writes_and_refuses_a_mistake(kind, tmp_path):
    option, good, parsed, bad, error, _, _ = CASES[kind]
    (tmp_path / "src").mkdir()
    expected = [p.format(base=tmp_path) for p in parsed] if kind == "paths" else parsed
    assert KINDS[kind].parse(option, written(good), "x.p", str(tmp_path)) == expected
    with pytest.raises((UnitError, ConfigError)) as refused:
        KINDS[kind].parse(option, written(bad), "x.p", str(tmp_path))
    assert error in str(refused.value)


@pytest.mark.parametrize("kind", CASES)
def test_each_kinds_schema_fragment_is_draft_07_and_agrees_with_the_parser(kind):
    option, good, _, bad, _, _, _ = CASES[kind]
    fragment = KINDS[kind].schema(option)
    jsonschema.Draft7Validator.check_schema(fragment)
    validator = jsonschema.Draft7Validator(fragment)
    assert validator.is_valid(written(good).plain())
    assert not validator.is_valid(written(bad).plain())


@pytest.mark.parametrize("dimension", list(Dimension))
def test_a_quantity_of_every_dimension_parses_and_validates_its_example(dimension):
    option = Option("p", dimension, example(dimension), "h")
    assert isinstance(KINDS[dimension].parse(option, written(f"'{example(dimension)}'"), "x.p", "."), float)
    assert jsonschema.Draft7Validator(KINDS[dimension].schema(option)).is_valid(example(dimension))


@pytest.mark.parametrize("kind", CASES)
def test_each_kind_is_named_in_list_and_in_the_docs_table(kind):
    option, _, _, _, _, column, markdown = CASES[kind]
    assert (shown(option), shown(option, markdown=True)) == (column, markdown)
    declared = [(name, o) for name, c in CHECKS.items() for o in c.OPTIONS if o.kind == kind]
    for check, option in declared[:1]:  # the first declared option of this kind, as `list` shows it
        head = rf"^ +{re.escape(option.name)} +{re.escape(shown(option))} +default "
        assert re.search(head, list_checks.render(200, [check]), re.MULTILINE), (check, option.name)
        assert f"| `{option.name}` | {shown(option, markdown=True)} |" in list_checks.render_markdown([check])


def test_a_figure_another_check_measures_is_listed_as_such():
    [option] = [o for o in CHECKS["dataloader"].OPTIONS if o.measured_by]
    assert shown(option) == "sample rate or measured"
    assert shown(option, markdown=True) == "sample rate (`1000 samples/s`) or `measured`"
