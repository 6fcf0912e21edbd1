"""The shm bench's arithmetic and config: the ratio and its target, the peak sampler, and the config it runs.
(The bench itself needs root and a private mount namespace with its own /dev/shm; it is run by hand, not here.)"""

from __future__ import annotations

import time

import pytest

from bench.shm_needed import SHAPES, Peak, config_text, ratio, shm_used, within_target


def test_the_target_is_never_below_the_peak_and_at_most_a_quarter_above():
    assert ratio(367.6, 330.9) == pytest.approx(1.111, abs=1e-3)
    assert within_target(100.0, 100.0) and within_target(125.0, 100.0)
    assert not within_target(99.9, 100.0)  # below the peak: the job dies before the gate fails
    assert not within_target(125.1, 100.0)  # too loose to gate on
    assert ratio(0.0, 0.0) == 1.0 and ratio(1.0, 0.0) == float("inf") and not within_target(1.0, 0.0)


def test_the_sampler_keeps_the_largest_reading_and_the_largest_since_its_mark():
    values = [5, 40, 10, 20, 30, 25]
    calls = []

    def used() -> int:  # the loop says "steady" while the 3rd reading is taken: 40 came before it
        calls.append(1)
        if len(calls) == 3:
            peak.mark()
        return values[len(calls) - 1] if len(calls) <= len(values) else 0

    peak = Peak(used, every_s=0.0)
    peak.start()  # after the name is bound: used() marks it
    while peak.samples < len(values):
        time.sleep(0.001)
    peak.stop()
    assert peak.peak == 40 and peak.since_mark == 30


def test_used_bytes_are_whole_blocks_of_the_filesystem(tmp_path):
    used = shm_used(str(tmp_path))
    assert used >= 0 and used % 512 == 0


def test_each_shapes_config_is_one_dataloader_instance_that_loads(tmp_path):
    from preflight import config as preflight_config

    for shape in SHAPES:
        path = tmp_path / f"{shape.name}.yaml"
        path.write_text(config_text(shape, str(tmp_path)))
        loaded = preflight_config.load(str(path), environ={})
        assert [i.check for i in loaded.instances] == ["dataloader"]
        text = path.read_text()
        assert ("loader: " in text) == bool(shape.loader) and "shm_headroom: {min: 0 %}" in text
        if not shape.loader:
            assert f"batch_size: {shape.batch_size}" in text and f"num_workers: {shape.workers}" in text
