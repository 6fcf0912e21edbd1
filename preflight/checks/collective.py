"""Collective bandwidth across the fleet: all-reduce and all-gather bus bandwidth, and stragglers.

Runs in every ``torchrun`` rank at once (``SCOPE = "fleet"``), inside the process group
the fleet run joined: NCCL on GPUs, gloo on CPUs. The method is nccl-tests'
(github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md): a size sweep ``-b min -e max -f 2``,
warm-up iterations, then timed iterations; each rank's time is averaged over the ranks
and turned into

    algbw = S / t                      S: bytes of the op's buffer (all-gather: the gathered whole)
    busbw = algbw * 2 (n - 1) / n      all-reduce (a ring moves 2 (n-1)/n of S through each link)
    busbw = algbw * (n - 1) / n        all-gather

so that bus bandwidth is comparable with the hardware's link bandwidth whatever the rank
count. Outside a fleet run (no process group) every metric is unmeasurable, with the fix.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from preflight.checks.base import Budget, Metric, Option
from preflight.measurement import Measurement, unmeasurable
from preflight.units import Dimension, format_value, to_unit

NAME = "collective"
HELP = "all-reduce and all-gather bus bandwidth across every torchrun rank (nccl-tests method), and stragglers"
DURATION = "split equally between the message sizes of the sweep, for each of all-reduce and all-gather"
SCOPE = "fleet"
OPTIONS = (
    Option("min_size", Dimension.SIZE, "1 MiB", "smallest buffer of the sweep, as nccl-tests -b", minimum=4096),
    Option("max_size", Dimension.SIZE, "64 MiB", "largest buffer of the sweep, as nccl-tests -e; its busbw is "
                                                 "the reported value", minimum=4096),
    Option("iterations", "int", 20, "most timed iterations per sample, as nccl-tests -n (fewer if the budget "
                                    "is short)", minimum=1),
    Option("repeats", "int", 3, "samples per size; the median is kept", minimum=1),
)
METRICS = (
    Metric("allreduce_busbw", "GB/s", True,
           "all-reduce (sum, float32) bus bandwidth at max_size, GB = 10^9 bytes: algbw * 2(n-1)/n with the time "
           "averaged over ranks (nccl-tests all_reduce_perf, doc/PERFORMANCE.md)",
           hint="measured {measured}, required {required}: check the NICs/NVLink (nvidia-smi topo -m, ibstat) "
                "and NCCL_DEBUG=INFO's chosen transport"),
    Metric("allgather_busbw", "GB/s", True,
           "all-gather (float32) bus bandwidth at max_size, S = the gathered buffer: algbw * (n-1)/n "
           "(nccl-tests all_gather_perf, doc/PERFORMANCE.md)",
           hint="measured {measured}, required {required}: check the NICs/NVLink and NCCL_DEBUG=INFO's transport"),
    Metric("straggler", "", False,
           "per rank: its time in the timed all-reduce loop at max_size over the median rank's time (1.0 is "
           "typical); the slowest rank's figure is the fleet's slowest-over-median ratio",
           per_device=True,
           hint="this rank was {measured}x the median: drain its node and check its NIC, GPU clocks and CPU load",
           ratio=True),
)

WARMUP = 2  # nccl-tests -w defaults to 5; two are enough once the sweep's first size has run
GB = 1e9


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Sweep all-reduce and all-gather over the fleet; every rank must call this together.

    Returns the same fleet-wide measurements on every rank: ``allreduce_busbw`` and
    ``allgather_busbw`` in GB/s (samples: busbw of each repeat at ``max_size``) and one
    ``straggler`` ratio per rank (device ``rank<N>``). Raises RuntimeError (from
    torch.distributed) when a rank is lost mid-collective; the fleet run names it.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        reason = "runs only in a fleet run: launch with `torchrun --nproc-per-node N -m preflight run --distributed`"
        return [unmeasurable(m.name, reason, m.unit) for m in METRICS]
    ranks = dist.get_world_size()
    if ranks < 2:
        reason = "a fleet of 1 rank has no bus to measure: launch at least 2 ranks"
        return [unmeasurable(m.name, reason, m.unit) for m in METRICS]
    # pragma: no mutate start (fleet-only: tests/fleet runs it under torchrun, out of the mutation run's reach)
    import statistics  # here: `preflight validate` imports this module for its tables only

    sizes = _sweep(int(options["min_size"]), int(options["max_size"]), ranks)
    per_size_s = budget.duration_s / len(sizes)
    results: list[Measurement] = []
    for name in ("allreduce", "allgather"):
        op = _operation(name, ranks)
        sweep: list[tuple[int, float]] = []
        for size in sizes:
            times = _time_size(op, size, per_size_s, int(options["iterations"]), int(options["repeats"]))
            samples = tuple(bus_bandwidth(name, size, _fleet_mean(t), ranks) for t in times)
            sweep.append((size, statistics.median(samples)))
        results.append(Measurement(f"{name}_busbw", unit="GB/s", samples=samples, method=_method(name, ranks, sweep)))
        if name == "allreduce":
            results += _stragglers(sum(times), ranks)
    return results
    # pragma: no mutate end


def bus_bandwidth(operation: str, size: int, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth in GB/s (10^9 B/s) of one ``operation`` on ``ranks`` ranks.

    ``size`` is the op's buffer in bytes (all-gather: the gathered whole), ``seconds`` the time
    of one op averaged over the ranks. algbw = size / seconds; busbw = algbw x 2(n-1)/n for
    "allreduce", algbw x (n-1)/n for "allgather" (nccl-tests doc/PERFORMANCE.md).

    Raises:
        KeyError: an operation other than those two.
    """
    factor = {"allreduce": 2 * (ranks - 1) / ranks, "allgather": (ranks - 1) / ranks}[operation]
    return size / seconds / GB * factor


def _sweep(low: int, high: int, ranks: int) -> list[int]:
    """Buffer sizes low, 2 low, ... up to high, each a whole number of float32 per rank."""
    step = 4 * ranks
    sizes, size = [], max(low, step)
    while size < high:
        sizes.append(size - size % step)
        size *= 2
    return sizes + [max(high - high % step, step)]


def _operation(name: str, ranks: int) -> Callable[[int], Callable[[], None]]:  # pragma: no mutate block (fleet-only)
    """A factory: bytes -> a zero-argument function running one collective on buffers of that size."""
    import torch
    import torch.distributed as dist

    device = _device()

    def make(size: int) -> Callable[[], None]:
        if name == "allreduce":
            buffer = torch.ones(size // 4, dtype=torch.float32, device=device)
            return lambda: dist.all_reduce(buffer)
        chunk = torch.ones(size // 4 // ranks, dtype=torch.float32, device=device)
        gathered = torch.empty(chunk.numel() * ranks, dtype=torch.float32, device=device)
        # torch 2.13 renamed all_gather_into_tensor to all_gather_single; older torch has only the former
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(gathered, chunk)

    return make


def _time_size(make: Callable[[int], Callable[[], None]], size: int, budget_s: float, iterations: int,
               repeats: int) -> list[float]:  # pragma: no mutate block (fleet-only)
    """This rank's mean seconds per op, one per repeat.

    Algorithm (nccl-tests' timing loop)::

        run the op WARMUP times; time one more; agree on the slowest rank's time t1
        iters = clamp(budget / repeats / t1, 1, iterations)    -- the same on every rank
        repeat `repeats` times: barrier; start clock; run iters ops; synchronize; stop clock
    """
    import torch.distributed as dist

    op = make(size)
    for _ in range(WARMUP):
        op()
    start = time.perf_counter()
    op()
    _synchronize()
    first = _fleet_max(time.perf_counter() - start)
    iters = max(1, min(iterations, int(budget_s / repeats / max(first, 1e-6))))
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            op()
        _synchronize()
        times.append((time.perf_counter() - start) / iters)
    return times


def _stragglers(mine: float, ranks: int) -> list[Measurement]:  # pragma: no mutate block (fleet-only)
    """Every rank's loop time over the median rank's, one measurement per rank."""
    import torch
    import torch.distributed as dist

    everyone = [torch.zeros(1, dtype=torch.float64, device=_device()) for _ in range(ranks)]
    dist.all_gather(everyone, torch.tensor([mine], dtype=torch.float64, device=_device()))
    return straggler_ratios([float(t.item()) for t in everyone])


def straggler_ratios(times: list[float]) -> list[Measurement]:
    """One ``straggler`` measurement per rank: its time in ``times`` (seconds, by rank) over the median rank's.

    1.0 is a typical rank; the slowest rank's ratio is what a synchronous job waits for (it is
    named in the method). Raises ``statistics.StatisticsError`` for no times.
    """
    import statistics

    median = statistics.median(times)
    slowest = max(range(len(times)), key=lambda r: times[r])
    method = (f"all-reduce loop time per rank over the median ({median * 1e3:.3g} ms); slowest: rank {slowest} "
              f"at {times[slowest] / median:.2f}x")
    return [Measurement("straggler", t / median, "", device=f"rank{r}", method=method) for r, t in enumerate(times)]


def _fleet_mean(seconds: float) -> float:
    """This rank's ``seconds`` averaged with every other rank's (nccl-tests' default, ``-a 1``)."""
    return _reduce(seconds, "sum") / _world()


def _fleet_max(seconds: float) -> float:
    return _reduce(seconds, "max")


def _reduce(value: float, how: str) -> float:  # pragma: no mutate block (fleet-only)
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([value], dtype=torch.float64, device=_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if how == "sum" else dist.ReduceOp.MAX)
    return float(tensor.item())


def _world() -> int:  # pragma: no mutate block (fleet-only)
    import torch.distributed as dist

    return dist.get_world_size()


def _device() -> Any:  # pragma: no mutate block (fleet-only)
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":  # GPU-only path: NCCL reduces device memory only
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _synchronize() -> None:  # pragma: no mutate block (fleet-only)
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":  # GPU-only path: kernels are asynchronous; the host clock needs a sync
        torch.cuda.synchronize()


def _method(name: str, ranks: int, sweep: list[tuple[int, float]]) -> str:  # pragma: no mutate block (fleet-only)
    import torch.distributed as dist

    table = ", ".join(f"{_size(size)}: {busbw:.3g}" for size, busbw in sweep)
    return (f"{dist.get_backend()} {name.replace('all', 'all-')} of float32 over {ranks} ranks, nccl-tests busbw; "
            f"GB/s by size: {table}")


def _size(size: int) -> str:
    unit = "MiB" if size >= 1 << 20 else "KiB"
    return format_value(to_unit(size, unit), unit)
