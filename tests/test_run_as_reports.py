"""Issue 42, its last "Done when": public reports of the same kinds as its cases, not the ones it was handed, each
built here for real and run through the gate as root (a Slurm prolog, an init container), naming the job's user.

- fluid-cloudnative/fluid#191: a dataset mount whose directory only root may enter; the job (runAsUser) cannot
  list it, root can.
- opendatahub-io/ilab-on-ocp#26: torch writes under ``~/.cache``; the job's HOME is its user's (``/`` for a uid
  with no passwd entry, as on OpenShift), never root's.
- HabanaAI/vllm-fork#929: ``getpass.getuser()`` (torch inductor's cache folder) raises KeyError for a uid with no
  passwd entry, unless USER or LOGNAME names one: the job has neither of root's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.test_runner_run_as import child, gate, work  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="switching to the job's user needs root and setpriv")


def _package(work: Path, code: str) -> Path:
    """``jobpkg`` with ``code`` as its ``data`` module, readable by every user, in ``work/src``."""
    package = work / "src" / "jobpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text(textwrap.dedent(code))
    for path in [work / "src", *((work / "src").rglob("*"))]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return work / "src"


TRAINEE = 4243  # a user the test adds to a private copy of /etc/passwd, with a home it owns
OPENSHIFT_UID = 1000680000  # a uid of an OpenShift namespace's range: no passwd entry, gid 0


def _with_user(work: Path) -> tuple[str, ...]:
    """A command prefix that runs in a private mount namespace whose /etc/passwd also names user ``trainee``
    (uid ``TRAINEE``, home ``work/home``, which it owns): the job's user as a cluster's directory knows it."""
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no private mount namespace here (unshare -m refused)")
    home = work / "home"
    home.mkdir()
    os.chown(home, TRAINEE, TRAINEE)
    passwd = work / "passwd"
    passwd.write_text(Path("/etc/passwd").read_text() + f"trainee:x:{TRAINEE}:{TRAINEE}::{home}:/bin/sh\n")
    os.chmod(passwd, 0o644)
    return ("unshare", "-m", "sh", "-c", f'mount --bind {passwd} /etc/passwd && exec "$@"', "sh")


HOME_CODE = """
    import getpass
    import os

    import torch
    from torch.utils.data import Dataset


    class Cached(Dataset):
        \"\"\"Makes torch.hub's checkpoint folder, as load_state_dict_from_url does before it downloads weights.\"\"\"

        def __init__(self):
            self.folder = os.path.join(torch.hub.get_dir(), "checkpoints")
            os.makedirs(self.folder, exist_ok=True)

        def __len__(self):
            return 256

        def __getitem__(self, index):
            return torch.zeros(4)


    class Compiled(Cached):
        \"\"\"Names inductor's cache folder as torch._inductor's cache_dir_utils does: by getpass.getuser().\"\"\"

        def __init__(self):
            self.folder = os.path.join("/tmp", "torchinductor_" + getpass.getuser())


    def cached():
        return Cached()


    def compiled():
        return Compiled()
"""


def _loader(src: Path, factory: str) -> str:
    return f"""
      dataloader:
        dataset: "jobpkg.data:{factory}"
        python_path: [{src}]
        duration: 0.5s
        num_workers: 1
        batch_size: 8
        throughput: {{min: 1 samples/s}}
    """


def test_ilab_on_ocp_26_the_jobs_home_is_its_users_not_roots(work, child):
    src = _package(work, HOME_CODE)
    prefix = _with_user(work)
    # the job's user has a home it owns: the job makes ~/.cache/torch/hub there, and so must the gate as the job
    code, results, output = gate(work, child, f"version: 1\ndefaults: {{run_as: trainee}}\nchecks:{_loader(src, 'cached')}",
                                 prefix=prefix)
    assert code == 0, output
    assert results["dataloader.throughput"]["verdict"] == "pass"
    assert (work / "home" / ".cache" / "torch" / "hub" / "checkpoints").is_dir()
    # a uid with no passwd entry (OpenShift's): HOME is "/", as the container runtime sets it, and the job's torch
    # cannot make /.cache there: the job's code, exit 2, naming the folder the job itself is refused
    code, results, output = gate(work, child, f"version: 1\ndefaults: {{run_as: '{OPENSHIFT_UID}'}}\n"
                                              f"checks:{_loader(src, 'cached')}", prefix=prefix)
    assert code == 2, output
    message = results["dataloader.throughput"]["message"]
    assert "PermissionError: [Errno 13] Permission denied: '/.cache'" in message, message


def test_vllm_fork_929_a_uid_without_a_passwd_entry_has_no_user_name(work, child):
    src = _package(work, HOME_CODE)
    # root's USER and LOGNAME are not the job's: getpass.getuser() of a uid the node does not know raises
    code, results, output = gate(work, child, f"version: 1\ndefaults: {{run_as: '{OPENSHIFT_UID}'}}\n"
                                              f"checks:{_loader(src, 'compiled')}", env={"USER": "root", "LOGNAME": "root"})
    assert code == 2, output
    message = results["dataloader.throughput"]["message"]
    assert f"KeyError: 'getpwuid(): uid not found: {OPENSHIFT_UID}'" in message, message
    # a user the node knows is named by its own name
    code, results, output = gate(work, child, f"version: 1\ndefaults: {{run_as: trainee}}\n"
                                              f"checks:{_loader(src, 'compiled')}", prefix=_with_user(work),
                                 env={"USER": "root", "LOGNAME": "root"})
    assert code == 0, output


def test_fluid_191_a_dataset_folder_only_root_may_enter_fails_as_the_job(work, child):
    data = work / "data"
    for index in range(60):
        folder = data / f"n{index % 3:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index:05d}.JPEG").write_bytes(os.urandom(10_000))
        os.chmod(folder / f"{index:05d}.JPEG", 0o644)
    for folder in data.iterdir():
        os.chmod(folder, 0o755)
    os.chmod(data, 0o700)  # the mount point as fluid's FUSE left it: root's alone
    checks = f"""
      storage:
        path: {data}
        duration: 0.5s
        unreadable_files: {{max: 0}}
      dataloader:
        path: {data}
        duration: 0.5s
        num_workers: 1
        throughput: {{min: 1 samples/s}}
    """
    code, results, output = gate(work, child, f"version: 1\nchecks:{checks}")
    assert code == 0, output  # root enters it
    code, results, output = gate(work, child, f"version: 1\ndefaults: {{run_as: nobody}}\nchecks:{checks}")
    assert code == 1, output  # as the job, user nobody, it cannot: the node fails, and says why and how to fix it
    unreadable = results["storage.unreadable_files"]
    assert (unreadable["verdict"], unreadable["value"]) == ("fail", 1), unreadable
    assert "1 unreadable directory: the job stops at the first with PermissionError" in unreadable["message"]
    assert unreadable["hint"].startswith(f"make {data} readable by the job's user"), unreadable["hint"]
    throughput = results["dataloader.throughput"]
    assert throughput["verdict"] == "fail" and "(1 unreadable directory skipped)" in throughput["message"]
