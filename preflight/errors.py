"""The small exception hierarchy. The CLI catches ``UsageError`` and exits 2 with its message."""

from __future__ import annotations

EXIT_USAGE = 2  # a usage or configuration error, with nothing measured (here, not in verdict: `--help` stays light)


class UsageError(Exception):
    """A user mistake (config, flag, path, environment): one line that names the place and the fix."""


class ConfigError(UsageError):
    """A mistake in a config file or an override, located as ``FILE:LINE:COL``."""

    def __init__(self, where: str, message: str) -> None:
        message = " ".join(message.split())  # one line, whatever a YAML library's message held
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message
