from __future__ import annotations

import io
import re
import shutil

import pytest

from tests.report_helpers import make_report, result
from preflight.report import console


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_colour_only_on_a_terminal_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert console.use_colour(_Terminal()) and not console.use_colour(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not console.use_colour(_Terminal())
    assert console.use_colour(io.StringIO(), "always") and not console.use_colour(_Terminal(), "never")


def test_colour_codes_only_when_asked():
    report = make_report([result("seq_read", "fail", "measured 1 MB/s, required >= 2 MB/s")])
    assert "\033[" in console.render(report, colour=True)
    assert "\033[" not in console.render(report, colour=False)


def test_unmeasured_metrics_sharing_a_reason_share_one_fix_line():
    no_gpu = "could not measure: no CUDA device: torch 2.13.0+cpu is a CPU build"
    report = make_report([
        result("device_count", "fail", "measured 0, required >= 1", instance="cuda", value=0.0, hint="check --gpus all"),
        result("matmul_error", "fail", no_gpu + "; required <= 0.001", instance="cuda"),
        result("temperature", "warn", no_gpu + "; required <= 85 C", instance="cuda"),
        result("h2d_pinned", "fail", no_gpu + "; required >= 10 GB/s", instance="transfer"),
        result("seq_read", "fail", "could not measure: /data does not exist; required >= 1 MB/s"),
    ])
    fixes = console.render(report, width=200).split("what to fix:\n", 1)[1].splitlines()[:-1]
    assert fixes == [
        "  cuda.device_count: measured 0, required >= 1",
        "    fix: check --gpus all",
        f"  cuda.matmul_error, cuda.temperature, transfer.h2d_pinned: {no_gpu}",
        "  storage.seq_read: could not measure: /data does not exist; required >= 1 MB/s",
    ]


def test_a_note_is_printed_once_under_the_rows_that_share_it():
    scratch = "on a scratch file beside the dataset: ./ holds 3 data files (0.06 MB), none of 8 MiB or more"
    report = make_report([
        result("seq_read", "pass", "measured 900 MB/s", value=900.0, note=scratch),
        result("rand_read", "pass", "measured 9000 IOPS", value=9000.0, note=scratch),
        result("small_files", "pass", "measured 900 files/s", value=900.0),
        result("skipped_files", "info", "measured 1", value=1.0, note="1 directory loop"),
    ])
    lines = console.render(report, width=200).splitlines()[1:-1]
    assert [line[:16] for line in lines] == ["storage.seq_read", "storage.rand_rea", "    └ seq_read, ",
                                             "storage.small_fi", "storage.skipped_", "    └ 1 director"]
    assert lines[2] == f"    └ seq_read, rand_read: {scratch}"


def test_a_note_shared_by_rows_that_are_not_next_to_each_other_is_printed_once():
    """Issue 35: the dataloader's pass note was printed three times, above and below `pids_available` (a fact
    row without it) and again after the skipped `shm_headroom` (its own note). Said once, naming its rows."""
    passed = "one pass: 898 of 898 files read once (101 others were read by checks before this one)"
    report = make_report([
        result("throughput", "pass", "measured 4226 samples/s", instance="dataloader", value=4226.0, note=passed),
        result("memory_headroom", "pass", "measured 99%", instance="dataloader", value=99.0, note=passed),
        result("pids_available", "info", "measured 32654", instance="dataloader", value=32654.0),
        result("pids_headroom", "pass", "measured 99.98%", instance="dataloader", value=99.98, note=passed),
        result("shm_headroom", "skip", "not applicable: the files loader's batches hold sample counts; required "
               ">= 0%", instance="dataloader"),
        result("workers", "info", "measured 1", instance="dataloader", value=1.0, note=passed),
        result("seq_read", "pass", "measured 900 MB/s", value=900.0, note=passed),  # another instance: its own
    ])
    text = console.render(report, width=200)
    lines = text.splitlines()[1:-1]
    assert text.count(passed) == 2, text
    assert [line[:18] for line in lines] == [
        "dataloader.through", "dataloader.memory_", "dataloader.pids_av", "dataloader.pids_he", "dataloader.shm_hea",
        "    └ not applicab", "dataloader.workers", "    └ throughput, ", "storage.seq_read .",
        "    └ one pass: 89"]
    assert lines[7] == f"    └ throughput, memory_headroom, pids_headroom, workers: {passed}"


def test_a_row_not_measured_on_the_dataset_says_what_it_was_and_a_shared_fix_is_said_once():
    """Issue 21: the table's note names the subject; consecutive misses with one fix show it once."""
    fix = "no dataset named: set DATA_DIR=/path/to/dataset"
    report = make_report([
        result("seq_read", "fail", "measured 900 MB/s", value=900.0, subject="no_dataset", hint=fix,
               note="on a scratch file beside the dataset"),
        result("small_files", "fail", "measured 900 files/s", value=900.0, subject="no_dataset", hint=fix),
        result("free_space", "pass", "measured 9 GiB", value=9.0, subject="dataset"),
    ])
    text = console.render(report, width=200)
    lines = text.splitlines()
    assert lines[2] == ("    └ measured on no dataset named (the working directory): on a scratch file beside "
                        "the dataset")
    assert lines[4] == "    └ measured on no dataset named (the working directory)"
    assert lines[5].startswith("storage.free_space") and "└" not in lines[6]  # the dataset's own: no label
    fixes = text.split("what to fix:\n", 1)[1].splitlines()[:-1]
    assert fixes == ["  storage.seq_read: measured 900 MB/s", "  storage.small_files: measured 900 files/s",
                     f"    fix: {fix}"]


def _gpu_node_report():
    """A realistic failing GPU node: per-device ids, a long text value, a baseline bound, long notes and fixes."""
    ecc_fix = ("the GPU reported 2 uncorrectable ECC errors since the driver loaded: drain the node, run "
               "`nvidia-smi -q -d ECC,PAGE_RETIREMENT`, reset the GPU (nvidia-smi -r) and RMA it if the count returns; "
               "see https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html")
    no_nvml = ("could not measure: NVML library not found (libnvidia-ml.so.1): no NVIDIA driver here, or the container "
               "was started without the NVIDIA runtime (--gpus all / runtimeClassName: nvidia); required >= 535.104")
    scratch = ("on 1000 scratch files of 112 KiB beside the dataset: /mnt/datasets/imagenet-21k/train (files up to "
               "128 KiB) holds 12 data files (993.6 kB), under the 100 files and 8 MiB (or 64 MiB of shards) a "
               "dataset figure needs")
    return make_report([
        result("device_count", "pass", "measured 8, required >= 8", instance="cuda", value=8.0, required=">= 8",
               duration_s=3.2),
        result("driver_version", "fail", no_nvml, instance="cuda", required=">= 535.104", unit="version",
               duration_s=3.2),
        result("name", "pass", "measured NVIDIA H100 80GB HBM3", instance="cuda", device="cuda:0",
               value="NVIDIA H100 80GB HBM3", unit="text", required="matches /H100|H200/", duration_s=3.2),
        result("ecc_uncorrectable_volatile", "fail", "measured 2, required <= 0", instance="cuda", device="cuda:0",
               value=2.0, required="<= 0", duration_s=3.2, hint=ecc_fix),
        result("h2d_link_efficiency", "warn", "measured 61%, required >= 75%", instance="transfer", device="cuda:7",
               value=61.0, unit="%", required=">= 75%", duration_s=12.4,
               note="PCIe Gen4 x16 negotiated as Gen4 x8 on 0000:bd:00.0: check the riser, the slot and ASPM"),
        result("seq_read", "pass", "measured 8.962 GB/s", instance="imagenet_train_volume", check="storage",
               value=8962.0, unit="MB/s", required=">= 3.882 GB/s (50% of baseline 7.765 GB/s)", duration_s=101.5),
        result("small_files", "pass", "measured 18658 files/s", value=18658.0, unit="files/s",
               required=">= 500 files/s", duration_s=101.5, note=scratch),
        result("small_files_bandwidth", "info", "measured 2.14 GB/s", value=2140.0, unit="MB/s", duration_s=101.5,
               note=scratch),
        result("filesystem", "info", "measured nfs4", value="nfs4 at /mnt/datasets/imagenet-21k/train "
               "(10.0.0.12:/export/datasets/imagenet-21k, ro,relatime,vers=4.2,rsize=1048576)", unit="text"),
        result("seq_read", "error", "storage check did not finish: timed out after 120s", instance="checkpoints",
               unit="MB/s", required=">= 1 GB/s", duration_s=120.0),
        result("size", "fail", "measured 64 MiB, required >= 8 GiB", instance="shm", value=0.0625, unit="GiB",
               required=">= 8 GiB", duration_s=0.3, hint="/dev/shm has 64 MiB, >= 8 GiB is needed: start the "
               "container with --shm-size=8g, or mount an emptyDir with medium: Memory"),
    ], config_path="/etc/preflight/gpu-training-node/thresholds.yaml")


_ANSI = re.compile(r"\033\[[0-9;]*m")


@pytest.mark.parametrize("width", [40, 60, 80, 100, 132, 200])
@pytest.mark.parametrize("colour", [False, True])
def test_every_line_fits_the_width(width, colour):
    text = _ANSI.sub("", console.render(_gpu_node_report(), colour=colour, width=width))
    assert max(len(line) for line in text.splitlines()) <= width
    assert " ".join(text.split()).endswith("== 3 failed, 1 error, 1 warning, 4 passed, 2 info in 1.2s ==")


@pytest.mark.parametrize("width", [40, 80])
def test_wrapping_loses_no_character(width):
    """Nothing is cut short: without whitespace, the table holds every id, value, requirement, note and fix."""
    text = "".join(console.render(_gpu_node_report(), width=width).split())
    for r in _gpu_node_report().results:
        message = r.message if r.verdict in ("fail", "warn", "error") else ""
        for part in (r.id, r.required, r.note, r.hint, message, str(r.value) if r.unit == "text" else ""):
            assert "".join(part.split()) in text, part
    assert "2.14GB/s" in text and "64MiB" in text and "8.962GB/s" in text


def test_at_80_columns_the_verdicts_line_up_and_a_long_id_gets_a_line_of_its_own():
    lines = console.render(_gpu_node_report(), width=80).splitlines()
    rows = [line for line in lines if re.search(r" (PASS|FAIL|WARN|INFO|ERROR) ", line)]
    assert len(rows) == 11 and len({re.search(r" (PASS|FAIL|WARN|INFO|ERROR) ", row).start() for row in rows}) == 1
    ecc = lines.index("cuda.ecc_uncorrectable_volatile[cuda:0]")
    assert re.fullmatch(r"  \.+ FAIL +2  <= 0", lines[ecc + 1])
    assert re.match(r"cuda\.name\[cuda:0\] \.+ PASS  NVIDIA H100 80GB HBM3$", lines[ecc - 2])
    assert any(re.fullmatch(r"shm\.size \.+ FAIL +64 MiB  >= 8 GiB", line) for line in lines)


def test_a_long_requirement_or_text_wraps_inside_its_column():
    lines = console.render(_gpu_node_report(), width=80).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("imagenet_train_volume.seq_read"))
    column = lines[row].index(">= 3.882 GB/s")
    assert lines[row].endswith(">= 3.882 GB/s (50% of") and lines[row + 1] == " " * column + "baseline 7.765 GB/s)"
    name = next(i for i, line in enumerate(lines) if line.startswith("cuda.name[cuda:0]"))
    assert lines[name].endswith("PASS  NVIDIA H100 80GB HBM3") and lines[name + 1].strip() == "matches /H100|H200/"


def test_notes_and_fixes_wrap_with_a_hanging_indent():
    lines = console.render(_gpu_node_report(), width=80).splitlines()
    note = next(i for i, line in enumerate(lines) if line.startswith("    └ small_files, small_files_bandwidth: "))
    assert lines[note + 1].startswith("      ") and not lines[note + 1].startswith("       ")
    fix = next(i for i, line in enumerate(lines) if line.startswith("    fix: the GPU reported"))
    assert all(line.startswith("         ") and line[9] != " " for line in lines[fix + 1:fix + 4])
    driver = next(i for i, line in enumerate(lines) if line.startswith("  cuda.driver_version: could not measure"))
    assert lines[driver + 1].startswith("    (libnvidia-ml.so.1)")
    assert any(line.endswith("required") or "required >= 535.104" in line for line in lines[driver:driver + 4])
    assert not any(line.rstrip().endswith((">=", "<=")) for line in lines)  # ">= 535.104" never splits


def test_the_duration_column_only_when_every_id_fits_beside_it():
    short = make_report([result("seq_read", "pass", "measured 2 GB/s", value=2000.0, unit="MB/s",
                                required=">= 200 MB/s", duration_s=6.4)])
    assert console.render(short, width=80).splitlines()[1].endswith(" >= 200 MB/s 6.4s")
    assert not any(line.endswith("s") and line[-4:-1].replace(".", "").isdigit()
                   for line in console.render(_gpu_node_report(), width=80).splitlines()[1:12])
    assert "101.5s" in console.render(_gpu_node_report(), width=132)


def test_the_width_is_the_terminal_s_else_80(monkeypatch):
    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(80, 24): shutil.os.terminal_size((132, 40)))
    assert console.terminal_width(_Terminal()) == 132
    assert console.terminal_width(io.StringIO()) == 80
    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(80, 24): shutil.os.terminal_size((20, 40)))
    assert console.terminal_width(_Terminal()) == console.MIN_WIDTH


def test_the_summary_counts_in_words():
    def summary(*verdicts):
        report = make_report([result(f"m{i}", v, value=1.0) for i, v in enumerate(verdicts)])
        return console.render(report).splitlines()[-1]

    assert summary("error", "error", "warn", "pass") == "== 2 errors, 1 warning, 1 passed in 1.2s =="
    assert summary("fail", "error", "warn", "warn", "skip") == "== 1 failed, 1 error, 2 warnings, 1 skipped in 1.2s =="


def test_a_text_without_requirement_takes_the_room_left_on_the_line():
    report = make_report([
        result("size", "pass", instance="shm", value=23.54, unit="GiB", required=">= 1 GiB", duration_s=0.3),
        result("filesystem", "info", value="ext4 at / (/dev/vda, rw,relatime)", unit="text", duration_s=10.5),
        result("straggler", "pass", instance="collective", device="rank0", value=1.01, required="<= 1.5",
               duration_s=3.6),
    ])
    rows = console.render(report, width=80).splitlines()[1:4]
    assert re.fullmatch(r"storage\.filesystem \.+ INFO  ext4 at / \(/dev/vda, rw,relatime\) 10\.5s", rows[1])
    assert len({len(row) for row in rows}) == 1 and all(len(row) <= 80 for row in rows)  # durations line up


def test_a_checks_duration_is_on_its_first_row_only():
    """Issue 25: each row repeated its check's total duration."""
    report = make_report([
        result("size", "pass", instance="shm", value=23.54, unit="GiB", required=">= 1 GiB", duration_s=0.4),
        result("free", "info", instance="shm", value=23.54, unit="GiB", duration_s=0.4),
        result("seq_read", "pass", value=982.0, unit="MB/s", required=">= 200 MB/s", duration_s=9.7),
        result("rand_read", "pass", value=57664.0, unit="IOPS", required=">= 5000 IOPS", duration_s=9.7),
    ])
    rows = console.render(report, width=80).splitlines()[1:5]
    assert [row.endswith(("0.4s", "9.7s")) for row in rows] == [True, False, True, False], rows
    assert rows[1].endswith("23.54 GiB") and rows[3].endswith(">= 5000 IOPS")


def test_noise_warnings_are_shown_under_their_row():
    """Issue 25: "interquartile range is 23% of the median" was only in the JSON."""
    noisy = "noisy: interquartile range is 23% of the median over 9 samples"
    report = make_report([result("seq_read", "pass", value=982.0, unit="MB/s", required=">= 200 MB/s",
                                 warnings=(noisy,)),
                          result("rand_read", "pass", value=57664.0, unit="IOPS", required=">= 5000 IOPS")])
    lines = console.render(report, width=80).splitlines()
    assert lines[2] == "    └ " + noisy and lines[3].startswith("storage.rand_read ")


def test_a_flag_reads_yes_or_no():
    """Issue 25: `storage.read_only INFO 0` said nothing a reader could use."""
    report = make_report([result("read_only", "info", value=0.0, unit=""),
                          result("read_only", "pass", instance="data", check="storage", value=1.0, unit="",
                                 required=">= 1")])
    lines = console.render(report, width=80).splitlines()
    assert re.match(r"storage\.read_only \.+ INFO +no +0\.0s$", lines[1]), lines
    assert re.match(r"data\.read_only \.+ PASS +yes  >= 1 +0\.0s$", lines[2]), lines
