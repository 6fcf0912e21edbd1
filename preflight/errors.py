"""The small exception hierarchy, and ``Found``, which gathers a config's mistakes; the CLI catches ``UsageError``
and exits 2 with its message."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the CLI imports this module to start
if TYPE_CHECKING:
    from typing import Callable, Iterable, TypeVar

    T = TypeVar("T")

EXIT_USAGE = 2  # a usage or configuration error, with nothing measured (here, not in verdict: `--help` stays light)
# Where ``preflight fleet`` asks local rank 0 of its node to leave the exit code (an environment variable naming a
# file): torchrun exits 1 for any failing worker, so a configuration error's 2 would read as the node's failure.
FLEET_STATUS_FILE = "PREFLIGHT_FLEET_STATUS_FILE"


class UsageError(Exception):
    """A user mistake (config, flag, path, environment): one line that names the place and the fix."""


class ConfigMistake(Exception):
    """A mistake of the config's or of the job's own code that a check meets while it runs, in the worker: a
    dataset directory that does not exist, a factory that cannot be imported or raises. ``str()`` is one line,
    the fix included; ``option`` names the option the config wrote it at, so the runner can put its
    ``FILE:LINE:COL`` first. Its instance is reported as an error and the run exits ``EXIT_USAGE``, not 1,
    unless a node fault failed the gate too (``verdict.exit_code``): no fault of the node's takes it out of
    rotation (issue 35)."""

    def __init__(self, message: str, option: str = "") -> None:
        super().__init__(message)
        self.option = option


class ConfigError(UsageError):
    """A mistake in a config file or an override, located as ``FILE:LINE:COL``."""

    def __init__(self, where: str, message: str) -> None:
        message = " ".join(message.split())  # one line, whatever a YAML library's message held
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


class ConfigErrors(ConfigError):
    """Every mistake found in one config file: ``validate`` and ``run`` report them all in one run.

    Its text is one line per mistake (``FILE:LINE:COL: what, and the fix``) in the file's order;
    ``where`` and ``message`` are the first one's, so a caller that expects one ``ConfigError`` still
    reads a located line.
    """

    def __init__(self, errors: list[ConfigError]) -> None:
        UsageError.__init__(self, "\n".join(str(error) for error in errors))
        self.errors = tuple(errors)
        self.where, self.message = errors[0].where, errors[0].message


class _Invalid:
    def __repr__(self) -> str:
        return "INVALID"


INVALID = _Invalid()  # what ``Found.attempt`` returns for a value whose error it recorded


class Found:
    """The ``ConfigError``s met while reading one file, gathered so that a run reports every mistake, not the first.

    A value that failed is ``spoil``ed: a later error at the same place is its echo (an unset
    ``${VAR}`` is then "not a size" too) and is dropped.
    """

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []
        self._spoiled: set[str] = set()

    def add(self, error: ConfigError) -> None:
        """Record ``error`` (each of a ``ConfigErrors``'), unless it repeats one or lies where a value already failed."""
        for each in error.errors if isinstance(error, ConfigErrors) else (error,):
            if each.where not in self._spoiled and str(each) not in map(str, self.errors):
                self.errors.append(each)

    def spoil(self, where: str) -> None:
        """The value at ``where`` failed and was reported: errors there from now on are echoes."""
        self._spoiled.add(where)

    def attempt(self, function: Callable[..., T], *args: object, **kwargs: object) -> T | _Invalid:
        """``function(*args, **kwargs)``, or ``INVALID`` when it raised a ``ConfigError`` (recorded here)."""
        try:
            return function(*args, **kwargs)
        except ConfigError as error:
            self.add(error)
            return INVALID

    def raise_any(self) -> None:
        """Raise what was found, in the file's order: one ``ConfigError`` as it was, several as ``ConfigErrors``."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            order = {id(error): index for index, error in enumerate(self.errors)}
            raise ConfigErrors(sorted(self.errors, key=lambda error: _position(error.where, order[id(error)])))


def _position(where: str, found: int) -> tuple[int, int, int, int]:
    """Sort key of ``FILE:LINE:COL``: by line and column; other places (``--set ...``) after, as found."""
    _, _, tail = where.rpartition(":")
    head, _, line = where[:len(where) - len(tail) - 1].rpartition(":")
    if head and line.isdigit() and tail.isdigit():
        return (0, int(line), int(tail), found)
    return (1, 0, 0, found)


def suggest(word: str, candidates: Iterable[str]) -> str:
    """``: did you mean `seq_read`?`` for the candidate closest to a mistyped ``word``; "" when none is close."""
    import difflib  # only for a mistake: `validate` of a good file never pays for it

    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f": did you mean `{close[0]}`?" if close else ""
