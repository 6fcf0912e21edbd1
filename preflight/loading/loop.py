"""Pull batches from a DataLoader over time windows, optionally emulating the GPU's compute (loading layer).

AU is MLPerf Storage's (DLIO's ``computation_time``): emulated compute / wall time, warm-up excluded; a worker the
cgroup OOM-killed is named (``explaining_worker_oom``). Method and measurements: docs/checks.md (``dataloader``),
docs/benchmarks.md (founding_table).
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence, TypeVar

import numpy as np

from preflight.checks.base import Budget
from preflight.host.cgroup_memory import OomWatch
from preflight.host.cpus import auto_workers
from preflight.io.dataset import Spent
from preflight.sampling import sample

T = TypeVar("T")

WARMUP_BATCHES_PER_WORKER = 2  # steps discarded per worker: workers starting, prefetch (2 per worker) filling
# At 1000 samples/s and batch 64, 0.1 s is 2 steps; shorter would not let 8 pools fit in a 3 s duration.
MIN_WINDOW_S = 0.1
OVERRUN = 1.25  # pools stop once another would end past this much of the duration
SLOPE_MIN_BATCHES = 8  # a pool's least-squares rate (``sustained``) stands on at least this many batches
GRID_POINTS = 1000  # moments the count is read at for that fit: a millisecond apart over a 1 s pass
MAX_DELIVERIES = 4096  # deliveries a pool keeps for it: past this, every second one (``BatchPuller._delivered``)
BURST_NAMED = 0.03  # a sustained rate this far below samples / time is named in the method: beyond a steady loader's jitter


class Window(NamedTuple):
    samples_per_s: float
    mb_per_s: float
    utilization_pct: float  # emulated compute time / wall time, 100 when step_time is 0
    seconds: float = 0.0  # the window's wall time: a pool's and a run's rate weigh windows by it (``time_weighted``)


class Delivery(NamedTuple):
    """Where a pool's pass stood at one moment of its windows: a window's start, or a batch just delivered."""

    seconds: float  # the puller's clock
    samples: int  # samples delivered so far, warm-up included (``BatchPuller.samples_total``)
    nbytes: int  # bytes of them


def sustained(deliveries: Sequence[Delivery], samples_per_s: float, mb_per_s: float) -> tuple[float, float]:
    """(samples/s, MB/s) a pool's windows sustain: the lower of their count over time (``samples_per_s``,
    ``mb_per_s``) and the least-squares slope of the count delivered against time, read at ``GRID_POINTS`` evenly
    spaced moments of ``deliveries``; the count alone under ``SLOPE_MIN_BATCHES`` batches. The slope leaves out a
    throttle's start-up burst, which a count over time takes in (docs/benchmarks.md, founding_table)."""
    if len(deliveries) - 1 < SLOPE_MIN_BATCHES or deliveries[-1].seconds <= deliveries[0].seconds:
        return samples_per_s, mb_per_s
    seconds = np.array([d.seconds for d in deliveries])
    moments = np.linspace(seconds[0], seconds[-1], GRID_POINTS)
    latest = np.searchsorted(seconds, moments, side="right") - 1  # the last delivery at or before each moment
    samples = np.array([d.samples for d in deliveries], dtype=float)[latest]
    nbytes = np.array([d.nbytes for d in deliveries], dtype=float)[latest]
    slope_samples, slope_bytes = (float(np.polyfit(moments, counts, 1)[0]) for counts in (samples, nbytes))
    return min(samples_per_s, max(0.0, slope_samples)), min(mb_per_s, max(0.0, slope_bytes) / 1e6)


def pool_rate(puller: BatchPuller, taken: Sequence[Window]) -> tuple[float, float, float]:
    """(samples/s, MB/s, burst) of one pool: the ``sustained`` rates over ``puller``'s deliveries and its windows
    ``taken``, and the fraction the samples/s fell below the windows' count over their time (0 for a steady loader)."""
    window_s = [w.seconds for w in taken]
    counted = time_weighted([w.samples_per_s for w in taken], window_s)
    rate, mb_rate = sustained(puller.deliveries, counted, time_weighted([w.mb_per_s for w in taken], window_s))
    return rate, mb_rate, 1 - rate / counted if counted > 0 else 0.0


def time_weighted(rates: Sequence[float], seconds: Sequence[float]) -> float:
    """The mean of ``rates`` weighted by the ``seconds`` each was measured over (total samples / total time); the
    plain mean where every weight is 0. A plain mean of window rates runs high for short, unequal windows."""
    total = sum(seconds)
    if total <= 0:
        return sum(rates) / len(rates)
    return sum(rate * s for rate, s in zip(rates, seconds)) / total


class EmptyLoader(ValueError):
    """The DataLoader yields no batch at all, even after a restart: its dataset holds no sample."""


class WorkerOomKilled(RuntimeError):
    """The kernel OOM-killed a DataLoader worker under the cgroup's memory limit."""


def explaining_worker_oom(measure: Callable[..., T],
                          watch: Callable[[], OomWatch] = OomWatch.start) -> Callable[..., T]:
    """Wrap a check's ``measure(options, budget, ...)``: name a DataLoader worker's OOM kill, with the fix.

    ``watch`` reads the cgroup's OOM-kill count before any loader starts; when ``measure`` raises torch's dead-worker
    RuntimeError and the count rose, ``WorkerOomKilled`` is raised instead. It wraps the whole of ``measure`` because
    torch raises that error from its SIGCHLD handler, at whatever line the main thread is on.
    """

    @functools.wraps(measure)
    def measured(options: Mapping[str, Any], *rest: Any) -> T:
        oom = watch()
        try:
            return measure(options, *rest)
        except RuntimeError as error:
            evidence = oom.evidence() if "DataLoader worker" in str(error) else ""
            if not evidence:
                raise
            workers = options["num_workers"]
            workers = f"auto = {auto_workers()}" if workers == "auto" else workers
            raise WorkerOomKilled(
                f"{error}: the kernel OOM-killed a DataLoader worker {evidence}: raise the container's or pod's "
                f"memory limit, or lower num_workers ({workers}), prefetch_factor ({options['prefetch_factor']}) "
                f"or batch_size ({options['batch_size']})") from error

    return measured


def sizes_or_tensor(batch: Any) -> tuple[int, int]:
    """(samples, bytes) of our own batches: a ``collate_sizes`` pair, or one stacked tensor."""
    if isinstance(batch, tuple):
        return batch
    return len(batch), batch.element_size() * batch.nelement()


EPOCH_ENDED = object()  # ``Epochs.next``'s answer where an epoch ended and no new one is to start


class Epochs:
    """A DataLoader's batches as a training loop takes them, epoch after epoch; the caller decides each epoch's end:
    ``next(new_epoch=True)`` starts the next (the pipeline's fed step), ``new_epoch=False`` returns ``EPOCH_ENDED``
    (the dataloader's one pass). ``position``: batches of this epoch; ``epoch_batches``: a whole one's."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.iterator: Iterator[Any] = iter(loader)  # the current epoch's, kept past its end (its workers are read)
        self.ended = False  # the current epoch's iterator is exhausted
        self.position, self.epochs = 0, 1
        self.epoch_batches: int | None = None

    def next(self, new_epoch: bool = True) -> Any:
        """The next batch, or ``EPOCH_ENDED`` (see the class).

        Raises:
            EmptyLoader: a new epoch yields no batch at all.
        """
        if not self.ended:
            try:
                batch = next(self.iterator)
            except StopIteration:
                self.ended, self.epoch_batches = True, self.position
            else:
                self.position += 1
                return batch
        if not new_epoch:
            return EPOCH_ENDED
        self.iterator, self.ended, self.position, self.epochs = iter(self.loader), False, 0, self.epochs + 1
        try:
            batch = next(self.iterator)
        except StopIteration:
            raise EmptyLoader("the DataLoader yields no batch: the dataset is empty") from None
        self.position = 1
        return batch


class BatchPuller:
    """Pulls batches over one pass of the data; counts samples, bytes and compute time.
    ``count(batch) -> (samples, bytes)``: ``sizes_or_tensor``, or ``user.batching``'s for the job's. Never restarted
    (a second epoch would be a cached reread): at the pass's end ``Spent`` is raised and ``spent`` set."""

    def __init__(self, loader: Any, step_time_s: float = 0.0,
                 count: Callable[[Any], tuple[int, int]] = sizes_or_tensor,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.loader = loader
        self.step_time_s = step_time_s
        self.count = count
        self.clock = clock  # seconds; the tests' fake clock makes window rates exact
        self.epochs = Epochs(loader)
        self.epochs_ended = 0  # epochs read to their end: every sample (every shard) reached ``count``
        self.batches = self.samples_total = self.bytes_total = 0  # delivered so far, warm-up included
        self.spent = False  # the pass ended: every sample this loader will deliver was delivered
        self.round_steps = 1  # a window's steps are a multiple of this: the workers' round (``window``)
        self.warmed_up = False  # its warm-up steps were taken (``windows``): a pool warms up once
        self.mark: float | None = None  # where the next window starts: the last one's end (``window``)
        self.deliveries: list[Delivery] = []  # the windows' start and each ``stride``-th batch (``sustained``)
        self.stride, self._unrecorded = 1, 0

    @property
    def iterator(self) -> Iterator[Any]:
        """The loader's iterator of the pass (torch's holds the workers ``memory`` reads)."""
        return self.epochs.iterator

    def restart_clock(self) -> None:
        """Start the next windows afresh: a new measurement on this warmed-up pool."""
        self.mark, self.deliveries, self.stride, self._unrecorded = None, [], 1, 0

    def _delivered(self, now: float) -> None:
        """Record where the pass stands at ``now`` for ``sustained``; past ``MAX_DELIVERIES`` every second record goes
        and the stride doubles, so memory stays bounded."""
        self._unrecorded += 1
        if self._unrecorded < self.stride:
            return
        self._unrecorded = 0
        self.deliveries.append(Delivery(now, self.samples_total, self.bytes_total))
        if len(self.deliveries) > MAX_DELIVERIES:
            del self.deliveries[1::2]  # the windows' start stays
            self.stride *= 2

    def close(self) -> None:
        """End this loader's workers now and wait for them, as torch does at an epoch's end (not when the garbage
        collector gets to it, with the next pool already started beside them)."""
        shutdown = getattr(self.iterator, "_shutdown_workers", None)  # torch's multi-process iterator
        if shutdown is not None:
            shutdown()

    def _next(self) -> tuple[int, int]:
        batch = self.epochs.next(new_epoch=False)
        if batch is EPOCH_ENDED:
            if not self.batches:
                raise EmptyLoader("the DataLoader yields no batch: the dataset is empty")
            self.epochs_ended += 1
            self.spent = True
            raise Spent(f"the pass over the data ended after {self.batches} batches") from None
        try:
            samples, nbytes = self.count(batch)
        except Spent:  # the count saw the stream start over (``user.Replays``): the pass ended there
            self.spent = True
            raise
        self.batches, self.samples_total, self.bytes_total = self.batches + 1, self.samples_total + samples, \
            self.bytes_total + nbytes
        return samples, nbytes

    def skip(self, batches: int) -> None:
        """Warm-up: take ``batches`` steps (workers starting, prefetch filling) and discard them."""
        for _ in range(batches):
            self._next()
            self._compute()

    def finish_epoch(self, seconds: float) -> bool:
        """Read the rest of the current epoch through ``count``, for at most ``seconds``; whether it ended. Used to
        count every damaged shard when a loader delivered no sample."""
        start = self.clock()
        try:
            while not self.spent and self.clock() - start < seconds:
                self._next()
        except Spent:
            pass
        return self.spent

    def window(self, seconds: float) -> Window:
        """Steps until at least ``seconds`` of wall time, in whole rounds of ``round_steps`` (torch yields batches
        worker by worker); where the pass ends first, the steps it held (``Spent`` when none). A window starts where
        the last ended (``mark``), so time between windows is not lost (docs/benchmarks.md, founding_table)."""
        start = self.mark if self.mark is not None else self.clock()
        if not self.deliveries:
            self.deliveries.append(Delivery(start, self.samples_total, self.bytes_total))
        count = size = steps = 0
        while True:
            try:
                samples, nbytes = self._next()
            except Spent:
                if not steps:
                    raise
                return self._ended(count, size, steps, start)
            self._compute()
            count, size, steps = count + samples, size + nbytes, steps + 1
            now = self.clock()
            self._delivered(now)
            if now - start >= seconds and steps % self.round_steps == 0:
                return self._ended(count, size, steps, start)

    def _ended(self, count: int, size: int, steps: int, start: float) -> Window:
        """The window from ``start`` to now; the next one starts here (``mark``)."""
        self.mark = self.clock()
        return self._rate(count, size, steps, self.mark - start)

    def ended_early(self) -> None:
        """Called when the pass ended before any window: a subclass that reads the loader's state after each window
        reads it now (``memory.Watched``)."""

    def _rate(self, count: int, size: int, steps: int, elapsed: float) -> Window:
        elapsed = max(elapsed, 1e-9)
        utilization = 100.0 * steps * self.step_time_s / elapsed if self.step_time_s else 100.0
        return Window(count / elapsed, size / elapsed / 1e6, min(100.0, utilization), elapsed)

    def _compute(self) -> None:
        if self.step_time_s:
            time.sleep(self.step_time_s)  # the emulated accelerator's step, as DLIO's computation_time


class Taken(list):  # the Windows, and why sampling stopped
    stopped = ""
    whole_pass = False  # the pass ended inside the warm-up: one window over all of it, the workers' start included
    read_on = False  # the first pool read on to the pass's end or the duration's (``pooled``)


def windows(puller: BatchPuller, workers: int, budget: Budget, min_windows: int = 5) -> Taken:
    """Discard ``workers`` x 2 warm-up steps (left out as DLIO and MLPerf Storage do, paid from the duration), then
    ``sampling.sample`` at least ``min_windows`` windows of an eighth of what is left (at least ``MIN_WINDOW_S``)
    until the pass ends; a pass that ends inside the warm-up is one window."""
    began = puller.clock()
    puller.round_steps = max(1, workers)  # the warm-up is whole rounds too: every window starts at a round's end
    if not puller.warmed_up:  # a pool read on (``pooled``) continues from its last window
        try:
            puller.skip(workers * WARMUP_BATCHES_PER_WORKER)
        except Spent as spent:
            return _whole_pass(puller, began, f"{spent}, inside the warm-up: the rate includes the workers' start")
        puller.warmed_up = True
        puller.restart_clock()
    if puller.mark is None:  # the first window starts here; each later one where the last ended, read on or not
        puller.mark = puller.clock()
    left = max(0.0, budget.duration_s - (puller.clock() - began))
    seconds = max(MIN_WINDOW_S, left / 8)
    taken = Taken()

    def one() -> float:
        taken.append(puller.window(seconds))
        return taken[-1][0]

    try:
        taken.stopped = sample(one, left, warmup=0, min_samples=min_windows, target_spread=0.03,
                               clock=puller.clock).stopped
    except Spent as spent:  # at the end of the warm-up: no window after it
        return _whole_pass(puller, began, f"{spent}, at the end of the warm-up: the rate includes the workers' start")
    return taken


def _whole_pass(puller: BatchPuller, began: float, stopped: str) -> Taken:
    """One window over every batch ``puller`` delivered since ``began``: a pass too short for warm-up and windows."""
    puller.ended_early()
    taken = Taken([puller._rate(puller.samples_total, puller.bytes_total, puller.batches, puller.clock() - began)])
    taken.stopped, taken.whole_pass = stopped, True
    return taken


class Pools(NamedTuple):
    """Rates over several fresh worker pools: each pool's (``rates``, ``mb_rates``) and their means."""

    rates: tuple[float, ...]  # samples/s of each pool, over its windows after warm-up (``sustained``)
    mb_rates: tuple[float, ...]  # MB/s of each pool
    stopped: str  # why the last pool's sampling stopped
    last: BatchPuller  # the last pool, still running (the AU phase continues on it)
    asked: int = 0  # worker_pools; more than len(rates) when the duration held fewer
    pool_s: float = 0.0  # the longest a pool took: its start, warm-up and windows
    spent: bool = False  # the pass over the data ended: the pools read every sample once between them
    seconds: tuple[float, ...] = ()  # each pool's measured time, its windows' (``time_weighted``)
    tail: int = 0  # samples of the pass's end that a fresh pool read inside its warm-up: not in the rate (``pooled``)
    read_on: bool = False  # the first pool read on to the pass's end, which the duration held (``pooled``)
    burst: float = 0.0  # the most a pool's sustained rate fell below its count over time (``sustained``), a fraction
    windows: tuple[Window, ...] = ()  # the last pool's windows

    @property
    def spread(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The (samples/s, MB/s) draws a figure's interval is taken over: the pools' rates, else the one pool's
        windows (not independent draws of the loader: a floor of its uncertainty; docs/checks.md)."""
        if len(self.rates) > 1 or len(self.windows) < 2:
            return self.rates, self.mb_rates
        return tuple(w.samples_per_s for w in self.windows), tuple(w.mb_per_s for w in self.windows)

    @property
    def rate(self) -> float:
        """samples/s over every pool: each pool's ``sustained`` rate weighed by its windows' time."""
        return time_weighted(self.rates, self.seconds)

    @property
    def mb_rate(self) -> float:
        """MB/s over every pool's windows, weighed as ``rate``."""
        return time_weighted(self.mb_rates, self.seconds)

    @property
    def method(self) -> str:
        burst = (f"; samples/s as the least-squares slope of samples delivered against time, {self.burst:.0%} below "
                 f"their count over the time: the device served a burst at the pass's start or end that its steady "
                 f"rate does not hold" if self.burst >= BURST_NAMED else "")
        return self._pools() + burst

    def _pools(self) -> str:
        tail = (f"; the pass's last {self.tail} samples, read by a fresh pool before its second window, not counted"
                if self.tail else "")
        if self.read_on:
            return (", one worker pool reading the pass over the data to its end, as the job's first epoch" if self.spent
                    else ", one worker pool reading on for the duration (at its first windows' rate the pass would "
                    "have ended within it)")
        if self.spent and len(self.rates) < self.asked:
            return (f", mean of {len(self.rates)} fresh worker pools continuing one pass over the data (it ended "
                    f"before {self.asked}){tail}" if len(self.rates) > 1 else f", one pass over the data{tail}")
        if len(self.rates) < self.asked:
            return f", mean of {len(self.rates)} of {self.asked} fresh worker pools"
        return f", mean of {len(self.rates)} fresh worker pools" if len(self.rates) > 1 else ""

    def shortfall(self, phases: Sequence[str] = ("the loader",)) -> str:
        """What a reader must know when the duration held fewer pools than ``worker_pools``, with a fix that works; ""
        otherwise. ``phases``: the parts ``duration`` is split between; the duration named is ``asked x pool_s`` times
        the phases (issue 35)."""
        if len(self.rates) >= self.asked or self.spent or self.read_on:  # a spent pass is no shortfall of the duration
            return ""
        needed = math.ceil(self.asked * self.pool_s * len(phases))
        split = f" (split between {', '.join(phases)})" if len(phases) > 1 else ""
        return (f"{len(self.rates)} of {self.asked} worker pools fit in the duration (a pool took up to "
                f"{self.pool_s:.2f}s to start, warm up and measure): raise duration to {needed}s{split} to measure "
                f"them all, or set worker_pools: {len(self.rates)}")


def pooled(start_pool: Callable[[], BatchPuller], take: Callable[[BatchPuller, Budget, int], Taken],
           budget: Budget, pools: int, clock: Callable[[], float] = time.perf_counter,
           handed_out: Callable[[], bool] = lambda: False, left_in_pass: Callable[[], int | None] = lambda: None,
           decided: Callable[[Sequence[float], float], bool] | None = None) -> Pools:
    """Measure up to ``pools`` fresh worker pools in turn, within ``budget.duration_s`` in all; with a threshold
    (``decided``, ``Budget.decider``), further pools while their rates' interval straddles it, up to
    ``budget.longest_s`` (``max_duration``).

    Algorithm::

        slot = duration / pools
        for each pool:
            stop if it is not the first and another pool like the slowest so far would end
                 past 1.25 x duration                          (the rest would not fit: ``warning``)
            start the pool (DataLoader, workers)               its start comes out of its slot
            take(pool, what is left of the slot)               warm-up, then windows (``windows``)
            if it is the first and its sampler handed out the pass's last index, or the rest of the pass
                 would end within the duration at its rate:
                take(pool, what is left of the duration)       the pool reads the pass to its end
            stop, not counting the pool, if it is not the first and the pass ended before its second window
            stop if the pass ended, or its sampler handed out its last index (``handed_out``)
            with a threshold: stop past the pools asked for once their rates decide it; while they do not,
                 go on past ``pools`` and past the duration, to another pool that would end within max_duration
        pool's rate = the lower of its samples / its windows' time and their least-squares slope (``sustained``)
        rate = the pools' rates weighed by their windows' time                (``time_weighted``)

    Several pools because a pool's rate depends on state fixed at its workers' start; ``left_in_pass()``: samples not
    handed out yet (None: unknown). Why each rule: docs/checks.md (``dataloader``), docs/benchmarks.md.
    """
    slot, began = budget.duration_s / pools, clock()
    rates, mb_rates, seconds, tail, stopped, below = [], [], [], 0, "", 0.0
    puller, pool_s, index, kept = None, 0.0, -1, Taken()

    def undecided() -> bool:  # another pool may still change the verdict, and would end within max_duration
        return (decided is not None and not decided(rates, clock() - began)
                and clock() - began + pool_s <= budget.longest_s)

    while True:
        index += 1
        if index >= pools and not undecided():
            break
        if index and clock() - began + pool_s > OVERRUN * budget.duration_s and not undecided():
            break
        pool_began = clock()
        if puller is not None:  # the previous pool's workers exit before the next pool's start, as at an epoch's
            puller.close()      # end: two pools at once would need twice the job's tasks (pids.max) and memory
        puller = None
        puller = start_pool()
        left = max(0.0, slot - (clock() - pool_began))
        taken = take(puller, budget._replace(duration_s=left), max(2, -(-5 // pools)))
        pool_s = max(pool_s, clock() - pool_began)
        if index and (taken.whole_pass or puller.spent and len(taken) == 1):  # the pass's tail (``_tail``)
            tail = puller.samples_total
            stopped = f"the pass over the data ended, {tail} samples into a fresh pool"
            break
        if not index and not puller.spent and (handed_out() or _rest_fits(taken, left_in_pass(),
                                                                           budget.duration_s - (clock() - began))):
            more = take(puller, budget._replace(duration_s=budget.duration_s - (clock() - began)), 10**9)
            taken = _joined(taken, more)
            pool_s = max(pool_s, clock() - pool_began)
        stopped = taken.stopped
        rate, mb_rate, burst = pool_rate(puller, taken)
        below = max(below, burst)
        rates.append(rate)
        mb_rates.append(mb_rate)
        seconds.append(sum(w.seconds for w in taken))
        kept = taken
        if puller.spent or handed_out() or taken.read_on:  # the pass is read or handed out (a further pool would
            break                                          # read it again), or the first pool had the duration
    spent = puller is not None and (puller.spent or handed_out())
    return Pools(tuple(rates), tuple(mb_rates), stopped, puller, pools, pool_s, spent,  # type: ignore[arg-type]
                 tuple(seconds), tail, taken.read_on, below, tuple(kept))


def _rest_fits(taken: Taken, left: int | None, seconds: float) -> bool:
    """Whether ``left`` samples, read at ``taken``'s rate, would take no more than ``seconds``."""
    rate = time_weighted([w.samples_per_s for w in taken], [w.seconds for w in taken])
    return left is not None and rate > 0 and left / rate <= seconds


def _joined(first: Taken, more: Taken) -> Taken:
    """One pool's windows read in two calls of ``take``: all of them, and why the second stopped."""
    joined = Taken([*first, *more])
    joined.stopped, joined.whole_pass, joined.read_on = more.stopped, first.whole_pass, True
    return joined
