"""report.write_atomic: a reader sees the old report or the new one, never half of one."""

import os
import subprocess
import sys

from tests.helpers import REPO

# In a child process: files may grow to 4 KiB (RLIMIT_FSIZE, SIGXFSZ ignored so write() fails with
# EFBIG), a real write fault for any user, as a full disk is for root.
WRITE_UNDER_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
from preflight.report import write_atomic
from preflight.errors import UsageError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    write_atomic(sys.argv[1], b"<new report/>" * 10000)
except UsageError as error:
    print(error)
    sys.exit(2)
"""


def test_a_write_that_fails_midway_keeps_the_old_report_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "report.xml"
    path.write_bytes(b"<old report/>")
    child = subprocess.run([sys.executable, "-c", WRITE_UNDER_A_FILE_SIZE_LIMIT, str(path)], cwd=REPO,
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert child.returncode == 2, child.stderr
    assert child.stdout.strip() == f"{path}: cannot write the report (File too large): choose a writable path"
    assert path.read_bytes() == b"<old report/>"
    assert os.listdir(tmp_path) == ["report.xml"]


def test_a_successful_write_replaces_the_file_whole_with_readable_permissions(tmp_path):
    from preflight.report import write_atomic

    path = tmp_path / "report.xml"
    path.write_bytes(b"<old report/>")
    write_atomic(str(path), b"<new/>")
    assert path.read_bytes() == b"<new/>"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert os.listdir(tmp_path) == ["report.xml"]
