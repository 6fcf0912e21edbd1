"""A DataLoader worker that dies: named as an OOM kill when the cgroup's count says so, else torch's own error."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
import torch

from preflight import cgroup
from preflight.cgroup_memory import OomWatch
from preflight.checks.dataloader.loop import BatchPuller, WorkerOomKilled
from tests.helpers import memory_limited_cgroup, run_cli, write_config

EVENTS = "low 0\nhigh 0\nmax 5\noom 1\noom_kill {kills}\noom_group_kill 0\n"  # cgroup v2 memory.events


class DiesInWorker(torch.utils.data.Dataset):
    """Each sample kills its worker with SIGKILL, first raising the fake cgroup's oom_kill count if given."""

    def __init__(self, events=None):
        self.events = events

    def __len__(self):
        return 8

    def __getitem__(self, index):
        if self.events is not None:  # what the kernel does as it OOM-kills; atomically, as the kernel's counter
            staged = self.events.with_name(f"events.{os.getpid()}")
            staged.write_text(EVENTS.format(kills=1))
            os.replace(staged, self.events)
        os.kill(os.getpid(), signal.SIGKILL)


def fake_v2(tmp_path):
    root = tmp_path / "cgroup"
    (root / "ctr").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    (root / "ctr" / "memory.max").write_text("1288490188\n")  # 1.2 GiB, as in case 10
    (root / "ctr" / "memory.events").write_text(EVENTS.format(kills=0))
    membership = tmp_path / "membership"
    membership.write_text("0::/ctr\n")
    return OomWatch.start(root, membership), root / "ctr" / "memory.events"


def loader(dataset):
    return torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=2, prefetch_factor=3)


def test_a_worker_dead_while_the_oom_count_rose_is_named_an_oom_kill_with_the_fix(tmp_path):
    watch, events = fake_v2(tmp_path)
    puller = BatchPuller(loader(DiesInWorker(events)), oom=watch)
    with pytest.raises(WorkerOomKilled) as caught:
        puller.skip(1)
    assert re.fullmatch(
        r"DataLoader worker \(pid.*: the kernel OOM-killed a DataLoader worker under the cgroup memory limit of "
        r"1\.2 GiB \(oom_kill in memory\.events rose from 0 to 1\): raise the container's or pod's memory limit, "
        r"or lower num_workers \(2\), prefetch_factor \(3\) or batch_size \(2\)", str(caught.value)), str(caught.value)


def test_a_worker_killed_otherwise_keeps_torchs_own_message(tmp_path):
    watch, _ = fake_v2(tmp_path)
    puller = BatchPuller(loader(DiesInWorker()), oom=watch)
    with pytest.raises(RuntimeError) as caught:
        puller.window(5.0)
    assert not isinstance(caught.value, WorkerOomKilled)
    assert re.fullmatch(r"DataLoader worker \(pid.*\) (exited unexpectedly|is killed by signal: Killed\.)",
                        str(caught.value)), str(caught.value)


def test_real_oom_kill_under_a_cgroup_limit_is_named_and_fewer_workers_fit(tmp_path):
    # Case 10 at a quarter scale: each worker reads whole files into one buffer the size of the
    # largest (96 MiB), so 4 workers need > 384 MiB beside the main process; 1 worker fits.
    data = tmp_path / "data"
    data.mkdir()
    block = b"\xa5" * (1 << 20)
    for index in range(8):
        with open(data / f"shard-{index}.bin", "wb") as shard:
            for _ in range(96):
                shard.write(block)
    config = write_config(tmp_path, f"""
        version: 1
        checks:
          dataloader:
            path: {data}
            batch_size: 2
            duration: 1s
            timeout: 60s
            throughput: {{min: 1 samples/s}}
        """)
    counter = "memory.events" if cgroup.unified() else "memory.oom_control"
    with memory_limited_cgroup(384 << 20) as (directory, prefix):
        runs = {workers: run_cli("run", "-c", str(config), "--set", f"dataloader.num_workers={workers}", "--format",
                                 "json", prefix=prefix, cwd=tmp_path)
                for workers in (4, 1)}
        kills = int(re.search(r"^oom_kill (\d+)$", (directory / counter).read_text(), re.M)[1])
    (crowded,), (fits, _) = (json.loads(runs[w].stdout)["results"] for w in (4, 1))
    assert kills >= 1, "the kernel never OOM-killed anything: the case was not built"
    assert crowded["verdict"] == "error"
    named = re.fullmatch(
        r"dataloader check did not finish: WorkerOomKilled: DataLoader worker \(pid.*: the kernel OOM-killed a "
        rf"DataLoader worker under the cgroup memory limit of 384 MiB \(oom_kill in {counter} rose from 0 to "
        r"(\d+)\): raise the container's or pod's memory limit, or lower num_workers \(4\), prefetch_factor "
        r"\(2\) or batch_size \(2\)", crowded["message"])
    assert named and 1 <= int(named[1]) <= kills, crowded["message"]  # more workers may die after the first
    assert (fits["id"], fits["verdict"]) == ("dataloader.throughput", "pass"), fits["message"]
