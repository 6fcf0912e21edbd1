"""``preflight run``: load the config, run the checks, and deliver every report the flags ask for.

stdout carries only the chosen format (``--format text`` table or ``--format json``);
progress, CI annotations and the compact verdict go to stderr, whose last line is always
the verdict (or the one-line error). A config that cannot be loaded still produces every
requested report (JSON, JUnit, Prometheus), the GitHub summary and the termination message,
each saying why, before exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from preflight import __version__
from preflight.errors import UsageError

TYPE_CHECKING = False  # as in cli: typing is not imported for `--help`
if TYPE_CHECKING:
    from typing import Mapping, TextIO

# Only what the parser needs is imported here: `preflight --help` builds this command's arguments and
# must stay as fast as a bare interpreter (bench/cli_startup.py); main() imports the run's machinery.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", metavar="FILE",
                        help="thresholds file (default: ./thresholds.yaml, else the bundled default)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="what stdout carries: the text table or the JSON report (progress goes to stderr)")
    parser.add_argument("--junit-xml", metavar="PATH", help="write a JUnit XML report to PATH")
    parser.add_argument("--json", metavar="PATH", help="write the JSON report to PATH (- for stdout)")
    parser.add_argument("--html", metavar="PATH",
                        help="write a self-contained HTML page (verdict, each metric against its threshold, "
                             "samples; a fleet's grid of nodes x metrics) to PATH")
    parser.add_argument("--prometheus", metavar="PATH",
                        help="write node_exporter textfile metrics to PATH (e.g. .../textfile/preflight.prom)")
    parser.add_argument("--termination-log", metavar="PATH",
                        help="Kubernetes termination message file (default: $PREFLIGHT_TERMINATION_LOG, else "
                             "/dev/termination-log; written only when it exists and is writable)")
    parser.add_argument("--only", metavar="ID,...", help="run only these check instances (comma-separated)")
    parser.add_argument("--skip", metavar="ID,...", help="run every check instance but these (comma-separated)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                        help="override a config value, e.g. --set storage.path=/mnt/data (repeatable)")
    parser.add_argument("--distributed", action="store_true",
                        help="run as one rank of a torchrun fleet: each node measures once, rank 0 writes one "
                             "merged report (automatic under torchrun)")
    parser.add_argument("--baseline", metavar="FILE",
                        help="baseline that `min: 90%% of baseline` thresholds refer to (default: the config's "
                             "`baseline:` key)")
    parser.add_argument("--save-baseline", metavar="FILE",
                        help="save every measured value to FILE, for later runs' `N%% of baseline` thresholds")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the table: auto = only on a terminal without NO_COLOR")


def main(args: argparse.Namespace, environ: Mapping[str, str] = os.environ, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Parse, load, run, and hand the run over to ``report.deliver``; returns the exit code."""
    from preflight import config, report, runner
    from preflight.host import node_lock
    from preflight.io import tempdir
    from preflight.report import deliver
    from preflight.report.progress import Progress

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    path = config.resolve_path(args.config)
    to = destinations(args)
    launch = _launch(args.distributed, environ)
    writes_reports = launch is None or launch.rank == 0  # in a fleet, only rank 0 writes reports
    if writes_reports:
        for destination in to.files():
            deliver.check_writable(destination)
    try:
        loaded = config.load(path, args.overrides, environ, baseline=args.baseline)
        if args.only:
            loaded = loaded.select(args.only.split(","))
        if args.skip:
            loaded = loaded.skip(args.skip.split(","))
        lock = node_lock.settings(environ)
        node_lock.NodeLock.open(lock).close()  # a bad PREFLIGHT_LOCK is exit 2 before any rank measures
    except UsageError as error:
        deliver.deliver_config_error(path, error, to, environ, stdout, stderr,
                                     launch.world_size if launch is not None else None)
        raise
    temporary = tempdir.choose(to.files() if writes_reports else ())  # before measuring, not after
    count = len(loaded.instances)
    print(f"preflight {__version__}: {count} check{'s' if count != 1 else ''} from {path}", file=stderr)
    if launch is not None:
        from preflight.fleet import orchestrate

        def write(reports):  # type: ignore[no-untyped-def]
            deliver.deliver(reports, to, environ, stdout, stderr, world_size=launch.world_size)

        return orchestrate.run(loaded, launch, write, temporary)
    started, clock = report.now(), time.monotonic()
    progress = Progress(stderr)
    try:
        results = runner.run(loaded, progress=progress, temp_dir=temporary, lock=lock)
    finally:
        progress.close()
    run_report = report.build(path, loaded.digest, results, started, time.monotonic() - clock)
    deliver.deliver([run_report], to, environ, stdout, stderr)
    return run_report.exit_code


def destinations(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """Where ``args`` (of ``run``, or of a command without report flags) asks the run to go."""
    from preflight.report.deliver import Destinations

    return Destinations(**{field: getattr(args, field, None) or default
                           for field, default in Destinations._field_defaults.items()})


def _launch(requested: bool, environ: Mapping[str, str]):  # type: ignore[no-untyped-def]
    """torchrun's place for this process with ``--distributed`` or under torchrun, else None."""
    from preflight.fleet import distributed

    if requested or distributed.launched_by_torchrun(environ):
        return distributed.launch_from(environ)
    return None
