"""ci/kubernetes/npd/: the node-problem-detector plugin run as NPD runs it, and its manifests.

No API server or NPD binary runs here: each rule's command line is taken from the monitor JSON and
run the way NPD's custom plugin monitor runs it (pkg/custompluginmonitor/plugin/plugin.go: its own
process group, killed at the rule's timeout, stdout trimmed and cut at ``max_output_length``, exit 0
OK, 1 NonOK, anything else Unknown), then turned into the node condition NPD would set
(custom_plugin_monitor.go, ``toConditionStatus``). The pod's mount paths (/etc/preflight-npd,
/run/preflight-npd) are moved under a temporary folder; nothing else in the command line changes.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import jsonschema
import kubernetes_validate
import pytest
import yaml

from preflight import config
from tests.helpers import REPO
from tests.test_ci import RESTRICTED

NPD = REPO / "ci" / "kubernetes" / "npd"
KUBERNETES_VERSION = "1.31.0"  # as tests/test_ci.py: its schemas ship inside kubernetes-validate
CONFIG_DIR, STATE_DIR = "/etc/preflight-npd", "/run/preflight-npd"
NPD_STDOUT_BYTES = 4096  # plugin.go: maxCustomPluginBufferBytes


def _monitor() -> dict:
    return json.loads((NPD / "preflight-monitor.json").read_text())


def _seconds(duration: str) -> float:
    sys.path.insert(0, str(NPD))
    try:
        from preflight_npd import go_duration
    finally:
        sys.path.remove(str(NPD))
    return go_duration(duration)


class Invocation(NamedTuple):
    status: str  # NPD's: OK, NonOK or Unknown
    condition: str  # the node condition's status NPD sets: False, True or Unknown
    message: str
    exit_code: int | None  # None when NPD killed it
    seconds: float


def npd_invoke(monitor: dict, rule: dict, root: Path, environ: dict[str, str] | None = None) -> Invocation:
    """Run ``rule`` as NPD's custom plugin monitor does, with the pod's paths under ``root``; NPD's
    environment is the container's: this test's, with this Python first on PATH, unless ``environ``."""
    timeout = _seconds(monitor["pluginConfig"]["timeout"])
    if "timeout" in rule and _seconds(rule["timeout"]) < timeout:
        timeout = _seconds(rule["timeout"])
    command = [re.sub(f"^({CONFIG_DIR}|{STATE_DIR})", lambda m: str(root / m.group(1).lstrip("/")), word)
               for word in [rule["path"], *rule.get("args", [])]]
    start = time.monotonic()
    environ = environ or {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                               env=environ, cwd=root)
    try:
        stdout, _ = process.communicate(timeout=timeout)
        killed = False
    except subprocess.TimeoutExpired:  # plugin.go: util.Kill, the whole process group
        os.killpg(process.pid, signal.SIGKILL)
        stdout, _ = process.communicate()
        killed = True
    seconds = time.monotonic() - start
    output = stdout[:NPD_STDOUT_BYTES].decode(errors="replace").strip()
    if killed:
        output = f"Timeout when running plugin {rule['path']!r}: state - signal: killed. output - {output!r}"
    output = output[:monitor["pluginConfig"]["max_output_length"]]
    code = process.returncode
    status = "OK" if code == 0 and not killed else "NonOK" if code == 1 and not killed else "Unknown"
    condition = {"OK": "False", "NonOK": "True", "Unknown": "Unknown"}[status]
    return Invocation(status, condition, output, None if killed else code, seconds)


def _pod_files(root: Path, monitor: dict, gate: str) -> None:
    """The ConfigMap's files as the pod mounts them, with ``gate`` as thresholds.yaml, and the state emptyDir."""
    mounted = root / CONFIG_DIR.lstrip("/")
    mounted.mkdir(parents=True)
    shutil.copy2(NPD / "preflight_npd.py", mounted / "preflight_npd.py")
    (mounted / "preflight-monitor.json").write_text(json.dumps(monitor))
    (mounted / "thresholds.yaml").write_text(gate)
    (mounted / "sleepy.py").write_text("import time\n\ndef make():\n    time.sleep(3600)\n")
    (root / STATE_DIR.lstrip("/")).mkdir(parents=True)


def _run_monitor(tmp_path: Path, gate: str, monitor: dict | None = None,
                 environ: dict[str, str] | None = None) -> dict[str, Invocation]:
    """One batch of the monitor: every rule in order (concurrency 1), by condition type."""
    monitor = monitor or _monitor()
    assert monitor["pluginConfig"]["concurrency"] == 1  # plugin.go runs the batch's rules one after the other
    _pod_files(tmp_path, monitor, gate)
    return {rule["condition"]: npd_invoke(monitor, rule, tmp_path, environ) for rule in monitor["rules"]}


def nrc_tainted(rule: dict, conditions: dict[str, str]) -> bool:
    """Whether the Node Readiness Controller keeps ``rule``'s taint on a node with ``conditions``: its
    evaluateRuleForNode (internal/controller/nodereadinessrule_controller.go), a condition satisfied
    when its status (else defaultStatus, else Unknown) equals requiredStatus, under allOf or anyOf."""
    spec = rule["spec"]
    satisfied = [conditions.get(c["type"], c.get("defaultStatus", "Unknown")) == c["requiredStatus"]
                 for c in spec["conditions"]]
    return not (any(satisfied) if spec.get("conditionPolicy") == "anyOf" else all(satisfied))


def _rule() -> dict:
    return yaml.safe_load((NPD / "node-readiness-rule.yaml").read_text())


PASS = "version: 1\nchecks:\n  shm:\n    size: {min: 1 MiB}\n"
FAIL = "version: 1\nchecks:\n  shm:\n    size: {min: 1000 TiB}\n"
TYPO = "version: 1\nchecks:\n  shm:\n    sizee: {min: 1 MiB}\n"
HUNG_CHECK = ("version: 1\nchecks:\n  dataloader:\n    dataset: \"sleepy:make\"\n    python_path: [.]\n"
              "    timeout: {timeout}\n    throughput: {{min: 1 samples/s}}\n")


@pytest.mark.parametrize("gate, failed, inconclusive, message, tainted", [
    (PASS, "False", "False", r"preflight passed 1 of 1 judged", False),
    (FAIL, "True", "False", r"preflight failed 1 of 1 judged: shm\.size", True),
    (TYPO, "Unknown", "True", r"preflight could not judge this node: config error: preflight: error: .*thresholds\.yaml:4:5: "
                              r"unknown key `sizee`.*", False),
    (HUNG_CHECK.format(timeout="3s"), "True", "False", r"preflight failed 1 of 1 judged: dataloader\.throughput", True),
], ids=["pass", "fail", "config-error", "check-hangs-past-its-timeout"])
def test_each_outcome_sets_the_condition_npd_would_and_only_a_failed_gate_taints(
        tmp_path, gate, failed, inconclusive, message, tainted):
    monitor = _monitor()
    ran = _run_monitor(tmp_path, gate, monitor)
    gate_rule = ran["PreflightFailed"]
    assert (gate_rule.condition, ran["PreflightInconclusive"].condition) == (failed, inconclusive)
    assert gate_rule.exit_code == {"False": 0, "True": 1, "Unknown": 2}[failed]  # what NPD reads
    assert re.fullmatch(message, gate_rule.message), gate_rule.message
    limit = monitor["pluginConfig"]["max_output_length"]
    assert all(len(i.message.encode()) <= limit for i in ran.values())  # the plugin's own line, not NPD's cut
    assert nrc_tainted(_rule(), {t: i.condition for t, i in ran.items()}) is tainted


def test_preflight_installed_beside_the_images_python_is_run_from_there(tmp_path):
    """An image whose python3 has no preflight (installed with --venv): PREFLIGHT_PYTHON names the one that has."""
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no /usr/bin/python3 to stand for an image's Python without preflight")
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    without = subprocess.run(["/usr/bin/python3", "-c", "import preflight"], capture_output=True, env=bare, cwd=tmp_path)
    assert without.returncode != 0  # the image's python3 cannot run the gate itself
    environ = {**bare, "PATH": f"/usr/bin{os.pathsep}/bin", "PREFLIGHT_PYTHON": sys.executable}
    ran = _run_monitor(tmp_path / "named", FAIL, environ=environ)["PreflightFailed"]
    assert (ran.condition, ran.message) == ("True", "preflight failed 1 of 1 judged: shm.size")
    # Not named: python3 exits 1 for want of preflight, which is no verdict on the node, never a problem.
    del environ["PREFLIGHT_PYTHON"]
    ran = _run_monitor(tmp_path / "unnamed", FAIL, environ=environ)["PreflightFailed"]
    assert ran.condition == "Unknown" and ran.exit_code == 3, ran
    assert ran.message.startswith("preflight could not judge this node: exit 1: ") and "No module named" in ran.message


def _scaled(monitor: dict, timeout: str) -> dict:
    """The monitor with NPD's timeouts set to ``timeout`` (a hang test cannot wait 10 minutes)."""
    scaled = copy.deepcopy(monitor)
    scaled["pluginConfig"]["timeout"] = timeout
    for rule in scaled["rules"]:
        rule["timeout"] = timeout
    return scaled


def test_a_run_with_no_verdict_is_bounded_below_npds_timeout_and_is_unknown_never_a_problem(tmp_path):
    """A check that sleeps past the plugin's deadline (its own timeout is an hour): the plugin kills preflight
    and answers Unknown with its own message before NPD would kill it and say only "Timeout"."""
    monitor = _scaled(_monitor(), "20s")
    ran = _run_monitor(tmp_path, HUNG_CHECK.format(timeout="1h"), monitor)
    gate = ran["PreflightFailed"]
    assert gate.exit_code == 3 and gate.status == "Unknown" and gate.seconds < 20, gate
    assert gate.message == ("preflight could not judge this node: no verdict within 14 s, below NPD's 20 s timeout; "
                            f"killed (log: {tmp_path}/run/preflight-npd/last-run.log)")
    assert ran["PreflightInconclusive"].condition == "True"
    assert not nrc_tainted(_rule(), {t: i.condition for t, i in ran.items()})
    alive = subprocess.run(["pgrep", "-f", f"{tmp_path}/etc/preflight-npd/thresholds.yaml"], capture_output=True)
    assert alive.stdout == b"", "preflight outlived the plugin's deadline"


def test_a_failed_node_returns_on_a_later_pass_and_a_config_error_does_not_take_a_passing_one_out(tmp_path):
    rule, conditions = _rule(), {}
    for step, (gate, tainted) in enumerate([(PASS, False), (FAIL, True), (FAIL, True), (TYPO, False), (PASS, False)]):
        ran = _run_monitor(tmp_path / str(step), gate)
        conditions = {t: i.condition for t, i in ran.items()}
        assert nrc_tainted(rule, conditions) is tainted, (step, conditions)
    assert nrc_tainted(rule, {}) is False  # a new node, before its first run: not held (defaultStatus False)


def test_a_long_failure_message_is_cut_by_the_plugin_within_max_output_length(tmp_path):
    gate = "version: 1\nchecks:\n" + "".join(
        f"  a_rather_long_instance_name_{n}:\n    check: shm\n    size: {{min: 1000 TiB}}\n" for n in range(12))
    monitor = _monitor()
    ran = _run_monitor(tmp_path, gate, monitor)["PreflightFailed"]
    limit = monitor["pluginConfig"]["max_output_length"]
    assert ran.condition == "True" and ran.message.endswith("...") and len(ran.message.encode()) <= limit
    assert ran.message.startswith("preflight failed 12 of 12 judged: a_rather_long_instance_name_0.size, ")


def test_one_rule_per_condition_and_no_condition_before_the_first_run():
    """kubernetes/node-problem-detector#566 and #664: two permanent rules on one condition flip it back and
    forth; #407: before a plugin's first run NPD reports its condition False, "healthy" unmeasured."""
    monitor = _monitor()
    conditions = [rule["condition"] for rule in monitor["rules"]]
    assert sorted(conditions) == sorted(set(conditions)) == sorted(c["type"] for c in monitor["conditions"])
    assert monitor["pluginConfig"]["skip_initial_status"] is True  # absent until judged: defaultStatus decides
    assert nrc_tainted(_rule(), {}) is False


def test_the_monitor_passes_npds_own_validation_and_leaves_room_for_the_plugins_kill():
    """custompluginmonitor/types/config.go: Validate, and the keys its structs read."""
    monitor = _monitor()
    assert set(monitor) <= {"plugin", "pluginConfig", "source", "conditions", "rules", "metricsReporting"}
    assert set(monitor["pluginConfig"]) <= {"invoke_interval", "timeout", "max_output_length", "concurrency",
                                            "enable_message_change_based_condition_update", "skip_initial_status"}
    assert monitor["plugin"] == "custom"
    npd_timeout = _seconds(monitor["pluginConfig"]["timeout"])
    defaults = {c["type"] for c in monitor["conditions"]}
    for rule in monitor["rules"]:
        assert set(rule) <= {"type", "condition", "reason", "path", "args", "timeout", "invoke_interval"}
        assert _seconds(rule["timeout"]) <= npd_timeout  # "plugin timeout is greater than global timeout"
        assert rule["type"] == "permanent" and rule["condition"] in defaults  # a preset default condition
        assert rule["path"] == f"{CONFIG_DIR}/preflight_npd.py"
    assert [r["args"][0] for r in monitor["rules"]] == ["gate", "inconclusive"]  # in this order, one at a time
    gate = monitor["rules"][0]
    deadline = _seconds(gate["timeout"]) - 3 * min(15.0, _seconds(gate["timeout"]) / 10)
    assert deadline >= 8 * 60  # the whole gate's checks (cuda, 120 s timeout) fit well inside it
    assert _seconds(monitor["pluginConfig"]["invoke_interval"]) > npd_timeout


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_manifests_pass_kubernetes_validate_strict():
    documents = _documents(NPD / "daemonset.yaml")
    assert [d["kind"] for d in documents] == ["Namespace", "ServiceAccount", "ClusterRoleBinding", "DaemonSet"]
    for document in documents:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "preflight-npd"},
                 "data": {name: (NPD / name).read_text() for name in _kustomization_files()}}
    kubernetes_validate.validate(configmap, KUBERNETES_VERSION, strict=True)


def test_strict_validation_here_rejects_a_misspelt_field():
    daemonset = copy.deepcopy(_documents(NPD / "daemonset.yaml")[-1])
    daemonset["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSION, strict=True)


def _kustomization_files() -> list[str]:
    kustomization = yaml.safe_load((NPD / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["daemonset.yaml"]
    (generator,) = kustomization["configMapGenerator"]
    assert generator["name"] == "preflight-npd"
    return generator["files"]


def test_the_daemonset_runs_npd_in_the_training_image_with_the_files_the_monitor_names():
    pod = _documents(NPD / "daemonset.yaml")[-1]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    training = next(d for d in _documents(REPO / "ci/kubernetes/training-job.yaml") if d["kind"] == "Job")
    assert container["image"] == training["spec"]["template"]["spec"]["containers"][0]["image"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    assert mounts[CONFIG_DIR]["configMap"]["name"] == "preflight-npd"
    assert mounts[CONFIG_DIR]["configMap"]["defaultMode"] & 0o111  # NPD executes the plugin file
    assert "emptyDir" in mounts[STATE_DIR] and "emptyDir" in mounts["/tmp"]
    monitor_flag = next(a for a in container["command"] if a.startswith("--config.custom-plugin-monitor="))
    named = {monitor_flag.split("=", 1)[1]} | {w for r in _monitor()["rules"] for w in [r["path"], *r["args"]]
                                              if w.startswith(CONFIG_DIR)}
    assert {Path(p).name for p in named} == set(_kustomization_files())
    assert all(Path(p).parent == Path(CONFIG_DIR) for p in named)
    assert "nvidia.com/gpu" not in json.dumps(container.get("resources", {}))  # it must not hold the node's GPUs
    for each in pod["initContainers"] + pod["containers"]:  # restricted, as every preflight container
        assert {key: each["securityContext"].get(key) for key in RESTRICTED} == RESTRICTED, each["name"]
    tolerated = {t["key"] for t in pod["tolerations"]}
    assert _rule()["spec"]["taint"]["key"] in tolerated  # it keeps running on the node it took out
    assert container["command"][0] == next(c for c in pod["initContainers"] if c["name"] == "npd-binary")[
        "command"][-1]


def test_the_npd_gate_loads_and_judges_node_health_only():
    loaded = config.load(str(NPD / "thresholds.yaml"))
    assert [i.name for i in loaded.instances] == ["cuda"]


def test_the_node_readiness_rule_matches_the_controllers_schema_and_the_monitors_conditions():
    crd = yaml.safe_load((REPO / "tests/schemas/nodereadinessrules.readiness.node.x-k8s.io.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    rule = _rule()
    assert rule["apiVersion"] == f"{crd['spec']['group']}/v1alpha1" and rule["kind"] == crd["spec"]["names"]["kind"]
    schema = version["schema"]["openAPIV3Schema"]
    jsonschema.validate(rule, schema)
    broken = copy.deepcopy(rule)
    broken["spec"]["conditionPolicy"] = "oneOf"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    assert rule["spec"]["taint"]["key"].startswith("readiness.k8s.io/")  # the CRD's CEL rule on the key
    assert rule["spec"]["taint"]["effect"] == "NoSchedule" and rule["spec"]["enforcementMode"] == "continuous"
    assert {c["type"] for c in rule["spec"]["conditions"]} == {c["type"] for c in _monitor()["conditions"]}
