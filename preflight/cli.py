"""Command line: parses ``preflight run|fleet|list|validate|schema|explain|diff|make-dataset`` and holds
the one error boundary.

Exit codes: 0 nothing failed or errored (warnings allowed); 1 the gate failed; 2 a usage
or configuration error, with nothing measured; 3 an internal error (a bug: the message
names the crash log, or where it happened when no log could be written). Importing this
module must not import torch, nor anything a subcommand needs: ``--help`` and ``--version``
import argparse and nothing of preflight but this, ``errors`` and ``commands.run``'s argument
table, so they cost about what a bare interpreter does (bench/cli_startup.py).
"""

from __future__ import annotations

import os
import sys

from preflight import __version__
from preflight.errors import EXIT_USAGE, FLEET_STATUS_FILE, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (1.5 ms of a 20 ms start)
if TYPE_CHECKING:
    import argparse
    from typing import Sequence

EXIT_INTERNAL = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names and return its exit code; under ``preflight fleet``, local rank 0 also
    leaves the code where the launcher reads it (torchrun itself exits 1 for any code but 0)."""
    code = _main(argv)
    status = os.environ.get(FLEET_STATUS_FILE)
    if status and os.environ.get("LOCAL_RANK", "0") == "0":
        try:
            with open(status, "w") as handle:
                handle.write(f"{code}\n")
        except OSError as error:
            print(f"preflight: could not leave the exit code for `preflight fleet` in {status}: {error}",
                  file=sys.stderr)
    return code


def _main(argv: Sequence[str] | None) -> int:
    if list(sys.argv[1:] if argv is None else argv) in (["--version"], ["-V"]):  # answered before argparse is imported
        print(f"preflight {__version__}")
        return 0
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            from preflight.commands import run

            return run.main(args)
        if args.command == "fleet":
            from preflight.commands import fleet

            return fleet.main(args, list(sys.argv[1:] if argv is None else argv))
        if args.command == "list":
            from preflight.commands import list_checks

            sys.stdout.write(list_checks.render_markdown(args.checks) if args.markdown else
                             list_checks.render(checks=args.checks))
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

            sys.stdout.write(explain.render(args.name, loaded=explain.read_config(args.config, args.overrides)))
            return 0
        if args.command == "diff":
            from preflight.commands import diff

            return diff.main(args)
        if args.command == "make-dataset":
            from preflight.commands import make_dataset

            return make_dataset.main(args)
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    except UsageError as error:
        print(_usage_message(error), file=sys.stderr)
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


def _usage_message(error: UsageError) -> str:
    """``preflight: error: FILE:LINE:COL: ...`` for one mistake; for several (``ConfigErrors``), one
    ``FILE:LINE:COL: ...`` line each, as compilers write them, then a line that counts them."""
    errors = getattr(error, "errors", ())
    if len(errors) < 2:
        return f"preflight: error: {error}"
    files = {head for head, line, column in (each.where.rsplit(":", 2) for each in errors if each.where.count(":") > 1)
             if line.isdigit() and column.isdigit()}
    return "\n".join([*map(str, errors), f"preflight: error: {len(errors)} errors in "
                      f"{', '.join(sorted(files)) or 'the config'}: fix each line above (nothing was measured)"])


def _internal_error(error: Exception, args: argparse.Namespace) -> int:
    """Say in one line that preflight has a bug and where its crash log is; returns 3 and never raises.

    The log goes where ``tempdir.choose`` finds room (TMPDIR, /dev/shm, the reports'
    directory). Where there is none, the line names the innermost frame instead.
    """
    import traceback

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
    import tempfile

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
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "an unknown place"


def _parser() -> argparse.ArgumentParser:
    import argparse

    from preflight.commands import run

    parser = argparse.ArgumentParser(
        prog="preflight", formatter_class=_formatter,
        description="Measure whether this node can feed and run a training job, and gate on thresholds.yaml.",
        epilog="exit codes: 0 passed (warnings allowed), 1 a check failed or errored, 2 usage or config error, "
               "3 internal error (a bug in preflight: stderr names the crash log)",
    )
    parser.add_argument("-V", "--version", action="version", version=f"preflight {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, formatter_class=_formatter)

    run.add_arguments(add("run", "run the checks and gate on their thresholds"))
    from preflight.commands import fleet

    fleet.add_arguments(add("fleet", "run the checks on every node of a fleet: torchrun on this node, its "
                                     "rendezvous bounded by fleet.timeout (then `run`'s options)"))
    listing = add("list", "list every check with its parameters and metrics")
    listing.add_argument("checks", metavar="CHECK", nargs="*",
                         help="only these checks (`preflight list dataloader`); by default every one")
    listing.add_argument("--markdown", action="store_true",
                         help="as Markdown tables (the reference in docs/configuration.md)")
    validate = add("validate", "check a thresholds file without measuring anything")
    validate.add_argument("file", metavar="FILE", nargs="?",
                          help="thresholds file (default: ./thresholds.yaml, else the bundled default)")
    validate.add_argument("-c", "--config", metavar="FILE", help="the same, as `run` takes it")
    validate.add_argument("--baseline", metavar="FILE", help="baseline for `N%% of baseline` thresholds")
    validate.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                          help="apply an override as `run --set` would (repeatable)")
    add("schema", "print the JSON Schema (draft-07) of thresholds.yaml")
    explain = add("explain", "what a check or one of its metrics measures, and how")
    explain.add_argument("name", metavar="CHECK[.METRIC]",
                         help="a check (`storage`) or a metric (`storage.seq_read`), as `preflight list` and the "
                              "report name them; an instance of the thresholds file (`wds.throughput`) too")
    explain.add_argument("-c", "--config", metavar="FILE",
                         help="the thresholds file the run read, whose instances and thresholds are shown "
                              "(default: ./thresholds.yaml, else the bundled default, as `run`)")
    explain.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                         help="an override the run was given (repeatable)")
    diff = add("diff", "compare two runs' JSON reports metric by metric, each change against its noise")
    diff.add_argument("old", metavar="OLD.json", help="the earlier run's (or one node's) JSON report")
    diff.add_argument("new", metavar="NEW.json", help="the later run's (or another node's) JSON report")
    diff.add_argument("--fail-on", metavar="N%",
                      help="exit 1 when a rate or latency got worse beyond its noise by more than N%% (e.g. 10%%); "
                           "without it, diff only reports")
    diff.add_argument("--inconclusive", choices=("pass", "fail"), default="pass",
                      help="with --fail-on, what a change whose noise is wider than N%% counts as: pass (the "
                           "default) or fail, to fail closed")
    make_dataset = add("make-dataset", "write an ImageNet-shaped sample dataset to rehearse the gate on")
    make_dataset.add_argument("directory", metavar="DIR", help="where to write it: a new or empty directory")
    for flag, default, help in (("--classes", 10, "class folders"), ("--per-class", 100, "files per class folder"),
                                ("--sample-bytes", 110_000, "bytes per file (ImageNet's median JPEG: 110000)")):
        make_dataset.add_argument(flag, type=int, default=default, help=f"{help} (default: {default})")
    return parser


def _formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's help formatter at the width ``shutil.get_terminal_size`` would give it ($COLUMNS, else the
    terminal's, else 80), found without importing shutil, which pulls in bz2, lzma and zlib: 1.3 ms of ``--help``."""
    import argparse

    columns = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return argparse.HelpFormatter(prog, width=(columns or 80) - 2)
