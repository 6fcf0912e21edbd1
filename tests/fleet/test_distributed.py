from __future__ import annotations

import os

import pytest

from preflight.fleet import distributed
from preflight.errors import UsageError

TORCHRUN_ENV = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job-1"}


def test_reads_torchruns_environment() -> None:
    launch = distributed.launch_from(TORCHRUN_ENV)
    assert launch == distributed.Launch(rank=3, world_size=4, local_rank=1, local_world_size=2, node_rank=1)


def test_detects_torchrun_only_when_its_run_id_is_set() -> None:
    assert distributed.launched_by_torchrun(TORCHRUN_ENV)
    assert not distributed.launched_by_torchrun({"RANK": "0", "WORLD_SIZE": "1"})


def test_missing_variables_name_themselves_and_how_to_launch() -> None:
    env = {k: v for k, v in TORCHRUN_ENV.items() if k not in ("GROUP_RANK", "MASTER_PORT")}
    with pytest.raises(UsageError, match=r"GROUP_RANK, MASTER_PORT not set: launch under torchrun"):
        distributed.launch_from(env)


@pytest.mark.parametrize("change", [{"RANK": "x"}, {"RANK": "4"}, {"LOCAL_RANK": "2"}])
def test_inconsistent_variables_are_a_usage_error(change: dict[str, str]) -> None:
    with pytest.raises(UsageError, match="--distributed"):
        distributed.launch_from({**TORCHRUN_ENV, **change})


def test_ranks_missing_at_join_are_read_from_the_store_keys() -> None:
    error = "wait timeout after 5000ms, keys: /default_pg/0//cpu//0/2"
    assert distributed._ranks_in_keys(error) == [2]
    assert distributed._ranks_in_keys("keys: [/default_pg/0//cpu//0/1, /default_pg/0//cpu//0/3]") == [1, 3]
    assert distributed._ranks_in_keys("Connection refused") == []


def test_the_nccl_error_handling_is_set_outright_over_what_the_launcher_set() -> None:
    environ = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}  # torchrun's default in every worker: tear down
    assert distributed.nccl_error_handling(environ) == "1"
    assert environ == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
    unset: dict[str, str] = {}
    assert distributed.nccl_error_handling(unset) is None and unset == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}


@pytest.mark.parametrize("launcher", [None, "3"], ids=["agent-default", "set-by-the-user"])
def test_under_torchrun_the_process_group_is_made_with_error_handling_2_and_a_hung_rank_is_named(
        tmp_path, launcher) -> None:
    # issue 34: torchrun's agent sets TORCH_NCCL_ASYNC_ERROR_HANDLING=1 in every worker, so a setdefault never
    # applied; since pytorch#73982 it passes on a value the launcher was given (3 here, SkipCleanUp, torch's own
    # default) instead. The probe reads the C environment (what ProcessGroupNCCL's constructor reads) at the
    # moment each rank creates its process group, then rank 1 hangs and rank 0's barrier must name it.
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {key: value for key, value in os.environ.items() if key != "TORCH_NCCL_ASYNC_ERROR_HANDLING"}
    env.update(PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    if launcher is not None:
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = launcher
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(root / "tests/fleet/nccl_probe.py"), "9"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=150)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output  # rank 0 failed on the hung rank, as the fleet must
    for rank in (0, 1):
        assert f"rank {rank}: launcher set '{launcher or 1}', the process group was created under b'2'" in output, \
            output
    assert "rank 0 named: rank 0: rank 1 (" in output and "did not reach the probe's barrier within" in output, output
