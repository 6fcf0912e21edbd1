"""Issue 21, cases 6-9: the dataloader check on the dataset shapes its file and tar paths misread.

Each case builds its input for real (``tests.datasets``) and asserts the verdict and the words a
user reads; the counts asserted (samples, keys, shards, files skipped) follow from what was built,
never from how much a time window held.
"""

from __future__ import annotations

import subprocess
import sys

from tests import datasets
from tests.helpers import REPO

BIG = 1_200_000_000  # the HDF5 file of case 6: 1.2 GB, one 110 kB record at a time in the job


def _peak_rss_reading(name: str, size: int) -> tuple[str, int]:
    """(what ``FileSamples`` returned for the one file ``name``, the peak RSS in KiB) of a fresh process reading it."""
    code = ("import resource, sys\n"
            "from preflight.checks.dataloader.files import FileSamples\n"
            "from preflight.io.dataset_walk import DataFile\n"
            "from preflight.io.uncached import bypass_for\n"
            "name, size = sys.argv[1], int(sys.argv[2])\n"
            "got = FileSamples([DataFile(name, size)], bypass_for(name, False))[0]\n"
            "print(*got, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    done = subprocess.run([sys.executable, "-c", code, name, str(size)], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr
    samples, read, peak = done.stdout.split()
    return f"{samples} {read}", int(peak)


def test_case_6_a_1_2_GB_file_is_read_whole_through_one_fixed_buffer(tmp_path):
    """The worker read a file through a buffer the size of the largest file: 1.2 GB of memory for one sample."""
    big = datasets.sparse_file(tmp_path / "train.bin", size=BIG, every=300)  # 4 MiB written, the rest holes
    got, peak_kib = _peak_rss_reading(str(big), BIG)
    assert got == f"1 {BIG}"  # the whole file was read, one sample
    assert peak_kib < 150 * 1024, f"peak RSS {peak_kib} KiB reading one 1.2 GB file"
