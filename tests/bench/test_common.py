"""The benches' shared helper: rounds alternate who goes first, scratch is removed, storage parts get N seconds."""

from __future__ import annotations

import os

from bench.common import alternating, defaults, per_storage_part, scratch_root
from preflight.checks.storage.parts import part_s


def test_rounds_alternate_who_goes_first_and_keep_each_rounds_pair():
    order = []
    rounds = alternating(4, lambda: order.append("a") or len(order), lambda: order.append("b") or -len(order))
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert rounds == [(1, -2), (4, -3), (5, -6), (8, -7)]  # (first's, second's) whoever went first


def test_scratch_is_a_hidden_directory_removed_with_its_files_even_after_an_error(tmp_path):
    try:
        with scratch_root(str(tmp_path)) as root:
            assert os.path.basename(root).startswith(".preflight-bench-")
            (open(os.path.join(root, "data.bin"), "wb")).close()
            raise KeyError("a bench failed")
    except KeyError:
        pass
    assert os.listdir(tmp_path) == []


def test_each_storage_part_gets_the_seconds_asked_and_options_are_the_defaults_parsed():
    assert part_s(per_storage_part(2.0)) == 2.0  # 5 parts (writes included), 10 s in all
    options = defaults("storage", path="/data")
    assert options["path"] == "/data" and options["data_size"] == 256 << 20
