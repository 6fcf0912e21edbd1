"""``num_workers: auto`` from real cgroup v1 and v2 file contents, laid out as the kernel does."""

from __future__ import annotations

import os

from preflight.host import cpus

AFFINITY = len(os.sched_getaffinity(0))


def _v2(tmp_path, membership, files):
    root = tmp_path / "cgroup"
    (root).mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(membership)
    return root, proc


def test_v2_quota_of_the_process_cgroup(tmp_path):
    root, proc = _v2(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "kubepods/pod1/ctr/cpu.max": "150000 100000\n",
        "kubepods/pod1/cpu.max": "max 100000\n",
        "cpu.max": "max 100000\n",  # the root's own file does not limit
    })
    assert cpus.cgroup_quota(root, proc) == 1.5
    assert cpus.auto_workers(root, proc) == max(1, int(min(AFFINITY, 1.5) * 0.7))


def test_v2_a_parent_limit_binds_the_child(tmp_path):
    root, proc = _v2(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "kubepods/pod1/ctr/cpu.max": "max 100000\n",
        "kubepods/pod1/cpu.max": "50000 100000\n",
    })
    assert cpus.cgroup_quota(root, proc) == 0.5
    assert cpus.available_cpus(root, proc) == 0.5
    assert cpus.auto_workers(root, proc) == 1  # never zero workers


def test_v2_unlimited_falls_back_to_the_affinity_mask(tmp_path):
    root, proc = _v2(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    assert cpus.cgroup_quota(root, proc) is None
    assert cpus.available_cpus(root, proc) == AFFINITY


def test_v1_cfs_quota_under_the_cpu_controller(tmp_path):
    root = tmp_path / "cgroup"
    group = root / "cpu,cpuacct" / "docker" / "abc"
    group.mkdir(parents=True)
    (group / "cpu.cfs_quota_us").write_text("400000\n")
    (group / "cpu.cfs_period_us").write_text("100000\n")
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n")
    assert cpus.cgroup_quota(root, proc) == 4.0
    assert cpus.available_cpus(root, proc) == min(AFFINITY, 4.0)


def test_v1_minus_one_means_no_quota(tmp_path):
    root = tmp_path / "cgroup"
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("3:cpu:/\n")
    assert cpus.cgroup_quota(root, proc) is None
