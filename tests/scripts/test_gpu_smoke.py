"""scripts/gpu-smoke-bundle.sh and scripts/gpu-smoke.sh on this CPU machine, pip cut off from any index.

The script's own logic, fast enough for CI: it settles its dependencies, stops at once when
torch sees no GPU, and otherwise fails on every row of the battery that errored, failed or was
not measured, naming it. A GPU node is played two ways. Its image: this Python with preflight's
small dependencies hidden (a folder on PYTHONPATH whose ``pynvml``, ``six``, ``junit_xml`` and
``yaml`` raise ImportError), the wheels packed offline by the bundle script. Its GPU:
``tests/fakes/gpu_site``, which puts the seam's fakes (one H200) behind ``preflight.host.gpu``
and ``preflight.host.nvml`` in every process the script starts; all above the seam is real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from preflight import config
from preflight.checks import CHECKS, p2p
from preflight.checks.base import Budget
from preflight.host import gpu
from preflight.verdict import Outcome, judge
from tests.fakes.gpu import FakeCuda, h200
from tests.helpers import REPO

HIDDEN = ("pynvml", "six", "junit_xml", "yaml")
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
SMOKE = REPO / "scripts" / "gpu-smoke.yaml"
FAKE_GPU = {"PYTHONPATH": str(REPO / "tests" / "fakes" / "gpu_site")}
BUILD = gpu.torch_build() or {}
cpu_build = pytest.mark.skipif(BUILD.get("cuda") is not None or BUILD.get("hip") is not None,
                               reason="asserts what a machine without a GPU does; this torch can see GPUs")


def script(name: str, *args: str, env: dict[str, str], cwd: Path = REPO, root: Path = REPO):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    return subprocess.run(["bash", str(root / "scripts" / name), *args], cwd=cwd, capture_output=True, text=True,
                          env={**environ, "PYTHON": sys.executable, **OFFLINE, **env}, timeout=120, check=False)


def hiding(folder: Path, modules: tuple[str, ...]) -> dict[str, str]:
    """Environment variables under which this Python cannot import ``modules``, and pip finds no wheel."""
    for module in modules:
        (folder / module).mkdir(parents=True)
        (folder / module / "__init__.py").write_text(f"raise ImportError('{module} hidden: the image lacks it')\n")
    return {"PYTHONPATH": str(folder), "PIP_FIND_LINKS": str(folder / "no-wheels-here")}


@pytest.fixture
def bare_image(tmp_path) -> dict[str, str]:
    """Environment variables under which this Python cannot import preflight's small dependencies."""
    return hiding(tmp_path / "hide", HIDDEN)


def summary(output: str) -> list[str]:
    """The reasons gpu-smoke.sh gives at the end, in its order."""
    return [line.strip() for line in output.split("the smoke test failed:\n", 1)[1].splitlines()]


def battery(tmp_path: Path, *instances: str, timeout: str = "") -> Path:
    """scripts/gpu-smoke.yaml cut to ``instances`` (all when none), thresholds and all, as a file."""
    document = yaml.safe_load(SMOKE.read_text())
    if instances:
        document["checks"] = {name: body for name, body in document["checks"].items() if name in instances}
    if timeout:
        document["defaults"]["timeout"] = timeout
        for body in document["checks"].values():
            body["timeout"] = timeout
    path = tmp_path / "battery.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@cpu_build
def test_the_bundle_installs_offline_and_the_smoke_script_stops_for_want_of_a_gpu(tmp_path, bare_image):
    bundle = tmp_path / "bundle"
    made = script("gpu-smoke-bundle.sh", "--pythons", "3.11", "--archs", "x86_64", str(bundle), env={})
    assert made.returncode == 0, made.stdout + made.stderr
    wheels = sorted(path.name.split("-")[0].lower() for path in (bundle / "wheels").iterdir())
    assert wheels == ["junit_xml", "nvidia_ml_py", "pyyaml", "six"]
    assert (bundle / "preflight" / "checks" / "transfer.py").exists() and not (bundle / "tests").exists()
    assert (bundle / "scripts" / "gpu_smoke_report.py").exists()

    out = tmp_path / "out"
    run = script("gpu-smoke.sh", str(out), env=bare_image, cwd=tmp_path, root=bundle)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"missing here: nvidia-ml-py six junit-xml pyyaml; installing from {bundle}/wheels" in run.stdout
    assert f"preflight from {bundle}/preflight/__init__.py" in run.stdout
    installed = {path.name for path in (out / "pydeps").iterdir()}
    assert {"_yaml", "junit_xml", "pynvml.py", "six.py", "yaml"} <= installed and "torch" not in installed
    assert run.stdout.splitlines()[-2:] == [
        f"cannot run: no GPU visible: no CUDA device: torch {BUILD['__version__']} is a CPU build, and {gpu.NO_GPU}",
        "fix: run this on a GPU node, in the job's image with its GPUs given to the container (--gpus all, or the "
        "pod's nvidia.com/gpu limit)"]


@cpu_build
def test_with_no_gpu_it_stops_at_once_nonzero_and_says_why(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text('{"results": []}')  # an earlier run's: must not outlive this one
    run = script("gpu-smoke.sh", str(out), env={})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "cannot run: no GPU visible: no CUDA device: torch " in run.stdout
    # nothing after the check for a GPU ran: no data written, no check run, no report, no reference
    assert "== data" not in run.stdout and "== preflight" not in run.stdout
    assert sorted(path.name for path in out.iterdir()) == []


@cpu_build
def test_it_runs_when_only_nvidia_ml_py_is_missing(tmp_path):
    run = script("gpu-smoke.sh", str(tmp_path / "out"), env=hiding(tmp_path / "hide", ("pynvml",)))
    assert run.returncode == 1, run.stdout + run.stderr  # for want of a GPU, not of nvidia-ml-py (that is 2)
    assert "missing here: nvidia-ml-py;" in run.stdout
    assert "nvidia-ml-py missing, with no wheel in PIP_FIND_LINKS" in run.stdout
    assert "preflight runs without it, and every NVML reading" in run.stdout
    assert "cannot run: no GPU visible" in run.stdout and "cannot run: nvidia-ml-py" not in run.stdout


def test_without_wheels_it_names_what_is_missing_and_how_to_get_it(tmp_path, bare_image):
    run = script("gpu-smoke.sh", str(tmp_path / "out"), env=bare_image)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "cannot run: nvidia-ml-py six junit-xml pyyaml missing from " in run.stdout
    assert "run scripts/gpu-smoke-bundle.sh BUNDLE, copy BUNDLE to this node" in run.stdout
    assert "== preflight" not in run.stdout


def test_a_gpu_that_cannot_compute_fails_the_smoke_test_by_its_row(tmp_path):
    crash = "CUDA error: an illegal memory access was encountered"
    out = tmp_path / "out"
    run = script("gpu-smoke.sh", "--config", str(battery(tmp_path, "cuda")), str(out),
                 env={**FAKE_GPU, "FAKE_GPU_MATMUL_ERROR": crash})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "cuda:0 NVIDIA H200, compute capability 9.0, PCI 0000:3b:00.0" in run.stdout
    # its first lines: torch's version and CUDA runtime, then the driver and whether torch gives PCI ids
    first = run.stdout.splitlines()[:6]
    assert first[1].startswith(f"python {sys.version.split()[0]}, torch {BUILD['__version__']}, CUDA runtime "), first
    assert "driver 550.54.15 (CUDA 12.4), from NVML" in first and \
        "PCI ids in torch's device properties: present (torch 2.5.1)" in first, first
    reasons = summary(run.stdout)
    assert reasons[0] == (f"not measured: cuda.matmul_error[cuda:0]: the GPU failed a 2048x2048 matmul ({crash}); "
                          f"check dmesg for Xid errors; required <= 0.001")
    # every other row of the healthy fake H200 passed the smoke thresholds; the reference needs a real GPU
    assert len(reasons) == 2 and reasons[1].startswith("bench/transfer_reference.py exited 1")
    verdicts = {r["id"]: r["verdict"] for r in json.loads((out / "report.json").read_text())["results"]}
    assert len(verdicts) == 27 and verdicts.pop("cuda.matmul_error[cuda:0]") == "fail"
    assert set(verdicts.values()) == {"pass"}


def test_a_check_that_errors_fails_the_smoke_test_and_its_errors_come_first(tmp_path):
    run = script("gpu-smoke.sh", "--config", str(battery(tmp_path, timeout="1 ms")), str(tmp_path / "out"),
                 env=FAKE_GPU)
    assert run.returncode == 1, run.stdout + run.stderr
    table = run.stdout.split("errors first\n", 1)[1].splitlines()
    thresholds = sum(len(i.thresholds) for i in config.load(str(SMOKE), environ={}).instances)
    assert [line.split()[0] for line in table[:thresholds]] == ["ERROR"] * thresholds
    assert table[0].startswith("ERROR cuda.device_count") and "timed out after 0.001s" in table[0]
    timed_out = "check did not finish: timed out after 0.001s and was killed; raise `timeout` in thresholds.yaml if " \
                "the node is slow"
    reasons = summary(run.stdout)
    assert reasons[:7] == [
        f"error in cuda.device_count and 26 more: cuda {timed_out}",
        f"error in transfer.h2d_pinned and 9 more: transfer {timed_out}",
        f"error in p2p.p2p_access and 1 more: p2p {timed_out}",
        f"error in model.samples_per_s and 2 more: model {timed_out}",
        f"error in model_bf16.samples_per_s and 2 more: model {timed_out}",
        f"error in pipeline.samples_per_s and 3 more: pipeline {timed_out}",
        f"error in xid.xid_drain and 2 more: xid {timed_out}",
    ]
    assert len(reasons) == 8 and reasons[7].startswith("bench/transfer_reference.py exited 1")


def test_every_metric_of_every_smoke_instance_has_a_threshold():
    # a row without one leaves the report when it cannot be measured: the smoke test would not see it fail
    for instance in config.load(str(SMOKE), environ={}).instances:
        gated = {threshold.metric for threshold in instance.thresholds}
        assert gated == {metric.name for metric in CHECKS[instance.check].METRICS}, instance.name


def test_a_failing_peer_copy_fails_the_smoke_battery_and_one_gpu_is_a_skip():
    [instance] = [i for i in config.load(str(SMOKE), environ={}).instances if i.check == "p2p"]
    broken = FakeCuda(devices=(h200(0), h200(1, "0000:86:00.0")),
                      peer_rate=RuntimeError("CUDA error: an illegal memory access was encountered"))
    results = judge(instance, Outcome(tuple(p2p.measurements({"size": 64 << 20}, Budget(0.2, 60), broken))))
    bandwidth = {r.id: r.verdict for r in results if r.metric == "p2p_bandwidth"}
    assert bandwidth == {"p2p.p2p_bandwidth[cuda:0->cuda:1]": "fail", "p2p.p2p_bandwidth[cuda:1->cuda:0]": "fail"}
    alone = judge(instance, Outcome(tuple(p2p.measurements({"size": 64 << 20}, Budget(0.2, 60), FakeCuda()))))
    assert {r.verdict for r in alone} == {"skip"}


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


@pytest.mark.parametrize("module, package", [("numpy", "numpy"), ("yaml", "pyyaml"), ("junit_xml", "junit-xml")])
def test_a_missing_package_stops_it_within_seconds_naming_it(tmp_path, module, package):
    started = time.monotonic()
    run = script("gpu-smoke.sh", str(tmp_path / "out"), env=hiding(tmp_path / "hide", (module,)))
    elapsed = time.monotonic() - started
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"cannot run: {package} missing from {sys.executable}, with no wheel in " in run.stdout
    assert "== environment" not in run.stdout  # torch was never imported, no GPU touched
    assert elapsed < 10, f"took {elapsed:.1f}s to name {package}"


def test_without_torch_it_stops_at_once_naming_it(tmp_path):
    python = tmp_path / "python"  # this Python without its site-packages: no torch, no numpy
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    run = script("gpu-smoke.sh", str(tmp_path / "out"), env={"PYTHON": str(python)})
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == (f"cannot run: torch missing from {python}: run this with the job's own "
                                           f"python and torch (PYTHON=...)")


def budget_lines(output: str) -> dict[str, float]:
    return {line.split()[0]: float(line.split()[1]) for line in output.split("step or check", 1)[1].splitlines()[1:]
            if line and not line.startswith((" ", "over budget"))}


def test_the_dry_run_shows_the_budget_adds_up_to_9_minutes_without_a_gpu(tmp_path):
    run = script("gpu-smoke.sh", "--dry-run", str(tmp_path / "out"), env={})
    assert run.returncode == 0, run.stdout + run.stderr
    steps = budget_lines(run.stdout)
    total = steps.pop("total")
    assert total == sum(steps.values()) <= 540, steps
    instances = config.load(str(SMOKE), environ={}).instances
    needed = 20 + sum(i.timeout_s + 6 for i in instances)  # start-up, and each check's timeout and kill grace
    assert needed <= steps["preflight"]
    assert all(i.retries == 0 and i.repeats == 1 for i in instances)
    assert "limit 540 s = 9 min" in run.stdout and "over budget" not in run.stdout
    assert "== environment" not in run.stdout and not (tmp_path / "out" / "report.json").exists()


def test_a_battery_whose_timeouts_overrun_the_budget_fails_the_dry_run(tmp_path):
    run = script("gpu-smoke.sh", "--dry-run", "--config", str(battery(tmp_path, timeout="60s")), env={})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "over budget: the battery needs up to 482 s, more than the preflight step's 340 s: lower its timeouts in " \
           in run.stdout


def test_reports_go_to_outdir_and_the_bulk_to_work(tmp_path):
    out, scratch = tmp_path / "reports", tmp_path / "scratch"
    run = script("gpu-smoke.sh", "--config", str(battery(tmp_path, "cuda")), "--work", str(scratch), str(out),
                 env=FAKE_GPU, cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr  # the reference needs a real GPU
    assert {p.name for p in out.iterdir()} == {"report.json", "report.xml", "problems.txt", "transfer-reference.txt"}
    assert (scratch / "imagenet-shaped").is_dir() and not (tmp_path / "gpu-smoke-out").exists()
    assert f"== done: files in {out}, status 1, " in run.stdout and "s of the 540s budget" in run.stdout


def test_a_budget_the_battery_overruns_stops_the_run_before_measuring(tmp_path):
    # The default battery's step bounds add up to 510 s: a 300 s budget cannot hold them, so nothing runs.
    run = script("gpu-smoke.sh", "--budget", "300", str(tmp_path / "out"), env=FAKE_GPU, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == ("cannot run within --budget 300s: its steps are bounded at 510s in all; "
                                           "raise --budget (--dry-run shows the table)")
    dry = script("gpu-smoke.sh", "--budget", "300", "--dry-run", env={})
    assert dry.returncode == 1 and "over budget: the steps add up to 510 s, over the 300 s limit" in dry.stdout
    assert "== environment" not in run.stdout and not (tmp_path / "out" / "report.json").exists()
    bad = script("gpu-smoke.sh", "--budget", "9 min", "--dry-run", env={})
    assert (bad.returncode, bad.stderr.strip()) == (2, "--budget 9 min: give whole seconds, such as --budget 540")