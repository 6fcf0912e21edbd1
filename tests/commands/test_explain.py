from __future__ import annotations

import re

import pytest

from preflight import config
from preflight.checks import CHECKS
from preflight.commands import explain
from preflight.errors import UsageError
from tests.helpers import run_cli

# reStructuredText that must not reach a terminal: ``literals``, :roles:`x`, `links <url>`_, a `::` paragraph end.
_MARKUP = re.compile(r"``|:[a-z]+:`|`_|\S::$", re.MULTILINE)


@pytest.mark.parametrize("name", list(CHECKS))
def test_explains_every_check_from_its_tables(name):
    text = explain.render(name, width=80)
    check = CHECKS[name]
    assert " ".join(text.split()).startswith(f"{name}: {check.HELP} ")
    for item in (*check.OPTIONS, *check.METRICS):
        assert re.search(rf"^  {item.name}  ", text, re.MULTILINE), item.name
    first_line = check.__doc__.strip().splitlines()[0].replace("``", "")
    assert first_line in " ".join(text.split())


@pytest.mark.parametrize("name", list(CHECKS))
def test_plain_text_within_the_width(name):
    text = explain.render(name, width=80)
    assert not _MARKUP.search(text), _MARKUP.search(text)
    # Only a docstring's literal block (collective's busbw formulas) keeps its own line breaks.
    assert all(len(line) <= 80 for line in text.splitlines() if not line.startswith("    algbw") and
               not line.startswith("    busbw")), text


def test_plain_turns_rst_into_text():
    assert explain._plain("``x`` and :func:`os.fsync` and :class:`~a.b.Stats`") == "x and os.fsync and Stats"
    assert explain._plain("see `nccl-tests <https://github.com/NVIDIA/nccl-tests>`_") == \
        "see nccl-tests (https://github.com/NVIDIA/nccl-tests)"
    assert explain._plain("turned into::\n\n    a = b") == "turned into:\n\n    a = b"


def test_a_metric_is_explained_on_its_own():
    text = explain.render("storage.seq_read", width=80)
    flat = " ".join(text.split())
    metric = next(m for m in CHECKS["storage"].METRICS if m.name == "seq_read")
    assert flat.startswith(f"storage.seq_read: {metric.help} ")
    assert "unit: MB/s (a threshold may use any bandwidth unit, like 1.5 GB/s)" in flat
    assert "direction: higher is better (a threshold is a `min`)" in flat
    assert "method: Storage I/O on the dataset path, measured as fio measures it" in flat  # the check's method
    assert "fix on a miss: the path reads at the figure measured:" in flat  # the hint, its fields in words
    assert "      seq_read: {min: 1.5 GB/s}" in text.splitlines()
    assert "parameters" not in text and "rand_read" not in text  # one metric, not the whole check
    assert all(len(line) <= 80 for line in text.splitlines())


def test_a_lower_is_better_per_device_metric_says_so():
    text = " ".join(explain.render("cuda.temperature", width=80).split())
    assert "unit: C (a threshold may use any temperature unit, like 85 C)" in text
    assert "direction: lower is better (a threshold is a `max`)" in text
    assert "per device: one result per GPU, named like cuda.temperature[cuda:0]" in text
    assert "temperature: {max: 85 C}" in text
    assert "method: CUDA as the job's torch and the driver (NVML) see it" in text


def test_a_result_id_from_a_report_is_accepted():
    assert explain.render("cuda.temperature[cuda:0]", width=80) == explain.render("cuda.temperature", width=80)
    assert "name: {match: H100}" in explain.render("cuda.name", width=80)


def test_unknown_check_suggests_the_closest():
    with pytest.raises(UsageError, match=r"unknown check `strage`: did you mean `storage`\?"):
        explain.render("strage")
    with pytest.raises(UsageError, match=r"unknown check `strage`: did you mean `storage`\?"):
        explain.render("strage.seq_read")


def test_unknown_metric_suggests_the_closest():
    with pytest.raises(UsageError, match=r"`storage` has no metric `seq_raed`: did you mean `seq_read`\? "
                                         r"\(`preflight explain storage` lists them\)"):
        explain.render("storage.seq_raed")


@pytest.mark.parametrize("name", list(CHECKS))
def test_no_internal_name_reaches_the_reader(name):
    """Issue 25: "(usercode.blame)", "(dataset_walk.too_few ...)", "(Measurement.note)" meant nothing to a user."""
    flat = " ".join(explain.render(name, width=200).split())
    internal = sorted(explain._INTERNAL - {"__init__", "__pycache__"})
    leaked = re.findall(rf"\(((?:{'|'.join(internal)})\.(?!com\b)\w+)", flat)  # not "(github.com/...)"
    assert not [name for name in leaked if not explain._public(name)], leaked  # a result id is for readers


def test_an_internal_reference_leaves_its_explanation():
    assert explain._plain("its frames (``usercode.blame``). Next") == "its frames. Next"
    assert explain._plain("too few files (``dataset_walk.too_few``: a few stray") == "too few files (a few stray"
    assert explain._plain("via ``torch.utils.data.DataLoader`` (``os.fsync``)") == \
        "via torch.utils.data.DataLoader (os.fsync)"
    assert explain._plain("throttling (``cuda.clock_throttle``)") == "throttling (cuda.clock_throttle)"


def test_a_check_says_what_its_duration_buys():
    text = " ".join(explain.render("storage", width=80).split())
    assert "duration (the check's measuring time): split equally between the timed parts that run" in text
    assert "duration (the check's measuring time): not used" in " ".join(explain.render("shm", width=80).split())


INSTANCE = """\
version: 1
checks:
  wds:
    check: dataloader
    path: {data}
    samples_per_gpu: 100 samples/s
    throughput_vs_required: {{min: 100 %}}   # the node feeds its GPUs
    throughput: {{min: 500 samples/s}}
"""


def test_an_instance_id_the_report_prints_is_explained_with_the_users_own_threshold(tmp_path):
    """Issue 35: `preflight explain wds.throughput_vs_required`, an id from the report, gave "unknown check `wds`",
    and "in thresholds.yaml:" showed an example, not the user's file."""
    file = tmp_path / "gate.yaml"
    file.write_text(INSTANCE.format(data=tmp_path))
    completed = run_cli("explain", "wds.throughput_vs_required", "-c", str(file))
    assert completed.returncode == 0, completed.stderr
    text = completed.stdout
    assert text.startswith("dataloader.throughput_vs_required: ")
    assert f"in {file}:\n  wds:  # check: dataloader\n    throughput_vs_required: {{min: 100 %}}  (line 7)\n" in text
    assert "{min: 1.5" not in text and "throughput: {min: 500" not in text  # the user's line, only this metric's
    whole = run_cli("explain", "wds", "-c", str(file)).stdout
    assert "    throughput_vs_required: {min: 100 %}  (line 7)\n    throughput: {min: 500 samples/s}  (line 8)\n" \
        in whole
    # the file `run` reads by default: ./thresholds.yaml in the working directory
    (tmp_path / "thresholds.yaml").write_text(INSTANCE.format(data=tmp_path))
    assert "throughput_vs_required: {min: 100 %}  (line 7)" in run_cli(
        "explain", "wds.throughput_vs_required[cpu]", cwd=tmp_path).stdout


def test_a_metric_the_users_file_does_not_judge_shows_an_example_and_says_so(tmp_path):
    file = tmp_path / "gate.yaml"
    file.write_text(INSTANCE.format(data=tmp_path))
    text = explain.render("wds.memory_headroom", width=80, loaded=config.load(str(file)))
    assert "in thresholds.yaml, whose instances set none of these; for example:\n  checks:\n    wds:\n" \
           "      memory_headroom: {min: " in text
    storage = explain.render("storage.seq_read", width=80, loaded=config.load(str(file)))
    assert f"({file} has no instance of this check); for example:" in storage


def test_an_id_neither_a_check_nor_an_instance_is_one_line_and_exit_2(tmp_path):
    file = tmp_path / "gate.yaml"
    file.write_text(INSTANCE.format(data=tmp_path))
    completed = run_cli("explain", "wdss.throughput", "-c", str(file))
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        f"preflight: error: unknown check `wdss`, nor an instance of {file}: did you mean `wds`? (`preflight list` "
        f"shows the checks; `preflight explain wdss.throughput -c FILE` reads the instances of the file the run "
        f"read)")
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\nchecks: {wds: {check: dataloadr}}\n")
    completed = run_cli("explain", "wds", "-c", str(broken))
    assert completed.returncode == 2 and completed.stderr.startswith(f"preflight: error: {broken}:2:")


def test_the_throughput_fix_follows_the_evidence_not_the_metrics_name():
    """Issue 35: `explain dataloader.throughput` advised a faster volume or shards, wrong for a decode-bound loader
    and for one already reading shards: it says which fix goes with which evidence of the run."""
    flat = " ".join(explain.render("dataloader.throughput", width=80).split())
    fix = flat.split("fix on a miss: ", 1)[1]
    assert "decode-bound (decode: image, raw_throughput 1.5x throughput or more): add workers or decode on the " \
           "GPU" in fix
    assert "tar shards already: at least as many shards as workers" in fix
    assert fix.index("decode-bound") < fix.index("faster volume")
