"""Which cgroup directories are this process's, from real /proc/self/cgroup lines (cgroups(7))."""

from __future__ import annotations

from preflight.host import cgroup

# A Docker container on a cgroup v1 host, as /proc/self/cgroup lists it (cpu and cpuacct co-mounted).
V1_MEMBERSHIP = """\
12:memory:/docker/abc
4:cpu,cpuacct:/docker/abc/tuned
1:name=systemd:/docker/abc
0::/
"""


def test_v2_directories_run_from_the_process_cgroup_up_to_the_root(tmp_path):
    root = tmp_path / "cgroup"
    (root / "kubepods" / "pod1" / "ctr").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    membership = tmp_path / "membership"
    membership.write_text("0::/kubepods/pod1/ctr\n")
    assert cgroup.unified(root)
    assert cgroup.directories("memory", root, membership) == [
        root / "kubepods/pod1/ctr", root / "kubepods/pod1", root / "kubepods", root]


def test_v1_each_controller_reads_its_own_hierarchy_and_its_own_line(tmp_path):
    root = tmp_path / "cgroup"
    (root / "memory" / "docker" / "abc").mkdir(parents=True)
    (root / "cpu,cpuacct" / "docker" / "abc" / "tuned").mkdir(parents=True)
    (root / "cpuset").mkdir()
    membership = tmp_path / "membership"
    membership.write_text(V1_MEMBERSHIP)
    assert not cgroup.unified(root)
    assert cgroup.directories("memory", root, membership) == [root / "memory/docker/abc", root / "memory/docker",
                                                              root / "memory"]
    assert cgroup.directories("cpu", root, membership)[0] == root / "cpu,cpuacct/docker/abc/tuned"


def test_a_controller_that_is_not_mounted_has_no_directories(tmp_path):
    membership = tmp_path / "membership"
    membership.write_text(V1_MEMBERSHIP)
    (tmp_path / "cgroup" / "cpuset").mkdir(parents=True)
    assert cgroup.directories("memory", tmp_path / "cgroup", membership) == []
    assert cgroup.directories("memory", tmp_path / "missing", tmp_path / "no-such-file") == []


def test_a_path_missing_under_the_mount_falls_back_to_the_existing_ancestors(tmp_path):
    # A container without its own cgroup namespace sees the host's path but only its own subtree mounted.
    root = tmp_path / "cgroup"
    (root / "memory").mkdir(parents=True)
    membership = tmp_path / "membership"
    membership.write_text(V1_MEMBERSHIP)
    assert cgroup.directories("memory", root, membership) == [root / "memory"]
