"""bench/diff_pairs.py's config is one `preflight validate` accepts, gating what the halved pairs must name.
(The bench itself needs root, a loop device and blkio cgroups; it is run by hand, not here.)"""

from __future__ import annotations

from pathlib import Path

import yaml

from bench.diff_pairs import HALVED, config
from tests.helpers import run_cli


def test_the_bench_config_validates_and_gates_every_rate_a_halved_pair_must_name(tmp_path):
    data = tmp_path / "train"
    data.mkdir()
    path = config(str(tmp_path), data, 215.0)
    done = run_cli("validate", path)
    assert done.returncode == 0, done.stdout + done.stderr
    checks = yaml.safe_load(Path(path).read_text())["checks"]
    assert checks["dataloader"]["samples_per_gpu"] == "215 samples/s" and checks["dataloader"]["gpus"] == 1
    for metric_id in HALVED:  # each has a threshold, so `diff` compares it (throughput_vs_required included)
        instance, metric = metric_id.split(".")
        assert "min" in checks[instance][metric], metric_id
