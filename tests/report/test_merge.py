from __future__ import annotations

from datetime import datetime, timezone

from preflight.checks import CHECKS
from preflight.checks.base import scope
from preflight.config import FleetSettings
from preflight.report import RunReport
from preflight.report.merge import Contribution, flatten, merge, partial
from preflight.verdict import Result


def node_report(host: str, seq_read: float, free_gib: float = 8.0) -> RunReport:
    results = (
        Result("storage", "storage", "seq_read", "pass", "measured", value=seq_read, unit="MB/s"),
        Result("shm", "shm", "free", "info", "measured", value=free_gib, unit="GiB"),
        Result("cuda", "cuda", "name", "info", "measured", device="cuda:0", value="NVIDIA H100", unit="text"),
    )
    return RunReport(host, datetime(2026, 11, 29, tzinfo=timezone.utc), 1.0, "f.yaml", "abc", results,
                     {"hostname": host})


def fleet_of(speeds: list[float]) -> list[Contribution]:
    """Two ranks per node; the node's local rank 0 (even rank) brings its report."""
    out = []
    for node, speed in enumerate(speeds):
        out.append(Contribution(2 * node, node, f"node-{node}", node_report(f"node-{node}", speed)))
        out.append(Contribution(2 * node + 1, node, f"node-{node}", None))
    return out


def by_id(report: RunReport) -> dict[str, Result]:
    return {result.id: result for result in report.results}


def test_one_report_per_node_with_its_ranks_as_facts() -> None:
    reports = merge(fleet_of([900.0, 1000.0]), [], FleetSettings(), world_size=4)
    assert [r.host for r in reports] == ["node-0", "node-1"]
    assert [(r.facts["node_rank"], r.facts["ranks"], r.facts["world_size"]) for r in reports] == [
        ("0", "0,1", "4"), ("1", "2,3", "4")]


def test_per_rank_fleet_results_go_to_their_node_and_fleet_wide_ones_to_rank_zeros() -> None:
    fleet_results = [
        Result("collective", "collective", "allreduce_busbw", "pass", "measured", value=90.0, unit="GB/s"),
        *(Result("collective", "collective", "straggler", "pass", "m", device=f"rank{r}", value=1.0) for r in range(4)),
    ]
    first, second = merge(fleet_of([900.0, 1000.0]), fleet_results, FleetSettings(), world_size=4)
    assert "collective.allreduce_busbw" in by_id(first) and "collective.allreduce_busbw" not in by_id(second)
    assert {"collective.straggler[rank2]", "collective.straggler[rank3]"} <= set(by_id(second))
    assert "collective.straggler[rank2]" not in by_id(first)


def test_a_node_far_below_the_fleet_median_is_flagged_though_it_meets_its_minimum() -> None:
    reports = merge(fleet_of([1000.0, 950.0, 300.0]), [], FleetSettings(median_ratio=0.5), world_size=6)
    flags = [by_id(r)["storage.seq_read.vs_fleet_median"] for r in reports]
    assert [f.verdict for f in flags] == ["pass", "pass", "fail"]
    assert abs(flags[2].value - 300 / 950) < 1e-9
    assert "0.32x the fleet median 950 MB/s over 3 nodes" in flags[2].message
    assert "straggler" in flags[2].hint
    assert by_id(reports[2])["storage.seq_read"].verdict == "pass"
    assert reports[2].exit_code == 1 and reports[0].exit_code == 0


def test_ratio_and_severity_are_configurable() -> None:
    reports = merge(fleet_of([1000.0, 950.0, 300.0]), [], FleetSettings(median_ratio=0.25, severity="warn"), 6)
    assert by_id(reports[2])["storage.seq_read.vs_fleet_median"].verdict == "pass"
    reports = merge(fleet_of([1000.0, 950.0, 300.0]), [], FleetSettings(median_ratio=0.5, severity="warn"), 6)
    assert by_id(reports[2])["storage.seq_read.vs_fleet_median"].verdict == "warn"
    assert reports[2].exit_code == 0


def test_texts_sizes_single_nodes_and_fleet_checks_are_not_compared() -> None:
    (only,) = merge(fleet_of([500.0]), [], FleetSettings(), world_size=2)
    assert not [r for r in only.results if r.metric.endswith("vs_fleet_median")]
    reports = merge(fleet_of([500.0, 520.0]), [], FleetSettings(), world_size=4)
    compared = {r.id for r in reports[0].results if r.metric.endswith("vs_fleet_median")}
    assert compared == {"storage.seq_read.vs_fleet_median"}  # not shm.free: a size is a fact


# Every metric of every check that a fleet run compares with the fleet median: measured rates
# and latencies only. Anything else is a fact (a flag, count, size, version, text, temperature,
# power limit, a rated link speed) or a percentage derived from a rate that is compared itself.
COMPARED = {
    "storage": {"seq_read", "rand_read", "rand_read_p50", "rand_read_p99", "small_files", "small_files_bandwidth",
                "seq_write", "fsync_p99"},
    "dataloader": {"throughput", "bandwidth", "raw_throughput"},
    "transfer": {"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable"},
    "p2p": {"p2p_bandwidth"},
    "cuda": set(),
    "xid": set(),  # counts of the kernel log's lines: facts of each node, never compared
    "shm": set(),
    "model": {"samples_per_s", "step_time_p50", "step_time_p99"},
    "pipeline": {"samples_per_s", "model_samples_per_s"},  # input_bound is a share (%), not a rate
    "collective": set(),  # fleet-wide already: one figure for the whole process group, or per rank vs its median
}


def test_only_performance_metrics_are_compared_with_the_fleet_median() -> None:
    assert set(COMPARED) == set(CHECKS)
    for name, check in CHECKS.items():
        compared = {m.name for m in check.METRICS if m.is_performance and scope(check) == "node"}
        assert compared == COMPARED[name], name
    facts = {("storage", m) for m in ("read_only", "open_files_limit", "free_space", "unreadable_files",
                                      "skipped_files", "filesystem")}
    facts |= {("cuda", m) for m in ("device_count", "driver_version", "ecc_uncorrectable_volatile",
                                    "ecc_uncorrectable_aggregate", "temperature", "memory_total", "power_limit")}
    facts |= {("transfer", "link_rate"), ("transfer", "numa_local"), ("shm", "free")}
    for check, metric in facts:
        assert not next(m for m in CHECKS[check].METRICS if m.name == metric).is_performance, (check, metric)


def storage_report(host: str, seq_read: float, read_only: int = 0, unreadable: int = 0) -> RunReport:
    """What the storage check reports on a healthy node: facts first, then the read loops."""
    def info(metric: str, value: float | str, unit: str = "") -> Result:
        return Result("storage", "storage", metric, "info", "measured", value=value, unit=unit)

    results = (info("filesystem", "ext4 at /", "text"), info("free_space", 64.0, "GiB"), info("read_only", read_only),
               info("open_files_limit", 1024), info("unreadable_files", unreadable), info("skipped_files", 0),
               Result("storage", "storage", "seq_read", "pass", "measured", value=seq_read, unit="MB/s"),
               info("rand_read_p99", 2.0, "ms"))
    return RunReport(host, datetime(2026, 11, 29, tzinfo=timezone.utc), 1.0, "f.yaml", "abc", results,
                     {"hostname": host})


def test_storage_facts_are_never_compared_and_a_healthy_fleet_passes() -> None:
    # The reported case: read_only is 0 on every node, so its fleet median is 0, and every node
    # failed `read_only.vs_fleet_median 0 >= 0.5x the fleet median`.
    contributions = [Contribution(n, n, f"node-{n}", storage_report(f"node-{n}", 1000.0 + n, unreadable=3 * n))
                     for n in range(2)]
    reports = merge(contributions, [], FleetSettings(), world_size=2)
    for report in reports:
        compared = sorted(r.metric for r in report.results if r.metric.endswith(".vs_fleet_median"))
        assert compared == ["rand_read_p99.vs_fleet_median", "seq_read.vs_fleet_median"]
        assert report.exit_code == 0


def test_a_metric_whose_fleet_median_is_zero_is_not_judged_against_it() -> None:
    # Two of three nodes read nothing (0 MB/s: their absolute threshold fails them); a ratio to 0 means nothing.
    contributions = [Contribution(n, n, f"node-{n}", storage_report(f"node-{n}", speed))
                     for n, speed in enumerate([0.0, 0.0, 900.0])]
    reports = merge(contributions, [], FleetSettings(), world_size=3)
    assert not [r for report in reports for r in report.results if r.metric == "seq_read.vs_fleet_median"]
    assert all(by_id(r)["storage.rand_read_p99.vs_fleet_median"].verdict == "pass" for r in reports)


def test_partial_report_keeps_rank_zeros_node_and_the_fleet_error() -> None:
    error = Result("fleet", "fleet", "", "error", "rank 2 (node-1, node 1) did not reach the gather")
    (report,) = partial(node_report("node-0", 900.0), error, world_size=4, node_rank=0)
    assert report.results[-1] is error and report.exit_code == 1 and report.facts["world_size"] == "4"


def test_flattened_fleet_names_each_node_in_its_results() -> None:
    reports = merge(fleet_of([1000.0, 300.0]), [], FleetSettings(), world_size=4)
    flat = flatten(reports)
    ids = [r.id for r in flat.results]
    assert "storage.seq_read[node0]" in ids and "storage.seq_read.vs_fleet_median[node1]" in ids
    assert "cuda.name[node1/cuda:0]" in ids
    assert flat.host == "2 nodes (node-0, node-1)" and flat.exit_code == 1
