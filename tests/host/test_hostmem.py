"""Host memory limits and NUMA placement, read from a fake /proc and /sys tree."""

from __future__ import annotations

import resource

from preflight.host import hostmem


def write(root, relative, text):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_and_v1_limits_and_their_unlimited_spellings(tmp_path):
    assert hostmem.cgroup_memory_limit(str(tmp_path)) is None
    write(tmp_path, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")  # a v2 root
    write(tmp_path, "sys/fs/cgroup/memory.max", "max\n")
    assert hostmem.cgroup_memory_limit(str(tmp_path)) is None
    write(tmp_path, "sys/fs/cgroup/memory.max", "17179869184\n")
    assert hostmem.cgroup_memory_limit(str(tmp_path)) == 16 << 30
    v1 = tmp_path / "v1"
    write(v1, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    assert hostmem.cgroup_memory_limit(str(v1)) is None


def test_mem_available_is_read_in_bytes(tmp_path):
    write(tmp_path, "proc/meminfo", "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   2097152 kB\n")
    assert hostmem.mem_available(str(tmp_path)) == 2 << 30
    assert hostmem.mem_available(str(tmp_path / "missing")) is None


def test_container_runtime_is_recognised(tmp_path):
    assert hostmem.container_runtime(str(tmp_path), {}) == ""
    assert hostmem.container_runtime(str(tmp_path), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "kubernetes"
    write(tmp_path, "run/.containerenv", "")
    assert hostmem.container_runtime(str(tmp_path), {}) == "podman"


def test_a_pinned_failure_outside_a_container_names_memlock_and_ram(tmp_path):
    write(tmp_path, "proc/meminfo", "MemAvailable: 1048576 kB\n")
    message = hostmem.pinned_failure(4 << 30, "cudaHostAlloc failed", str(tmp_path), {})
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    memlock = "unlimited" if soft == resource.RLIM_INFINITY else hostmem._size(soft)
    assert message == (f"could not pin 4 GiB of host memory (cudaHostAlloc failed); RLIMIT_MEMLOCK {memlock}, "
                       f"MemAvailable 1 GiB, no cgroup memory limit: free host memory or raise `ulimit -l`; "
                       f"this is a host memory limit, not a GPU fault")


def test_numa_nodes_of_a_pci_device_and_of_the_process(tmp_path):
    write(tmp_path, "sys/bus/pci/devices/0000:3b:00.0/numa_node", "1\n")
    write(tmp_path, "sys/devices/system/node/node0/cpulist", "0-3,8-11\n")
    write(tmp_path, "sys/devices/system/node/node1/cpulist", "4-7,12-15\n")
    assert hostmem.numa_node_of_pci("0000:3b:00.0", str(tmp_path)) == 1
    assert hostmem.numa_node_of_pci("0000:86:00.0", str(tmp_path)) is None
    assert hostmem.process_numa_nodes({4, 5, 12}, str(tmp_path)) == (1,)
    assert hostmem.process_numa_nodes({3, 4}, str(tmp_path)) == (0, 1)
