"""bench/transfer_reference.py's comparison, driven without a GPU: every GPU gets a line, whatever failed."""

from __future__ import annotations

import importlib.util

import pytest

from preflight.measurement import Measurement, unmeasurable
from tests.helpers import REPO


@pytest.fixture
def bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("transfer_reference", REPO / "bench" / "transfer_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr("sys.argv", ["transfer_reference.py", "--repeats", "3"])
    return module


def two_gpus_one_unmeasured():
    lost = "the h2d_pinned copy failed on cuda:1 (CUDA error: unspecified launch failure): a GPU fault"
    return [
        Measurement("pinned_alloc", 0.25, "GiB", method="torch.empty(pin_memory=True) of 256 MiB"),
        Measurement("h2d_pinned", samples=(52.0, 53.0, 54.0), unit="GB/s", device="cuda:0"),
        Measurement("d2h_pinned", samples=(50.0, 51.0, 52.0), unit="GB/s", device="cuda:0"),
        unmeasurable("h2d_pinned", lost, "GB/s", "cuda:1"),
        Measurement("d2h_pinned", samples=(50.0, 51.0, 52.0), unit="GB/s", device="cuda:1"),
    ]


def test_a_gpu_preflight_could_not_measure_gets_a_line_and_fails_the_run(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench.transfer, "measure", lambda options, budget: two_gpus_one_unmeasured())
    monkeypatch.setattr(bench, "reference", lambda index, direction, size, repeats: 50.0)
    assert bench.main() == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1:6] == [
        "cuda:0   d2h_pinned            51.00           50.00   1.020",
        "cuda:0   h2d_pinned            53.00           50.00   1.060",
        "cuda:1   d2h_pinned            51.00           50.00   1.020",
        "cuda:1   h2d_pinned                -           50.00       -  NOT MEASURED",
        "         preflight could not measure: the h2d_pinned copy failed on cuda:1 (CUDA error: unspecified launch "
        "failure): a GPU fault",
    ]


def test_a_reference_that_fails_on_one_gpu_is_reported_and_the_rest_compared(bench):
    def reference(index, direction):
        if index == 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore lines")
        return 52.0

    lines, ok = bench.compare(two_gpus_one_unmeasured(), reference)
    assert not ok
    assert "cuda:1   d2h_pinned            51.00               -       -  NOT MEASURED" in lines
    assert "         reference failed: CUDA error: an illegal memory access was encountered" in lines
    assert "cuda:0   h2d_pinned            53.00           52.00   1.019" in lines


def test_every_gpu_within_ten_percent_passes(bench):
    measured = [m for m in two_gpus_one_unmeasured() if m.device == "cuda:0"]
    lines, ok = bench.compare(measured, lambda index, direction: 51.0)
    assert ok and not any("OUTSIDE" in line or "NOT MEASURED" in line for line in lines)
    lines, ok = bench.compare(measured, lambda index, direction: 40.0)
    assert not ok and lines[1].endswith("  OUTSIDE 10%")


def test_without_a_gpu_it_says_why_in_one_line(bench, monkeypatch, capsys):
    reason = "no CUDA device: torch 2.13.0+cpu is a CPU build; install a CUDA build of torch"
    monkeypatch.setattr(bench.transfer, "measure", lambda options, budget: [unmeasurable("h2d_pinned", reason)])
    assert bench.main() == 1
    assert capsys.readouterr().out == f"no GPU measurement: {reason}\n"
