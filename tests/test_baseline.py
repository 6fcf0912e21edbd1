import json
import re

import pytest

from preflight import baseline, cli, config
from preflight.checks import CHECKS
from preflight.errors import ConfigError, UsageError
from tests.fakes import reader, steady
from tests.helpers import write_config

GATED = """
version: 1
baseline: base.json
defaults: {{duration: 0.5s, repeats: 3}}
checks:
  disk:
    check: reader
    path: {data}
    throttle: {throttle}
    read_bw: {{min: 50% of baseline}}   # wide: the machine is shared; bench/noise.py measures the real spread
"""


@pytest.fixture(autouse=True)
def fake_checks(monkeypatch):
    monkeypatch.setitem(CHECKS, "reader", reader)
    monkeypatch.setitem(CHECKS, "steady", steady)


def test_a_saved_baseline_passes_the_same_node_and_fails_a_throttled_reader(tmp_path, capsys):
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * (4 << 12))  # 4 MiB: 0.4 s per throttled pass
    first = write_config(tmp_path, GATED.replace("read_bw: {{min: 50% of baseline}}", "read_bw: {{min: 1 MB/s}}")
                         .replace("baseline: base.json\n", "").format(data=data, throttle="0 B/s"), "first.yaml")
    assert cli.main(["run", "-c", str(first), "--save-baseline", str(tmp_path / "base.json")]) == 0
    saved = json.loads((tmp_path / "base.json").read_text())
    base = saved["values"]["disk.read_bw"]["value"]
    assert saved["kind"] == "preflight-baseline" and saved["values"]["disk.read_bw"]["unit"] == "MB/s"
    assert base > 100  # a page-cache read: hundreds of MB/s at least, so a 10 MB/s throttle is far below half

    same = write_config(tmp_path, GATED.format(data=data, throttle="0 B/s"), "same.yaml")
    assert cli.main(["run", "-c", str(same), "--json", str(tmp_path / "same.json")]) == 0
    [result] = json.loads((tmp_path / "same.json").read_text())["results"]
    assert result["verdict"] == "pass" and result["threshold"] == {"min": pytest.approx(base / 2)}
    assert re.search(r"required >= [\d.]+ [kMG]B/s \(50% of baseline [\d.]+ [kMG]B/s\)$", result["message"])

    slow = write_config(tmp_path, GATED.format(data=data, throttle="10 MB/s"), "slow.yaml")
    assert cli.main(["run", "-c", str(slow), "--json", str(tmp_path / "slow.json")]) == 1
    [result] = json.loads((tmp_path / "slow.json").read_text())["results"]
    assert result["verdict"] == "fail"
    assert result["value"] == pytest.approx(10, rel=0.2)  # the throttle, measured for real
    assert "of baseline" in result["message"]
    capsys.readouterr()


def baseline_file(tmp_path, values):
    path = tmp_path / "base.json"
    path.write_text(json.dumps({"schema": 1, "kind": "preflight-baseline", "values": values}))
    return path


def load(tmp_path, threshold, **kwargs):
    path = write_config(tmp_path, f"""
        version: 1
        checks:
          s: {{check: steady, rate: {threshold}}}
        """)
    return config.load(str(path), environ={}, **kwargs)


def test_relative_bounds_are_converted_from_the_baseline_unit(tmp_path):
    path = baseline_file(tmp_path, {"s.rate": {"value": 2000, "unit": "samples/s"}, "other.x": {"value": 1,
                                                                                                "unit": "MB/s"}})
    [instance] = load(tmp_path, "{min: 90% of baseline, max: 150% of baseline}", baseline=str(path)).instances
    [threshold] = instance.thresholds
    assert threshold.relative == {"min": 0.9, "max": 1.5} and threshold.baseline == {"s.rate": 2000.0}


@pytest.mark.parametrize(
    "threshold, values, message",
    [
        ("{min: 90% of baseline}", None, "is relative to a baseline, but none is given: pass --baseline FILE"),
        ("{min: 90% of the baseline}", {}, "write a baseline bound like `90% of baseline`"),
        ("{min: 90% of baseline}", {"t.rate": {"value": 1, "unit": "samples/s"}}, "has no value for it"),
        ("{min: 90% of baseline}", {"s.rate": {"value": 1, "unit": "GiB"}}, "holds GiB, not a sample rate"),
        ("{min: 90% of baseline, max: 50% of baseline}", {"s.rate": {"value": 1, "unit": "samples/s"}},
         "min is above max"),
    ],
)
def test_baseline_mistakes_are_located_config_errors(tmp_path, threshold, values, message):
    path = baseline_file(tmp_path, values) if values is not None else None
    with pytest.raises(ConfigError, match="thresholds.yaml:3:") as error:
        load(tmp_path, threshold, baseline=str(path) if path else None)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "cannot read the baseline (No such file or directory): save one with"),
        ("{not json", "the baseline is not valid JSON"),
        ('{"schema": 1, "values": {}}', "not a preflight baseline"),
        ('{"schema": 1, "kind": "preflight-baseline", "values": {"a.b": {"value": NaN, "unit": "MB/s"}}}',
         "entry `a.b` needs a finite `value` and a known `unit`"),
    ],
)
def test_a_bad_baseline_file_is_a_usage_error_naming_it(tmp_path, content, message):
    path = tmp_path / "base.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=re.escape(message)):
        baseline.load(str(path))


def test_a_device_missing_from_the_baseline_is_an_error_not_a_pass(tmp_path):
    from preflight.measurement import Measurement
    from preflight.verdict import Outcome, judge

    path = baseline_file(tmp_path, {"s.rate[cuda:0]": {"value": 100, "unit": "samples/s"}})
    [instance] = load(tmp_path, "{min: 90% of baseline}", baseline=str(path)).instances
    outcome = Outcome((Measurement("rate", 95.0, "samples/s", "cuda:0"), Measurement("rate", 95.0, "samples/s",
                                                                                     "cuda:1")))
    first, second = judge(instance, outcome)
    assert first.verdict == "pass" and first.threshold == {"min": 90.0}
    assert second.verdict == "error" and "no value for s.rate[cuda:1]" in second.message
