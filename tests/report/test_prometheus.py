from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client import parser

from tests.report_helpers import make_report, result
from preflight.report import prometheus


def _samples(text):
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_values_are_in_base_units_with_unit_suffixes():
    report = make_report([
        result("seq_read", "fail", "m", value=2080.5, unit="MB/s"),
        result("size", "pass", "m", instance="shm", value=8.0, unit="GiB"),
        result("throughput", "pass", "m", instance="loader\"x", check="dataloader", value=1500.0, unit="samples/s"),
        result("h2d_pinned", "error", "crashed", instance="transfer", device="cuda:0", unit="GB/s"),
        result("driver_version", "pass", "m", instance="cuda", value="550.54.15", unit="version"),
    ])
    samples = _samples(prometheus.render(report))
    assert samples['preflight_storage_seq_read_bytes_per_second{name="storage",device=""}'] == 2080.5e6
    assert samples['preflight_shm_size_bytes{name="shm",device=""}'] == 8 * 2**30
    assert samples['preflight_dataloader_throughput_samples_per_second{name="loader\\"x",device=""}'] == 1500
    met = 'preflight_threshold_met{name="storage",check="storage",metric="seq_read",device=""}'
    assert samples[met] == 0
    assert samples['preflight_threshold_met{name="transfer",check="transfer",metric="h2d_pinned",'
                   'device="cuda:0"}'] == 0
    assert samples['preflight_results{verdict="fail"}'] == 1 and samples['preflight_results{verdict="pass"}'] == 3
    assert samples["preflight_passed"] == 0
    assert samples["preflight_last_run_timestamp_seconds"] == 1795964400
    info = [k for k in samples if k.startswith("preflight_info{")][0]
    assert 'host="node-17"' in info and 'driver="550.54.15"' in info and 'gpu="8x NVIDIA H100 80GB HBM3"' in info


def test_every_family_has_help_and_type_and_parses_with_prometheus_client():
    text = prometheus.render(make_report([result("seq_read", "pass", "m", value=1.0, unit="MB/s")]))
    families = {family.name: family for family in parser.text_string_to_metric_families(text)}
    assert "preflight_storage_seq_read_bytes_per_second" in families and "preflight_info" in families


def test_percentages_become_ratios():
    assert prometheus.to_base(90.0, "%") == 0.9
    assert prometheus.metric_name("storage", "rand_read", "IOPS") == "preflight_storage_rand_read_operations_per_second"


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "preflight.prom"
    prometheus.write(str(path), make_report([result("seq_read", "pass", "m", value=1.0, unit="MB/s")]))
    assert path.read_text().startswith("# HELP preflight_info")
    assert [p.name for p in tmp_path.iterdir()] == ["preflight.prom"]


def test_a_config_error_replaces_every_measurement_with_not_passed_and_a_config_error():
    from datetime import datetime, timezone

    good = prometheus.render(make_report([result("seq_read", "pass", "m", value=1.0, unit="MB/s")]))
    assert _samples(good)["preflight_passed"] == 1 and _samples(good)["preflight_config_error"] == 0
    text = prometheus.render_config_error({"hostname": "node-17", "preflight": "0.1.0", "torch": "2.4.0"},
                                          datetime(2026, 11, 29, 15, tzinfo=timezone.utc))
    families = {family.name: family for family in parser.text_string_to_metric_families(text)}
    assert set(families) == {"preflight_info", "preflight_last_run_timestamp_seconds", "preflight_run_duration_seconds",
                             "preflight_passed", "preflight_config_error", "preflight_results"}
    samples = _samples(text)
    assert samples["preflight_passed"] == 0 and samples["preflight_config_error"] == 1
    assert samples["preflight_last_run_timestamp_seconds"] == 1795964400
    assert sum(v for k, v in samples.items() if k.startswith("preflight_results{")) == 0
    assert 'host="node-17"' in next(k for k in samples if k.startswith("preflight_info{"))


def _every_metric_once():
    """One numeric result for every metric of every check, as a run that measured them all would give."""
    from preflight.checks import CHECKS

    return make_report([result(m.name, "pass", "m", instance=name, value=1.0, unit=m.unit)
                        for name, check in CHECKS.items() for m in check.METRICS
                        if m.unit not in ("version", "text")])


def test_no_gauge_name_is_reserved_or_abbreviated():
    """Issue 25: promtool rejected `preflight_cuda_device_count` (a gauge ending in `_count`, which histograms and
    summaries own) and would reject an abbreviated unit (`samples_per_s`)."""
    names = {family.name for family in parser.text_string_to_metric_families(prometheus.render(_every_metric_once()))}
    assert "preflight_cuda_devices" in names and "preflight_model_samples_per_second" in names
    assert {"preflight_pipeline_samples_per_second", "preflight_pipeline_model_samples_per_second"} <= names
    for name in names:
        assert not name.endswith(("_count", "_sum", "_bucket", "_total")), name
        assert "_s_" not in name + "_" and "_ms_" not in name + "_", name


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: apt-get install prometheus (Debian's package "
                                              "has it), or put promtool from a Prometheus release on PATH")
def test_promtool_accepts_the_textfile(tmp_path):
    path = tmp_path / "preflight.prom"
    prometheus.write(str(path), _every_metric_once())
    checked = subprocess.run([PROMTOOL, "check", "metrics"], stdin=path.open(), capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked.stdout + checked.stderr
