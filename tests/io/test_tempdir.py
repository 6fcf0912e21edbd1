import sys

import pytest

from preflight.io import tempdir
from tests.helpers import in_read_only_root


def test_candidates_are_tmpdir_as_tempfile_looks_then_dev_shm_then_the_reports_directories():
    environ = {"TMPDIR": "/scratch", "TMP": "/scratch/", "TEMP": ""}
    found = tempdir.candidates(["/reports/r.json", None, "-", "/reports/r.xml", "/other/p.prom"], environ)
    assert found == ["/scratch", "/tmp", "/var/tmp", "/usr/tmp", "/dev/shm", "/reports", "/other"]


def test_a_writable_tmpdir_is_chosen_first(tmp_path):
    assert tempdir.choose(["/dev/shm/r.json"], {"TMPDIR": str(tmp_path)}) == str(tmp_path)
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


def test_a_file_is_no_temporary_directory(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        tempdir.probe(str(tmp_path / "file"))


CHOOSE = """
import sys
from preflight import errors
from preflight.io import tempdir
try:
    print(tempdir.choose(sys.argv[1:]))
except errors.UsageError as error:
    print(error)
"""


def choose_under_a_read_only_root(tmp_path, shm, report, writable=()):
    """``tempdir.choose([report])`` with TMPDIR=tmp_path where / is read-only; what it printed."""
    result = in_read_only_root(f"TMPDIR={tmp_path} {sys.executable} -c '{CHOOSE}' {report}", shm, writable)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_under_a_read_only_root_dev_shm_is_chosen(tmp_path):
    assert choose_under_a_read_only_root(tmp_path, "private", "/dev/shm/r.json") == "/dev/shm"  # the case


def test_under_a_read_only_root_and_dev_shm_the_reports_directory_is_chosen(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert choose_under_a_read_only_root(tmp_path, "read-only", f"{out}/r.json", [out]) == str(out)
    assert list(out.iterdir()) == []


def test_with_nothing_writable_the_error_names_every_place_tried_and_the_fix(tmp_path):
    message = choose_under_a_read_only_root(tmp_path, "read-only", f"{tmp_path}/r.json")
    assert message.startswith(f"no writable temporary directory (TMPDIR={tmp_path}; tried {tmp_path} (read-only "
                              f"file system), /tmp (read-only file system), /var/tmp (read-only file system), ")
    assert message.endswith(", /dev/shm (read-only file system)): mount an emptyDir at /tmp "
                            "(readOnlyRootFilesystem: true) or set TMPDIR to a writable directory")
    assert message.count(str(tmp_path)) == 2  # the report's directory is TMPDIR here: tried once
