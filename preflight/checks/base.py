"""The protocol every check module speaks, and its option and metric tables.

A check is a module (as pre-commit's languages are) with four constants and one
function. The runner imports it in a worker process; ``config`` validates instances
against its tables; ``preflight list``, ``--help`` and the JSON Schema are generated
from the same tables. A check measures; it never sees a threshold.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, NamedTuple, Protocol, Sequence, TypedDict, Union, cast

from preflight.units import UNITS, Dimension

if TYPE_CHECKING:
    from preflight.io.dataset import Dataset
    from preflight.measurement import Measurement

Scope = Literal["node", "fleet"]
OptionKind = Union[str, Dimension]  # a row of ``option_kinds.KINDS``: "int", "path", ..., or a quantity's dimension
# What a performance figure is measured in: a rate or a latency. Only these are compared with
# the fleet median; sizes, counts, flags, percentages, temperatures, versions and texts are facts
# (or figures derived from a compared rate) and a node is never judged by its peers' facts.
PERFORMANCE = frozenset({Dimension.BANDWIDTH, Dimension.IOPS, Dimension.SAMPLE_RATE, Dimension.FILE_RATE,
                         Dimension.DURATION})


class Option(NamedTuple):
    """One parameter of a check, declared once (as fio declares its options in a table)."""

    name: str
    kind: OptionKind
    default: object  # written as a user would write it, parsed by the same parser
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    outside: str = ""  # a directory that must not lie inside the (read-only) directory this option names
    # Options that make this one pointless: while one of them differs from its default, giving this one a
    # value other than its default is a config error (it would be silently ignored).
    ignored_with: tuple[str, ...] = ()
    # Options of which one must name the job's code ("package.module:callable") for this one to have an
    # effect (``dataset_args`` without ``dataset``): given otherwise, it is a config error. () for none.
    for_factory: tuple[str, ...] = ()
    # (check, metric) that may supply the value from another instance of the same run: written
    # `measured` (the instance named after that check) or `{from: <instance>}`; the runner runs
    # that instance first and passes its judged figure (``Produced``). () for none.
    measured_by: tuple[str, str] = ()


_Named = TypedDict("_Named", {"from": str, "metric": str})


class Produced(_Named, total=False):
    """An option read from a producer (``Option.measured_by``): the instance and metric config names, then, from
    ``runner.resolve``, the figure in the metric's unit and its ``source``, or the ``reason`` there is none.
    A dict: options reach the worker as JSON."""

    value: float
    source: str
    reason: str


class Metric(NamedTuple):
    """One measured quantity: its canonical unit, direction and method."""

    name: str
    unit: str  # symbol from units.UNITS; "" for counts; "version"/"text" for strings
    higher_is_better: bool | None  # None: not ordered (a name); versions are ordered like numbers
    help: str  # what is measured and the method's source
    per_device: bool = False
    hint: str = ""  # the fix when it misses; may use {measured}, {required}, {required_up} (the bound rounded up to
    # a whole number of the unit: --shm-size={required_up}g) and option names ({path})
    rated: bool = False  # a rate from a specification or the driver (a link's rate), not measured: a fact
    # A figure of the job's data (a read rate, samples/s, the dataset's free space): its threshold is a dataset
    # threshold, which only a measurement whose ``subject`` is the dataset's can pass (``verdict``).
    about_data: bool = False
    flag: bool = False  # a yes/no fact measured as 1 or 0 (read_only): reports say "yes" or "no"
    # A dimensionless quotient of two measured figures (a relative error, a speedup, a time over the median's): unit
    # "" as a count's, but a figure that varies from run to run, where a count is exact (``is_count``).
    ratio: bool = False
    # The figure depends on who reads (file modes, groups, per-user limits, capabilities): measured as the job's user
    # (``host.identity``); measured as root instead, its row says so.
    by_user: bool = False
    # A count of the dataset's faults (files that cannot be read or decoded): the run's, whichever check met them
    # (``runner`` adds those other checks on the same path found after this one), with how much was read.
    counts_faults: bool = False

    @property
    def is_performance(self) -> bool:
        """A measured rate or latency (``PERFORMANCE`` units, ordered, not ``rated``): the only
        kind of metric a fleet run compares with the fleet median."""
        unit = UNITS.get(self.unit)
        return (unit is not None and unit.dimension in PERFORMANCE and self.higher_is_better is not None
                and not self.rated)

    @property
    def is_count(self) -> bool:
        """An exact count (unit "", not a ``ratio``; a flag's 1 or 0 too): two runs' values are the same or differ,
        with no noise between them (``report.compare``)."""
        return self.unit == "" and not self.ratio

    @property
    def is_version(self) -> bool:
        return self.unit == "version"

    @property
    def is_text(self) -> bool:
        return self.unit == "text"


# How far a long part of a check got ("12,345 of 1,000,000 files read, ..."): shown on stderr while it runs.
# Replaced by the worker with its channel to the runner (as ``io.scratch.on_create``).
on_progress: Callable[[str], None] = lambda line: None  # noqa: E731

NO_BOUNDS: Mapping[str, tuple[float | None, float | None]] = types.MappingProxyType({})
WALK_SHARE = 0.25  # of a check's timeout, for walking its dataset (``Budget.walk_s``)


class Budget(NamedTuple):
    """What a check may spend: ``duration`` seconds of measuring, inside ``timeout``, on the metrics asked for.

    ``duration_s`` is the measuring time of the whole check, warm-ups and fresh worker pools included: a check
    with several timed parts splits it between them (its ``DURATION`` says how), so its wall time is about
    ``duration`` plus a fixed start-up (``Timing``). ``metrics`` names the metrics the configuration judges:
    a costly part that only unnamed metrics need (scratch writes, fsync) is left out; ``None`` (a bench, a
    test, a caller that judges nothing) measures everything.
    """

    duration_s: float
    timeout_s: float
    metrics: tuple[str, ...] | None = None
    # The instance's name in thresholds.yaml (``checkpoints`` for a second storage instance), for the fixes a
    # check names ("set checkpoints.scratch_dir"); "" (a bench, a test): the check's own name is used.
    instance: str = ""
    # The run's dataset (``io.dataset``): its one pass over the files and the faults met, shared by every check of
    # the run; None outside a run, where ``with_dataset`` gives the check one of its own.
    dataset: Dataset | None = None
    # The judged metrics' fixed bounds (min, max), in their units, and how long one whose interval straddles them
    # may be measured (0: ``duration``): the sequential verdict's stopping rule (``decider``), never a verdict.
    bounds: Mapping[str, tuple[float | None, float | None]] = NO_BOUNDS
    max_duration_s: float = 0.0

    def decider(self, metric: str, center: Callable[[Sequence[float]], float] | None = None,
                floor: float = 0.0) -> Callable[[Sequence[float], float], bool] | None:
        """For ``metric`` judged against a fixed bound: whether its samples, kept over a span of seconds, decide it:
        their ``measurement.band`` around ``center`` (their median; the DataLoader's pools: their mean, the figure
        it reports), at least ``floor`` of it either side (``measurement.verdict_floor``), lies wholly
        on one side (``measurement.clears``): stricter than the verdict's, so a short figure or a single sample is
        read on unless ``EXTEND_FACTOR`` from the bound. None where it has no such bound: its sampling stops as it
        always has."""
        import statistics

        from preflight.measurement import EXTEND_FACTOR, MIN_SPAN_S, at_least, band, clears

        bounds, middle = self.bounds.get(metric), center or statistics.median
        if bounds is None:
            return None

        def decided(samples: Sequence[float], span_s: float) -> bool:
            if not samples:
                return False
            value = middle(samples)
            found = band(samples, value, span_s < MIN_SPAN_S, EXTEND_FACTOR)
            return clears(bounds, at_least(found, value, floor))

        return decided

    @property
    def longest_s(self) -> float:
        """``max_duration``: how long a figure that its interval does not decide is measured, at least ``duration``."""
        return max(self.duration_s, self.max_duration_s)

    def with_dataset(self) -> Budget:
        """This budget with a dataset: the run's, else (a bench, a test calling a check) one of its own."""
        if self.dataset is not None:
            return self
        from preflight.io.dataset import Dataset

        return self._replace(dataset=Dataset.private())

    def named(self, check: str) -> str:
        """The instance's name for a fix's ``NAME.option``, else ``check`` (the check's registry name)."""
        return self.instance or check

    def split(self, phases: int) -> Budget:
        """Each of ``phases`` equal shares of ``duration`` (and of ``max_duration``): a check's phases (raw reads, the
        loader, a sweep) take one each, and their pools, warm-ups and windows come out of it."""
        return self._replace(duration_s=self.duration_s / phases, max_duration_s=self.max_duration_s / phases)

    def requires(self, metric: str) -> bool:
        """Whether the configuration judges ``metric`` (not merely measures it: ``None`` metrics judge none)."""
        return self.metrics is not None and metric in self.metrics

    def wants(self, *metrics: str) -> bool:
        """Whether any of ``metrics`` is asked for (always, when ``metrics`` is ``None``)."""
        return self.metrics is None or any(m in self.metrics for m in metrics)

    @property
    def walk_s(self) -> float:
        """Seconds the check's dataset walk may take: a quarter of its timeout (30 s of the default 120 s).

        However slow the filesystem's metadata (a stat over NFS or FUSE), the walk then leaves
        three quarters for the measuring (about ``duration``), so the check returns a figure on the
        files it found, not a timeout.
        """
        return self.timeout_s * WALK_SHARE


class Timing(NamedTuple):
    """How long a check configured so takes, said before it starts: its measuring time and a fixed start-up.

    ``measuring_s`` is what ``duration`` buys (more only where ``duration`` is below the floor the check's
    parts need, as its ``DURATION`` says); ``startup_s`` is what it costs whatever the duration (a worker
    process, importing torch, the dataset walk, scratch data), as measured on a 2-CPU VM and stated by the
    check's ``timing``. The wall time expected is their sum; ``bound_s`` is the most it may take on a busy
    machine (bench/check_wall_time.py holds each check to it).
    """

    measuring_s: float
    startup_s: float

    @property
    def expected_s(self) -> float:
        return self.measuring_s + self.startup_s

    @property
    def bound_s(self) -> float:
        return 2 * self.measuring_s + self.startup_s


class Check(Protocol):
    NAME: str  # registry key, and the default instance name in thresholds.yaml
    HELP: str  # one line for `preflight list`
    OPTIONS: tuple[Option, ...]  # parameters, each with its default
    METRICS: tuple[Metric, ...]  # what measure() may return
    # SCOPE (optional, default "node"): "node" checks run once per node in a worker process;
    # "fleet" checks run in every torchrun rank at once, inside its process group.
    # check_user_code(options) (optional): import and build the job's own code that options name
    # (``preflight validate`` only; never iterates data); raises ``UserCodeError`` naming the option.
    # DURATION (optional): what `duration` buys in this check, one line for `list` and `explain`.
    # timing(options, budget) -> Timing (optional): the measuring time and start-up, before it runs;
    # without it the check is taken to measure for `duration` after ``DEFAULT_STARTUP_S`` (``timing``).
    # RUNS_AS (optional, default "job"): "job" runs as the job's user (``host.identity``), whose uid, groups and
    # limits decide what it meets; "gate" keeps the gate's own (the kernel log, which the node's root reads).

    def measure(self, options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
        """Measure every metric this check can on this machine; never judge them."""
        ...


class UserCodeError(Exception):
    """The job's own code that option ``option`` names cannot be used: one line, with the Python error and the fix."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def runs_as_job(check: Check) -> bool:
    """Whether ``check``'s answer depends on who reads, so it runs as the job's user (``RUNS_AS``, default job)."""
    return getattr(check, "RUNS_AS", "job") == "job"


def scope(check: Check) -> Scope:
    """Where ``check`` runs: ``node`` (the default) or ``fleet`` (every rank, in the process group)."""
    return cast(Scope, getattr(check, "SCOPE", "node"))


DEFAULT_STARTUP_S = 2.0  # a check without its own ``timing``: a worker process and importing torch (2-CPU VM)


def timing(check: Check, options: Mapping[str, Any], budget: Budget) -> Timing:
    """The check's own ``timing(options, budget)``, else ``duration`` of measuring after ``DEFAULT_STARTUP_S``."""
    own = getattr(check, "timing", None)
    return own(options, budget) if own is not None else Timing(budget.duration_s, DEFAULT_STARTUP_S)


def duration_help(check: Check) -> str:
    """What ``duration`` buys in ``check`` (its ``DURATION``), for ``list`` and ``explain``."""
    return getattr(check, "DURATION", "") or "its measuring time, warm-ups included"
