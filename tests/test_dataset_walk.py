import sys

import pytest

from preflight.dataset_walk import DataFile, dataset_files
from tests.helpers import in_mount_namespace


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    (tmp_path / "train" / "a" / "img1.jpg").write_bytes(b"x" * 10)
    (tmp_path / "train" / "img0.jpg").write_bytes(b"y" * 20)
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "objects.pack").write_bytes(b"z" * 30)
    (tmp_path / ".hidden.txt").write_bytes(b"h")
    (tmp_path / "link.jpg").symlink_to(tmp_path / "train" / "img0.jpg")
    return tmp_path


def test_walks_regular_non_empty_files_in_sorted_order_skipping_hidden_and_links(tree):
    found = list(dataset_files(str(tree)))
    # top-down: a directory's files before its subdirectories, as os.walk and find
    assert found == [DataFile(str(tree / "train" / "img0.jpg"), 20), DataFile(str(tree / "train" / "a" / "img1.jpg"), 10)]


def test_a_file_path_is_its_own_dataset_and_a_missing_path_is_empty(tree):
    assert list(dataset_files(str(tree / "train" / "img0.jpg"))) == [DataFile(str(tree / "train" / "img0.jpg"), 20)]
    assert list(dataset_files(str(tree / "nope"))) == []


def test_stays_on_the_filesystem_of_path(tree):
    """A real tmpfs mounted inside the tree (private mount namespace) is not walked, as find -xdev."""
    mount = tree / "train" / "mnt"
    mount.mkdir()
    code = (f"from preflight.dataset_walk import dataset_files\n"
            f"print(sorted(f.name for f in dataset_files({str(tree)!r})))")
    script = (f"mount -t tmpfs -o size=1m tmpfs {mount} && echo data > {mount}/other.jpg && "
              f"{sys.executable} -c \"{code}\"")
    result = in_mount_namespace(script)
    assert result.returncode == 0, result.stderr
    assert "other.jpg" not in result.stdout
    assert "img0.jpg" in result.stdout
