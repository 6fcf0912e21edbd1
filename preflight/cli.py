"""Command line: parses ``preflight run|list|validate|schema|explain`` and holds the one error boundary.

Exit codes: 0 nothing failed or errored (warnings allowed); 1 the gate failed; 2 a usage
or configuration error, with nothing measured; 3 an internal error (a bug: the message
names the crash log). Importing this module must not import torch.
"""

from __future__ import annotations

import argparse
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

            sys.stdout.write(explain.render(args.check))
            return 0
        parser.print_help(sys.stderr)
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
    from preflight.commands import run

    parser = argparse.ArgumentParser(
        prog="preflight",
        description="Measure whether this node can feed and run a training job, and gate on thresholds.yaml.",
        epilog="exit codes: 0 passed (warnings allowed), 1 a check failed or errored, 2 usage or config error",
    )
    parser.add_argument("--version", action="version", version=f"preflight {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run.add_arguments(commands.add_parser("run", help="run the checks and gate on their thresholds"))
    listing = commands.add_parser("list", help="list every check with its parameters and metrics")
    listing.add_argument("--markdown", action="store_true", help="as Markdown tables (the README's reference)")
    validate = commands.add_parser("validate", help="check a thresholds file without measuring anything")
    validate.add_argument("-c", "--config", metavar="FILE",
                          help="thresholds file (default: ./thresholds.yaml, else the bundled default)")
    validate.add_argument("--baseline", metavar="FILE", help="baseline for `N%% of baseline` thresholds")
    validate.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                          help="apply an override as `run --set` would (repeatable)")
    commands.add_parser("schema", help="print the JSON Schema (draft-07) of thresholds.yaml")
    explain = commands.add_parser("explain", help="what a check measures, how, and every option and metric")
    explain.add_argument("check", metavar="CHECK", help="a check name, as `preflight list` shows")
    return parser
