"""Command line: parses ``preflight run|list|validate|schema|explain`` and holds the one error boundary.

Exit codes: 0 nothing failed or errored (warnings allowed); 1 the gate failed; 2 a usage
or configuration error, with nothing measured; 3 an internal error (a bug: the message
names the crash log, or where it happened when no log could be written). Importing this
module must not import torch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from typing import Sequence

from preflight import __version__
from preflight.errors import UsageError
from preflight.verdict import EXIT_USAGE

EXIT_INTERNAL = 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            from preflight.commands import run

            return run.main(args)
        if args.command == "list":
            from preflight.commands import list_checks

            sys.stdout.write(list_checks.render_markdown() if args.markdown else list_checks.render())
            return 0
        if args.command == "validate":
            from preflight.commands import validate

            return validate.main(args)
        if args.command == "schema":
            from preflight.commands import schema

            sys.stdout.write(schema.render())
            return 0
        if args.command == "explain":
            from preflight.commands import explain

            sys.stdout.write(explain.render(args.name))
            return 0
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    except UsageError as error:
        print(f"preflight: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("preflight: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `preflight list | head -1`: the reader has what it wanted; not a bug
        from preflight.report.deliver import silence

        silence(sys.stdout)
        return 0
    except Exception as error:  # noqa: BLE001  the boundary for bugs: one line, details in a crash log
        return _internal_error(error, args)


def _internal_error(error: Exception, args: argparse.Namespace) -> int:
    """Say in one line that preflight has a bug and where its crash log is; returns 3 and never raises.

    The log goes where ``tempdir.choose`` finds room (TMPDIR, /dev/shm, the reports'
    directory). Where there is none, the line names the innermost frame instead.
    """
    try:
        try:
            where = f"crash log: {_write_crash_log(traceback.format_exc(), args)}"
        except Exception as failure:  # noqa: BLE001  no room for a log must not hide the bug
            where = f"at {_innermost_frame(error)}; no crash log: {failure}"
        print(f"preflight: internal error: {error!r} ({where})", file=sys.stderr)
    except Exception:  # noqa: BLE001  even stderr is gone: the exit status still says it
        pass
    return EXIT_INTERNAL


def _write_crash_log(details: str, args: argparse.Namespace) -> str:
    """Write ``details`` to a new crash log and return its path.

    Raises:
        UsageError: no writable temporary directory.
        OSError: the log could not be written whole (it is then removed).
    """
    from preflight.commands.run import destinations
    from preflight.io import tempdir

    handle, path = tempfile.mkstemp(prefix="preflight-crash-", suffix=".log",
                                    dir=tempdir.choose(destinations(args).files()))
    try:
        with os.fdopen(handle, "w", encoding="utf-8", errors="replace") as log:
            log.write(details)
    except BaseException:
        os.unlink(path)
        raise
    return path


def _innermost_frame(error: BaseException) -> str:
    """``FILE:LINE in FUNCTION`` where ``error`` was raised, as a traceback's last frame says."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "an unknown place"


def _parser() -> argparse.ArgumentParser:
    from preflight.commands import run

    parser = argparse.ArgumentParser(
        prog="preflight",
        description="Measure whether this node can feed and run a training job, and gate on thresholds.yaml.",
        epilog="exit codes: 0 passed (warnings allowed), 1 a check failed or errored, 2 usage or config error, "
               "3 internal error (a bug in preflight: stderr names the crash log)",
    )
    parser.add_argument("--version", action="version", version=f"preflight {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run.add_arguments(commands.add_parser("run", help="run the checks and gate on their thresholds"))
    listing = commands.add_parser("list", help="list every check with its parameters and metrics")
    listing.add_argument("--markdown", action="store_true", help="as Markdown tables (the README's reference)")
    validate = commands.add_parser("validate", help="check a thresholds file without measuring anything")
    validate.add_argument("file", metavar="FILE", nargs="?",
                          help="thresholds file (default: ./thresholds.yaml, else the bundled default)")
    validate.add_argument("-c", "--config", metavar="FILE", help="the same, as `run` takes it")
    validate.add_argument("--baseline", metavar="FILE", help="baseline for `N%% of baseline` thresholds")
    validate.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                          help="apply an override as `run --set` would (repeatable)")
    commands.add_parser("schema", help="print the JSON Schema (draft-07) of thresholds.yaml")
    explain = commands.add_parser("explain", help="what a check or one of its metrics measures, and how")
    explain.add_argument("name", metavar="CHECK[.METRIC]",
                         help="a check (`storage`) or a metric (`storage.seq_read`), as `preflight list` and the "
                              "report name them")
    return parser
