from __future__ import annotations

import pytest
import torch.distributed as dist

from preflight.checks import collective
from preflight.checks.base import Budget, scope


def test_runs_in_every_rank_not_in_a_node_worker() -> None:
    assert scope(collective) == "fleet"


def test_outside_a_fleet_run_every_metric_is_unmeasurable_with_the_launch_command() -> None:
    assert not dist.is_initialized()
    measured = collective.measure({"min_size": 4096, "max_size": 8192, "iterations": 1, "repeats": 1},
                                  Budget(0.1, 10))
    assert [m.metric for m in measured] == ["allreduce_busbw", "allgather_busbw", "straggler"]
    assert all(not m.measured and "torchrun --nproc-per-node N -m preflight run --distributed" in m.reason
               for m in measured)


def test_a_fleet_of_one_has_no_bus_to_measure(tmp_path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        measured = collective.measure({"min_size": 4096, "max_size": 8192, "iterations": 1, "repeats": 1},
                                      Budget(0.1, 10))
    finally:
        dist.destroy_process_group()
    assert all(not m.measured and "at least 2 ranks" in m.reason for m in measured)


def test_the_sweep_doubles_from_min_to_max_in_whole_float32_per_rank() -> None:
    assert collective._sweep(1 << 20, 8 << 20, ranks=4) == [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    assert all(size % (4 * 3) == 0 for size in collective._sweep(1 << 20, 5 << 20, ranks=3))
    assert collective._sweep(1 << 20, 1 << 20, ranks=2) == [1 << 20]


@pytest.mark.parametrize("ranks, allreduce, allgather", [
    (2, 1.0, 0.5),  # nccl-tests doc/PERFORMANCE.md: 2(n-1)/n and (n-1)/n
    (4, 1.5, 0.75),
    (8, 1.75, 0.875),
])
def test_bus_bandwidth_follows_nccl_tests_factors(ranks, allreduce, allgather) -> None:
    # 1 GB in 0.1 s is an algbw of 10 GB/s (GB = 10^9 B)
    assert collective.bus_bandwidth("allreduce", 10**9, 0.1, ranks) == pytest.approx(10 * allreduce, rel=1e-12)
    assert collective.bus_bandwidth("allgather", 10**9, 0.1, ranks) == pytest.approx(10 * allgather, rel=1e-12)
    assert collective.bus_bandwidth("allreduce", 2**30, 0.5, ranks) == pytest.approx(2**31 / 1e9 * allreduce,
                                                                                     rel=1e-12)
    with pytest.raises(KeyError):
        collective.bus_bandwidth("broadcast", 10**9, 0.1, ranks)


def test_each_ranks_time_is_averaged_over_the_ranks_not_maxed(monkeypatch) -> None:
    rank_times = [1.0, 2.0, 6.0]  # what the three ranks timed; this rank timed 1.0
    reduced = {"sum": sum(rank_times), "max": max(rank_times)}
    calls = []
    monkeypatch.setattr(collective, "_reduce", lambda value, how: calls.append((value, how)) or reduced[how])
    monkeypatch.setattr(collective, "_world", lambda: len(rank_times))
    assert collective._fleet_mean(1.0) == 3.0
    assert collective._fleet_max(1.0) == 6.0
    assert calls == [(1.0, "sum"), (1.0, "max")]


def test_straggler_ratios_are_each_ranks_time_over_the_median_rank() -> None:
    ratios = collective.straggler_ratios([0.010, 0.012, 0.030])
    assert [(m.device, m.value) for m in ratios] == [("rank0", pytest.approx(10 / 12)), ("rank1", 1.0),
                                                     ("rank2", pytest.approx(2.5))]
    assert ratios[0].method == "all-reduce loop time per rank over the median (12 ms); slowest: rank 2 at 2.50x"
    even = collective.straggler_ratios([2.0, 4.0, 1.0, 3.0])  # median 2.5: an even count interpolates
    assert [m.value for m in even] == [0.8, 1.6, 0.4, 1.2] and "slowest: rank 1 at 1.60x" in even[0].method


def test_the_unmeasurable_metrics_keep_their_units_and_give_the_whole_launch_command() -> None:
    measured = collective.measure({"min_size": 4096, "max_size": 8192, "iterations": 1, "repeats": 1},
                                  Budget(0.1, 10))
    assert [(m.metric, m.unit) for m in measured] == [("allreduce_busbw", "GB/s"), ("allgather_busbw", "GB/s"),
                                                      ("straggler", "")]
    assert {m.reason for m in measured} == {
        "runs only in a fleet run: launch with `torchrun --nproc-per-node N -m preflight run --distributed`"}


def _fake_fleet(monkeypatch, ranks: int) -> None:
    """A process group of ``ranks`` ranks where every op of S bytes takes S ns on every rank (1 GB/s algbw)."""
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: ranks)
    monkeypatch.setattr(collective, "_operation", lambda name, ranks: name)
    monkeypatch.setattr(collective, "_time_size",
                        lambda op, size, budget_s, iterations, repeats: [size * 1e-9] * repeats)
    monkeypatch.setattr(collective, "_fleet_mean", lambda seconds: seconds)
    monkeypatch.setattr(collective, "_stragglers", lambda mine, ranks: collective.straggler_ratios([mine] * ranks))
    monkeypatch.setattr(collective, "_method", 
                        lambda name, ranks, sweep: f"{name} " + ", ".join(f"{s}: {b:.3g}" for s, b in sweep))


def test_a_fleet_of_two_ranks_is_measured_and_one_rank_is_not(monkeypatch, tmp_path) -> None:
    _fake_fleet(monkeypatch, ranks=2)
    options = {"min_size": 4096, "max_size": 8192, "iterations": 1, "repeats": 2}
    measured = collective.measure(options, Budget(0.1, 10))
    # 2 ranks: busbw = algbw * 2(n-1)/n = 1 GB/s for all-reduce, algbw * (n-1)/n = 0.5 GB/s for all-gather
    assert [(m.metric, m.value, m.unit) for m in measured] == [
        ("allreduce_busbw", pytest.approx(1.0), "GB/s"), ("straggler", 1.0, ""), ("straggler", 1.0, ""),
        ("allgather_busbw", pytest.approx(0.5), "GB/s")]
    assert measured[0].method == "allreduce 4096: 1, 8192: 1"
    monkeypatch.setattr(dist, "get_world_size", lambda: 1)
    alone = collective.measure(options, Budget(0.1, 10))
    assert [(m.metric, m.value, m.unit) for m in alone] == [("allreduce_busbw", None, "GB/s"),
                                                            ("allgather_busbw", None, "GB/s"), ("straggler", None, "")]
    assert {m.reason for m in alone} == {"a fleet of 1 rank has no bus to measure: launch at least 2 ranks"}


def test_straggler_measurements_are_unitless_and_name_the_median_in_milliseconds() -> None:
    ratios = collective.straggler_ratios([0.0999, 0.0999, 0.0999])
    assert [(m.metric, m.unit, m.device, m.value) for m in ratios] == [
        ("straggler", "", "rank0", 1.0), ("straggler", "", "rank1", 1.0), ("straggler", "", "rank2", 1.0)]
    assert ratios[0].method == "all-reduce loop time per rank over the median (99.9 ms); slowest: rank 0 at 1.00x"


@pytest.mark.parametrize("size, text", [(4096, "4 KiB"), (12288, "12 KiB"), ((1 << 20) - 4096, "1020 KiB"),
                                        (1 << 20, "1 MiB"), (64 << 20, "64 MiB")],
                         ids=["4KiB", "12KiB", "1020KiB", "1MiB", "64MiB"])  # no spaces: mutmut passes ids to pytest
def test_sweep_sizes_are_named_in_kib_below_one_mib_and_in_mib_from_it(size, text) -> None:
    assert collective._size(size) == text
