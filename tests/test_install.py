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
from typing import NamedTuple

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


class Image(NamedTuple):
    """A runner's image as a template meets it: its environment (PATH's python3 is the job's), its torch."""
    environ: dict[str, str]
    python: str  # the job's interpreter, as PATH names it
    site: Path  # the folder that holds the job's torch
    before: dict[str, tuple[int, int, int]]


def _on_path(tmp_path: Path, wheelhouse: Path, bin_dir: Path, **extra: str) -> dict[str, str]:
    return clean_environ(tmp_path, wheelhouse, PATH=f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", **extra)


def make_conda_prefix(prefix: Path) -> Path:
    """A conda-style prefix: its own interpreter in bin/ (python, python3 symlinks to python3.X, as conda
    has), this Python's standard library linked entry by entry under lib/python3.X with its own empty
    site-packages, and conda-meta/. sys.prefix is then ``prefix``, found from the binary's own place."""
    version = sysconfig.get_python_version()
    base = Path(sys.base_prefix)
    (prefix / "bin").mkdir(parents=True)
    (prefix / "conda-meta").mkdir()
    (prefix / "conda-meta" / "history").write_text("==> 2026-12-02 00:00:00 <==\n# cmd: conda create -p prefix\n")
    shutil.copy2(base / "bin" / f"python{version}", prefix / "bin" / f"python{version}")
    for name in ("python", "python3"):
        (prefix / "bin" / name).symlink_to(f"python{version}")
    stdlib = prefix / "lib" / f"python{version}"
    (stdlib / "site-packages").mkdir(parents=True)
    for entry in (base / "lib" / f"python{version}").iterdir():
        if entry.name != "site-packages":
            (stdlib / entry.name).symlink_to(entry)
    return prefix / "bin" / "python3"


@pytest.fixture(params=["venv", "conda", "system"])
def image(request, tmp_path, wheelhouse) -> Image:
    """The job's torch in a venv on PATH (/opt/venv), a conda prefix on PATH, or an externally managed system Python."""
    if request.param == "system":
        environ, site, before = request.getfixturevalue("pep668_runner")
        return Image(environ, "python3", site, before)
    if request.param == "venv":
        prefix = tmp_path / "opt" / "venv"
        made = run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], clean_environ(tmp_path, wheelhouse),
                   tmp_path)
        assert made.returncode == 0, made.stderr
    else:
        prefix = tmp_path / "opt" / "conda"
        make_conda_prefix(prefix)
    site = prefix / SITE
    make_image_site(site)
    return Image(_on_path(tmp_path, wheelhouse, prefix / "bin"), str(prefix / "bin" / "python3"), site,
                 torch_files(site))


def _jenkins_steps() -> list[str]:
    """The Jenkinsfile's `sh` steps in order, as the shell reads them (Groovy ''' and ' strings: no interpolation)."""
    text = (REPO / "ci" / "jenkins" / "Jenkinsfile").read_text()
    return [block or line for block, line in re.findall(r"sh '''(.*?)'''|sh '([^']+)'", text, re.DOTALL)]


def _install_and_run(template: str, image: Image, tmp_path: Path, source: Path, wheel: Path) -> tuple[str, str]:
    """Run ``template``'s install lines and its `preflight run` (``--only shm``) on ``image``; (python, log)."""
    work = tmp_path / "workspace"
    (work / "dist").mkdir(parents=True)
    shutil.copy(wheel, work / "dist")
    bash = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # GitHub's `shell: bash`, GitLab's shell executor
    if template == "action":
        runner = {"RUNNER_TEMP": str(tmp_path / "runner-temp"), "GITHUB_ACTION_PATH": str(source),
                  "GITHUB_OUTPUT": str(tmp_path / "install-output"), "GITHUB_ACTIONS": "true"}
        (tmp_path / "runner-temp").mkdir()
        installed = run([*bash, _action_step("install")["run"]], {**image.environ, **runner}, work, timeout=240)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        python = _github_file(tmp_path / "install-output")["python"]
        ran = run([*bash, _action_step("run")["run"]],
                  {**image.environ, **runner, "GITHUB_OUTPUT": str(tmp_path / "run-output"), "PREFLIGHT_PYTHON": python,
                   "PREFLIGHT_CONFIG": "", "PREFLIGHT_JUNIT_XML": "junit.xml", "PREFLIGHT_JSON": "report.json",
                   "PREFLIGHT_HTML": "report.html", "PREFLIGHT_ARGS": "--only shm",
                   "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}, work)
        log = installed.stderr + ran.stdout + ran.stderr
    elif template == "gitlab":
        job = yaml.safe_load((REPO / "ci" / "gitlab" / "preflight.gitlab-ci.yml").read_text())[".preflight"]
        script = "\n".join(job["script"]) + '\necho "preflight_python=$preflight_python"'
        ran = run([*bash, script], {**image.environ, **job["variables"], "PREFLIGHT_ARGS": "--only shm",
                                    "CI_PROJECT_DIR": str(work)}, work, timeout=240)
        log = ran.stdout + ran.stderr
        python = re.search(r"^preflight_python=(.*)$", ran.stdout, re.MULTILINE).group(1)
    else:  # Jenkins runs each `sh` step with `sh -xe`; the snippet gates on the workspace's thresholds.yaml
        (work / "thresholds.yaml").write_text("version: 1\nchecks:\n  shm:\n    size: {min: 1 MiB}\n")
        install, gate = _jenkins_steps()
        environ = {**image.environ, "WORKSPACE": str(work)}
        installed = run(["sh", "-xe", "-c", install], environ, work, timeout=240)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        python = (work / ".preflight-python").read_text().strip()
        ran = run(["sh", "-xe", "-c", gate], environ, work)
        log = installed.stderr + ran.stdout + ran.stderr
    assert ran.returncode == 0, log
    return python, log


@pytest.mark.parametrize("template", ["action", "gitlab", "jenkins"])
def test_every_template_installs_for_the_jobs_own_torch_and_keeps_it(tmp_path, source, wheel, image, template):
    """Issue 35 case 1: a torch in /opt/venv or a conda prefix was missed and another one pulled."""
    python, log = _install_and_run(template, image, tmp_path, source, wheel)
    assert python.endswith("/bin/python") and "/opt/" not in python, python  # a venv beside, not the image's
    assert f"torch {TORCH} at {image.site / 'torch'}" in log and f"torch {TORCH} kept at {image.site / 'torch'}" in log
    for line in log.splitlines():  # pip never looked for a torch: --no-deps, then the other requirements
        assert not re.match(r"\s*(Collecting|Downloading|Processing|Requirement already satisfied:|Uninstalling)"
                            r" (\S*/)?torch\b", line), line
    assert re.search(r"== \d passed", log), log
    assert torch_files(image.site) == image.before
    where = run([python, "-c", "import preflight, torch; print(preflight.__file__); print(torch.__file__)"],
                image.environ, tmp_path)
    assert where.stdout.split() == [str(Path(python).parents[1] / SITE / "preflight" / "__init__.py"),
                                    str(image.site / "torch" / "__init__.py")], where.stdout + where.stderr


def _installer(package: Path, *arguments: str) -> list[str]:
    """README's install line: the installer run from the wheel itself by the job's python3."""
    return ["python3", "-m", "preflight.commands.install", *arguments, str(package)]


def test_the_installer_installs_into_a_venv_or_conda_prefix_that_has_torch(tmp_path, wheel, image):
    installed = run(_installer(wheel), {**image.environ, "PYTHONPATH": str(wheel)}, tmp_path, timeout=240)
    if image.python == "python3":  # the externally managed system Python: only beside it
        assert installed.returncode == 2 and installed.stdout == "", installed.stderr
        assert installed.stderr.splitlines()[-1].endswith(
            "is externally managed (PEP 668): add --venv DIR to install beside it, sharing its torch"), installed.stderr
        assert len(installed.stderr.splitlines()) == 2 and torch_files(image.site) == image.before  # pip never ran
        return
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.strip() == image.python
    assert torch_files(image.site) == image.before
    where = run([image.python, "-c", "import preflight, torch; print(preflight.__file__); print(torch.__file__)"],
                image.environ, tmp_path)
    assert where.stdout.split() == [str(image.site / "preflight" / "__init__.py"),
                                    str(image.site / "torch" / "__init__.py")], where.stderr
    version = run([str(Path(image.python).parent / "preflight"), "--version"], image.environ, tmp_path)
    assert version.stdout.strip() == f"preflight {__version__}", version.stderr


# Torches an image may hold that pip does not see as a plain installed "torch", from public reports.
FAKE_TORCHES = {
    # name of its .dist-info (None: none), version, a requirement it declares that is not installed
    "dist-info": ("torch", "2.99.0+fake", None),
    # pytorch/pytorch#21980: the nightly image's torch had no "torch" metadata; any package needing torch
    # made pip install torch 1.1.0 over it. As found there: a torch_nightly distribution, or none at all.
    "nightly-dist-name": ("torch_nightly", "1.2.0.dev20190619", None),
    "no-dist-info": (None, "1.2.0.dev20190619", None),
    # astral-sh/uv#2560: NGC's torch is a pre-release (2.3.0a0+ebedce2); a `torch>=1.7` requirement
    # made the installer fetch an older release over it.
    "ngc-prerelease": ("torch", "2.3.0a0+ebedce2", None),
    # pypa/pip#12902: ROCm's image torch 2.4.0.dev20240520+rocm6.0 declares a requirement the image
    # does not satisfy; `pip install torch` then collected torch 2.4.0 from the index over it.
    "rocm-dev-unmet-requirement": ("torch", "2.4.0.dev20240520+rocm6.0", "pytorch-triton-rocm==3.0.0+21eae954ef"),
}


def _fake_torch_venv(tmp_path: Path, wheelhouse: Path, shape: str) -> tuple[dict[str, str], Path, str]:
    """A venv on PATH whose torch is a small importable package with ``__version__``, its metadata as
    ``FAKE_TORCHES[shape]`` says; pip and numpy real. Returns the environment, the prefix, the version."""
    dist_name, version, requires = FAKE_TORCHES[shape]
    prefix = tmp_path / "opt" / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], clean_environ(tmp_path, wheelhouse),
               tmp_path)
    assert made.returncode == 0, made.stderr
    site = prefix / SITE
    for dist in _with_requirements(("pip", "numpy")).values():
        for file in dist.files or ():
            source = Path(str(dist.locate_file(file)))
            if file.parts[0] != ".." and source.exists():
                (site / file).parent.mkdir(parents=True, exist_ok=True)
                os.link(source, site / file)
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("from torch.version import __version__\n")
    (site / "torch" / "version.py").write_text(f"__version__ = {version!r}\n")
    if dist_name:  # as pip writes it: installed, with the files it owns
        info = site / f"{dist_name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n"
                                       + (f"Requires-Dist: {requires}\n" if requires else ""))
        (info / "INSTALLER").write_text("pip\n")
        (info / "RECORD").write_text("torch/__init__.py,,\ntorch/version.py,,\n")
    return _on_path(tmp_path, wheelhouse, prefix / "bin"), prefix, version


@pytest.mark.parametrize("shape", FAKE_TORCHES)
def test_a_torch_pip_does_not_see_as_installed_is_still_the_one_kept(tmp_path, wheel, wheelhouse, shape):
    """A torch without "torch" metadata, a pre-release or one with an unmet requirement: the installer's
    --no-deps keeps pip from resolving torch at all, where a bare `torch` requirement fetched another."""
    environ, prefix, version = _fake_torch_venv(tmp_path, wheelhouse, shape)
    keep = tmp_path / "keep-torch.txt"
    keep.write_text(f"torch=={version}\n")
    old = run(["python3", "-m", "pip", "install", "--dry-run", "-c", str(keep), str(wheel)], environ, tmp_path)
    if shape in ("nightly-dist-name", "no-dist-info", "rocm-dev-unmet-requirement"):  # what the templates ran:
        # pip looked for a torch (or its missing requirement) on the index; offline here, so it failed
        assert old.returncode != 0 and re.search(r"No matching distribution found for (torch|pytorch-triton-rocm)"
                                                 r"|depends on torch\n.*constraint\) torch==", old.stdout + old.stderr), \
            old.stdout + old.stderr
    installed = run(_installer(wheel, "--venv", str(tmp_path / "beside")), {**environ, "PYTHONPATH": str(wheel)},
                    tmp_path, timeout=240)
    assert installed.returncode == 0, installed.stderr
    assert f"torch {version} kept at {prefix / SITE / 'torch'}" in installed.stderr
    assert not re.search(r"^\s*(Collecting|Downloading) (torch|pytorch-triton)", installed.stderr, re.MULTILINE)
    python = installed.stdout.strip()
    imported = run([python, "-c", "import preflight.cli, torch; print(torch.__version__, torch.__file__)"], environ,
                   tmp_path)
    assert imported.stdout.split() == [version, str(prefix / SITE / "torch" / "__init__.py")], imported.stderr


def test_no_torch_for_the_jobs_python_is_refused_in_one_line_and_nothing_is_installed(tmp_path, wheel, wheelhouse):
    """What the templates did: print "pip installs one" and pull 5 GB of another torch. Now: exit 2, nothing run."""
    prefix = tmp_path / "opt" / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], clean_environ(tmp_path, wheelhouse),
               tmp_path).returncode == 0
    environ = _on_path(tmp_path, wheelhouse, prefix / "bin")
    refused = run(_installer(wheel, "--venv", str(tmp_path / "beside")), {**environ, "PYTHONPATH": str(wheel)},
                  tmp_path)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"preflight: no torch importable by {prefix}/bin/python3 (a venv at {prefix}): preflight measures "
        "the job's own torch and never installs one: run this with the Python your training job runs (--python or "
        "PREFLIGHT_JOB_PYTHON), or put torch in the image first"]
    assert not (tmp_path / "beside").exists()


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
    assert f"torch {TORCH} kept at {site / 'torch'}" in log
    assert f"{project}/.preflight-venv/lib/" in log and "/preflight/thresholds.yaml" in log  # the bundled gate
    assert "shm.size" in log and "== 3 passed, 1 info" in log
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
