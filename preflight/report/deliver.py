"""Deliver a finished run to every destination the command line asked for.

One function for a single node and for a fleet (``deliver``): stdout gets the chosen format,
each report file (JSON, JUnit, HTML, baseline) is written atomically and on its own (a full
disk under one must not cost the others), then the integrations that read one report (Prometheus, GitHub, the Kubernetes
termination message, the compact verdict line on stderr). A closed stdout (``| head``) is not
an error: as command-line tools do on EPIPE, preflight stops writing to it and still writes
every file (Python's documented handling: point stdout at /dev/null, "Note on SIGPIPE").
A config that cannot be loaded is delivered too (``deliver_config_error``): every requested
report says so, none keeps a previous run's verdict.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping, NamedTuple, Sequence, TextIO

from preflight.errors import ConfigError, UsageError
from preflight.io import tempdir
from preflight.report import RunReport, write_atomic


class Destinations(NamedTuple):
    """Where a run goes, as ``preflight run``'s flags say."""

    format: str = "text"  # what stdout carries: "text" (the table) or "json"
    colour: str = "auto"
    json: str | None = None  # a path, or "-" for stdout
    junit_xml: str | None = None
    html: str | None = None
    prometheus: str | None = None
    save_baseline: str | None = None
    termination_log: str | None = None

    def files(self) -> list[str]:
        """The report files to write, for checking them before measuring."""
        return [p for p in (self.junit_xml, self.json, self.html, self.prometheus, self.save_baseline)
                if p and p != "-"]


def deliver(reports: Sequence[RunReport], to: Destinations, environ: Mapping[str, str], stdout: TextIO,
            stderr: TextIO, world_size: int | None = None) -> None:
    """Write ``reports`` (one node's, or each node's of a fleet of ``world_size`` ranks) everywhere ``to`` says.

    Raises:
        UsageError: one or more report files could not be written (every other one was).
    """
    from preflight.report import console, html, json_report, junit
    from preflight.report.merge import flatten

    fleet = world_size is not None
    as_json = (lambda: json_report.render_fleet(reports, world_size)) if fleet else (  # type: ignore[arg-type]
        lambda: json_report.render(reports[0]))
    if to.format == "json" or to.json == "-":
        _to_stdout(stdout, as_json())
    else:
        _to_stdout(stdout, "\n".join(console.render(r, console.use_colour(stdout, to.colour)) for r in reports))
    one = flatten(reports) if fleet else reports[0]
    failed = _write_each([
        (to.json if to.json != "-" else None, lambda path: write_atomic(path, as_json().encode())),
        (to.junit_xml, lambda path: junit.write(path, list(reports), fleet)),
        (to.html, lambda path: html.write(path, reports, world_size)),
        (to.save_baseline, lambda path: _save_baseline(path, one)),
    ])
    if reports:
        _integrations(one, to, environ, stderr)
    if failed:
        raise UsageError("; ".join(failed))


def deliver_config_error(config_path: str, error: UsageError, to: Destinations, environ: Mapping[str, str],
                         stdout: TextIO, stderr: TextIO, world_size: int | None = None) -> None:
    """Say why in every report the command line asked for; the CLI then prints it and exits 2.

    JSON (exit_code 2, an ``error``, no results; the fleet shape for a rank of ``world_size``),
    JUnit (one ConfigError case), HTML (the error, nothing measured) and Prometheus (``preflight_passed 0``,
    ``preflight_config_error 1``) replace whatever an earlier run left there: a dashboard or
    pipeline must never read a good run's verdict after a broken config. No baseline is saved.
    A report that cannot be written is one ``preflight: error:`` line before the config error's.
    """
    from preflight import report
    from preflight.report import github, html, json_report, junit, kubernetes, prometheus

    message = str(error)
    facts, started = report.host_facts(config_path), report.now()
    as_json = json_report.render_config_error(config_path, message, facts, started, world_size)
    if to.format == "json" or to.json == "-":
        _to_stdout(stdout, as_json)
    failed = _write_each([
        (to.json if to.json != "-" else None, lambda path: write_atomic(path, as_json.encode())),
        (to.junit_xml, lambda path: write_atomic(path, junit.render_config_error(config_path, message, facts,
                                                                                 started))),
        (to.prometheus, lambda path: write_atomic(path, prometheus.render_config_error(facts, started).encode())),
        (to.html, lambda path: write_atomic(path, html.render_config_error(
            config_path, message, facts, json_report.iso(started)).encode())),
    ])
    for failure in failed:
        print(f"preflight: error: {failure}", file=stderr)
    if github.active(environ):
        where = error.where if isinstance(error, ConfigError) else config_path
        each = [(mistake.where, str(mistake)) for mistake in getattr(error, "errors", ())]
        github.publish_config_error(where, message, environ, stderr, to.junit_xml, to.json, to.html, each)
    kubernetes.write(kubernetes.termination_path(to.termination_log, environ), kubernetes.config_error_summary(message))


def _write_each(writes: Sequence[tuple[str | None, Callable[[str], None]]]) -> list[str]:
    """Call each write whose destination is set, each on its own; the errors of those that failed."""
    failed = []
    for destination, write in writes:
        if destination:
            try:
                write(destination)
            except UsageError as error:
                failed.append(str(error))
    return failed


def check_writable(destination: str) -> None:
    """Fail before measuring, not after, when a report could not be written.

    Raises:
        UsageError: the directory is missing or not writable, or ``destination`` is a directory.
    """
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


def _to_stdout(stdout: TextIO, text: str) -> None:
    try:
        stdout.write(text)
        stdout.flush()
    except BrokenPipeError:
        silence(stdout)


def silence(stream: TextIO) -> None:
    """The reader of ``stream`` went away (EPIPE): send whatever is still written to it to /dev/null,
    the interpreter's own flush at exit included (Python docs, "Note on SIGPIPE")."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _save_baseline(path: str, run_report: RunReport) -> None:
    from preflight import baseline
    from preflight.report import json_report

    document = baseline.render(run_report.results, run_report.host, json_report.timestamp(run_report),
                               run_report.config_digest)
    write_atomic(path, document.encode())


def _integrations(run_report: RunReport, to: Destinations, environ: Mapping[str, str], stderr: TextIO) -> None:
    from preflight.report import github, kubernetes, prometheus

    if to.prometheus:
        prometheus.write(to.prometheus, run_report)
    if github.active(environ):
        github.publish(run_report, environ, stderr, to.junit_xml, to.json, to.html)
    kubernetes.write(kubernetes.termination_path(to.termination_log, environ), kubernetes.summary(run_report))
    print(kubernetes.verdict_line(run_report), file=stderr, flush=True)
