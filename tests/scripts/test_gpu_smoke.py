"""scripts/gpu-smoke-bundle.sh and scripts/gpu-smoke.sh end to end on this CPU machine, pip cut off from any index.

The GPU node is played by this Python with preflight's small dependencies hidden: a folder on
PYTHONPATH whose ``pynvml``, ``six``, ``junit_xml`` and ``yaml`` raise ImportError, as if the
image lacked them. The wheels come from the bundle script, offline, so it packs them from
this Python's installed distributions. There is no GPU here, so every run must fail, and say
why, with the errors first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO

HIDDEN = ("pynvml", "six", "junit_xml", "yaml")
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def script(name: str, *args: str, env: dict[str, str], cwd: Path = REPO, root: Path = REPO):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    return subprocess.run(["bash", str(root / "scripts" / name), *args], cwd=cwd, capture_output=True, text=True,
                          env={**environ, "PYTHON": sys.executable, **OFFLINE, **env}, timeout=240, check=False)


@pytest.fixture
def bare_image(tmp_path) -> dict[str, str]:
    """Environment variables under which this Python cannot import preflight's small dependencies."""
    hide = tmp_path / "hide"
    for module in HIDDEN:
        (hide / module).mkdir(parents=True)
        (hide / module / "__init__.py").write_text(f"raise ImportError('{module} hidden: the image lacks it')\n")
    return {"PYTHONPATH": str(hide), "PIP_FIND_LINKS": str(tmp_path / "no-wheels-here")}


def summary(output: str) -> list[str]:
    """The reasons gpu-smoke.sh gives at the end, in its order."""
    return [line.strip() for line in output.split("the smoke test failed:\n", 1)[1].splitlines()]


def test_the_bundle_and_the_smoke_script_run_offline_and_fail_for_want_of_a_gpu(tmp_path, bare_image):
    bundle = tmp_path / "bundle"
    made = script("gpu-smoke-bundle.sh", "--pythons", "3.11", "--archs", "x86_64", str(bundle), env={})
    assert made.returncode == 0, made.stdout + made.stderr
    wheels = sorted(path.name.split("-")[0].lower() for path in (bundle / "wheels").iterdir())
    assert wheels == ["junit_xml", "nvidia_ml_py", "pyyaml", "six"]
    assert (bundle / "preflight" / "checks" / "transfer.py").exists() and not (bundle / "tests").exists()

    out = tmp_path / "out"
    run = script("gpu-smoke.sh", str(out), env=bare_image, cwd=tmp_path, root=bundle)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"missing here: nvidia-ml-py six junit-xml pyyaml; installing from {bundle}/wheels" in run.stdout
    assert f"preflight from {bundle}/preflight/__init__.py" in run.stdout
    installed = {path.name for path in (out / "pydeps").iterdir()}
    assert {"_yaml", "junit_xml", "pynvml.py", "six.py", "yaml"} <= installed and "torch" not in installed
    reasons = summary(run.stdout)
    assert reasons[0].startswith("no GPU: measured 0, required >= 1 (no CUDA device: torch ")
    assert reasons[1].startswith("bench/transfer_reference.py exited 1: no GPU measurement: no CUDA device")
    assert (out / "report.json").exists() and (out / "report.xml").exists()
    # model and pipeline fall back to the CPU and the built-in tiny CNN (no torchvision here), and measure
    assert "torchvision is not importable here" in run.stdout and "model: tiny" in run.stdout
    report = {r["id"]: r for r in json.loads((out / "report.json").read_text())["results"]}
    for key in ("model.samples_per_s[cpu]", "model_bf16.step_time_p50[cpu]", "pipeline.input_bound[cpu]"):
        assert report[key]["value"] is not None and report[key]["verdict"] != "error", report[key]
    assert "over 256 files under" in report["pipeline.samples_per_s[cpu]"]["method"]


def test_without_wheels_it_names_what_is_missing_and_how_to_get_it(tmp_path, bare_image):
    run = script("gpu-smoke.sh", str(tmp_path / "out"), env=bare_image)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "cannot run: nvidia-ml-py six junit-xml pyyaml missing from " in run.stdout
    assert "run scripts/gpu-smoke-bundle.sh BUNDLE, copy BUNDLE to this node" in run.stdout
    assert "== preflight" not in run.stdout


def test_a_check_that_errors_fails_the_smoke_test_and_its_errors_come_first(tmp_path):
    config = tmp_path / "hang.yaml"
    config.write_text((REPO / "scripts" / "gpu-smoke.yaml").read_text().replace("timeout: 300s", "timeout: 1 ms"))
    run = script("gpu-smoke.sh", "--config", str(config), str(tmp_path / "out"), env={})
    assert run.returncode == 1, run.stdout + run.stderr
    table = run.stdout.split("errors first\n", 1)[1].splitlines()
    assert table[0].startswith("ERROR cuda.device_count") and "timed out after 0.001s" in table[0]
    assert [line.split()[0] for line in table[:19]] == ["ERROR"] * 19
    reasons = summary(run.stdout)
    assert reasons[:3] == [
        f"error in cuda.device_count and 9 more: cuda check did not finish: timed out after 0.001s and was killed; "
        f"raise `timeout` in thresholds.yaml if the node is slow",
        f"error in transfer.h2d_pinned and 6 more: transfer check did not finish: timed out after 0.001s and was "
        f"killed; raise `timeout` in thresholds.yaml if the node is slow",
        f"error in p2p.p2p_access and 1 more: p2p check did not finish: timed out after 0.001s and was killed; raise "
        f"`timeout` in thresholds.yaml if the node is slow",
    ]


def test_usage_errors_exit_2():
    assert script("gpu-smoke.sh", "--wheels", "/nonexistent", env={}).returncode == 2
    assert script("gpu-smoke.sh", "--frobnicate", env={}).returncode == 2
    help_text = script("gpu-smoke.sh", "--help", env={})
    assert help_text.returncode == 0 and "--wheels DIR" in help_text.stdout and "set -uo" not in help_text.stdout


def test_an_installed_distribution_packs_into_a_wheel_pip_accepts(tmp_path):
    packed = subprocess.run([sys.executable, str(REPO / "scripts" / "wheel_from_installed.py"), str(tmp_path), "six"],
                            capture_output=True, text=True, check=True)
    wheel = next(tmp_path.glob("six-*.whl"))
    assert wheel.name.endswith("-py2.py3-none-any.whl") and wheel.name in packed.stdout
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        record = archive.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
    assert "six.py" in names and not any(n.endswith((".pyc", "INSTALLER", "direct_url.json")) for n in names)
    assert all(line.split(",")[0] in names for line in record.splitlines())
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, env={**os.environ, **OFFLINE})
    assert (target / "six.py").read_bytes() == Path(__import__("six").__file__).read_bytes()
