"""The distribution is `train-preflight` wherever it is installed from; the package and the command stay `preflight`.

`preflight` on the package index is an unrelated web-deployment tool (0.2.0, pinning an ancient
`requests`): an instruction that asks the index for `preflight` installs that instead. The name
`train-preflight` was free on the index when it was chosen (`pip download --no-deps train-preflight`:
no matching distribution); tests/test_install.py checks the wheel built under it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO

# Everything a user copies an install step or an image from.
INSTRUCTIONS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "action.yml",
                REPO / "ci" / "github" / "preflight.yml", REPO / "ci" / "gitlab" / "preflight.gitlab-ci.yml",
                REPO / "ci" / "jenkins" / "Jenkinsfile",
                *sorted((REPO / "ci" / "kubernetes").rglob("*.yaml"))]
# `pip install` (or `pip3`, `python -m pip`) with a bare `preflight` requirement: `preflight`,
# `'preflight[image]'`, `preflight==0.1`; not `train-preflight`, a path or a git URL ending in it.
ASKS_FOR_THE_OTHER_PREFLIGHT = re.compile(
    r"pip3? install\b[^\n`;&|]*?(?<![\w/.+@:-])['\"]?preflight(?=[\s'\"`\[=<>~!;&|]|$)")


def test_pyproject_names_the_distribution_train_preflight_and_keeps_the_preflight_command():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "train-preflight"
    assert project["scripts"] == {"preflight": "preflight.cli:main"}
    assert "torch" in project["dependencies"]  # bare: whatever torch the image has satisfies it


@pytest.mark.parametrize("line, asks", [
    ("pip install preflight", True),
    ("pip install 'preflight[image]'", True),
    ("python3 -m pip install --quiet preflight==0.1.0", True),
    ("pip install train-preflight", False),
    ("pip install 'train-preflight[image]'", False),
    ('pip install "git+https://github.com/<owner>/preflight@v0"', False),
    ("pip install ./preflight", False),
    ("pip install dist/train_preflight-0.1.0-py3-none-any.whl && preflight run", False),
])
def test_the_pattern_tells_the_unrelated_preflight_from_ours(line, asks):
    assert bool(ASKS_FOR_THE_OTHER_PREFLIGHT.search(line)) is asks


@pytest.mark.parametrize("path", INSTRUCTIONS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_instruction_asks_the_package_index_for_the_unrelated_preflight(path: Path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        assert not ASKS_FOR_THE_OTHER_PREFLIGHT.search(line), f"{path.name}:{number}: {line.strip()}"


@pytest.mark.parametrize("path", [REPO / "README.md", REPO / "docs/install.md", REPO / "docs/ci.md", REPO / "action.yml",
                                  REPO / "ci/gitlab/preflight.gitlab-ci.yml",
                                  *[path for path in sorted((REPO / "ci" / "kubernetes").rglob("*.yaml"))
                                    if "image:" in path.read_text()]],  # the manifests that run an image
                         ids=lambda p: str(p.relative_to(REPO)))
def test_the_install_passages_name_train_preflight(path: Path):
    assert "train-preflight" in path.read_text()


def test_the_gitlab_template_installs_the_bundled_wheel_unless_told_otherwise():
    job = yaml.safe_load((REPO / "ci" / "gitlab" / "preflight.gitlab-ci.yml").read_text())[".preflight"]
    assert job["variables"]["PREFLIGHT_PACKAGE"] == ""  # not the index: train-preflight is not released there yet
    assert job["variables"]["PREFLIGHT_WHEEL"] == "dist/train_preflight-*.whl"
    assert job["variables"]["PREFLIGHT_CONFIG"] == ""  # ./thresholds.yaml, else the bundled default gate


# `pip install train-preflight` (or `'train-preflight[image]'`) asks the package index, which does not serve it yet.
ASKS_THE_INDEX_FOR_TRAIN_PREFLIGHT = re.compile(
    r"pip3? install\b[^\n`;&|]*?(?<![\w/.+@:-])['\"]?train-preflight(?:\[[\w,]+\])?['\"]?(?=[\s`;&|)]|$)")


@pytest.mark.parametrize("line, asks", [
    ("pip install train-preflight", True),
    ("pip install 'train-preflight[image]' (or pillow)", True),
    ("RUN pip install train-preflight", True),
    ("pip install dist/train_preflight-0.1.0-py3-none-any.whl", False),
    ('pip install "git+https://<git host>/<your group>/preflight.git@<commit>"', False),
])
def test_the_index_pattern_finds_an_install_by_name(line, asks):
    assert bool(ASKS_THE_INDEX_FOR_TRAIN_PREFLIGHT.search(line)) is asks


@pytest.mark.parametrize("path", INSTRUCTIONS + sorted((REPO / "preflight").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_offers_an_install_from_the_index_or_an_unpublished_action_tag(path: Path):
    """Issue 25: README, templates and the Pillow error offered `pip install train-preflight`, which no index
    serves yet, and `<owner>/preflight@v0`, a tag that does not exist: say what works today."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        assert not ASKS_THE_INDEX_FOR_TRAIN_PREFLIGHT.search(line), f"{path.name}:{number}: {line.strip()}"
        assert "preflight@v0" not in line and "<owner>" not in line, f"{path.name}:{number}: {line.strip()}"


def _covers_the_three_ways_in(section: str) -> None:
    assert "python -m build" in section and "git+https://" in section  # (a) a wheel, or a git URL
    assert "python3 -m preflight.commands.install" in section  # the one installer, into the job's Python
    assert "--venv /opt/preflight" in section and "externally-managed-environment" in section  # PEP 668: beside it
    assert re.search(r"^FROM pytorch/pytorch:\S+$", section, re.MULTILINE)  # (b) a Dockerfile layer
    assert "python3 -m venv .venv" in section  # (c) a laptop or CI runner venv
    assert "pip install torch " not in section.replace("pip install torch --index-url", "")  # no bare torch pull


def test_the_readme_install_section_follows_quick_start_and_covers_the_three_ways_in():
    readme = (REPO / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", readme, re.MULTILINE)
    assert headings[headings.index("Quick start") + 1] == "Install"
    section = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    _covers_the_three_ways_in(section)
    assert "(docs/install.md)" in section  # the details


def test_the_install_page_covers_the_three_ways_in_and_keeping_torch():
    page = (REPO / "docs" / "install.md").read_text()
    _covers_the_three_ways_in(page)
    assert "--no-deps" in page and re.search(r"never\s+installs one", page)  # torch stays as it is, as a rule


def test_python_m_build_makes_the_wheel_without_a_deprecation_warning(tmp_path: Path):
    """Issue 35: `python -m build` warned that `project.license` as a TOML table is deprecated (setuptools stops
    building such a project in 2027). The license is an SPDX expression (PEP 639) and the wheel's metadata says
    so; built from this checkout's tracked files with this Python's setuptools, offline, as tests/test_install.py
    builds it."""
    import shutil
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("build")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip(f"git cannot list this checkout's files: {listed.stderr.decode().strip()}")
    source = tmp_path / "source"
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (REPO / name).is_file() and not name.startswith(("tests/", "docs/")):
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name, follow_symlinks=False)
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path)],
                           cwd=source, capture_output=True, text=True, timeout=300, check=False)
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert "Deprecat" not in output and "deprecated" not in output, output
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata.splitlines()
