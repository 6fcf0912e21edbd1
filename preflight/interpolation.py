"""Config layer: expand the environment references in a string, as Docker Compose does.

Compose's forms (https://docs.docker.com/reference/compose-file/interpolation/)::

    $VAR, ${VAR}          VAR's value ("" when VAR is set but empty)
    ${VAR:-default}       VAR if set and non-empty, else default
    ${VAR-default}        VAR if set, else default
    ${VAR:?message}       VAR if set and non-empty, else an error saying message
    ${VAR?message}        VAR if set, else an error saying message
    ${VAR:+replacement}   replacement if VAR is set and non-empty, else ""
    ${VAR+replacement}    replacement if VAR is set, else ""
    $$                    a literal $

VAR is ``[A-Za-z_][A-Za-z0-9_]*``; nested references expand when used; any other ``$`` is kept (``"^on$"``). The whole
string is parsed first, so a malformed ``${`` fails whatever the environment. Unlike Compose, an unset ``$VAR`` is an
error, not "": an empty path or bound would quietly gate the wrong thing.
"""

from __future__ import annotations

import re
from typing import Mapping, NamedTuple, Union

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OPERATORS = (":-", ":?", ":+", "-", "?", "+")  # the two-character forms are tried first
MAX_NESTING = 16  # ${A:-${B:-x}} is 2; the bound only keeps a hostile string from recursing deep
FORMS = "${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}, ${VAR:+replacement}, ${VAR+replacement}"
_STOP = re.compile(r"\$")
_STOP_IN_WORD = re.compile(r"[$}]")  # a default, message or replacement also ends at "}"


class InterpolationError(ValueError):
    """A malformed or unsatisfied reference; ``position`` indexes its ``$`` in the string."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__(message)
        self.position = position
        self.message = message


class Reference(NamedTuple):
    """One ``$VAR`` or ``${VAR...}`` of a parsed string."""

    position: int  # index of its "$" in the string
    name: str
    operator: str | None  # one of OPERATORS; None for $VAR and ${VAR}
    word: tuple[Part, ...]  # the default, message or replacement after the operator


Part = Union[str, Reference]


def expand(text: str, environ: Mapping[str, str]) -> str:
    """``text`` with every reference replaced from ``environ``.

    Raises:
        InterpolationError: a malformed reference (whatever ``environ`` holds), an unset
            variable without a default, or a ``?``/``:?`` reference whose variable is missing.
    """
    if "$" not in text:
        return text
    return _evaluate(parse(text), environ)


def parse(text: str) -> tuple[Part, ...]:
    """``text`` as literal strings and references, in order.

    Raises:
        InterpolationError: an unclosed ``${``, a missing or invalid name, or an unknown operator.
    """
    return _Parser(text).parts(0, depth=0, in_word=False)[0]


class _Parser:
    """Recursive descent over one string: ``parts`` reads text and references, ``braced`` one ``${...}``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def parts(self, start: int, depth: int, in_word: bool) -> tuple[tuple[Part, ...], int]:
        """Parts from ``start`` to the end of the text, or (``in_word``) to the ``}`` that ends a word; returns them
        and the index where they stopped."""
        text, at = self.text, start
        parts: list[Part] = []
        literal: list[str] = []  # text since the last reference, joined into one part
        while at < len(text):
            found = (_STOP_IN_WORD if in_word else _STOP).search(text, at)
            stop = found.start() if found else len(text)
            literal.append(text[at:stop])
            at = stop
            if at == len(text) or text[at] == "}":
                break
            following = text[at + 1:at + 2]
            if following == "$":
                literal.append("$")
                at += 2
            elif following == "{":
                reference, at = self.braced(at, depth)
                parts.extend([*_joined(literal), reference])
                literal = []
            elif (name := NAME.match(text, at + 1)) is not None:
                parts.extend([*_joined(literal), Reference(at, name.group(), None, ())])
                literal, at = [], name.end()
            else:  # Compose keeps a "$" that starts no reference
                literal.append("$")
                at += 1
        return (*parts, *_joined(literal)), at

    def braced(self, dollar: int, depth: int) -> tuple[Reference, int]:
        """The reference whose ``${`` is at ``dollar``, and the index after its ``}``."""
        text = self.text
        if depth >= MAX_NESTING:
            raise InterpolationError(dollar, f"references nested more than {MAX_NESTING} deep: "
                                             f"a default needs one or two")
        name = NAME.match(text, dollar + 2)
        after = name.end() if name else dollar + 2
        if after == len(text):
            raise self._unclosed(dollar)
        if name is None:
            if text[after] in "}:-?+":
                raise InterpolationError(dollar, f"`{self._excerpt(dollar)}` names no variable: "
                                                 f"write ${{NAME}}, or $$ for a literal $")
            raise InterpolationError(dollar, f"`{self._excerpt(dollar)}`: a variable name is letters, digits "
                                             f"and _, not starting with a digit; write $$ for a literal $")
        if text[after] == "}":
            return Reference(dollar, name.group(), None, ()), after + 1
        operator = next((o for o in OPERATORS if text.startswith(o, after)), None)
        if operator is None:
            found = text[after:after + 2] if text[after] == ":" else text[after]
            raise InterpolationError(dollar, f"`{self._excerpt(dollar)}`: `{found}` is not an interpolation operator: "
                                             f"use one of {FORMS}, or $$ for a literal $")
        word, end = self.parts(after + len(operator), depth + 1, in_word=True)
        if end == len(text):
            raise self._unclosed(dollar)
        return Reference(dollar, name.group(), operator, word), end + 1

    def _unclosed(self, dollar: int) -> InterpolationError:
        return InterpolationError(dollar, f"`{self._excerpt(dollar)}` is not closed: add `}}`, "
                                          f"or write $$ for a literal $")

    def _excerpt(self, dollar: int, limit: int = 40) -> str:
        """The reference starting at ``dollar``, up to its first ``}``, shortened for a message."""
        close = self.text.find("}", dollar)
        shown = self.text[dollar:close + 1] if close >= 0 else self.text[dollar:]
        return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def _evaluate(parts: tuple[Part, ...], environ: Mapping[str, str]) -> str:
    return "".join(part if isinstance(part, str) else _resolve(part, environ) for part in parts)


def _resolve(reference: Reference, environ: Mapping[str, str]) -> str:
    name, operator = reference.name, reference.operator
    value = environ.get(name)
    if operator is None:
        if value is None:
            raise InterpolationError(reference.position, f"environment variable {name} is not set: "
                                                         f"export it or write ${{{name}:-default}}")
        return value
    # ":-", ":?", ":+" treat an empty value as missing; "-", "?", "+" only an unset one
    missing = value is None or (value == "" and operator.startswith(":"))
    if operator.endswith("-"):
        return _evaluate(reference.word, environ) if missing else value  # type: ignore[return-value]
    if operator.endswith("+"):
        return "" if missing else _evaluate(reference.word, environ)
    if not missing:
        return value  # type: ignore[return-value]
    said = _evaluate(reference.word, environ).strip() or "export it with a value"
    raise InterpolationError(reference.position, f"environment variable {name} is "
                                                 f"{'not set' if value is None else 'empty'}: {said}")


def _joined(literal: list[str]) -> tuple[str, ...]:
    joined = "".join(literal)
    return (joined,) if joined else ()
