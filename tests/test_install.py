"""The real wheel, installed the ways the README and the pipeline templates install it, never touching torch.

An "image" here is a Python environment that already has torch and numpy, as a training image
does (the torch of this test run: 2.13.0+cpu in CI). Installing torch for every test would take
half a minute, so the image is assembled from this test run's own installed pip, torch and numpy
and what they require: every file each distribution's RECORD lists, hard-linked (what
`pip install` wrote, byte for byte, RECORD and METADATA included), so pip sees the image as one
it built itself.

The small dependencies (PyYAML, nvidia-ml-py, junit-xml, six) and setuptools for pip's isolated
builds come as wheels packed from this Python by scripts/wheel_from_installed.py, and pip runs
with `--no-index` and no configuration files: nothing is downloaded, so a torch that pip wanted
to fetch could not hide behind a slow download; it would fail the install and the test.

"Torch was kept" is checked three ways: pip said it was already satisfied and never collected,
uninstalled or installed it; its version is unchanged; and every file of it is the same inode
with the same mtime and size as before.

Select these tests with `-m install` (about 40 s), or leave them out with `-m "not install"`.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from preflight import __version__
from tests.helpers import REPO

pytestmark = pytest.mark.install

SYSTEM_PYTHON = Path(os.environ.get("PREFLIGHT_TEST_SYSTEM_PYTHON", "/usr/bin/python3"))
# What a training image has before preflight: pip, torch (and what it requires) and numpy.
IMAGE_HAS = ("pip", "torch", "numpy")
# What pip may have to fetch: preflight's other dependencies, and setuptools for building from source.
WHEELHOUSE_HAS = ("pyyaml", "nvidia-ml-py", "junit-xml", "six", "setuptools")
TORCH = importlib.metadata.version("torch")
WHEEL = f"train_preflight-{__version__}-py3-none-any.whl"
SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _with_requirements(names: tuple[str, ...]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions ``names`` and, recursively, what they require here (no extras)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if _key(name) in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found[_key(name)] = dist
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def make_image_site(site: Path) -> None:
    """Give ``site`` (a site-packages folder) this Python's installed pip, torch, numpy and their requirements."""
    for dist in _with_requirements(IMAGE_HAS).values():
        for file in dist.files or ():
            source = Path(str(dist.locate_file(file)))
            if file.parts[0] == ".." or not source.exists():  # console scripts; byte-code pip never wrote
                continue
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            os.link(source, site / file)


def torch_files(site: Path) -> dict[str, tuple[int, int, int]]:
    """Inode, mtime and size of every file of the torch distribution under ``site``, by path."""
    (info,) = site.glob("torch-*.dist-info")
    files = {}
    for line in (info / "RECORD").read_text().splitlines():
        path = site / line.split(",")[0]
        if path.exists():
            stat = path.stat()
            files[line.split(",")[0]] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    assert len(files) > 1000, f"torch under {site} has only {len(files)} files"
    return files


def assert_pip_kept_torch(output: str) -> None:
    """pip's own account: torch was already there, and it neither fetched, removed nor installed one."""
    assert re.search(r"^Requirement already satisfied: torch\b", output, re.MULTILINE), output
    for line in output.splitlines():
        assert not re.match(r"\s*(Collecting|Downloading|Processing) (\S*/)?torch\b", line), line
        assert not re.match(r"\s*(Attempting uninstall:|Found existing installation:|Uninstalling) torch\b", line), line
    installed = re.search(r"^Successfully installed (.*)$", output, re.MULTILINE)
    assert installed and f"train-preflight-{__version__}" in installed.group(1).split(), output
    assert not any(word.startswith("torch-") for word in installed.group(1).split()), installed.group(1)


def clean_environ(tmp_path: Path, wheelhouse: Path, **extra: str) -> dict[str, str]:
    """This process's environment without pip or Python settings, pip offline on ``wheelhouse``."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("PIP_", "PYTHON", "GITHUB_", "CI_")) and k not in {"VIRTUAL_ENV", "CI"}}
    return {**environ, "HOME": str(tmp_path / "home"), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(wheelhouse), "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            **extra}


def run(command: list[str], env: dict[str, str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of this checkout's files (what git would commit), so building writes nothing into it."""
    copy = tmp_path_factory.mktemp("source")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=False)
    if listed.returncode != 0:
        pytest.skip(f"git cannot list this checkout's files: {listed.stderr.decode().strip()}")
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (REPO / name).exists() or (REPO / name).is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name, follow_symlinks=False)
    return copy


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory) -> Path:
    """The wheel `python -m build --wheel` makes (with this Python's setuptools, offline)."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)],
                           cwd=source, capture_output=True, text=True, timeout=180, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = out.glob("*.whl")
    return path


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    house = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([sys.executable, str(REPO / "scripts" / "wheel_from_installed.py"), str(house), *WHEELHOUSE_HAS],
                   capture_output=True, text=True, check=True)
    return house


def test_the_wheel_is_train_preflight_with_the_preflight_package_command_and_default_gate(wheel):
    import zipfile

    assert wheel.name == WHEEL
    info = f"train_preflight-{__version__}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        bundled = archive.read("preflight/thresholds.yaml")
    assert "Name: train-preflight\n" in metadata
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")]
    assert "torch" in requires  # a bare requirement: any installed torch satisfies it; never pinned
    assert "preflight = preflight.cli:main" in entry_points
    assert bundled == (REPO / "thresholds.yaml").read_bytes()
    assert not any(name.startswith(("tests/", "bench/", "scripts/")) for name in names)


def test_the_wheel_installs_into_an_image_that_has_torch_and_keeps_it(tmp_path, wheel, wheelhouse):
    image = tmp_path / "image"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(image)], clean_environ(tmp_path, wheelhouse),
               tmp_path)
    assert made.returncode == 0, made.stderr
    make_image_site(image / SITE)
    before = torch_files(image / SITE)
    python = str(image / "bin" / "python")
    environ = clean_environ(tmp_path, wheelhouse)

    installed = run([python, "-m", "pip", "install", str(wheel)], environ, tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert_pip_kept_torch(installed.stdout)
    assert torch_files(image / SITE) == before

    listed = run([python, "-m", "pip", "list", "--format=freeze"], environ, tmp_path)
    assert {f"torch=={TORCH}", f"train-preflight=={__version__}"} <= set(listed.stdout.split())
    version = run([str(image / "bin" / "preflight"), "--version"], environ, tmp_path)
    assert version.stdout.strip() == f"preflight {__version__}", version.stderr
    where = run([python, "-c", "import preflight, torch; print(preflight.__file__); print(torch.__file__)"],
                environ, tmp_path)
    assert where.stdout.split() == [str(image / SITE / "preflight" / "__init__.py"),
                                    str(image / SITE / "torch" / "__init__.py")], where.stderr
    validated = run([str(image / "bin" / "preflight"), "validate"], environ, tmp_path)  # the bundled default gate
    assert validated.returncode == 0, validated.stdout + validated.stderr


def _externally_managed_python() -> Path:
    """The system Python, when pip refuses to install into it (PEP 668); else the test is skipped."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"no system Python at {SYSTEM_PYTHON} (set PREFLIGHT_TEST_SYSTEM_PYTHON)")
    probe = subprocess.run([str(SYSTEM_PYTHON), "-c", "import sys, sysconfig; "
                            "print(sys.prefix == sys.base_prefix, sysconfig.get_path('stdlib'), "
                            "'%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=False)
    system, stdlib, version = probe.stdout.split()
    if system != "True" or not (Path(stdlib) / "EXTERNALLY-MANAGED").exists():
        pytest.skip(f"{SYSTEM_PYTHON} is not externally managed (PEP 668): no EXTERNALLY-MANAGED in {stdlib}")
    if version != sysconfig.get_python_version():
        pytest.skip(f"{SYSTEM_PYTHON} is Python {version}; this test's torch is for {sysconfig.get_python_version()}")
    return SYSTEM_PYTHON


@pytest.fixture
def pep668_runner(tmp_path, wheelhouse) -> tuple[dict[str, str], Path, dict[str, tuple[int, int, int]]]:
    """A runner whose `python3` is an externally managed system Python that already has torch.

    The image's torch lies in a site folder of that Python outside any venv: its user site
    (PYTHONUSERBASE), which, like dist-packages, a `--system-site-packages` venv sees after its own.
    Returns the environment to run the step in, the torch site and the torch files' stat.
    """
    python = _externally_managed_python()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(python)
    userbase = tmp_path / "image-site"
    site = userbase / SITE
    make_image_site(site)
    environ = clean_environ(tmp_path, wheelhouse, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                            PYTHONUSERBASE=str(userbase))
    refused = run(["python3", "-m", "pip", "install", "six"], environ, tmp_path)  # what the action used to run
    if "No module named pip" in refused.stderr:
        pytest.skip(f"{python} has no pip to show the refusal with")
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, refused.stderr
    return environ, site, torch_files(site)


def _action_step(step_id: str) -> dict:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    return next(step for step in action["runs"]["steps"] if step.get("id") == step_id)


def _github_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_the_action_installs_into_a_venv_on_an_externally_managed_python_and_keeps_its_torch(
        tmp_path, source, pep668_runner):
    environ, site, before = pep668_runner
    work = tmp_path / "workspace"  # no thresholds.yaml here: the bundled default gate is used
    work.mkdir()
    runner = {"RUNNER_TEMP": str(tmp_path / "runner-temp"), "GITHUB_ACTION_PATH": str(source),
              "GITHUB_OUTPUT": str(tmp_path / "install-output"), "GITHUB_ACTIONS": "true"}
    (tmp_path / "runner-temp").mkdir()
    bash = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # how GitHub runs `shell: bash`

    install = _action_step("install")
    assert install["if"] == "inputs.install == 'true'"
    installed = run([*bash, install["run"]], {**environ, **runner}, work, timeout=240)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"preflight: keeping this Python's torch {TORCH}" in installed.stdout
    python = _github_file(tmp_path / "install-output")["python"]
    assert python == str(tmp_path / "runner-temp" / "preflight-venv" / "bin" / "python")
    assert torch_files(site) == before
    where = run([python, "-c", "import preflight, torch; print(preflight.__file__); print(torch.__file__)"],
                environ, work)
    assert where.stdout.split() == [str(Path(python).parents[1] / SITE / "preflight" / "__init__.py"),
                                    str(site / "torch" / "__init__.py")], where.stdout + where.stderr

    step = _action_step("run")
    assert step["env"]["PREFLIGHT_PYTHON"] == "${{ steps.install.outputs.python || 'python3' }}"
    outputs = tmp_path / "run-output"
    ran = run([*bash, step["run"]], {**environ, **runner, "GITHUB_OUTPUT": str(outputs), "PREFLIGHT_PYTHON": python,
                                     "PREFLIGHT_CONFIG": "", "PREFLIGHT_JUNIT_XML": "junit.xml",
                                     "PREFLIGHT_JSON": "report.json", "PREFLIGHT_ARGS": "--only shm",
                                     "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}, work)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    header = next(line for line in ran.stderr.splitlines() if " from " in line)  # stderr: not wrapped to 80 columns
    assert f"{Path(python).parents[1]}/lib/" in header and header.endswith("/preflight/thresholds.yaml"), header
    assert _github_file(outputs)["passed"] == "true"
    assert (work / "junit.xml").exists() and (work / "report.json").exists()


FAILING_GATE = "version: 1\nchecks:\n  shm:\n    size: {min: 1000 TiB}\n"


GITLAB_CI_LOCAL = os.environ.get("GITLAB_CI_LOCAL") or shutil.which("gitlab-ci-local")
GITLAB_CI_LOCAL_MISSING = [tool for tool, where in (("gitlab-ci-local", GITLAB_CI_LOCAL), ("rsync", shutil.which("rsync")),
                                                    ("git", shutil.which("git"))) if not where]
WITHOUT_GITLAB_CI_LOCAL = (
    f"{' and '.join(GITLAB_CI_LOCAL_MISSING)} not installed: npm install --prefix ~/.cache/gcl gitlab-ci-local@4.65.1, "
    f"apt-get install rsync, and set GITLAB_CI_LOCAL=~/.cache/gcl/node_modules/.bin/gitlab-ci-local")


def _run_gitlab_job(executor: str, project: Path, environ: dict[str, str], variables: dict[str, str]):
    """Run the template's `.preflight` job in ``project`` as GitLab's shell executor would; return (rc, log)."""
    template = REPO / "ci" / "gitlab" / "preflight.gitlab-ci.yml"
    if executor == "bash":  # what the shell executor does: the script lines, in order, in one bash with -eo pipefail
        job = yaml.safe_load(template.read_text())[".preflight"]
        ran = run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", "\n".join(job["script"])],
                  {**environ, **job["variables"], **variables, "CI_PROJECT_DIR": str(project)}, project, timeout=240)
        return ran.returncode, ran.stdout + ran.stderr
    shutil.copy(template, project / "preflight.gitlab-ci.yml")
    (project / ".gitlab-ci.yml").write_text(yaml.safe_dump(
        {"include": [{"local": "preflight.gitlab-ci.yml"}],
         "preflight": {"extends": ".preflight", "variables": variables}}, sort_keys=False))
    if not (project / ".git").exists():
        for command in (["git", "init", "-q"], ["git", "add", "-A"],
                        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-qm", "ci"]):
            subprocess.run(command, cwd=project, env=environ, check=True, capture_output=True)
    ran = run([str(GITLAB_CI_LOCAL), "--shell-executor-no-image", "preflight"], environ, project, timeout=240)
    return ran.returncode, ran.stdout + ran.stderr


@pytest.mark.parametrize("executor", ["bash", pytest.param("gitlab-ci-local", marks=pytest.mark.skipif(
    bool(GITLAB_CI_LOCAL_MISSING), reason=WITHOUT_GITLAB_CI_LOCAL))])
def test_the_gitlab_template_installs_into_a_venv_and_gates_on_thresholds_yaml_else_the_bundled_gate(
        tmp_path, wheel, pep668_runner, executor):
    environ, site, before = pep668_runner
    project = tmp_path / "project"
    (project / "dist").mkdir(parents=True)
    shutil.copy(wheel, project / "dist")  # the bundled wheel the template falls back to (no PREFLIGHT_PACKAGE)
    variables = {"PREFLIGHT_ARGS": "--only shm"}

    status, log = _run_gitlab_job(executor, project, environ, variables)  # no thresholds.yaml in the project
    assert status == 0, log
    assert f"preflight: keeping this Python's torch {TORCH}" in log
    assert f"{project}/.preflight-venv/lib/" in log and "/preflight/thresholds.yaml" in log  # the bundled gate
    assert "shm.size" in log and "== 2 passed, 1 info" in log
    assert torch_files(site) == before

    (project / "thresholds.yaml").write_text(FAILING_GATE)
    status, log = _run_gitlab_job(executor, project, environ, variables)
    assert status == 1, log
    assert "shm.size" in log and "FAIL" in log and "/preflight/thresholds.yaml" not in log
    assert "<failure" in (project / "preflight-junit.xml").read_text()
    if executor == "gitlab-ci-local":  # `artifacts: when: always`: the JUnit report is kept for the Tests tab
        assert " FAIL  preflight" in log and "exported artifacts" in log, log
        assert "<failure" in (project / ".gitlab-ci-local" / "artifacts" / "preflight" / "preflight-junit.xml").read_text()
    assert torch_files(site) == before
