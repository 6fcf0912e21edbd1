"""The job's own code: imported from python_path, sys.path restored, its failures blamed on its own frames."""

from __future__ import annotations

import sys

import pytest

from preflight.checks import usercode
from preflight.checks.base import UserCodeError
from tests.helpers import job_package

TORCH_TEXT = '''Caught KeyError in DataLoader worker process 1.
Original Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 349, in _worker_loop
    data = fetcher.fetch(index)
  File "{root}/jobpkg/data.py", line 20, in __getitem__
    return self.load(self.items[index])
  File "{root}/jobpkg/data.py", line 12, in load
    raise KeyError(name)
           ^^^^^^^^^^^^^
KeyError: 'n01440764/missing.JPEG'
'''


def _package(tmp_path, body: str) -> str:
    return str(job_package(tmp_path, "jobpkg", {"data": body}))


def test_a_worker_exception_reraised_by_torch_is_read_from_its_text(tmp_path):
    with usercode.on_path([str(tmp_path)]):
        error = KeyError(TORCH_TEXT.format(root=tmp_path))
        assert usercode.blame(error) == ("KeyError: 'n01440764/missing.JPEG' (at jobpkg/data.py:12 in load, "
                                         "from jobpkg/data.py:20 in __getitem__)")


def test_an_exception_raised_in_this_process_is_blamed_on_the_jobs_frames(tmp_path):
    root = _package(tmp_path, "def make():\n    return helper()\n\ndef helper():\n    raise ValueError('no data')\n")
    with usercode.on_path([root]):
        make = usercode.load("jobpkg.data:make", "dataset")
        with pytest.raises(ValueError) as caught:
            make()
        assert usercode.blame(caught.value) == ("ValueError: no data (at jobpkg/data.py:5 in helper, "
                                                "from jobpkg/data.py:2 in make)")


def test_on_path_restores_sys_path_and_forgets_the_jobs_modules(tmp_path):
    root = _package(tmp_path, "def make():\n    return 1\n")
    before = list(sys.path)
    with usercode.on_path([root]):
        assert sys.path[0] == root and usercode.load("jobpkg.data:make", "dataset")() == 1
    assert sys.path == before and "jobpkg.data" not in sys.modules and "jobpkg" not in sys.modules


@pytest.mark.parametrize("body, message", [
    ("import no_such_dependency\n", "cannot import jobpkg.data:make: jobpkg.data failed to import "
                                    "(ModuleNotFoundError: No module named 'no_such_dependency' (at jobpkg/data.py:1 "
                                    "in <module>)): install what it needs in this image"),
    ("raise RuntimeError('config missing')\n", "cannot import jobpkg.data:make: jobpkg.data raised RuntimeError: "
                                               "config missing (at jobpkg/data.py:1 in <module>) while importing: "
                                               "fix the module"),
    ("make = 3\n", "jobpkg.data:make is a int, not callable: name a function or class"),
])
def test_import_failures_name_the_python_error_and_the_fix(tmp_path, body, message):
    root = _package(tmp_path, body)
    with usercode.on_path([root]), pytest.raises(UserCodeError) as error:
        usercode.load("jobpkg.data:make", "dataset")
    assert str(error.value) == message and error.value.option == "dataset"


def test_on_path_never_forgets_a_module_imported_before_it(tmp_path):
    import preflight.checks.usercode as before

    with usercode.on_path([str(usercode.__file__).rsplit("/preflight/", 1)[0]]):  # python_path: [.] at the repo root
        pass
    assert sys.modules["preflight.checks.usercode"] is before
