"""The cgroup memory limit and OOM-kill count, from files laid out and written as the kernel does."""

from __future__ import annotations

from preflight.host import cgroup_memory
from preflight.host.cgroup_memory import OomCount, OomWatch

# cgroup v2 memory.events of a container whose process the OOM killer ended once (Linux 6.x keys).
V2_EVENTS = "low 0\nhigh 0\nmax 37\noom 1\noom_kill {kills}\noom_group_kill 0\n"
# cgroup v1 memory.oom_control (Linux >= 4.13 adds oom_kill).
V1_OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n"
V1_UNLIMITED = "9223372036854771712\n"  # PAGE_COUNTER_MAX pages in bytes, 4 KiB pages


def v2_tree(tmp_path, kills=0, pod_max="1288490188\n", container_max="max\n"):
    root = tmp_path / "cgroup"
    container = root / "kubepods.slice" / "pod1" / "ctr"
    container.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "kubepods.slice" / "pod1" / "memory.max").write_text(pod_max)
    (container / "memory.max").write_text(container_max)
    (container / "memory.events").write_text(V2_EVENTS.format(kills=kills))
    membership = tmp_path / "membership"
    membership.write_text("0::/kubepods.slice/pod1/ctr\n")
    return root, membership, container


def v1_tree(tmp_path, kills=0):
    root = tmp_path / "cgroup"
    container = root / "memory" / "docker" / "abc"
    container.mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text(V1_UNLIMITED)
    (root / "memory" / "docker" / "memory.limit_in_bytes").write_text(V1_UNLIMITED)
    (container / "memory.limit_in_bytes").write_text(f"{300 << 20}\n")
    (container / "memory.oom_control").write_text(V1_OOM_CONTROL.format(kills=kills))
    membership = tmp_path / "membership"
    membership.write_text("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
    return root, membership, container


def test_v2_count_is_read_from_memory_events_and_a_parent_limit_binds(tmp_path):
    root, membership, container = v2_tree(tmp_path, kills=2)
    assert cgroup_memory.oom_kills(root, membership) == OomCount(2, container / "memory.events")
    assert cgroup_memory.memory_limit(root, membership) == 1288490188  # the pod's 1.2 GiB; the container's is max


def test_v2_the_tightest_limit_on_the_way_up_wins(tmp_path):
    root, membership, _ = v2_tree(tmp_path, container_max=f"{300 << 20}\n")
    assert cgroup_memory.memory_limit(root, membership) == 300 << 20


def test_v2_unlimited_everywhere_is_none(tmp_path):
    root, membership, _ = v2_tree(tmp_path, pod_max="max\n")
    assert cgroup_memory.memory_limit(root, membership) is None


def test_v1_count_is_read_from_oom_control_and_near_2_to_the_63_means_no_limit(tmp_path):
    root, membership, container = v1_tree(tmp_path, kills=3)
    assert cgroup_memory.oom_kills(root, membership) == OomCount(3, container / "memory.oom_control")
    assert cgroup_memory.memory_limit(root, membership) == 300 << 20
    (container / "memory.limit_in_bytes").write_text(V1_UNLIMITED)
    assert cgroup_memory.memory_limit(root, membership) is None


def test_a_kernel_without_the_counter_says_nothing(tmp_path):
    root, membership, container = v1_tree(tmp_path)
    (container / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")  # before Linux 4.13
    assert cgroup_memory.oom_kills(root, membership) is None
    assert cgroup_memory.oom_kills(tmp_path / "nothing", membership) is None
    assert OomWatch.start(root, membership).evidence() == ""


def test_the_watch_names_a_rise_in_the_count_with_the_limit(tmp_path):
    root, membership, container = v2_tree(tmp_path, kills=1)
    watch = OomWatch.start(root, membership)
    assert watch.evidence() == ""  # no kill since the start
    (container / "memory.events").write_text(V2_EVENTS.format(kills=3))
    assert watch.evidence() == "under the cgroup memory limit of 1.2 GiB (oom_kill in memory.events rose from 1 to 3)"


def test_the_watch_without_a_limit_says_the_node_ran_out(tmp_path):
    root, membership, container = v1_tree(tmp_path)
    (container / "memory.limit_in_bytes").write_text(V1_UNLIMITED)
    watch = OomWatch.start(root, membership)
    (container / "memory.oom_control").write_text(V1_OOM_CONTROL.format(kills=1))
    assert watch.evidence() == ("with no cgroup memory limit set, so the node itself ran out of memory "
                                "(oom_kill in memory.oom_control rose from 0 to 1)")


def test_sizes_read_in_binary_units():
    assert cgroup_memory.readable(300 << 20) == "300 MiB"
    assert cgroup_memory.readable(1288490188) == "1.2 GiB"
    assert cgroup_memory.readable(16 << 30) == "16 GiB"


def test_v1_a_limit_above_the_mounted_tree_is_read_from_hierarchical_memory_limit(tmp_path):
    # A v1 runtime bind-mounts the container's cgroup at the hierarchy's root: /proc/self/cgroup names a path not
    # in the tree, and the pod's limit above it is only in memory.stat (cloudfoundry/gosigar#56).
    root = tmp_path / "cgroup"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text(V1_UNLIMITED)
    (root / "memory" / "memory.stat").write_text(
        f"cache 0\nshmem 0\nhierarchical_memory_limit {300 << 20}\nhierarchical_memsw_limit {300 << 20}\n"
        f"total_shmem {7 << 20}\n")
    membership = tmp_path / "membership"
    membership.write_text("12:memory:/kubepods/pod1/abc\n0::/\n")
    assert cgroup_memory.memory_limit(root, membership) == 300 << 20
    assert cgroup_memory.shmem(root, membership) == 7 << 20  # v1: total_shmem, the cgroup's and its children's
    (root / "memory" / "memory.stat").write_text(f"hierarchical_memory_limit {V1_UNLIMITED}")
    assert cgroup_memory.memory_limit(root, membership) is None
    assert cgroup_memory.shmem(root, membership) is None


def test_v2_tmpfs_charged_to_the_cgroup_is_memory_stat_shmem(tmp_path):
    root, membership, container = v2_tree(tmp_path)
    (container / "memory.stat").write_text(f"anon {50 << 20}\nfile {9 << 20}\nshmem {8 << 20}\nfile_mapped 0\n")
    assert cgroup_memory.shmem(root, membership) == 8 << 20


def fake_proc(tmp_path, parents):
    """A /proc whose processes have the given ``{pid: ppid}``."""
    proc = tmp_path / "proc"
    for pid, ppid in parents.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (python3 (a worker)) S {ppid} {pid} {pid} 0 -1\n")
    return proc


def test_a_cgroup_holding_only_the_loader_its_workers_and_its_ancestors_is_not_shared(tmp_path):
    # 1 the container's shell, 7 the gate, 9 and 10 its workers, 11 a decoder a worker started.
    root, membership, container = v2_tree(tmp_path)
    proc = fake_proc(tmp_path, {1: 0, 7: 1, 9: 7, 10: 7, 11: 9, 20: 1})
    (container / "cgroup.procs").write_text("1\n7\n9\n10\n")
    (container / "sub").mkdir()
    (container / "sub" / "cgroup.procs").write_text("11\n")  # descendants' cgroups: shmem counts them too
    assert cgroup_memory.shared_with_others(7, root, membership, proc) is False
    (container / "sub" / "cgroup.procs").write_text("11\n20\n")  # 20: another program the shell started
    assert cgroup_memory.shared_with_others(7, root, membership, proc) is True
    (container / "cgroup.procs").write_text("1\n7\n0\n")  # 0: a process outside this PID namespace
    (container / "sub" / "cgroup.procs").write_text("")
    assert cgroup_memory.shared_with_others(7, root, membership, proc) is True
    (container / "cgroup.procs").unlink()
    assert cgroup_memory.shared_with_others(7, root, membership, proc) is None


def test_v2_memory_high_is_the_tightest_up_the_tree_and_none_on_v1(tmp_path):
    # Kubernetes MemoryQoS writes memory.high below memory.max: the kernel throttles from there (sqliteai/warp#14).
    root, membership, container = v2_tree(tmp_path)
    assert cgroup_memory.memory_high(root, membership) is None  # no memory.high files
    (container / "memory.high").write_text("max\n")
    (container.parent / "memory.high").write_text(f"{900 << 20}\n")
    assert cgroup_memory.memory_high(root, membership) == 900 << 20
    v1_root, v1_membership, v1_container = v1_tree(tmp_path / "v1")
    (v1_container / "memory.high").write_text(f"{100 << 20}\n")  # no such file on v1: never read there
    assert cgroup_memory.memory_high(v1_root, v1_membership) is None


def test_readable_picks_the_unit_each_size_fits():
    """One helper for every byte size (``units.format_value``): a size under 1 MiB is not "0 MiB" (issue 35)."""
    assert [cgroup_memory.readable(n) for n in (0, 180 * 1024, 500 * 1024, 1023, 300 << 20)] == [
        "0 B", "180 KiB", "500 KiB", "1023 B", "300 MiB"]
