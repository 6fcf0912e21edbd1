"""preflight/commands/install.py without building a wheel: where it looks, what it leaves out, how it refuses.

The installs themselves, into and beside real image layouts, are in tests/test_install.py (`-m install`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from preflight.commands import install

OURS = str(Path(install.__file__).resolve().parents[2])


def test_the_job_python_is_the_one_path_names_never_its_symlinks_target(tmp_path, monkeypatch):
    """/opt/venv/bin/python3 links to the base Python: resolved, it would lose the venv and its torch."""
    bin_dir = tmp_path / "opt" / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to(os.path.realpath("/bin/sh"))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin")
    monkeypatch.delenv(install.JOB_PYTHON_VARIABLE, raising=False)
    assert install.job_python(None) == str(bin_dir / "python3")
    monkeypatch.setenv(install.JOB_PYTHON_VARIABLE, str(bin_dir / "python3"))
    assert install.job_python(None) == str(bin_dir / "python3")


def test_a_named_python_that_is_not_there_is_refused_in_one_line(tmp_path, capsys):
    assert install.main(["--python", str(tmp_path / "nope" / "python3"), "pkg.whl"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"preflight: no executable Python at {tmp_path}/nope/python3: name the interpreter your training job runs "
        "with --python or PREFLIGHT_JOB_PYTHON"]


@pytest.mark.parametrize("pythonpath, kept", [
    (OURS, None),
    (f"{OURS}{os.pathsep}/opt/extra-site", "/opt/extra-site"),  # an image's own PYTHONPATH stays
    (f"/opt/extra-site{os.pathsep}{OURS}{os.pathsep}", "/opt/extra-site"),
])
def test_children_run_without_this_modules_own_pythonpath_entry(monkeypatch, pythonpath, kept):
    monkeypatch.setenv("PYTHONPATH", pythonpath)
    assert install._child_environ().get("PYTHONPATH") == kept


def test_the_probe_reports_this_pythons_torch_kind_and_site():
    import sys
    import torch

    found = install.probe(sys.executable, ("numpy", "not-installed-anywhere"))
    assert found["torch"] == {"origin": torch.__file__, "version": torch.__version__}
    assert found["kind"] == ("venv" if sys.prefix != sys.base_prefix else "system")
    assert str(Path(torch.__file__).parents[1]) in found["sites"]
    assert set(found["installed"]) == {"numpy"}


def test_a_venv_folder_holding_other_files_is_refused_and_left_as_it_was(tmp_path, capsys):
    """--venv names where to create; a folder with someone's files in it is never made into one."""
    import sys

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("mine")
    assert install.main(["--python", sys.executable, "--venv", str(tmp_path / "data"), "pkg.whl"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"preflight: --venv {tmp_path}/data holds other files and is not a venv: name a new or empty folder")
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["keep.txt"]
