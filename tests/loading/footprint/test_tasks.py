"""What the job's loader needs of the pids limit, from known task counts (``dataloader.tasks``).

The real counts and limits are exercised in test_pids_limit.py; here the inputs are fixed so each
figure is known: the peak over the windows, a worker counted at least as a tensor-sending one, the
intra-op threads added once, and the share left of what the tightest limit allows.
"""

from __future__ import annotations

import pytest

from preflight.loading.footprint import tasks
from preflight.host.pids import Limits, Scope


def test_the_peak_is_the_busiest_window_each_worker_at_least_a_tensor_senders_count():
    # windows: main 9 + workers 16 (2 each), then main 10 + workers 20; a tensor-sending worker holds 3 here
    peak = tasks.needed([(9, 16), (10, 20)], workers=8, tensor_worker=3, intra_op=1)
    assert peak == tasks.Needed(total=10 + 1 + 24, main=10, intra_op=1, per_worker=3, workers=8)
    # workers that hold more than the probe count as measured: 4 workers of 8 tasks (a pool each, medmcp#99)
    assert tasks.needed([(5, 32)], workers=4, tensor_worker=3, intra_op=0).total == 5 + 32
    assert tasks.needed([], workers=4, tensor_worker=3, intra_op=0) is None


def test_no_workers_needs_the_main_process_alone():
    assert tasks.needed([(3, 0)], workers=0, tensor_worker=0, intra_op=1) == tasks.Needed(4, 3, 1, 0, 0)


def test_headroom_is_the_share_left_of_the_tightest_limit_with_the_gates_runner_given_back(monkeypatch):
    monkeypatch.setattr(tasks, "intra_op_threads", lambda: 1)
    # pids.max 40 with 5 in use, 2 of them the runner's and 1 this process's: the job's loader may hold 38
    limits = Limits((Scope("pids.max", 40, 5, "/cg/job/pids.max", gate=2), Scope("kernel.pid_max", 4096, 300,
                                                                                 "/proc/sys/kernel/pid_max", 2)),
                    own=1)
    assert tasks.fact(limits).value == 38.0
    assert tasks.fact(limits).method.startswith("tightest: pids.max 40 (/cg/job/pids.max): 5 in use, 2 of them")
    row = tasks.headroom(limits, [(9, 16)], {"num_workers": 8}, 8, "DataLoader(...)", tensor_worker=3)
    assert row.value == pytest.approx(100 * (38 - 34) / 38)  # 9 + 1 + 8 x 3 = 34
    assert "needs 34 tasks = the main process's 9" in row.reason and "8 workers x 3" in row.reason
    over = tasks.headroom(limits, [(9, 40)], {"num_workers": 8}, 8, "DataLoader(...)", tensor_worker=3)
    assert over.value == pytest.approx(100 * (38 - 50) / 38) and "lower num_workers (8)" in over.hint


def test_a_real_worker_that_sent_tensors_holds_its_thread_its_feeder_and_the_fd_passing_thread():
    # measured on one real worker: 3 here (torch 2.x, Linux, file_descriptor sharing); never fewer than its
    # main thread and its result queue's feeder
    assert tasks.probe(1) >= 2 and tasks.probe(0) == 0
