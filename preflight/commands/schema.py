"""``preflight schema``: the draft-07 JSON Schema of thresholds.yaml, generated, never written.

Built from what ``config.py`` validates with (the checks' OPTIONS and METRICS, each option's row of
``checks.option_kinds.KINDS``, config's keys), for editors (docs/configuration.md, "Editor support").
A string may hold an environment reference (``interpolation``), so every string schema accepts one.
"""

from __future__ import annotations

import json
from typing import Any

from preflight import config
from preflight.checks import CHECKS
from preflight.checks.base import Metric, Option
from preflight.checks.option_kinds import ENV_REFERENCE, KINDS, quantity
from preflight.units import UNITS, Dimension

DRAFT_07 = "http://json-schema.org/draft-07/schema#"
_VERSION = r"^\d+(\.\d+)*$"
# Each instance setting (config.INSTANCE_KEYS but `check`), also the keys of `defaults:`.
_SETTINGS = {
    "timeout": {**quantity(Dimension.DURATION), "description": "timeout of each check"},
    "duration": {**quantity(Dimension.DURATION), "description": "duration of each check: the least it measures"},
    "max_duration": {**quantity(Dimension.DURATION),
                     "description": "the most a check measures a figure whose interval straddles its threshold; "
                                    "default 3x duration, at most half the timeout"},
    "marginal": {"enum": list(config.MARGINAL), "description": "what a figure still straddling its threshold at "
                                                               "max_duration does: warn (default), fail or pass"},
    "severity": {"enum": list(config.SEVERITIES), "description": "fail: a miss fails the gate; warn: reported only"},
    "required": {"type": "boolean", "description": "false: an unmeasurable metric is skipped, not failed"},
    "repeats": {"type": "integer", "minimum": 1, "maximum": config.MAX_REPEATS,
                "description": "runs of the check; the median of their values is judged"},
    "retries": {"type": "integer", "minimum": 0, "maximum": config.MAX_RETRIES,
                "description": "re-measurements of a miss within retry_margin of its bound"},
    "retry_margin": {**quantity(Dimension.PERCENT), "description": "retry_margin of each check"},
}
# `defaults.run_as`, the run's own: the job's user (config.RUN_AS_FORM).
_RUN_AS = {"type": ["integer", "string"], "pattern": config.RUN_AS_FORM.pattern, "minimum": 0,
           "description": "the job's user, UID[:GID] (names or numbers): the checks whose answer depends on who "
                          "reads run as it; default: SLURM_JOB_UID/SLURM_JOB_GID, else the gate's own",
           "examples": ["1001", "alice:pfdata"]}


def build() -> dict[str, Any]:
    """The schema as a dict (draft-07)."""
    definitions = {name: _instance(name, check) for name, check in CHECKS.items()}
    # Instances are told apart with if/then, not anyOf: an editor then reports the error of the one schema that
    # applies ("Property seq_raed is not allowed", "Missing property check") instead of "not valid under any".
    by_check = {
        "type": "object",
        "required": ["check"],
        "properties": {"check": {"enum": list(CHECKS), "description": "the check this instance runs"}},
        "allOf": [{"if": {"properties": {"check": {"const": name}}}, "then": {"$ref": f"#/definitions/{name}"}}
                  for name in CHECKS],
    }
    checks = {
        "type": "object",
        "minProperties": 1,
        "description": "instances to run: named after their check, or any name with `check: <check>`",
        "properties": {
            name: {"if": {"type": "object", "required": ["check"]}, "then": by_check,
                   "else": {"if": {"type": "null"}, "else": {"$ref": f"#/definitions/{name}"}}} for name in CHECKS
        },
        "additionalProperties": by_check,
    }
    top = {"version": {"const": 1, "description": "format of this file"},
           "defaults": {"type": "object", "additionalProperties": False,
                        "properties": {**{key: _SETTINGS[key] for key in config.DEFAULTS},
                                       config.RUN_AS: _RUN_AS}},
           "fleet": _fleet(),
           "checks": checks,
           "baseline": {"type": "string", "minLength": 1,
                        "description": "baseline file for `N% of baseline` bounds, relative to this file"}}
    assert tuple(top) == config.TOP_LEVEL_KEYS, "config's top-level keys changed: update the schema"
    return {
        "$schema": DRAFT_07,
        "title": "preflight thresholds.yaml",
        "type": "object",
        "additionalProperties": False,
        "required": ["version", "checks"],
        "properties": top,
        "definitions": definitions,
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def _fleet() -> dict[str, Any]:
    """The ``fleet:`` section (config.FleetSettings): used only by a torchrun fleet run."""
    properties = {
        "timeout": {**quantity(Dimension.DURATION), "description": "joining, each collective and each barrier"},
        "backend": {"enum": list(config.BACKENDS), "description": "auto: nccl when every local rank has a GPU"},
        "median_ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1,
                         "description": "flag a node below this fraction of the fleet median"},
        "severity": _SETTINGS["severity"],
    }
    assert tuple(properties) == tuple(config.FLEET_DEFAULTS), "config's fleet keys changed: update the schema"
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "description": "how a torchrun fleet run joins, waits and compares nodes"}


def _instance(name: str, check: Any) -> dict[str, Any]:
    properties: dict[str, Any] = {"check": {"const": name, "description": f"run the `{name}` check"}}
    properties.update({key: _SETTINGS[key] for key in config.INSTANCE_KEYS if key != "check"})
    properties.update({option.name: _option(option) for option in check.OPTIONS})
    properties.update({metric.name: _threshold(metric) for metric in check.METRICS})
    found = {"type": "object", "description": check.HELP, "additionalProperties": False, "properties": properties}
    rules = _ignored(check.OPTIONS) + _without_factory(check.OPTIONS)
    return {**found, "allOf": rules} if rules else found


def _ignored(options: Any) -> list[dict[str, Any]]:
    """``Option.ignored_with`` as draft-07 if/then: while the other option is given a non-default value, this
    one keeps its default (or an environment reference, which only ``config`` can expand)."""
    defaults = {option.name: option.default for option in options}
    rules = []
    for option in options:
        for other in option.ignored_with:
            given = {"required": [other], "properties": {other: {"not": {"const": defaults[other]}}}}
            kept = {"properties": {option.name: {"anyOf": [{"const": defaults[option.name]}, ENV_REFERENCE]}}}
            rules.append({"if": given, "then": kept})
    return rules


def _without_factory(options: Any) -> list[dict[str, Any]]:
    """``Option.for_factory`` as draft-07 if/then: given a non-empty value, this option needs one of its factory
    options to name the job's code (``config.names_code``: a ``:``, or an environment reference)."""
    rules = []
    for option in options:
        if option.for_factory:
            given = {"required": [option.name], "properties": {option.name: {"not": {"const": option.default}}}}
            code = {"anyOf": [{"type": "string", "pattern": ":"}, ENV_REFERENCE]}
            named = [{"required": [other], "properties": {other: code}} for other in option.for_factory]
            rules.append({"if": given, "then": {"anyOf": named}})
    return rules


def _option(option: Option) -> dict[str, Any]:
    schema = KINDS[option.kind].schema(option)
    if option.measured_by:  # `measured`, or `{from: <instance>}` of the producing check
        producer = {"type": "object", "additionalProperties": False, "required": ["from"],
                    "properties": {"from": {"type": "string", "minLength": 1}}}
        schema = {"anyOf": [schema, {"const": "measured"}, producer]}
    return {**schema, "description": option.help, "default": option.default}


def _threshold(metric: Metric) -> dict[str, Any]:
    description = f"{metric.help} [{metric.unit or 'count'}]"
    severity = _SETTINGS["severity"]
    if metric.is_text:
        match = {"type": "string", "minLength": 1, "format": "regex",
                 "description": "a regular expression searched in the text (re.search)"}
        return {"type": "object", "description": description, "additionalProperties": False,
                "properties": {"match": match, "severity": severity}, "required": ["match"]}
    if metric.is_version:
        bound: dict[str, Any] = {"anyOf": [{"type": "string", "pattern": _VERSION}, {"type": "number", "minimum": 0},
                                           ENV_REFERENCE]}
    else:
        bound = quantity(UNITS[metric.unit].dimension, relative=True)
    properties = {"min": bound, "max": bound, "severity": severity}
    assert set(properties) | {"match"} == set(config.THRESHOLD_KEYS), "config's threshold keys changed: update the schema"
    return {
        "type": "object",
        "description": description,
        "additionalProperties": False,
        "properties": properties,
        "anyOf": [{"required": ["min"]}, {"required": ["max"]}],
    }
