from __future__ import annotations

import re

import pytest

from preflight.checks import CHECKS
from preflight.commands import list_checks
from tests.helpers import run_cli

_HEAD = re.compile(r"^    (\S+)( +)(\S+)")  # an option or metric line: name, the gap, kind or unit


@pytest.mark.parametrize("width", [60, 80, 120])
def test_every_line_fits_the_width(width):
    assert max(len(line) for line in list_checks.render(width=width).splitlines()) <= width


def test_columns_stay_aligned_on_the_longest_names():
    section, columns = "", {"parameters": set(), "metrics": set()}
    for line in list_checks.render(width=80).splitlines():
        if line in ("  parameters:", "  metrics:"):
            section = line.strip(" :")
        elif not line.startswith("  "):
            section = ""
        elif section and (head := _HEAD.match(line)):
            columns[section].add(head.start(3))  # where the kind (parameters) or unit (metrics) starts
            assert len(head.group(2)) >= 2, line  # never glued to a long name
    assert len(columns["parameters"]) == len(columns["metrics"]) == 1, columns
    longest = max((m.name for check in CHECKS.values() for m in check.METRICS), key=len)
    assert longest == "ecc_uncorrectable_aggregate" and columns["metrics"] == {4 + len(longest) + 2}


def test_help_is_wrapped_beneath_its_name():
    lines = list_checks.render(width=80).splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("    seq_read "))
    metric = next(m for m in CHECKS["storage"].METRICS if m.name == "seq_read")
    help_lines = []
    for line in lines[index + 1:]:
        if not line.startswith("        "):
            break
        help_lines.append(line.strip())
    assert " ".join(help_lines) == " ".join(metric.help.split())


def test_a_choice_reads_as_plain_text():
    text = list_checks.render(width=120)
    assert "none|image" in text and "\\|" not in text



def test_each_check_says_what_its_duration_buys_right_beneath_its_help():
    text = " ".join(list_checks.render(width=400).split())  # one line per item: no wrapping to undo
    for name, check in CHECKS.items():
        assert f"{name}: {check.HELP} duration: " in text, name
    assert (f"storage: {CHECKS['storage'].HELP} duration: split equally between the timed parts that run, each with "
            f"its warm-up: seq_read, rand_read (and its percentiles), small_files, and seq_write and fsync_p99 only "
            f"when judged") in text
    assert "in each, worker_pools fresh pools share it, each pool's start and warm-up included" in text


def test_list_filters_by_check_and_refuses_an_unknown_one_in_one_line():
    """Issue 35: `preflight list dataloader` was refused while the full list is hundreds of lines."""
    completed = run_cli("list", "dataloader", "shm")
    assert completed.returncode == 0, completed.stderr
    heads = [line.split(":", 1)[0] for line in completed.stdout.splitlines() if line and not line.startswith(" ")]
    assert heads == ["shm", "dataloader"]  # the registry's order
    assert completed.stdout == list_checks.render(checks=["dataloader", "shm"])
    assert run_cli("list", "shm", "--markdown").stdout.startswith("#### `shm`\n")
    assert "#### `storage`" not in run_cli("list", "shm", "--markdown").stdout
    refused = run_cli("list", "dataloder")
    assert refused.returncode == 2 and refused.stderr.strip() == (
        "preflight: error: list dataloder: no such check: did you mean `dataloader`? (`preflight list` shows them "
        "all; an instance of your file is listed under its check)")


def test_a_ratio_reads_as_a_ratio_not_a_count():
    """Issue 35: ``matmul_error`` (max |GPU - CPU| / max |CPU|) read "count" in the reference and in ``explain``: a
    relative error has no unit, and is no count. The counts beside it still read "count"."""
    table = run_cli("list", "cuda", "--markdown").stdout
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ")[1] for line in table.splitlines()
            if line.startswith("| `")}
    assert rows["matmul_error"] == "ratio" and rows["device_count"] == "count" and rows["runtime_supported"] == "yes/no"
    assert "relative error" in table.split("| `matmul_error` |", 1)[1].splitlines()[0]
    assert "  unit:          ratio\n" in run_cli("explain", "cuda.matmul_error").stdout
    transfer = run_cli("list", "transfer", "--markdown").stdout
    assert "| `pinned_speedup` | ratio |" in transfer
