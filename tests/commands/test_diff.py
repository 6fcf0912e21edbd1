"""``preflight diff``: two runs' JSON reports, every metric in both, each change against the noise between runs."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from preflight.report import noise
from preflight.report import json_report
from preflight.report.compare import load, pair
from tests.helpers import run_cli
from tests.report_helpers import make_report, result

STEADY = [1000.0, 1010.0, 990.0, 1005.0, 995.0]  # CV 0.8%: its band is seq_read's run-to-run floor's


def _storage(seq_read: list[float], p99: list[float], free_space: float = 100.0, verdict: str = "pass"):
    return [
        result("seq_read", verdict, value=sorted(seq_read)[len(seq_read) // 2], unit="MB/s", samples=tuple(seq_read),
               threshold={"min": 200.0}),
        result("rand_read_p99", "info", value=sorted(p99)[len(p99) // 2], unit="ms", samples=tuple(p99)),
        result("free_space", "info", value=free_space, unit="GiB"),  # no threshold: a fact
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


def test_band_is_three_sigma_of_two_runs_from_the_floor_and_both_runs_samples():
    floor = noise.floor("storage.seq_read")
    assert "docs/benchmarks.md" in floor.source
    assert noise.band("storage.seq_read", [], []) == pytest.approx(3 * math.sqrt(2) * floor.cv)
    wide = [500.0, 1500.0, 1000.0, 800.0, 1200.0]
    assert noise.cv(wide) == pytest.approx(0.3808, abs=1e-4)  # sample stdev (n - 1) 380.8 over mean 1000
    # the median's standard error from the MAD (200 around 1000): 1.253 x 1.4826 x 200 / sqrt(5) / 1000
    assert noise.standard_error(wide) == pytest.approx(1.253 * 1.4826 * 0.2 / math.sqrt(5), abs=1e-4)
    burst = [124.0, 31.0, 29.0, 30.0, 28.0, 31.0]  # a throttle's start-up burst in one window of six
    assert noise.standard_error(burst) < 0.05 < noise.cv(burst) / math.sqrt(6)
    assert noise.standard_error([224.0, 339.0]) == 0  # two pools: too few to say how unsure their mean is
    held = floor.cv * math.sqrt(3 / 5)  # five samples: the floor held over 5/3 the floor runs' sampling (issue 44)
    assert noise.run_noise("storage.seq_read", STEADY) == pytest.approx(held)
    assert noise.run_noise("storage.seq_read", STEADY * 4) == pytest.approx(floor.cv * math.sqrt(3 / 20))
    assert noise.standard_error(STEADY) < held < noise.standard_error(wide)  # each run: the larger of the two
    assert noise.band("storage.seq_read", STEADY, wide) == pytest.approx(
        3 * math.sqrt(held ** 2 + noise.standard_error(wide) ** 2))
    assert noise.band("storage.seq_read", STEADY, STEADY, runs=[(900.0, 1000.0, 1100.0), ()]) == pytest.approx(
        3 * math.sqrt(0.1 ** 2 + held ** 2))  # the old run's repeats 10% apart: the spread between its runs
    # a metric measured nowhere takes issue 14's stability target, and says so
    assert noise.floor("transfer.h2d_pinned") == (0.05, noise.floor("transfer.h2d_pinned").source)
    assert "not measured run to run" in noise.floor("transfer.h2d_pinned").source


def test_every_floor_names_a_real_metric_and_where_it_was_measured():
    from preflight.checks import CHECKS

    for metric_id, floor in noise.RUN_TO_RUN.items():
        check, name = metric_id.split(".", 1)
        assert name in {m.name for m in CHECKS[check].METRICS}, metric_id
        assert 0 < floor.cv < 1 and floor.source, metric_id


def test_a_halved_rate_regresses_and_fails_the_diff(tmp_path):
    old = _write(tmp_path, "old.json", _storage(STEADY, [2.0, 2.1, 1.9]))
    new = _write(tmp_path, "new.json", _storage([s * 0.5 for s in STEADY], [2.0, 2.1, 1.9]))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("storage.seq_read "))
    assert "1 GB/s" in line and "500 MB/s" in line and "0.500x" in line
    width = 3 * math.sqrt(2) * noise.floor("storage.seq_read").cv * math.sqrt(3 / 5)  # STEADY's error is smaller
    assert f"REGRESSED -50% (noise ±{width:.0%}, --fail-on 10%)" in line
    assert done.stdout.splitlines()[-1] == ("== 1 regressed beyond 10%, 1 cannot tell (counted as pass), 2 not judged; "
                                            "4 metrics in both runs ==")  # rand_read_p99's floor is ±61% a run
    assert run_cli("diff", str(old), str(new)).returncode == 0  # without --fail-on, diff only reports


def test_the_same_drop_inside_a_noisy_metrics_spread_is_within_noise(tmp_path):
    wide = [500.0, 1500.0, 1000.0, 800.0, 1200.0]  # CV 38%: a 20% move is what these samples do anyway
    old = _write(tmp_path, "old.json", _storage(wide, [2.0]))
    new = _write(tmp_path, "new.json", _storage([s * 0.8 for s in wide], [2.0]))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 0, done.stdout
    line = next(line for line in done.stdout.splitlines() if line.startswith("storage.seq_read "))
    width = noise.band("storage.seq_read", wide, [s * 0.8 for s in wide])
    # Wider than --fail-on: a 10% regression could hide in it, so diff says it cannot tell, and how long would
    assert width > 0.5 and f"cannot tell at this noise (-20%, noise ±{width:.0%} > --fail-on 10%): " in line
    assert line.endswith("in both runs would tell"), line
    wider = f"{math.ceil(width * 100) + 1}%"  # a --fail-on past the band: told, within noise
    assert run_cli("diff", str(old), str(new), "--fail-on", wider).stdout.count("within noise (-20%") == 1
    closed = run_cli("diff", str(old), str(new), "--fail-on", "10%", "--inconclusive", "fail")
    assert closed.returncode == 1 and "2 cannot tell (counted as fail)" in closed.stdout.splitlines()[-1]  # p99 too


def test_a_latency_is_worse_when_higher_and_a_fact_is_never_judged(tmp_path):
    old = _write(tmp_path, "old.json", _storage(STEADY, [2.0, 2.02, 1.98], free_space=100.0))
    new = _write(tmp_path, "new.json", _storage(STEADY, [8.0, 8.08, 7.92], free_space=10.0))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[2:-1]}
    assert "REGRESSED +300%" in lines["storage.rand_read_p99"]
    assert "0.100x" in lines["storage.free_space"] and "not judged (a fact)" in lines["storage.free_space"]
    assert lines["storage.filesystem"].endswith("same")
    assert done.returncode == 1


def test_a_faster_run_is_better_and_a_verdict_change_is_shown(tmp_path):
    old = _write(tmp_path, "old.json", _storage([150.0, 151.0, 149.0], [2.0], verdict="fail"))
    new = _write(tmp_path, "new.json", _storage(STEADY, [2.0]))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 0
    line = next(line for line in done.stdout.splitlines() if line.startswith("storage.seq_read "))
    width = noise.band("storage.seq_read", [150.0, 151.0, 149.0], STEADY)
    assert f"better +567% (noise ±{width:.0%}); fail -> pass" in line


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


def _busy_node_run(small_files: list[float], seq_read: list[float], pools: list[float], required: float = 530.0):
    """A run of issue 35's node as ``preflight run --json`` writes it: storage's seq_read (3 windows) and small_files
    (3 windows) gated, its rand_read reported; a dataloader with ``throughput`` (each fresh worker pool's rate a
    sample, their mean the value) and ``throughput_vs_required`` gated; the pool count a fact."""
    mean = sum(pools) / len(pools)
    return [
        result("seq_read", "pass", value=sorted(seq_read)[1], unit="MB/s", samples=tuple(seq_read),
               threshold={"min": 200.0}, stopped="time budget 1s spent after 3 samples", subject="scratch"),
        result("rand_read", "info", value=21000.0, unit="IOPS", samples=(20800.0, 21000.0, 21300.0)),
        result("small_files", "pass", value=sorted(small_files)[1], unit="files/s", samples=tuple(small_files),
               threshold={"min": 500.0}, stopped="spread 1.4% <= 3% after 3 samples", subject="dataset"),
        result("throughput", "pass", instance="dataloader", value=mean, unit="samples/s", samples=tuple(pools),
               threshold={"min": 100.0}, subject="dataset"),
        result("throughput_vs_required", "pass" if mean >= required else "fail", instance="dataloader",
               value=100 * mean / required, unit="%", samples=tuple(100 * p / required for p in pools),
               threshold={"min": 100.0}, subject="dataset"),
        result("workers", "info", instance="dataloader", value=2.0, unit=""),
    ]


# Issue 35: two back-to-back runs of an unchanged node at load 4.7-6.3. Each run's samples agree within 2%, so the
# old band (the larger of 5% and twice the samples' CV) was ±5%, while the runs differ by 12-19%: what the same
# node does from one run to the next when it is busy (docs/benchmarks.md, 'Noise on a busy node').
MONDAY = dict(small_files=[9180.0, 9050.0, 9310.0], seq_read=[812.0, 800.0, 826.0], pools=[702.0, 688.0, 716.0, 694.0])
TUESDAY = dict(small_files=[7430.0, 7330.0, 7560.0], seq_read=[712.0, 700.0, 725.0], pools=[596.0, 610.0, 588.0, 602.0])


def test_an_unchanged_busy_node_drifting_19_percent_between_runs_does_not_fail(tmp_path):
    old = _write(tmp_path, "old.json", _busy_node_run(**MONDAY))
    new = _write(tmp_path, "new.json", _busy_node_run(**TUESDAY))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 0, done.stdout
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[2:-1]}
    assert "0.809x" in lines["storage.small_files"]  # the report's -19%
    width = noise.band("storage.small_files", MONDAY["small_files"], TUESDAY["small_files"])
    assert f"cannot tell at this noise (-19%, noise ±{width:.0%} > --fail-on 10%)" in lines["storage.small_files"]
    assert "(-12%" in lines["storage.seq_read"] and "(-14%" in lines["dataloader.throughput"]
    assert "REGRESSED" not in done.stdout  # told to count what it cannot tell as a pass (the default)


def test_a_halved_volume_on_the_same_busy_node_fails_naming_its_rates(tmp_path):
    halved = {key: [value / 2 for value in values] for key, values in TUESDAY.items()}
    old = _write(tmp_path, "old.json", _busy_node_run(**MONDAY))
    new = _write(tmp_path, "new.json", _busy_node_run(**halved))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 1, done.stdout
    regressed = [line.split()[0] for line in done.stdout.splitlines() if " REGRESSED " in line]
    assert regressed == ["storage.seq_read", "storage.small_files", "dataloader.throughput",
                         "dataloader.throughput_vs_required"]
    assert "REGRESSED -60% (noise ±" in next(line for line in done.stdout.splitlines()
                                             if line.startswith("storage.small_files "))


def test_throughput_vs_required_the_user_gated_is_compared_and_a_fact_stays_a_fact(tmp_path):
    old = _write(tmp_path, "old.json", _busy_node_run(**MONDAY))
    new = _write(tmp_path, "new.json", _busy_node_run(**{**MONDAY, "pools": [300.0, 310.0, 290.0, 305.0]}))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 1, done.stdout
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[2:-1]}
    line = lines["dataloader.throughput_vs_required"]
    assert "132.1%" in line and "56.84%" in line and "0.430x" in line, line
    width = noise.band("dataloader.throughput_vs_required", [100 * p / 530 for p in MONDAY["pools"]],
                       [100 * p / 530 for p in (300.0, 310.0, 290.0, 305.0)])
    assert line.endswith(f"REGRESSED -57% (noise ±{width:.0%}, --fail-on 10%); pass -> fail")
    assert lines["dataloader.workers"].endswith("same")  # a count not gated: the same or changed, exactly
    assert "cannot tell at this noise (+0%" in lines["storage.rand_read"]  # its floor is ±55% a run


def test_a_gated_figure_without_a_direction_of_its_own_is_judged_the_way_its_threshold_points(tmp_path):
    from preflight.report.compare import judged_direction

    assert judged_direction("dataloader", "throughput_vs_required", {"min": 100.0}) is True
    assert judged_direction("storage", "free_space", {"min": 1.0}) is True
    assert judged_direction("storage", "free_space", None) is None  # a size no one gated: a fact
    assert judged_direction("cuda", "driver_version", {"min": "535.104"}) is None  # a version has no proportion
    assert judged_direction("storage", "rand_read_p99", None) is False  # a latency, gated or not
    assert judged_direction("nosuch", "figure", {"max": 3.0}) is False  # a check this preflight lacks: the bound says


def test_a_runs_own_repeats_that_disagree_widen_the_band_to_their_spread(tmp_path):
    def run(scale: float, runs: tuple[float, ...]):
        rows = _storage([s * scale for s in STEADY], [2.0])
        return [dataclasses.replace(rows[0], runs=runs)] + rows[1:]

    old_alone = _write(tmp_path, "old.json", run(1.0, ()))
    new_alone = _write(tmp_path, "new.json", run(0.6, ()))
    assert run_cli("diff", str(old_alone), str(new_alone), "--fail-on", "10%").returncode == 1  # -40%: beyond
    # With `repeats: 3`, each report holds its runs' figures: this node swings ±30% between runs.
    old = _write(tmp_path, "old3.json", run(1.0, (1000.0, 700.0, 1300.0)))
    new = _write(tmp_path, "new3.json", run(0.6, (600.0, 420.0, 780.0)))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 0, done.stdout
    width = 3 * math.sqrt(2) * noise.cv([1000.0, 700.0, 1300.0])
    assert (f"cannot tell at this noise (-40%, noise ±{width:.0%} > --fail-on 10%): the runs' repeats disagree by "
            f"more than that") in done.stdout


# Issue 35, a new user's trial of the README's Quick start: on the bundled default over `make-dataset`'s 1000 files,
# small_files reads its first-epoch share (a tenth: 100 files) in one sample of a few milliseconds, and 2 of 10
# unchanged pairs at load 3.8-6.3 on 2 CPUs exited 1: `12626 -> 6025 files/s REGRESSED -52% (noise ±26%)`. Over a
# span that short the scheduler sets the rate; the row says so (`short: `) and diff does not compare it.
def _short_run(small_files: float):
    from preflight import sampling

    span = 100 / small_files
    warning = sampling.short_warning("1 sample of 100 files", span, "a dataset of about 50000 files gives it 0.5 s")
    stopped = "each of its 100 files read once after 1 samples"
    rows = _busy_node_run(**MONDAY)
    rows[2] = dataclasses.replace(rows[2], value=small_files, samples=(small_files,), stopped=stopped,
                                  warnings=(warning,))
    return rows


def test_a_rate_sampled_over_milliseconds_is_too_short_to_compare_not_regressed(tmp_path):
    old = _write(tmp_path, "old.json", _short_run(12626.0))  # 100 files in 7.9 ms
    new = _write(tmp_path, "new.json", _short_run(6025.0))  # 100 files in 16.6 ms, the trial's -52%
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 0, done.stdout
    line = next(line for line in done.stdout.splitlines() if line.startswith("storage.small_files "))
    assert line.endswith("0.477x  too short to compare (old: 1 sample of 100 files in 8 ms, "
                         "new: 1 sample of 100 files in 17 ms)"), line
    assert done.stdout.splitlines()[-1] == ("== 4 cannot tell (counted as pass), 1 too short to compare, 1 not judged; "
                                            "6 metrics in both runs ==")
    # The same runs with a halved volume: every rate sampled long enough still regresses.
    halved = {key: [value / 2 for value in values] for key, values in MONDAY.items()}
    rows = _busy_node_run(**halved)
    rows[2] = _short_run(6025.0)[2]
    done = run_cli("diff", str(old), str(_write(tmp_path, "halved.json", rows)), "--fail-on", "10%")
    assert done.returncode == 1, done.stdout
    assert [line.split()[0] for line in done.stdout.splitlines() if " REGRESSED " in line] == [
        "storage.seq_read", "dataloader.throughput", "dataloader.throughput_vs_required"]


def test_the_quick_starts_small_files_is_one_short_sample_that_says_so_and_is_not_compared(tmp_path):
    """The README's Quick start for real: `make-dataset`'s 1000 files, the bundled thresholds.yaml (storage only).
    small_files reads its share, 100 files, once, in one sample of milliseconds: its method says what it read, its
    row that it is rough; two runs back to back are not compared on it, nor is a report of it at half the rate (what
    the trial's unchanged pairs gave), which the diff before this change called REGRESSED -50% (noise ±26%)."""
    from tests.helpers import REPO

    data = tmp_path / "imagenet-sample"
    made = run_cli("make-dataset", str(data))
    assert made.returncode == 0, made.stderr
    done = run_cli("run", "-c", str(REPO / "thresholds.yaml"), "--only", "storage", "--json", "-",
                   env={"DATA_DIR": str(data)}, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    small = next(r for r in report["results"] if r["id"] == "storage.small_files")
    # Its share of the first epoch, 100 files, in one sample; a further share where the node was slow enough that
    # 500 files/s stood within 10x of it (a busy machine), each named
    read, kept = map(int, re.fullmatch(r"each of its (\d+) files read once after (\d+) samples", small["stopped"]).groups())
    assert read % 100 == 0 and read // 100 == kept, small["stopped"]
    rule = "10% of the dataset's 1000 files, at least 25"
    assert (f"open+read+close of up to {read} of 1000 existing small files, each once (" +
            (f"its share of the first epoch: {rule})" if read == 100 else f"{kept} shares of the first epoch, each {rule}")
            ) in small["method"], small["method"]
    said = f"{kept} sample{'s' if kept > 1 else ''} of {read} files in "
    short = [w for w in small["warnings"] if w.startswith("short: " + said)]
    assert len(short) == 1 and "`preflight diff` does not compare it: a dataset of about " in short[0], small
    old = tmp_path / "old.json"
    old.write_text(done.stdout)
    # A second run right after, as the trial's pairs were: whatever the two rates, their rows are not compared (the
    # other rows' verdicts depend on this node's load, so the pair's exit code is not asserted here).
    again = run_cli("run", "-c", str(REPO / "thresholds.yaml"), "--only", "storage", "--json", str(tmp_path / "b.json"),
                    env={"DATA_DIR": str(data)}, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    pair = run_cli("diff", str(old), str(tmp_path / "b.json"), "--fail-on", "10%")
    rows = {line.split()[0]: line for line in pair.stdout.splitlines()[2:-1]}
    for metric in ("storage.small_files", "storage.small_files_bandwidth"):
        assert re.search(rf"x  too short to compare \(old: {said}\d+ ms, new: \d+ samples? of \d+ files "
                         r"in \d+ ms\)$", rows[metric]), rows[metric]
    for r in report["results"]:
        if r["metric"] in ("small_files", "small_files_bandwidth"):
            r["value"], r["samples"] = r["value"] / 2, [s / 2 for s in r["samples"]]
            r["warnings"] = [w.replace(" ms;", " ms (halved);", 1) for w in r["warnings"]]
    new = tmp_path / "new.json"
    new.write_text(json.dumps(report))
    diffed = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert diffed.returncode == 0, diffed.stdout
    lines = {line.split()[0]: line for line in diffed.stdout.splitlines()[2:-1]}
    for metric in ("storage.small_files", "storage.small_files_bandwidth"):
        assert f"0.500x  too short to compare (old: {said}" in lines[metric], lines[metric]


def _counts(gpus: float, xid: float, unreadable: float, workers: float, matmul: float) -> list:
    """A GPU node's counts: gated ones (GPUs, Xid lines needing a drain), facts (unreadable files, workers), and
    matmul_error, a ratio that varies from run to run, not a count."""
    return [
        result("device_count", "pass", instance="cuda", value=gpus, threshold={"min": 8.0}),
        result("xid_drain", "pass" if not xid else "fail", instance="xid", value=xid, threshold={"max": 0.0}),
        result("unreadable_files", "info", value=unreadable),
        result("workers", "info", instance="dataloader", value=workers),
        result("matmul_error", "pass", instance="cuda", device="cuda:0", value=matmul, threshold={"max": 1e-3}),
    ]


def _line(stdout: str, result_id: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith(result_id + " "))


def test_an_exact_count_is_compared_exactly_without_a_noise_band(tmp_path):
    """Issue 35: ``cuda.device_count`` 8 -> 7 was "within noise (-12%, noise ±21%)", a band meant for rates given to
    a count that either changed or did not. A gated count that got worse is judged by ``--fail-on`` as a rate is
    (-12.5% is beyond 10%, within 20%), one that left 0 is worse by more than any; a fact is "same" or "changed"."""
    old = _write(tmp_path, "old.json", _counts(8, 0, 3, 4, 2.4e-7))
    new = _write(tmp_path, "new.json", _counts(7, 2, 5, 4, 3.1e-7))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 1, done.stdout + done.stderr
    said = {i: _line(done.stdout, i) for i in ("cuda.device_count", "xid.xid_drain", "storage.unreadable_files",
                                               "dataloader.workers", "cuda.matmul_error[cuda:0]")}
    assert said["cuda.device_count"].endswith("REGRESSED -1 (-12%, an exact count, --fail-on 10%)")
    assert said["xid.xid_drain"].endswith("REGRESSED +2 (from 0, an exact count, --fail-on 10%); pass -> fail")
    assert said["storage.unreadable_files"].endswith("changed +2 (a fact, not judged)")
    assert said["dataloader.workers"].endswith("same")
    for result_id in ("cuda.device_count", "xid.xid_drain", "storage.unreadable_files", "dataloader.workers"):
        assert "noise" not in said[result_id], said[result_id]
    # matmul_error is a relative error (a ratio), not a count: still judged against the noise between runs
    band = 3 * math.sqrt(2) * noise.floor("cuda.matmul_error").cv
    assert said["cuda.matmul_error[cuda:0]"].endswith(f"REGRESSED +29% (noise ±{band:.0%}, --fail-on 10%)")
    assert done.stdout.splitlines()[-1] == ("== 3 regressed beyond 10%, 2 not judged; 5 metrics in "
                                            "both runs ==")
    lenient = run_cli("diff", str(old), str(new), "--fail-on", "20%")
    assert lenient.returncode == 1  # the Xid count left 0: worse by more than any --fail-on
    assert _line(lenient.stdout, "cuda.device_count").endswith("worse -1 (-12%, an exact count)")


def test_an_unchanged_count_is_the_same_and_never_regresses(tmp_path):
    old = _write(tmp_path, "old.json", _counts(8, 0, 3, 4, 2.4e-7))
    new = _write(tmp_path, "new.json", _counts(8, 0, 3, 4, 2.4e-7))
    done = run_cli("diff", str(old), str(new), "--fail-on", "0%")
    assert done.returncode == 0, done.stdout
    for result_id in ("cuda.device_count", "xid.xid_drain", "storage.unreadable_files", "dataloader.workers"):
        assert _line(done.stdout, result_id).endswith("same"), result_id
    assert done.stdout.splitlines()[-1] == ("== 2 same count, 1 cannot tell (counted as pass), 2 not judged; 5 metrics "
                                            "in both runs ==")  # at --fail-on 0% any noise is too wide to tell


def test_a_size_read_once_has_no_noise_band_so_a_cut_is_caught(tmp_path):
    """A new user's trial: /dev/shm cut from 23.54 GiB to 18.83 GiB, and what it allocates from 1 GiB to 819 MiB,
    were "within noise (-20%, noise ±21%)" at --fail-on 10%: sizes read once from the system have no run-to-run
    noise. A memory figure sampled over a run keeps its band."""
    def run(size: float, allocatable: float) -> list:
        return [result("size", "pass", instance="shm", value=size, unit="GiB", threshold={"min": 1.0}),
                result("allocatable", "pass", instance="shm", value=allocatable, unit="GiB", threshold={"min": 1.0})]

    old, new = _write(tmp_path, "old.json", run(23.54, 1.0)), _write(tmp_path, "new.json", run(18.83, 0.8))
    done = run_cli("diff", str(old), str(new), "--fail-on", "10%")
    assert done.returncode == 1, done.stdout + done.stderr
    assert _line(done.stdout, "shm.size").endswith("REGRESSED -20% (noise ±0%, --fail-on 10%)")
    assert _line(done.stdout, "shm.allocatable").endswith("REGRESSED -20% (noise ±0%, --fail-on 10%)")
    same = run_cli("diff", str(old), str(old), "--fail-on", "0%")
    assert same.returncode == 0, same.stdout
