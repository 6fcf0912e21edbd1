"""``preflight diff``: two runs' JSON reports, every metric in both, each change judged against its own noise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.report import noise
from preflight.report import json_report
from preflight.report.compare import load, pair
from tests.helpers import run_cli
from tests.report_helpers import make_report, result

STEADY = [1000.0, 1010.0, 990.0, 1005.0, 995.0]  # CV 0.8%: the 5% floor is its band


def _storage(seq_read: list[float], p99: list[float], free_space: float = 100.0, verdict: str = "pass"):
    return [
        result("seq_read", verdict, value=sorted(seq_read)[len(seq_read) // 2], unit="MB/s", samples=tuple(seq_read),
               threshold={"min": 200.0}),
        result("rand_read_p99", "info", value=sorted(p99)[len(p99) // 2], unit="ms", samples=tuple(p99)),
        result("free_space", "pass", value=free_space, unit="GiB", threshold={"min": 1.0}),
        result("filesystem", "info", value="ext4 at /", unit="text"),
    ]


def _write(tmp_path: Path, name: str, results, host: str = "node-17") -> Path:
    path = tmp_path / name
    path.write_text(json_report.render(make_report(results, facts={"hostname": host})))
    return path


def _fleet(tmp_path: Path, name: str, per_node: list[list]) -> Path:
    reports = [make_report(results, facts={"hostname": f"n{i}", "node_rank": str(i), "ranks": str(i)})
               for i, results in enumerate(per_node)]
    path = tmp_path / name
    path.write_text(json_report.render_fleet(reports, world_size=len(reports)))
    return path


def test_band_is_the_gate_floor_or_twice_the_larger_cv():
    assert noise.band("storage.seq_read", STEADY, STEADY) == 0.05
    assert noise.band("dataloader.throughput", STEADY) == 0.10
    wide = [500.0, 1500.0, 1000.0, 800.0, 1200.0]
    assert noise.band("storage.seq_read", STEADY, wide) == pytest.approx(2 * noise.cv(wide))
    assert noise.cv(wide) == pytest.approx(0.3808, abs=1e-4)  # sample stdev (n - 1) 380.8 over mean 1000


def test_a_rate_20_percent_lower_beyond_its_noise_regresses_and_fails_the_diff(tmp_path):
    old = _write(tmp_path, "old.json", _storage(STEADY, [2.0, 2.1, 1.9]))
    new = _write(tmp_path, "new.json", _storage([s * 0.8 for s in STEADY], [2.0, 2.1, 1.9]))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("storage.seq_read "))
    assert "1 GB/s" in line and "800 MB/s" in line and "0.800x" in line
    assert "REGRESSED -20% (noise ±5%, --fail-on 10%)" in line
    assert done.stdout.splitlines()[-1] == "== 1 regressed beyond 10%, 1 within noise, 2 not judged; 4 metrics in both runs =="
    assert run_cli("diff", str(old), str(new)).returncode == 0  # without --fail-on, diff only reports


def test_the_same_drop_inside_a_noisy_metrics_spread_is_within_noise(tmp_path):
    wide = [500.0, 1500.0, 1000.0, 800.0, 1200.0]  # CV 38%: a 20% move is what these samples do anyway
    old = _write(tmp_path, "old.json", _storage(wide, [2.0]))
    new = _write(tmp_path, "new.json", _storage([s * 0.8 for s in wide], [2.0]))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 0, done.stdout
    line = next(line for line in done.stdout.splitlines() if line.startswith("storage.seq_read "))
    assert "within noise (-20%, noise ±76%)" in line


def test_a_latency_is_worse_when_higher_and_a_fact_is_never_judged(tmp_path):
    old = _write(tmp_path, "old.json", _storage(STEADY, [2.0, 2.02, 1.98], free_space=100.0))
    new = _write(tmp_path, "new.json", _storage(STEADY, [3.0, 3.03, 2.97], free_space=10.0))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[2:-1]}
    assert "REGRESSED +50%" in lines["storage.rand_read_p99"]
    assert "0.100x" in lines["storage.free_space"] and "not judged (a fact)" in lines["storage.free_space"]
    assert lines["storage.filesystem"].endswith("same")
    assert done.returncode == 1


def test_a_faster_run_is_better_and_a_verdict_change_is_shown(tmp_path):
    old = _write(tmp_path, "old.json", _storage([150.0, 151.0, 149.0], [2.0], verdict="fail"))
    new = _write(tmp_path, "new.json", _storage(STEADY, [2.0]))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 0
    line = next(line for line in done.stdout.splitlines() if line.startswith("storage.seq_read "))
    assert "better +567% (noise ±5%); fail -> pass" in line


def test_two_nodes_reports_side_by_side_pair_by_id(tmp_path):
    a = _write(tmp_path, "a.json", _storage(STEADY, [2.0]), host="node-a")
    b = _write(tmp_path, "b.json", _storage([s / 2 for s in STEADY], [2.0]), host="node-b")
    done = run_cli("diff", str(a), str(b), "--fail-on", "10%")
    assert done.stdout.splitlines()[0].startswith(f"preflight diff: {a} (node-a at 2026-11-29T15:00:00Z) -> {b} (node-b")
    assert done.returncode == 1 and "REGRESSED -50%" in done.stdout


def test_fleets_pair_node_by_node_and_a_single_node_pairs_with_each_node(tmp_path):
    healthy = _storage(STEADY, [2.0])
    old = _fleet(tmp_path, "old.json", [healthy, healthy])
    new = _fleet(tmp_path, "new.json", [healthy, _storage([s * 0.5 for s in STEADY], [2.0])])
    changes, only_old, only_new = pair(load(str(old)), load(str(new)))
    by_id = {c.id: c for c in changes}
    assert len(changes) == 8 and not only_old and not only_new
    assert not by_id["storage.seq_read[node0]"].regressed(0.1)
    assert by_id["storage.seq_read[node1]"].regressed(0.1)
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 1 and "fleet of 2 nodes" in done.stdout.splitlines()[0]
    single = _write(tmp_path, "one.json", healthy)
    changes, _, _ = pair(load(str(single)), load(str(new)))
    assert {c.id for c in changes if c.regressed(0.1)} == {"storage.seq_read[node1]"}
    assert len(changes) == 8


def test_metrics_in_one_run_only_are_listed(tmp_path):
    old = _write(tmp_path, "old.json", _storage(STEADY, [2.0]))
    new = _write(tmp_path, "new.json", _storage(STEADY, [2.0])[:2] + [result("size", "pass", instance="shm",
                                                                                  value=8.0, unit="GiB")])
    done = run_cli("diff", str(old), str(new))
    assert f"only in {old}: storage.free_space, storage.filesystem" in done.stdout
    assert f"only in {new}: shm.size" in done.stdout


@pytest.mark.parametrize("make, says", [
    (lambda d: d / "missing.json", "missing.json: no such file"),
    (lambda d: (d / "t.json").write_text("{oops") and d / "t.json", "t.json:1:2: not JSON"),
    (lambda d: (d / "t.json").write_text('{"a": 1}') and d / "t.json", "t.json: not a preflight JSON report"),
    (lambda d: (d / "t.json").write_text('{"schema": 1, "results": [{"id": "x"}]}') and d / "t.json",
     "t.json: not a preflight JSON report: a result lacks"),
    (lambda d: (d / "t.json").write_text(json.dumps({"schema": 1, "error": "thresholds.yaml:3:1: bad", "results": []}))
     and d / "t.json", "that run never started (thresholds.yaml:3:1: bad)"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, make, says):
    good = _write(tmp_path, "good.json", _storage(STEADY, [2.0]))
    done = run_cli("diff", str(good), str(make(tmp_path)))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("preflight: error: "), done.stderr
    assert says in done.stderr


@pytest.mark.parametrize("value", ["ten", "10", "150%"])
def test_fail_on_takes_a_percentage(tmp_path, value):
    good = _write(tmp_path, "good.json", _storage(STEADY, [2.0]))
    done = run_cli("diff", str(good), str(good), "--fail-on", value)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"preflight: error: --fail-on {value}: ") and "like --fail-on 10%" in done.stderr
