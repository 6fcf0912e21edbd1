from __future__ import annotations

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
