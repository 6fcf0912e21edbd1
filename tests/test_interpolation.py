"""Docker Compose's interpolation forms, each with its variable set, empty and unset."""

from __future__ import annotations

import pytest

from preflight.interpolation import MAX_NESTING, InterpolationError, Reference, expand, parse

STATES = {"set": {"X": "value"}, "empty": {"X": ""}, "unset": {}}


class Fails:
    """An expected InterpolationError whose message contains ``fragment``."""

    def __init__(self, fragment: str) -> None:
        self.fragment = fragment


# form: what it gives with X set to "value", set to "", and unset (Compose's interpolation page)
FORMS = {
    "${X}": ("value", "", Fails("environment variable X is not set: export it or write ${X:-default}")),
    "$X": ("value", "", Fails("environment variable X is not set")),
    "${X:-d}": ("value", "d", "d"),
    "${X-d}": ("value", "", "d"),
    "${X:?say why}": ("value", Fails("environment variable X is empty: say why"),
                      Fails("environment variable X is not set: say why")),
    "${X?say why}": ("value", "", Fails("environment variable X is not set: say why")),
    "${X:+r}": ("r", "", ""),
    "${X+r}": ("r", "r", ""),
}


@pytest.mark.parametrize("form, state, expected", [
    (form, state, outcome) for form, outcomes in FORMS.items() for state, outcome in zip(STATES, outcomes)
])
def test_each_form_with_the_variable_set_empty_and_unset(form, state, expected):
    environ = STATES[state]
    if isinstance(expected, Fails):
        with pytest.raises(InterpolationError) as error:
            expand(f"a/{form}/b", environ)
        assert expected.fragment in error.value.message
        assert error.value.position == 2  # the reference's "$"
    else:
        assert expand(f"a/{form}/b", environ) == f"a/{expected}/b"


@pytest.mark.parametrize("text, expected", [
    ("${A:-${C:-x}}", "x"),
    ("${A:-${B:-x}}", "b"),
    ("${A:-${B}}", "b"),
    ("${A:-$B/data}", "b/data"),
    ("${A-${EMPTY:-x}}", "x"),
    ("${A-${EMPTY-x}}", ""),
    ("${B:+${A:-y}z}", "yz"),
    ("${B:-${A}}", "b"),  # a default is only read when used: A's being unset does not matter here
    ("${B?${A}}", "b"),
    ("${A:-{x}}", "{x}"),  # a default ends at the first "}" that closes no "${"
    ("${A:-a}b}", "ab}"),
    ("${A:-$}", "$"),
    ("${A:-$$B}", "$B"),
])
def test_nested_defaults(text, expected):
    assert expand(text, {"B": "b", "EMPTY": ""}) == expected


def test_a_nested_message_says_why():
    with pytest.raises(InterpolationError, match="environment variable A is not set: mount the data at /data"):
        expand("${A:?mount the data at ${WHERE:-/data}}", {})


@pytest.mark.parametrize("text, expected", [
    ("$$", "$"),
    ("$${B}", "${B}"),
    ("$$B", "$B"),
    ("$$$B", "$b"),
    ("$$$$", "$$"),
    ("cost $$5", "cost $5"),
    # A "$" that starts no reference stays, as in Compose: regular expressions keep their anchors.
    ("^on$", "^on$"),
    ("^(H100|H200)$|^A100$", "^(H100|H200)$|^A100$"),
    ("$5 and $-x and $ and $.", "$5 and $-x and $ and $."),
    ("$B_1/x", "b1/x"),  # a bare name is as long as it can be
    ("$B.txt", "b.txt"),
    ("no reference", "no reference"),
    ("", ""),
])
def test_dollars(text, expected):
    assert expand(text, {"B": "b", "B_1": "b1"}) == expected


@pytest.mark.parametrize("text, position, fragment", [
    ("${", 0, "`${` is not closed: add `}`, or write $$ for a literal $"),
    ("path/${DATA_DIR-./data", 5, "`${DATA_DIR-./data` is not closed: add `}`"),
    ("${A:-${B:-x}", 0, "`${A:-${B:-x}` is not closed"),
    ("${A:-${B:-x", 5, "`${B:-x` is not closed"),
    ("${}", 0, "`${}` names no variable: write ${NAME}, or $$ for a literal $"),
    ("x${:-d}", 1, "`${:-d}` names no variable"),
    ("${1X}", 0, "`${1X}`: a variable name is letters, digits and _, not starting with a digit"),
    ("${ X}", 0, "a variable name is letters, digits and _"),
    ("${X/a/b}", 0, "`${X/a/b}`: `/` is not an interpolation operator: use one of ${VAR}, ${VAR:-default}"),
    ("${X:=d}", 0, "`:=` is not an interpolation operator"),
    ("${X%.*}", 0, "`%` is not an interpolation operator"),
    ("${X }", 0, "` ` is not an interpolation operator"),
    ("${A:-${X/a}}", 5, "`/` is not an interpolation operator"),
])
def test_malformed_references_are_refused_whatever_the_environment(text, position, fragment):
    for environ in ({}, {"A": "a", "B": "b", "X": "x", "DATA_DIR": "/d"}):
        with pytest.raises(InterpolationError) as error:
            expand(text, environ)
        assert (error.value.position, fragment in error.value.message) == (position, True), error.value.message
        assert "\n" not in error.value.message
    with pytest.raises(InterpolationError):
        parse(text)  # found before anything is looked up


def test_deep_nesting_is_refused_without_recursing_far():
    deep = "${A:-" * (MAX_NESTING + 1) + "x" + "}" * (MAX_NESTING + 1)
    with pytest.raises(InterpolationError, match=f"nested more than {MAX_NESTING} deep"):
        expand(deep, {})
    fine = "${A:-" * MAX_NESTING + "x" + "}" * MAX_NESTING
    assert expand(fine, {}) == "x"


def test_a_long_string_is_read_in_linear_time():
    text = "$$x ${A:-y} " * 20_000
    assert expand(text, {}) == "$x y " * 20_000


def test_parse_gives_literals_and_references_and_no_empty_literal():
    assert parse("a$X${Y}") == ("a", Reference(1, "X", None, ()), Reference(3, "Y", None, ()))
    assert parse("${A:-d}") == (Reference(0, "A", ":-", ("d",)),)


@pytest.mark.parametrize("text, message", [
    # the excerpt runs from the reference's "$" to its first "}", not from the text's start or to a later "}"
    ("a ${X/b}c}", "`${X/b}`: `/` is not an interpolation operator: use one of ${VAR}, ${VAR:-default}, "
                   "${VAR-default}, ${VAR:?error}, ${VAR?error}, ${VAR:+replacement}, ${VAR+replacement}, or $$ "
                   "for a literal $"),
    # 40 characters are shown whole; 41 become the first 37 and "..."
    ("${" + "A" * 36 + "/}", "`${" + "A" * 36 + "/}`: `/` is not an interpolation operator"),
    ("${" + "A" * 37 + "/}", "`${" + "A" * 35 + "...`: `/` is not an interpolation operator"),
])
def test_a_message_quotes_the_reference_up_to_forty_characters(text, message):
    with pytest.raises(InterpolationError) as error:
        expand(text, {})
    assert error.value.message.startswith(message)


@pytest.mark.parametrize("text", ["${X:?}", "${X?  }"])
def test_a_required_variable_without_a_message_says_to_export_it(text):
    with pytest.raises(InterpolationError) as error:
        expand(text, {})
    assert error.value.message == "environment variable X is not set: export it with a value"


def test_too_deep_nesting_is_located_at_the_reference_that_crosses_the_bound():
    deep = "${A:-" * (MAX_NESTING + 1) + "x" + "}" * (MAX_NESTING + 1)
    with pytest.raises(InterpolationError) as error:
        expand(deep, {})
    assert error.value.position == 5 * MAX_NESTING  # the 17th "${A:-" starts after 16 of 5 characters
    assert error.value.message == "references nested more than 16 deep: a default needs one or two"
