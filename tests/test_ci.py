"""The pipeline pieces under ci/ and action.yml: valid for their consumers, naming only what exists."""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from preflight import config
from preflight.cli import _parser
from preflight.commands import schema
from preflight.report import github

REPO = Path(__file__).resolve().parents[1]
KUBERNETES_VERSION = "1.31.0"  # pinned: its schemas ship inside kubernetes-validate, no network needed
MANIFESTS = sorted((REPO / "ci" / "kubernetes").glob("*.yaml"))
# The restricted Pod Security Standard's container settings (kubernetes.io/docs/concepts/security/
# pod-security-standards/), plus a read-only root: what every preflight container carries.
RESTRICTED = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
              "seccompProfile": {"type": "RuntimeDefault"}, "readOnlyRootFilesystem": True}
# GitLab CI job keywords (docs.gitlab.com/ee/ci/yaml/) and `artifacts:` / `artifacts:reports:` keys.
GITLAB_JOB_KEYS = {"after_script", "allow_failure", "artifacts", "before_script", "cache", "coverage", "dependencies",
                   "environment", "extends", "hooks", "id_tokens", "image", "inherit", "interruptible", "needs",
                   "parallel", "release", "resource_group", "retry", "rules", "script", "secrets", "services",
                   "stage", "tags", "timeout", "trigger", "variables", "when"}
GITLAB_ARTIFACT_KEYS = {"paths", "exclude", "expire_in", "expose_as", "name", "public", "access", "reports",
                        "untracked", "when"}


def _documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _run_arguments(command: str, subcommand: str = "run") -> list[str]:
    """The words after `preflight run` (or ``subcommand``) in a shell line, with shell variables given sample
    values."""
    command = command.replace('"${config[@]}"', "-c thresholds.yaml").replace("$PREFLIGHT_ARGS", "")
    command = command.replace('${PREFLIGHT_CONFIG:+-c "$PREFLIGHT_CONFIG"}', "-c thresholds.yaml")
    words = shlex.split(re.sub(r"\$\{?(\w+)\}?", r"\1-value", command))
    return words[words.index(subcommand) + 1:]


def _assert_cli_accepts(command: str, subcommand: str = "run") -> None:
    args = _parser().parse_args([subcommand, *_run_arguments(command, subcommand)])
    assert args.command == subcommand


def test_there_are_manifests():
    assert {path.name for path in MANIFESTS} == {"training-job.yaml", "node-sweep-job.yaml", "fleet-job.yaml"}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifests_pass_kubernetes_validate_strict(path):
    for document in _documents(path):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_strict_validation_rejects_a_misspelt_field():
    job = next(d for d in _documents(REPO / "ci/kubernetes/training-job.yaml") if d["kind"] == "Job")
    broken = copy.deepcopy(job)
    broken["spec"]["template"]["spec"]["initContainers"][0]["terminationMessagePolicyy"] = "File"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_init_container_shares_image_gpus_and_a_memory_backed_shm_with_the_trainer():
    documents = _documents(REPO / "ci/kubernetes/training-job.yaml")
    pod = next(d for d in documents if d["kind"] == "Job")["spec"]["template"]["spec"]
    (init,), (train,) = pod["initContainers"], pod["containers"]
    assert init["image"] == train["image"]
    assert init["resources"]["limits"]["nvidia.com/gpu"] == train["resources"]["limits"]["nvidia.com/gpu"] == 8
    volumes = {v["name"]: v for v in pod["volumes"]}
    shm = next(m for m in init["volumeMounts"] if m["mountPath"] == "/dev/shm")
    assert volumes[shm["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert pod["restartPolicy"] == "Never"
    _assert_cli_accepts(shlex.join(init["command"]))


def test_configmap_thresholds_load_and_match_the_schema(tmp_path):
    (configmap,) = [d for d in _documents(REPO / "ci/kubernetes/training-job.yaml") if d["kind"] == "ConfigMap"]
    path = tmp_path / "thresholds.yaml"
    path.write_text(configmap["data"]["thresholds.yaml"])
    loaded = config.load(str(path), environ={"DATA_DIR": "/data"})
    assert [i.name for i in loaded.instances] == ["cuda", "shm", "storage", "dataloader", "transfer"]
    jsonschema.validate(yaml.safe_load(path.read_text()), schema.build())


def test_fleet_job_runs_one_bounded_launch_per_node_with_matching_node_count():
    # `preflight fleet`, not torchrun itself: its rendezvous is bounded by fleet.timeout (issue 45 case 3)
    documents = {d["kind"]: d for d in _documents(REPO / "ci/kubernetes/fleet-job.yaml")}
    spec = documents["Job"]["spec"]
    command = spec["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["preflight", "fleet"] and "torchrun" not in command
    assert f"--nnodes={spec['completions']}" in command and spec["parallelism"] == spec["completions"]
    assert "--node-rank=$(JOB_COMPLETION_INDEX)" in command
    name, service = documents["Job"]["metadata"]["name"], documents["Service"]["metadata"]["name"]
    assert f"--master-addr={name}-0.{service}" in command and documents["Service"]["spec"]["clusterIP"] == "None"
    port = documents["Service"]["spec"]["ports"][0]["port"]
    assert f"--master-port={port}" in command
    _assert_cli_accepts(shlex.join(command), "fleet")


def test_fleet_thresholds_load_and_match_the_schema(tmp_path):
    documents = {d["kind"]: d for d in _documents(REPO / "ci/kubernetes/fleet-job.yaml")}
    path = tmp_path / "thresholds.yaml"
    path.write_text(documents["ConfigMap"]["data"]["thresholds.yaml"])
    loaded = config.load(str(path))
    assert [i.name for i in loaded.instances] == ["cuda", "storage", "collective"]
    assert loaded.fleet == config.FleetSettings(300.0, "auto", 0.5, "fail")
    jsonschema.validate(yaml.safe_load(path.read_text()), schema.build())


def test_pytorchjob_runs_the_same_fleet_command_on_master_and_workers():
    (job,) = _documents(REPO / "ci/kubernetes/kubeflow/fleet-pytorchjob.yaml")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    command = replicas["Master"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["preflight", "fleet"]  # torchrun's place read from the operator's PET_* variables
    assert replicas["Worker"]["template"] == replicas["Master"]["template"]
    _assert_cli_accepts(shlex.join(command), "fleet")


def _pod_specs(node):
    """Every pod spec (a mapping with ``containers``) in a manifest, wherever its kind nests it."""
    if isinstance(node, dict):
        if "containers" in node:
            yield node
        for value in node.values():
            yield from _pod_specs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _pod_specs(value)


def test_every_preflight_container_is_restricted_with_a_writable_tmp_emptydir():
    found = []
    for path in MANIFESTS + sorted((REPO / "ci/kubernetes/kubeflow").glob("*.yaml")):
        for pod in (pod for document in _documents(path) for pod in _pod_specs(document)):
            for container in pod.get("initContainers", []) + pod["containers"]:
                if "preflight" in container["command"]:
                    found.append(f"{path.name}:{container['name']}")
                    context = container["securityContext"]
                    assert {key: context.get(key) for key in RESTRICTED} == RESTRICTED, found[-1]
                    assert context.get("runAsUser") != 0 and "add" not in context["capabilities"], found[-1]
                    (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
                    (volume,) = [v for v in pod["volumes"] if v["name"] == tmp["name"]]
                    assert volume["emptyDir"] is not None and not tmp.get("readOnly"), found[-1]
    assert sorted(found) == ["fleet-job.yaml:preflight", "fleet-pytorchjob.yaml:pytorch",  # Master, Worker
                             "fleet-pytorchjob.yaml:pytorch", "node-sweep-job.yaml:preflight",
                             "training-job.yaml:preflight"]


def test_pytorchjob_pod_template_passes_kubernetes_validate_strict():
    # The PyTorchJob is a CRD without a schema here; its pod template is a core PodTemplateSpec.
    (job,) = _documents(REPO / "ci/kubernetes/kubeflow/fleet-pytorchjob.yaml")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "preflight"}, **replica["template"]}
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_action_names_only_inputs_and_outputs_that_exist():
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    text = (REPO / "action.yml").read_text()
    assert set(re.findall(r"inputs\.([\w-]+)", text)) == set(action["inputs"])
    step_ids = {step.get("id") for step in action["runs"]["steps"]}
    written = set(github.outputs(_empty_report(), "j.xml", "r.json"))
    for name, output in action["outputs"].items():
        step, key = re.fullmatch(r"\$\{\{ steps\.([\w-]+)\.outputs\.([\w-]+) \}\}", output["value"]).groups()
        assert step in step_ids and key in written, name
    run_step = next(step for step in action["runs"]["steps"] if step.get("id") == "run")
    for variable in set(re.findall(r"\$(PREFLIGHT_\w+)", run_step["run"])):
        assert variable in run_step["env"], variable
    _assert_cli_accepts(run_step["run"].strip().splitlines()[-1])


def test_example_workflow_uses_only_the_actions_inputs_and_outputs():
    action = yaml.safe_load((REPO / "action.yml").read_text())
    workflow = yaml.safe_load((REPO / "ci/github/preflight.yml").read_text())
    step = next(s for s in workflow["jobs"]["preflight"]["steps"] if s.get("id") == "preflight")
    assert set(step["with"]) <= set(action["inputs"])
    text = (REPO / "ci/github/preflight.yml").read_text()
    assert set(re.findall(r"steps\.preflight\.outputs\.([\w-]+)", text)) <= set(action["outputs"])


def test_gitlab_template_uploads_junit_always_with_known_keys():
    template = yaml.safe_load((REPO / "ci/gitlab/preflight.gitlab-ci.yml").read_text())
    job = template[".preflight"]
    assert set(job) <= GITLAB_JOB_KEYS and set(job["artifacts"]) <= GITLAB_ARTIFACT_KEYS
    assert job["artifacts"]["when"] == "always"
    command = job["script"][-1]  # the lines before it install preflight (tests/test_install.py runs them)
    arguments = _run_arguments(command)
    assert job["artifacts"]["reports"]["junit"] == arguments[arguments.index("--junit-xml") + 1]
    assert set(job["artifacts"]["paths"]) >= {job["artifacts"]["reports"]["junit"]}
    _assert_cli_accepts(command)


@pytest.mark.parametrize("where", ["action.yml exit-code output", "GitLab template comments"])
def test_every_exit_code_is_named_where_a_pipeline_reads_it(where):
    if where.startswith("action"):
        text = yaml.safe_load((REPO / "action.yml").read_text())["outputs"]["exit-code"]["description"]
    else:
        lines = (REPO / "ci/gitlab/preflight.gitlab-ci.yml").read_text().splitlines()
        text = " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))
    for code, meaning in [(0, "passed"), (1, "gate failed"), (2, "usage or config error"), (3, "internal error")]:
        assert re.search(rf"\b{code} \(?(the |a |an )?{meaning}", text), (code, text)


def test_jenkinsfile_publishes_junit_in_post_always():
    text = (REPO / "ci/jenkins/Jenkinsfile").read_text()
    post = text[text.index("post {"):]
    always = post[post.index("always {"):]
    assert re.search(r"junit testResults: 'preflight-junit\.xml'", always)
    command = re.search(r"sh '([^']+)'", text).group(1)
    assert "--junit-xml preflight-junit.xml" in command
    _assert_cli_accepts(command)


def _empty_report():
    from tests.report_helpers import make_report

    return make_report([])


def test_every_pipeline_piece_writes_the_html_page_and_keeps_it():
    """Issue 25: the GitHub action, the GitLab template and the Jenkinsfile publish the HTML report."""
    action = yaml.safe_load((REPO / "action.yml").read_text())
    run_step = next(step for step in action["runs"]["steps"] if step.get("id") == "run")
    assert '--html "$PREFLIGHT_HTML"' in run_step["run"] and run_step["env"]["PREFLIGHT_HTML"] == "${{ inputs.html }}"
    assert action["outputs"]["html"]["value"] == "${{ steps.run.outputs.html }}"
    workflow = (REPO / "ci/github/preflight.yml").read_text()
    assert "${{ steps.preflight.outputs.html }}" in workflow.split("upload-artifact", 1)[1]
    job = yaml.safe_load((REPO / "ci/gitlab/preflight.gitlab-ci.yml").read_text())[".preflight"]
    arguments = _run_arguments(job["script"][-1])
    page = arguments[arguments.index("--html") + 1]
    assert page in job["artifacts"]["paths"] and job["artifacts"]["expose_as"]
    jenkins = (REPO / "ci/jenkins/Jenkinsfile").read_text()
    command = re.search(r"sh '([^']+)'", jenkins).group(1)
    page = command.split("--html ", 1)[1].split()[0]
    assert re.search(rf"archiveArtifacts artifacts: '[^']*\b{re.escape(page)}\b", jenkins[jenkins.index("always {"):])


def test_the_gitlab_template_with_no_wheel_and_no_preflight_stops_with_one_line(tmp_path):
    """Its fallback: PREFLIGHT_PACKAGE, else the project's bundled wheel, else the image's preflight, else exit 2."""
    job = yaml.safe_load((REPO / "ci/gitlab/preflight.gitlab-ci.yml").read_text())[".preflight"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 1\n")  # an image's python3 without preflight
    (bin_dir / "python3").chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CI_PROJECT_DIR": str(project), **job["variables"]}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", "\n".join(job["script"][:2])],
                          cwd=project, env=environ, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"preflight: no wheel matches PREFLIGHT_WHEEL=dist/train_preflight-*.whl in {project} and {bin_dir}/python3 "
        "has no preflight: build the wheel in a preflight checkout (python -m build --wheel) and commit it to "
        "dist/, or set PREFLIGHT_PACKAGE to a wheel's path or a git URL"]


def test_the_node_sweep_shares_the_nodes_measuring_lock_through_a_host_directory():
    (job,) = _documents(REPO / "ci/kubernetes/node-sweep-job.yaml")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    lock = next(e["value"] for e in container["env"] if e["name"] == "PREFLIGHT_LOCK")
    mount = next(m for m in container["volumeMounts"] if lock.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert "hostPath" in volume and not mount.get("readOnly")  # every preflight pod on the node opens one file
    text = (REPO / "ci/kubernetes/node-sweep-job.yaml").read_text()
    assert "ReadOnlyMany" in text and "pod-security.kubernetes.io/enforce=privileged" in text


def test_docs_ci_names_every_input_and_output_of_the_action():
    """Issue 35: docs/ci.md's list of the action's inputs left out `html` (and its outputs `html`)."""
    action = yaml.safe_load((REPO / "action.yml").read_text())
    prose = " ".join((REPO / "docs" / "ci.md").read_text().split())
    listed = re.search(r"\(inputs: ([^;]*); outputs: ([^)]*)\)", prose)
    assert listed, "docs/ci.md no longer lists the action's inputs and outputs"
    inputs, outputs = (set(re.findall(r"`([\w-]+)`", part)) for part in listed.groups())
    assert inputs == set(action["inputs"]) and outputs == set(action["outputs"])


def _example_overrides() -> dict[str, list[str]]:
    """The `--set` arguments each CI example gives preflight run, by where it gives them."""
    workflow = yaml.safe_load((REPO / "ci/github/preflight.yml").read_text())
    step = next(s for s in workflow["jobs"]["preflight"]["steps"] if s.get("id") == "preflight")
    header = [line for line in (REPO / "ci/gitlab/preflight.gitlab-ci.yml").read_text().splitlines()
              if line.startswith("#") and "PREFLIGHT_ARGS" in line]
    gitlab = re.search(r'PREFLIGHT_ARGS: "([^"]*)"', header[0]).group(1)
    docs = re.findall(r"^\s+args: (.*)$", (REPO / "docs/ci.md").read_text(), re.MULTILINE)
    found = {"ci/github/preflight.yml": step["with"]["args"], "GitLab template header": gitlab,
             **{f"docs/ci.md args #{n}": args for n, args in enumerate(docs, 1)}}
    return {where: [w for w in shlex.split(args) if w != "--set"] for where, args in found.items()}


@pytest.mark.parametrize("where", list(_example_overrides()))
def test_every_ci_example_names_the_dataset_of_every_dataset_row_of_the_bundled_gate(where):
    """Issue 35: ci/github/preflight.yml and the GitLab header set only storage.path, so the bundled gate's
    dataloader rows failed "no dataset named". Each example's `--set`s, on the bundled gate without DATA_DIR,
    leave no check instance without its dataset."""
    overrides = _example_overrides()[where]
    loaded = config.load(str(config.bundled_path()), overrides, environ={})
    unnamed = [i.name for i in loaded.instances if "path" in i.options and i.options["path"] == ""]
    assert not unnamed, f"{where} ({overrides}) names no dataset for {unnamed}"


def test_docs_slurm_shows_every_gate_it_installs_and_each_loads(tmp_path):
    """Issue 35: docs/slurm.md installed a healthcheck.yaml it never showed. Each file its install lines put in
    /etc/preflight/ is shown as a `# /etc/preflight/NAME` block, and that block is a valid thresholds file."""
    text = (REPO / "docs" / "slurm.md").read_text()
    installed = re.search(r"^install -m 644 (.+?) /etc/preflight/", text, re.MULTILINE).group(1).split()
    blocks = {m.group(1): m.group(2) for m in re.finditer(r"```yaml\n# /etc/preflight/([\w.-]+)[^\n]*\n(.*?)```",
                                                            text, re.DOTALL)}
    assert set(installed) <= set(blocks), f"installed but never shown: {set(installed) - set(blocks)}"
    for name in installed:
        (tmp_path / name).write_text(blocks[name])
        loaded = config.load(str(tmp_path / name), environ={})
        assert loaded.instances, name
