"""Command line: ``preflight run`` and ``preflight list``, and the one error boundary.

Exit codes: 0 nothing failed or errored (warnings allowed); 1 the gate failed; 2 a usage
or configuration error, with nothing measured; 3 an internal error (a bug: the message
names the crash log). Importing this module must not import torch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
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
            return _run(args)
        if args.command == "list":
            from preflight.commands import list_checks

            sys.stdout.write(list_checks.render_markdown() if args.markdown else list_checks.render())
            return 0
        parser.print_help()
        return EXIT_USAGE
    except UsageError as error:
        print(f"preflight: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("preflight: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001  the boundary for bugs: one line, details in a crash log
        with tempfile.NamedTemporaryFile("w", prefix="preflight-crash-", suffix=".log", delete=False) as log:
            log.write(traceback.format_exc())
        print(f"preflight: internal error: {sys.exc_info()[1]!r} (crash log: {log.name})", file=sys.stderr)
        return EXIT_INTERNAL


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="preflight",
        description="Measure whether this node can feed and run a training job, and gate on thresholds.yaml.",
        epilog="exit codes: 0 passed (warnings allowed), 1 a check failed or errored, 2 usage or config error",
    )
    parser.add_argument("--version", action="version", version=f"preflight {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser("run", help="run the checks and gate on their thresholds")
    run.add_argument("-c", "--config", metavar="FILE",
                     help="thresholds file (default: ./thresholds.yaml, else the bundled default)")
    run.add_argument("--junit-xml", metavar="PATH", help="write a JUnit XML report to PATH")
    run.add_argument("--json", metavar="PATH", help="write the JSON report to PATH (- for stdout)")
    run.add_argument("--only", metavar="ID,...", help="run only these check instances (comma-separated)")
    run.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                     help="override a config value, e.g. --set storage.path=/mnt/data (repeatable)")
    run.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                     help="colour the table: auto = only on a terminal without NO_COLOR")
    listing = commands.add_parser("list", help="list every check with its parameters and metrics")
    listing.add_argument("--markdown", action="store_true", help="as Markdown tables (the README's reference)")
    return parser


def _run(args: argparse.Namespace) -> int:
    from preflight import config, report, runner
    from preflight.report import console, json_report, junit

    path = config.resolve_path(args.config)
    loaded = config.load(path, args.overrides)
    if args.only:
        loaded = loaded.select(args.only.split(","))
    for destination in (args.junit_xml, args.json):
        _check_writable(destination)
    print(f"preflight {__version__}: {len(loaded.instances)} checks from {path}", file=sys.stderr)
    started, clock = report.now(), time.monotonic()
    results = runner.run(loaded, progress=_progress)
    run_report = report.build(path, loaded.digest, results, started, time.monotonic() - clock)
    if args.json == "-":
        sys.stdout.write(json_report.render(run_report))
    else:
        sys.stdout.write(console.render(run_report, console.use_colour(sys.stdout, args.color)))
        sys.stdout.flush()
    if args.json and args.json != "-":
        report.write_atomic(args.json, json_report.render(run_report).encode())
    if args.junit_xml:
        junit.write(args.junit_xml, [run_report])
    return run_report.exit_code


def _check_writable(destination: str | None) -> None:
    """Fail before measuring, not after, when a report could not be written."""
    if not destination or destination == "-":
        return
    directory = os.path.dirname(os.path.abspath(destination))
    if not os.path.isdir(directory):
        raise UsageError(f"{destination}: directory {directory} does not exist: create it or choose another path")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"{destination}: directory {directory} is not writable: choose a writable path")


def _progress(instance: object, results: object) -> None:
    name = getattr(instance, "name")
    if results is None:
        print(f"  running {name} ...", file=sys.stderr, flush=True)
