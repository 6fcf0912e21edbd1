"""GitHub Actions: a step summary table, annotations on thresholds.yaml, and step outputs.

Active when ``GITHUB_ACTIONS=true``. Uses the runner's documented files and workflow
commands (docs.github.com, "Workflow commands for GitHub Actions"):
- ``$GITHUB_STEP_SUMMARY``: Markdown appended to the job's summary page;
- ``::error file=F,line=L,col=C,title=T::message`` on stdout of the step (here: stderr,
  which the runner reads the same way, so stdout keeps only the chosen format);
  GitHub shows at most 10 of each level per step, so we emit 10 and then one plain line
  saying how many more there are;
- ``$GITHUB_OUTPUT``: ``key=value`` lines the workflow reads as ``steps.<id>.outputs.<key>``.
Escaping follows @actions/core: ``%``, CR and LF in data; also ``:`` and ``,`` in properties.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence, TextIO

from preflight.report import RunReport, shown_value
from preflight.verdict import Result

MAX_ANNOTATIONS = 10  # per level, as GitHub displays per step
_LEVEL = {"fail": "error", "error": "error", "warn": "warning"}
_MARK = {"pass": "✅ pass", "fail": "❌ fail", "error": "💥 error", "warn": "⚠️ warn", "skip": "⏭️ skip",
         "info": "ℹ️ info"}


def active(environ: Mapping[str, str]) -> bool:
    return environ.get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(report: RunReport, workspace: str | None = None) -> list[str]:
    """Workflow-command lines: one per missed threshold (10 per level at most, then a count)."""
    lines: list[str] = []
    for level in ("error", "warning"):
        misses = [r for r in report.results if _LEVEL.get(r.verdict) == level]
        lines += [annotation(level, _title(r), _annotation_text(r), r.where, workspace)
                  for r in misses[:MAX_ANNOTATIONS]]
        if len(misses) > MAX_ANNOTATIONS:
            lines.append(f"preflight: {len(misses) - MAX_ANNOTATIONS} more {level}s not annotated "
                         f"(GitHub shows {MAX_ANNOTATIONS} per step); see the job summary")
    return lines


def annotation(level: str, title: str, message: str, where: str = "", workspace: str | None = None) -> str:
    """One ``::error``/``::warning`` command; ``where`` is ``FILE:LINE:COL`` (made workspace-relative)."""
    properties = []
    location = _location(where, workspace)
    if location:
        path, line, column = location
        properties += [f"file={escape_property(path)}", f"line={line}", f"col={column}"]
    properties.append(f"title={escape_property(title)}")
    return f"::{level} {','.join(properties)}::{escape_data(message)}"


def summary(report: RunReport, html_path: str | None = None) -> str:
    """The Markdown table appended to ``$GITHUB_STEP_SUMMARY``; with ``html_path``, a line naming the HTML page
    (a step summary cannot hold it: GitHub strips its styles and SVG, so it travels as an artifact)."""
    counts = report.counts()
    verdict = "❌ preflight failed" if report.exit_code else "✅ preflight passed"
    totals = ", ".join(f"{counts[v]} {v}" for v in ("fail", "error", "warn", "pass", "skip") if counts.get(v))
    lines = [f"### {verdict} on `{_cell(report.host)}`", "",
             f"{totals} in {report.duration_s:.1f}s · config `{_cell(report.config_path)}`", "",
             "| Result | Verdict | Measured | Required | Why and fix |", "|---|---|---|---|---|"]
    for r in report.results:
        lines.append(f"| `{_cell(r.id)}` | {_MARK[r.verdict]} | {_cell(_measured(r))} | {_cell(r.required or '-')} "
                     f"| {_cell(_why(r))} |")
    facts = ", ".join(f"{k} {v}" for k, v in report.facts.items() if k in ("gpu", "driver", "torch", "cuda") and v)
    page = ([f"The whole report, each metric against its threshold with its samples: `{_cell(html_path)}` (a "
             f"self-contained page; upload it with actions/upload-artifact, as ci/github/preflight.yml does).", ""]
            if html_path else [])
    return "\n".join(lines + ["", *page, f"<sub>{_cell(facts)}</sub>", ""]) + "\n"


def outputs(report: RunReport, junit_path: str | None, json_path: str | None,
            html_path: str | None = None) -> dict[str, str]:
    """Step outputs: passed, failed (failed + errored results), warnings, exit-code, report paths."""
    counts = report.counts()
    return {
        "passed": "true" if report.exit_code == 0 else "false",
        "failed": str(counts.get("fail", 0) + counts.get("error", 0)),
        "warnings": str(counts.get("warn", 0)),
        "exit-code": str(report.exit_code),
        "junit-xml": junit_path or "",
        "json": json_path if json_path and json_path != "-" else "",
        "html": html_path or "",
    }


def publish(report: RunReport, environ: Mapping[str, str], log: TextIO, junit_path: str | None,
            json_path: str | None, html_path: str | None = None) -> None:
    """Write the summary, outputs and annotations where the runner's environment says."""
    for line in annotations(report, environ.get("GITHUB_WORKSPACE")):
        print(line, file=log)
    append(environ.get("GITHUB_STEP_SUMMARY"), summary(report, html_path))
    append(environ.get("GITHUB_OUTPUT"), format_outputs(outputs(report, junit_path, json_path, html_path)))


def publish_config_error(where: str, message: str, environ: Mapping[str, str], log: TextIO,
                         junit_path: str | None = None, json_path: str | None = None,
                         html_path: str | None = None, each: Sequence[tuple[str, str]] = ()) -> None:
    """A config that could not be loaded: one annotation at its place (at each mistake's, ``each`` holding
    their places and messages when there are several), a summary line, ``passed=false``."""
    for place, text in list(each or [(where, message)])[:MAX_ANNOTATIONS]:
        print(annotation("error", "preflight: invalid config", text if each else message, place,
                         environ.get("GITHUB_WORKSPACE")), file=log)
    append(environ.get("GITHUB_STEP_SUMMARY"), f"### ❌ preflight could not start\n\n`{_cell(message)}`\n")
    json_file = json_path if json_path and json_path != "-" else ""
    append(environ.get("GITHUB_OUTPUT"), format_outputs({"passed": "false", "failed": "0", "warnings": "0",
                                                         "exit-code": "2", "junit-xml": junit_path or "",
                                                         "json": json_file, "html": html_path or ""}))


def format_outputs(values: Mapping[str, str]) -> str:
    return "".join(f"{key}={' '.join(value.split())}\n" for key, value in values.items())


def append(path: str | None, text: str) -> None:
    """Append to a runner file; a missing variable or unwritable file is skipped (not ours to fail on)."""
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as stream:
            stream.write(text)
    except OSError:
        pass


def _why(result: Result) -> str:
    if result.verdict in ("pass", "info"):
        return ""
    return f"{result.message}; fix: {result.hint}" if result.hint else result.message


def _title(result: Result) -> str:
    return f"preflight: {result.id} {result.verdict}"


def _annotation_text(result: Result) -> str:
    return f"{result.message}\nfix: {result.hint}" if result.hint else result.message


def _measured(result: Result) -> str:
    if result.value is None:
        return "-"
    return shown_value(result)


def _location(where: str, workspace: str | None) -> tuple[str, str, str] | None:
    parts = where.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None  # "--set storage.path=..." or "defaults": no line to point at
    return _workspace_relative(parts[0], workspace), parts[1], parts[2]


def _workspace_relative(path: str, workspace: str | None) -> str:
    """``path`` as GitHub places annotations: relative to ``$GITHUB_WORKSPACE``, the repository root.

    A relative ``path`` is relative to the working directory (``-c thresholds.yaml`` run from
    ``ci/`` is ``ci/thresholds.yaml``). Symbolic links are resolved when the plain paths do not
    meet (a container job's workspace can be a link). A file outside the workspace keeps its
    absolute path: GitHub cannot place it, and a relative one would point at the wrong file.
    """
    if not workspace:
        return path
    absolute = os.path.abspath(path)
    resolved = os.path.realpath(absolute), os.path.realpath(workspace)
    for inside, root in ((absolute, os.path.abspath(workspace)), resolved):
        relative = os.path.relpath(inside, root)
        if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
            return relative
    return absolute


def _cell(text: str) -> str:
    return " ".join(str(text).replace("|", "\\|").replace("`", "'").split())
