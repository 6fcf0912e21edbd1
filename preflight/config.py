"""Load and validate thresholds.yaml (its shape: docs/configuration.md) into instances of checks with thresholds.

Every error is a ``ConfigError`` located at ``FILE:LINE:COL`` with the fix; ``load`` gathers every one
the file has (``errors.Found``) and raises them together, so one run reports them all.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, NamedTuple

from preflight import baseline as baselines
from preflight import yaml_source
from preflight.checks import CHECKS, usercode
from preflight.checks.base import Budget, Metric, Option, Produced
from preflight.checks.option_kinds import KINDS
from preflight.errors import INVALID, ConfigError, ConfigErrors, Found, UsageError, suggest
from preflight.units import UNITS, Dimension, UnitError, example, parse_quantity, to_unit
from preflight.yaml_source import OVERRIDE_PREFIX, Located

Severity = Literal["fail", "warn"]
SEVERITIES: tuple[Severity, ...] = ("fail", "warn")
INSTANCE_KEYS = ("check", "timeout", "duration", "max_duration", "marginal", "severity", "required", "repeats",
                 "retries", "retry_margin")
MARGINAL = ("warn", "fail", "pass")  # what a figure whose interval still straddles its threshold does to the exit
MAX_DURATION_TIMES = 3  # max_duration's default: this many times duration, and never past half the timeout
THRESHOLD_KEYS = ("min", "max", "match", "severity")
TOP_LEVEL_KEYS = ("version", "defaults", "fleet", "checks", "baseline")
DEFAULTS = {"timeout": "120s", "duration": "5s", "max_duration": "", "marginal": "warn", "severity": "fail",
            "repeats": 1, "retries": 0, "retry_margin": "10%"}
MAX_REPEATS, MAX_RETRIES = 20, 5
RUN_AS = "run_as"  # a key of ``defaults`` that is the run's, not each instance's: who the job runs as
RUN_AS_FORM = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$")
FLEET_DEFAULTS = {"timeout": "300s", "backend": "auto", "median_ratio": 0.5, "severity": "fail"}
BACKENDS = ("auto", "nccl", "gloo")
NO_MAPPING: Mapping[str, Any] = {}  # the default of the records' mapping fields; never written to
_VERSION = re.compile(r"^\d+(\.\d+)*$")


class Threshold(NamedTuple):
    """A declared bound on one metric, in the metric's canonical unit (versions as text)."""

    metric: str
    min: float | str | None
    max: float | str | None
    severity: Severity
    where: str  # FILE:LINE:COL of the metric's key, for annotations
    match: str | None = None  # a regular expression a text metric must contain (re.search)
    relative: Mapping[str, float] = NO_MAPPING  # {"min": 0.9} for `min: 90% of baseline`
    baseline: Mapping[str, float] = NO_MAPPING  # result id -> baseline value, metric's unit


class Instance(NamedTuple):
    """One configured run of a check: its options (parsed), thresholds and limits."""

    name: str
    check: str
    options: Mapping[str, Any]
    thresholds: tuple[Threshold, ...]
    timeout_s: float
    duration_s: float
    required: bool
    where: str
    repeats: int = 1  # runs of the check; the median of their values is judged
    retries: int = 0  # re-measurements allowed when a miss is within retry_margin of its bound
    retry_margin: float = 0.10  # as a fraction of the bound
    option_where: Mapping[str, str] = NO_MAPPING  # FILE:LINE:COL of each option given
    max_duration_s: float = 0.0  # how long a figure whose interval straddles its threshold is measured at most
    marginal: str = "warn"  # what such a figure, still straddling at max_duration, does to the exit (``MARGINAL``)

    @property
    def budget(self) -> Budget:
        """What the check may spend: ``duration`` and ``timeout``, on the metrics this instance judges, and up to
        ``max_duration`` on those whose interval straddles their fixed bound (``Budget.bounds``)."""
        bounds = {t.metric: (t.min, t.max) for t in self.thresholds if not t.relative and t.match is None
                  and all(b is None or isinstance(b, float) for b in (t.min, t.max))}
        return Budget(self.duration_s, self.timeout_s, tuple(sorted({t.metric for t in self.thresholds})), self.name,
                      bounds=bounds, max_duration_s=max(self.duration_s, self.max_duration_s))


class FleetSettings(NamedTuple):
    """The ``fleet:`` section: how a ``torchrun`` run joins, waits and compares nodes.

    ``timeout_s`` bounds joining the process group and every collective or barrier, so a
    rank that never joins or dies cannot hang the others; ``median_ratio`` flags a node
    whose metric is below that fraction of the fleet median (above its inverse for
    lower-is-better metrics), with ``severity``.
    """

    timeout_s: float = 300.0
    backend: str = "auto"  # auto: nccl when every local rank has a GPU, else gloo
    median_ratio: float = 0.5
    severity: Severity = "fail"


class Config(NamedTuple):
    path: str
    instances: tuple[Instance, ...]
    source: bytes  # the file's bytes and the overrides, which ``digest`` names
    fleet: FleetSettings = FleetSettings()
    run_as: str = ""  # ``defaults.run_as``: the job's user, ``UID[:GID]`` (``host.identity.job``); "" for none

    @property
    def digest(self) -> str:
        """sha256 (hex) of the file's bytes and the overrides, for reports."""
        import hashlib  # here, not at the top: `validate` starts faster without loading OpenSSL

        return hashlib.sha256(self.source).hexdigest()

    def select(self, ids: Iterable[str]) -> Config:
        """Keep only the named instances (``--only storage,shm``).

        Raises:
            UsageError: an id names no instance; the message lists the valid ones.
        """
        wanted = self._named(ids, "--only")
        kept = tuple(i for i in self.instances if i.name in wanted)
        return Config(self.path, kept, self.source, self.fleet)

    def skip(self, ids: Iterable[str]) -> Config:
        """Drop the named instances (``--skip cuda,transfer``).

        Raises:
            UsageError: an id names no instance, or nothing would be left to run.
        """
        unwanted = self._named(ids, "--skip")
        kept = tuple(i for i in self.instances if i.name not in unwanted)
        if not kept:
            raise UsageError(f"--skip {','.join(unwanted)}: that leaves no check to run in {self.path}: skip fewer, "
                             f"or name the ones to run with --only")
        return Config(self.path, kept, self.source, self.fleet)

    def _named(self, ids: Iterable[str], flag: str) -> list[str]:
        wanted = [i.strip() for i in ids if i.strip()]
        names = [instance.name for instance in self.instances]
        for name in wanted:
            if name not in names:
                raise UsageError(f"{flag} {name}: no such check instance in {self.path}{suggest(name, names)}")
        return wanted


def bundled_path() -> Path:
    """The default gate shipped inside the package."""
    return Path(__file__).with_name("thresholds.yaml")


def resolve_path(explicit: str | None) -> str:
    """``-c FILE`` if given, else ``./thresholds.yaml`` if present, else the bundled default."""
    if explicit:
        return explicit
    local = Path("thresholds.yaml")
    return str(local) if local.is_file() else str(bundled_path())


def load(path: str, overrides: Iterable[str] = (), environ: Mapping[str, str] | None = None, *,
         baseline: str | None = None) -> Config:
    """Read, expand, override and validate the config at ``path``.

    ``baseline`` (``--baseline FILE``) names the file that ``N% of baseline`` thresholds
    refer to; without it, the top-level ``baseline:`` key does (relative to ``path``).

    Every mistake in values is found in one pass: each value is checked on its own, and one that
    fails leaves the others to be checked (an instance of an unknown check is the one thing whose
    keys cannot be).

    Raises:
        UsageError: the file cannot be read.
        ConfigError: one thing in it (or in an override) is invalid; ``ConfigErrors`` when several are.
    """
    environ = os.environ if environ is None else environ
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise UsageError(f"{path}: cannot read the config ({error.strerror}): check the thresholds file's path "
                         f"(-c FILE, or validate FILE)") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}:1:1", "the file is not UTF-8 text: is this the right file?") from None
    found = Found()
    root = yaml_source.load(path, text, environ, found)
    overrides = list(overrides)
    for assignment in overrides:
        updated = found.attempt(yaml_source.apply_override, root, assignment, environ)
        root = root if updated is INVALID else updated
    source = data + "\0".join(overrides).encode()
    base = os.path.dirname(os.path.abspath(path))
    origin = found.attempt(baselines.Source, path, baseline, root)
    if origin is INVALID:  # said once, at the `baseline:` key: the bounds that read it have nothing more to say
        origin = _Unnamed(path, None, Located({}, root.where))
    instances = found.attempt(_instances, root, origin, base, found)
    fleet = found.attempt(_fleet, root, found)
    run_as = found.attempt(_run_as, root)
    found.raise_any()
    return Config(path, instances, source, fleet, run_as)


class _Unnamed(baselines.Source):
    """A ``baseline:`` key that names no file (its error is reported): bounds relative to it read nothing."""

    def values_for(self, metric: Metric, instance: str, node: Located) -> dict[str, float]:
        return {}


def _instances(root: Located, baseline: baselines.Source, base: str, found: Found) -> tuple[Instance, ...]:
    """Every instance under ``checks:``; a mistake in any part is added to ``found`` and the rest checked.

    Raises:
        ConfigError: the top level is not a mapping (nothing under it can be read).
    """
    top = _mapping(root, "the top level")
    found.attempt(_reject_unknown, top, TOP_LEVEL_KEYS)
    version = top.get("version")
    if version is None or version.value != 1 or isinstance(version.value, bool):
        where = version.where if version else root.where
        found.add(ConfigError(where, "expected `version: 1` at the top level"))
    defaults = dict(DEFAULTS)
    if "defaults" in top:
        given = found.attempt(_mapping, top["defaults"], "defaults")
        if given is not INVALID:
            found.attempt(_reject_unknown, given, (*DEFAULTS, RUN_AS))
            defaults.update({key: node for key, node in given.items() if key in DEFAULTS})
    if "checks" not in top:
        raise ConfigError(root.where, "missing `checks:`: list the checks to run (see `preflight list`)")
    checks = _mapping(top["checks"], "checks")
    if not checks:
        raise ConfigError(top["checks"].where, "`checks:` is empty: add at least one check (see `preflight list`)")
    instances = tuple(instance for name, node in checks.items()
                      if (instance := found.attempt(_instance, name, node, defaults, baseline, base, found))
                      is not INVALID)
    _producers(instances, root.where.rsplit(":", 2)[0], found)
    return instances


def _run_as(root: Located) -> str:
    """``defaults.run_as``: ``UID[:GID]``, each a number or a name ("1001", "alice:pfdata"); "" where not given.

    Raises:
        ConfigError: the value is not of that form.
    """
    defaults = root.value.get("defaults") if isinstance(root.value, dict) else None
    node = defaults.value.get(RUN_AS) if defaults is not None and isinstance(defaults.value, dict) else None
    if node is None or node.value in (None, ""):
        return ""
    text = str(node.value)
    if isinstance(node.value, bool) or not RUN_AS_FORM.match(text):
        raise ConfigError(node.where, f"`defaults.run_as`: expected the job's user as UID[:GID], names or numbers "
                                      f"(1001, alice, alice:pfdata), found {node.value!r}")
    return text


def _fleet(root: Located, found: Found) -> FleetSettings:
    """The ``fleet:`` section; a mistake in any key is added to ``found`` and the others checked.

    Raises:
        ConfigError: ``fleet:`` is not a mapping.
    """
    top = _mapping(root, "the top level")
    if "fleet" not in top:
        return FleetSettings()
    given = _mapping(top["fleet"], "fleet")
    found.attempt(_reject_unknown, given, tuple(FLEET_DEFAULTS))
    timeout_s = found.attempt(_quantity, given.get("timeout", FLEET_DEFAULTS["timeout"]), Dimension.DURATION,
                              "fleet.timeout")
    if timeout_s is not INVALID and timeout_s <= 0:
        found.add(ConfigError(given["timeout"].where, "`fleet.timeout` must be positive, like `300s`"))
    backend = given["backend"].value if "backend" in given else "auto"
    if backend not in BACKENDS:
        found.add(ConfigError(given["backend"].where, f"`fleet.backend` must be one of {', '.join(BACKENDS)}, "
                              f"found {backend!r}{suggest(str(backend), BACKENDS)}"))
    ratio = given["median_ratio"].value if "median_ratio" in given else FLEET_DEFAULTS["median_ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
        found.add(ConfigError(given["median_ratio"].where, "`fleet.median_ratio` must be a number between 0 and 1, "
                              f"like 0.5 (flag nodes below half the fleet median), found {ratio!r}"))
    severity = found.attempt(_severity, given.get("severity", FLEET_DEFAULTS["severity"]))
    ratio = float(ratio) if isinstance(ratio, (int, float)) else ratio
    return FleetSettings(timeout_s, backend, ratio, severity)  # read only when nothing was found


def _instance(name: str, node: Located, defaults: Mapping[str, Any], baseline: baselines.Source,
              base: str, found: Found) -> Instance:
    """One instance: each key is checked on its own, its mistake added to ``found`` (the instance then holds
    ``INVALID`` there, and ``load`` raises before anyone reads it).

    Raises:
        ConfigError: the instance cannot be checked at all: not a mapping, of no known check, or a
            metric or option written one indent short.
    """
    if name not in CHECKS and not (isinstance(node.value, dict) and "check" in node.value):
        _refuse_misplaced(name, node)
    body = _mapping(node, f"check `{name}`") if node.value is not None else {}
    check_name = _text(body["check"]) if "check" in body else name
    if check_name not in CHECKS:
        where = body["check"].where if "check" in body else node.key_location
        suggestion = suggest(check_name, CHECKS)
        raise ConfigError(where, f"unknown check `{check_name}`" + (f"{suggestion} Or add" if suggestion else ": add")
                          + f" `check: <name>` to make `{name}` an instance of a known check")
    check = CHECKS[check_name]
    options = {option.name: option for option in check.OPTIONS}
    metrics = {metric.name: metric for metric in check.METRICS}
    found.attempt(_reject_unknown, body, (*INSTANCE_KEYS, *options, *metrics))

    def setting(key: str, dimension: Dimension) -> float:
        value = body.get(key, defaults[key])
        return found.attempt(_quantity, value, dimension, f"{name}.{key}" if key in body else f"defaults.{key}")

    severity = found.attempt(_severity, body.get("severity", defaults["severity"]))
    parsed_options = {
        option.name: found.attempt(coerce_option, option, body.get(option.name), f"{name}.{option.name}", base)
        for option in check.OPTIONS
    }
    for option in check.OPTIONS:
        involved = (option.name, *filter(None, [option.outside]), *option.ignored_with, *option.for_factory)
        if any(parsed_options[other] is INVALID for other in involved):
            continue  # said already; the rules between options need every one they read
        if option.outside:
            found.attempt(_refuse_inside, name, option, parsed_options, body.get(option.name))
        if option.ignored_with and option.name in body:
            found.attempt(_refuse_ignored, name, option, check.OPTIONS, parsed_options, body)
        if option.for_factory and option.name in body:
            found.attempt(_refuse_without_factory, name, option, parsed_options, body)
    thresholds = tuple(
        threshold for key, value in body.items() if key in metrics
        if (threshold := found.attempt(_threshold, metrics[key], value, severity, name, baseline, found))
        is not INVALID
    )
    required = body["required"].value if "required" in body else True
    if not isinstance(required, bool):
        found.add(ConfigError(body["required"].where, "`required` must be true or false"))
    timeout_s = setting("timeout", Dimension.DURATION)
    duration_s = setting("duration", Dimension.DURATION)
    if INVALID not in (timeout_s, duration_s) and (timeout_s <= 0 or duration_s <= 0):
        found.add(ConfigError(node.where, f"`{name}`: timeout and duration must be positive"))
    repeats = found.attempt(_whole, body.get("repeats", defaults["repeats"]), f"{name}.repeats", 1, MAX_REPEATS)
    retries = found.attempt(_whole, body.get("retries", defaults["retries"]), f"{name}.retries", 0, MAX_RETRIES)
    margin = setting("retry_margin", Dimension.PERCENT)
    if margin is not INVALID and margin > 100:
        found.add(ConfigError(_node(body.get("retry_margin", defaults["retry_margin"])).where,
                              f"`{name}.retry_margin` must be at most 100%, found {margin:g}%"))
    option_where = {option.name: body[option.name].where for option in check.OPTIONS if option.name in body}
    marginal = found.attempt(_marginal, body.get("marginal", defaults["marginal"]), name)
    most = body.get("max_duration", defaults["max_duration"])
    given = _node(most).value not in ("", None)
    max_duration_s = (setting("max_duration", Dimension.DURATION) if given
                      else _default_max_duration(duration_s, timeout_s))
    if given and INVALID not in (max_duration_s, duration_s, timeout_s) and not duration_s <= max_duration_s <= timeout_s:
        found.add(ConfigError(_node(most).where, f"`{name}.max_duration` must lie between duration "
                              f"({duration_s:g} s) and timeout ({timeout_s:g} s), found {max_duration_s:g} s"))
    return Instance(name, check_name, parsed_options, thresholds, timeout_s, duration_s, required, node.where,
                    repeats, retries, margin / 100 if margin is not INVALID else INVALID, option_where,
                    max_duration_s, marginal)


def _default_max_duration(duration_s: Any, timeout_s: Any) -> Any:
    """``MAX_DURATION_TIMES`` x ``duration``, never past half the timeout (the check's start and its other parts
    need the rest), never below ``duration``."""
    if INVALID in (duration_s, timeout_s):
        return INVALID
    return max(duration_s, min(MAX_DURATION_TIMES * duration_s, timeout_s / 2))


def _marginal(node: Any, name: str) -> str:
    """``marginal``: warn, fail or pass.

    Raises:
        ConfigError: any other value.
    """
    node = _node(node)
    if node.value not in MARGINAL:
        raise ConfigError(node.where, f"`{name}.marginal` must be one of {', '.join(MARGINAL)}: what a figure whose "
                                      f"interval still straddles its threshold at max_duration does, found "
                                      f"{node.value!r}")
    return str(node.value)


def _refuse_misplaced(name: str, node: Located) -> None:
    """A metric or option written at the level of the checks, one indent short: say where it belongs.

    Raises:
        ConfigError: ``name`` is a metric or option of some check (nothing when it is neither).
    """
    owners = [c for c, module in CHECKS.items() if any(item.name == name for item in (*module.METRICS, *module.OPTIONS))]
    if not owners:
        return
    kind = "metric" if any(m.name == name for m in CHECKS[owners[0]].METRICS) else "option"
    such = " or ".join(f"`{c}:`" for c in owners[:3])
    raise ConfigError(node.key_location, f"`{name}` belongs under a check such as {such}: it is a {kind} of "
                      f"{'that check' if len(owners) == 1 else 'those checks'}, not a check; indent it below the "
                      f"check's name")


def _refuse_inside(name: str, option: Option, options: Mapping[str, Any], node: Located | None) -> None:
    """The read-only guarantee: a directory we write (``scratch_dir``) never lies inside the dataset."""
    value, protected = options[option.name], options[option.outside]
    if node is None or not value:
        return
    from preflight.io.scratch import is_inside  # here, not at the top: most configs set no scratch_dir

    if is_inside(value, protected):
        raise ConfigError(node.where, f"`{name}.{option.name}` ({value}) is inside `{name}.{option.outside}` "
                          f"({protected}), which preflight never writes: choose a directory outside it on the "
                          f"same filesystem, or leave it out to use the one above it")


def _refuse_ignored(name: str, option: Option, declared: Iterable[Option], options: Mapping[str, Any],
                    body: Mapping[str, Located]) -> None:
    """An option given a value it would be measured without (``Option.ignored_with``) is an error, never ignored."""
    involved = (option.name, *option.ignored_with)
    defaults = {o.name: coerce_option(o, None, o.name) for o in declared if o.name in involved}
    if options[option.name] == defaults[option.name]:
        return
    for other in option.ignored_with:
        if options[other] != defaults[other] and other in body:
            raise ConfigError(body[option.name].where, f"`{name}.{option.name}` has no effect while "
                              f"`{name}.{other}` is set ({body[other].where}): remove `{option.name}`, or remove "
                              f"`{other}` to use it")


def names_code(value: Any) -> bool:
    """Whether a ``code`` option's parsed value names the job's code (``"package.module:callable"``, whose form
    ``coerce_option`` has checked) rather than a built-in name (``resnet50``) or nothing."""
    return isinstance(value, str) and ":" in value


def locate_job_code(instance: Instance) -> None:
    """Each of ``instance``'s options that names the job's code must name a top-level package the worker can
    find: on ``python_path``, in this Python's packages (editable installs included) or the working directory.

    Only located (``importlib`` finders), never imported: ``validate`` calls this before it imports torch and
    the job's code, so a package on no path is told at once. (``run`` leaves the job's code to the worker, whose
    error says the same line and exits 2 too: docs/faults-and-noise.md.)

    Raises:
        ConfigError: at the option's place, naming the package and the fix.
    """
    import importlib.machinery
    import importlib.util

    for option in CHECKS[instance.check].OPTIONS:
        spec = instance.options.get(option.name)
        if option.kind != "code" or not names_code(spec):
            continue
        top = spec.partition(":")[0].split(".")[0]
        search = [*instance.options.get("python_path", []), os.getcwd()]
        if top in sys.modules or importlib.util.find_spec(top) or \
                importlib.machinery.PathFinder.find_spec(top, search):
            continue
        # a name close to one on python_path: the name is the typo; worded as run's worker words it (issue 35)
        raise ConfigError(instance.option_where.get(option.name, instance.where),
                          f"{instance.name}.{option.name}: {usercode.not_found(spec, top, search)}")


def _refuse_without_factory(name: str, option: Option, options: Mapping[str, Any],
                            body: Mapping[str, Located]) -> None:
    """An option for the job's code (``Option.for_factory``) given while no option names that code is an error."""
    if not options[option.name] or any(names_code(options[other]) for other in option.for_factory):
        return
    named = [f"`{name}.{other}`" for other in option.for_factory]
    none = f"{named[0]} names" if len(named) == 1 else f"neither {' nor '.join(named)} names"
    raise ConfigError(body[option.name].where, f"`{name}.{option.name}` has no effect: {none} the job's code "
                      f"(\"package.module:factory\"): remove `{option.name}`, or set `{option.for_factory[0]}` "
                      f"to the job's factory")


def coerce_option(option: Option, node: Located | None, label: str, base: str = ".") -> Any:
    """Parse one option value (or its default, written as a user would) with its kind's parser (``option_kinds``),
    relative paths from ``base`` (the config file's directory; the working directory for a ``--set`` value).

    Raises:
        ConfigError: the value does not fit the option's kind, choices or limits.
    """
    if node is None:
        node = Located(option.default, f"default of {label}")
    value, where = node.value, node.where
    if option.measured_by and (value == "measured" or isinstance(value, dict)):
        return _producer(option, node, label)
    base = os.getcwd() if where.startswith(OVERRIDE_PREFIX) else base
    try:
        result = KINDS[option.kind].parse(option, node, label, base)
    except UnitError as error:
        measured = f", or `measured` (the `{option.measured_by[0]}` instance's figure)" if option.measured_by else ""
        raise ConfigError(where, f"`{label}`: {error}{measured}") from None
    if option.minimum is not None and isinstance(result, (int, float)) and result < option.minimum:
        raise ConfigError(where, f"`{label}` must be at least {option.minimum:g}, found {value!r}")
    if option.maximum is not None and isinstance(result, (int, float)) and result > option.maximum:
        raise ConfigError(where, f"`{label}` must be at most {option.maximum:g}, found {value!r}")
    return result


def _producer(option: Option, node: Located, label: str) -> Produced:
    """``measured`` or ``{from: <instance>}``: the instance whose figure supplies the option (checked in ``_producers``)."""
    check, metric = option.measured_by
    if node.value == "measured":
        return {"from": check, "metric": metric}
    given = _mapping(node, f"`{label}`")
    _reject_unknown(given, ("from",))
    if "from" not in given or not isinstance(given["from"].value, str) or not given["from"].value:
        raise ConfigError(node.where, f"`{label}`: expected `measured`, `{{from: <{check} instance>}}` or a "
                          f"quantity like `{option.default}`")
    return {"from": given["from"].value, "metric": metric}


def _producers(instances: tuple[Instance, ...], path: str, found: Found) -> None:
    """Every ``measured``/``{from: ...}`` option names an instance of the check that measures it, in this file.

    Each that does not is a ``ConfigError`` added to ``found``, at the option, naming the instance it
    expected and the fix.
    """
    kinds = {instance.name: instance.check for instance in instances}
    for instance in instances:
        for option in CHECKS[instance.check].OPTIONS:
            value = instance.options[option.name]
            if not option.measured_by or not isinstance(value, dict):
                continue
            check, metric = option.measured_by
            producer, where = value["from"], instance.option_where.get(option.name, instance.where)
            if producer == instance.name or kinds.get(producer) != check:
                named = f"`{producer}` is a `{kinds[producer]}` instance" if producer in kinds else \
                    f"{path} has no instance named `{producer}`"
                found.add(ConfigError(where, f"`{instance.name}.{option.name}` reads {metric} from a `{check}` "
                                      f"instance, but {named}: add `{check}:` under checks, or name one with "
                                      f"`{option.name}: {{from: <instance>}}`"
                                      f"{suggest(producer, [n for n, c in kinds.items() if c == check])}"))


def _threshold(metric: Metric, node: Located, default_severity: Severity, instance: str,
               baseline: baselines.Source, found: Found) -> Threshold:
    """One metric's threshold; a mistake in one of its keys is added to ``found`` and the others checked.

    Raises:
        ConfigError: it is not a mapping, has no bound, or a ``match`` threshold's mistake.
    """
    label = metric.name
    if not isinstance(node.value, dict):
        hint = "{min: 535.104}" if metric.is_version else "{min: " + _example(metric) + "}"
        raise ConfigError(node.where, f"`{label}` is a metric: give it a threshold like {hint}")
    body = node.value
    found.attempt(_reject_unknown, body, THRESHOLD_KEYS)
    if "match" in body:
        return _match_threshold(metric, node, default_severity)
    if "min" not in body and "max" not in body:
        raise ConfigError(node.where, f"`{label}`: a threshold needs `min` or `max`")
    relative = {key: found.attempt(baselines.relative_bound, metric, body[key]) for key in ("min", "max")
                if key in body}
    bounds = {key: found.attempt(_bound, metric, body[key]) if key in body and relative[key] is None else None
              for key in ("min", "max")}
    relative = {key: fraction for key, fraction in relative.items() if fraction is not None}
    low, high = bounds["min"], bounds["max"]
    fractions = [fraction for fraction in relative.values() if fraction is not INVALID]
    if isinstance(low, float) and isinstance(high, float) and low > high or \
            len(fractions) == 2 and relative["min"] > relative["max"]:
        raise ConfigError(node.where, f"`{label}`: min is above max")
    severity = found.attempt(_severity, body["severity"]) if "severity" in body else default_severity
    values = found.attempt(baseline.values_for, metric, instance, node) if fractions else {}
    return Threshold(metric.name, low, high, severity, _set_at(node), relative=relative, baseline=values)


def _match_threshold(metric: Metric, node: Located, default_severity: Severity) -> Threshold:
    """``{match: "H100|H200"}``: the text metric must contain a match of the regular expression."""
    body, label = node.value, metric.name
    pattern = body["match"]
    if not metric.is_text:
        raise ConfigError(pattern.where, f"`{label}`: `match` is for text metrics; use `min`/`max` here")
    if "min" in body or "max" in body:
        raise ConfigError(node.where, f"`{label}`: give either `match` or `min`/`max`, not both")
    if isinstance(pattern.value, bool):
        raise ConfigError(pattern.where, f"`{label}.match`: YAML reads {pattern.raw or pattern.value} as a boolean: "
                                         f"quote it (\"{pattern.raw or 'on'}\")")
    if not isinstance(pattern.value, str) or not pattern.value:
        raise ConfigError(pattern.where, f"`{label}.match`: expected a regular expression like \"H100|H200\", "
                                         f"found {pattern.value!r}")
    try:
        re.compile(pattern.value)
    except re.error as error:
        raise ConfigError(pattern.where, f"`{label}.match`: invalid regular expression {pattern.value!r} ({error}): "
                                         f"quote it and escape special characters") from None
    severity = _severity(body["severity"]) if "severity" in body else default_severity
    return Threshold(metric.name, None, None, severity, _set_at(node), match=pattern.value)


def _set_at(node: Located) -> str:
    """Where a threshold was set: a ``--set`` that changed one of its keys, else its key in the file."""
    overridden = [child.where for child in node.value.values() if child.where.startswith(OVERRIDE_PREFIX)]
    return overridden[-1] if overridden else node.key_location


def _bound(metric: Metric, node: Located) -> float | str:
    if metric.is_text:
        raise ConfigError(node.where, f"`{metric.name}` is text and takes no min/max: use `{{match: REGEX}}`")
    if metric.is_version:
        text = str(node.raw if node.raw is not None else node.value).strip().strip("'\"")
        if not _VERSION.match(text):
            raise ConfigError(node.where, f"`{metric.name}`: expected a version like \"535.104\", found {text!r}")
        return text
    dimension = UNITS[metric.unit].dimension
    return to_unit(_quantity(node, dimension, metric.name), metric.unit)


def _example(metric: Metric) -> str:
    return example(UNITS[metric.unit].dimension)


def _quantity(node: Located | str, dimension: Dimension, label: str) -> float:
    if not isinstance(node, Located):
        node = Located(node, "defaults")
    try:
        value = parse_quantity(node.value, dimension)
    except UnitError as error:
        raise ConfigError(node.where, f"`{label}`: {error}") from None
    if value < 0:
        raise ConfigError(node.where, f"`{label}`: must not be negative, found {node.value!r}")
    return value


def _node(value: Located | object) -> Located:
    return value if isinstance(value, Located) else Located(value, "defaults")


def _whole(value: Located | object, label: str, low: int, high: int) -> int:
    """A whole number between ``low`` and ``high`` (``repeats``, ``retries``)."""
    node = _node(value)
    number = node.value
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise ConfigError(node.where, f"`{label}` must be a whole number from {low} to {high}, found {number!r}")
    return number


def _severity(node: Located | str) -> Severity:
    value = node.value if isinstance(node, Located) else node
    if value not in SEVERITIES:
        where = node.where if isinstance(node, Located) else "defaults"
        raise ConfigError(where, f"severity must be `fail` or `warn`, found {value!r}")
    return value  # type: ignore[return-value]


def _mapping(node: Located, what: str) -> dict[str, Located]:
    if not isinstance(node.value, dict):
        raise ConfigError(node.where, f"{what} must be a mapping of keys to values, found {node.value!r}")
    return node.value


def _text(node: Located) -> str:
    if not isinstance(node.value, str):
        raise ConfigError(node.where, f"expected text, found {node.value!r}")
    return node.value


def _reject_unknown(body: Mapping[str, Located], allowed: Iterable[str]) -> None:
    """Each key of ``body`` not in ``allowed`` is an error at the key (a merged one says which ``<<`` brought it).

    Raises:
        ConfigError: one unknown key; ``ConfigErrors`` for several.
    """
    allowed = tuple(allowed)
    errors = [ConfigError(node.key_location, f"unknown key `{key}`{suggest(key, allowed)}"
                          + (f" (merged here by the `<<` at {node.merged_at})" if node.merged_at else ""))
              for key, node in body.items() if key not in allowed]
    if len(errors) > 1:
        raise ConfigErrors(errors)
    if errors:
        raise errors[0]
