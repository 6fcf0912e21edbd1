"""``preflight run``: load the config, run the checks, and deliver every report the flags ask for.

stdout carries only the chosen format (``--format text`` table or ``--format json``);
progress, CI annotations and the compact verdict go to stderr, whose last line is always
the verdict (or the one-line error). A config that cannot be loaded still produces the
JUnit file, GitHub summary and termination message, each saying why, before exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Mapping, TextIO

from preflight import __version__, tempdir
from preflight.errors import ConfigError, UsageError
from preflight.progress import Progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", metavar="FILE",
                        help="thresholds file (default: ./thresholds.yaml, else the bundled default)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="what stdout carries: the text table or the JSON report (progress goes to stderr)")
    parser.add_argument("--junit-xml", metavar="PATH", help="write a JUnit XML report to PATH")
    parser.add_argument("--json", metavar="PATH", help="write the JSON report to PATH (- for stdout)")
    parser.add_argument("--prometheus", metavar="PATH",
                        help="write node_exporter textfile metrics to PATH (e.g. .../textfile/preflight.prom)")
    parser.add_argument("--termination-log", metavar="PATH",
                        help="Kubernetes termination message file (default: $PREFLIGHT_TERMINATION_LOG, else "
                             "/dev/termination-log; written only when it exists and is writable)")
    parser.add_argument("--only", metavar="ID,...", help="run only these check instances (comma-separated)")
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
    from preflight import config, report, runner
    from preflight.report import console, json_report, junit

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    path = config.resolve_path(args.config)
    launch = _launch(args.distributed, environ)
    writes_reports = launch is None or launch.rank == 0  # in a fleet, only rank 0 writes reports
    if writes_reports:
        for destination in report_paths(args):
            _check_writable(destination)
    try:
        loaded = config.load(path, args.overrides, environ, baseline=args.baseline)
        if args.only:
            loaded = loaded.select(args.only.split(","))
    except UsageError as error:
        _config_error(path, error, args, environ, stderr)
        raise
    temporary = tempdir.choose(report_paths(args) if writes_reports else ())  # before measuring, not after
    count = len(loaded.instances)
    print(f"preflight {__version__}: {count} check{'s' if count != 1 else ''} from {path}", file=stderr)
    if launch is not None:
        from preflight import fleet

        write = lambda reports: _write_fleet(reports, args, launch.world_size, environ, stdout, stderr)  # noqa: E731
        return fleet.run(loaded, launch, write, temporary)
    started, clock = report.now(), time.monotonic()
    progress = Progress(stderr)
    try:
        results = runner.run(loaded, progress=progress, temp_dir=temporary)
    finally:
        progress.close()
    run_report = report.build(path, loaded.digest, results, started, time.monotonic() - clock)
    if args.format == "json" or args.json == "-":
        stdout.write(json_report.render(run_report))
    else:
        stdout.write(console.render(run_report, console.use_colour(stdout, args.color)))
    stdout.flush()
    writes: list[tuple[str | None, Callable[[str], None]]] = [
        (args.json if args.json != "-" else None,
         lambda to: report.write_atomic(to, json_report.render(run_report).encode())),
        (args.junit_xml, lambda to: junit.write(to, [run_report])),
        (args.save_baseline, lambda to: _save_baseline(to, run_report)),
    ]
    failed = []
    for destination, deliver in writes:
        if destination:
            try:  # each report on its own: a full disk under one must not cost the others
                deliver(destination)
            except UsageError as error:
                failed.append(str(error))
    _integrations(run_report, args, environ, stderr)
    if failed:
        raise UsageError("; ".join(failed))
    return run_report.exit_code


def report_paths(args: argparse.Namespace) -> list[str | None]:
    """The report files ``args`` asks for (None where a flag is absent or the command has none)."""
    return [getattr(args, name, None) for name in ("junit_xml", "json", "prometheus", "save_baseline")]


def _save_baseline(path: str, run_report) -> None:  # type: ignore[no-untyped-def]
    from preflight import baseline
    from preflight.report import json_report, write_atomic

    document = baseline.render(run_report.results, run_report.host, json_report.timestamp(run_report),
                               run_report.config_digest)
    write_atomic(path, document.encode())


def _launch(requested: bool, environ: Mapping[str, str]):  # type: ignore[no-untyped-def]
    """torchrun's place for this process with ``--distributed`` or under torchrun, else None."""
    from preflight import distributed

    if requested or distributed.launched_by_torchrun(environ):
        return distributed.launch_from(environ)
    return None


def _write_fleet(reports, args: argparse.Namespace, world_size: int, environ: Mapping[str, str],  # type: ignore[no-untyped-def]
                 stdout: TextIO, stderr: TextIO) -> None:
    """Rank 0's output of a fleet run: every node's table (or the JSON), one JSON and one JUnit file;
    the one-report integrations (GitHub, termination message, Prometheus) get the fleet flattened."""
    from preflight.report import console, json_report, junit, write_atomic
    from preflight.report.merge import flatten

    if args.format == "json" or args.json == "-":
        stdout.write(json_report.render_fleet(reports, world_size))
    else:
        stdout.write("\n".join(console.render(report, console.use_colour(stdout, args.color)) for report in reports))
    stdout.flush()
    if args.json and args.json != "-":
        write_atomic(args.json, json_report.render_fleet(reports, world_size).encode())
    if args.junit_xml:
        junit.write(args.junit_xml, reports)
    if reports:
        _integrations(flatten(reports), args, environ, stderr)


def _integrations(run_report, args: argparse.Namespace, environ: Mapping[str, str], stderr: TextIO) -> None:  # type: ignore[no-untyped-def]
    from preflight.report import github, kubernetes, prometheus

    if args.prometheus:
        prometheus.write(args.prometheus, run_report)
    if github.active(environ):
        github.publish(run_report, environ, stderr, args.junit_xml, args.json)
    kubernetes.write(kubernetes.termination_path(args.termination_log, environ), kubernetes.summary(run_report))
    print(kubernetes.verdict_line(run_report), file=stderr, flush=True)


def _config_error(path: str, error: UsageError, args: argparse.Namespace, environ: Mapping[str, str],
                  stderr: TextIO) -> None:
    """Say why in every report that a pipeline shows ``when: always``; the CLI then prints it and exits 2."""
    from preflight import report
    from preflight.report import github, junit, kubernetes

    message = str(error)
    if args.junit_xml:
        facts = report.host_facts(path)
        report.write_atomic(args.junit_xml, junit.render_config_error(path, message, facts, report.now()))
    if github.active(environ):
        where = error.where if isinstance(error, ConfigError) else path
        github.publish_config_error(where, message, environ, stderr, args.junit_xml)
    kubernetes.write(kubernetes.termination_path(args.termination_log, environ),
                     kubernetes.config_error_summary(message))


def _check_writable(destination: str | None) -> None:
    """Fail before measuring, not after, when a report could not be written."""
    if not destination or destination == "-":
        return
    directory = os.path.dirname(os.path.abspath(destination))
    if not os.path.isdir(directory):
        raise UsageError(f"{destination}: directory {directory} does not exist: create it or choose another path")
    try:
        tempdir.probe(directory)
    except OSError as error:
        raise UsageError(f"{destination}: directory {directory} is not writable ({tempdir.reason(error)}): "
                         f"choose a writable path") from None
    if os.path.isdir(destination):
        raise UsageError(f"{destination} is a directory: give a file path, like {destination.rstrip('/')}/report")
