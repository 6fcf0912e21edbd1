"""A storage group whose pass holds nothing to read once is unmeasurable, with the reason, never a crash."""

from __future__ import annotations

from preflight.checks.storage.measuring import _isolated
from preflight.io.dataset import Spent


def test_a_group_that_finds_its_pass_spent_before_its_first_sample_is_unmeasurable_with_the_reason():
    def spent() -> list:
        raise Spent("each byte of its 1 files streamed once")

    rows = _isolated(spent, (("seq_read", "MB/s"),), "/data", "train", None)
    assert [(m.metric, m.value, m.unit) for m in rows] == [("seq_read", None, "MB/s")]
    assert rows[0].reason == ("nothing left to read for the first time under /data (each byte of its 1 files "
                              "streamed once): the checks before it read the whole dataset; point train.path at "
                              "more of it or run train alone (--only)")
