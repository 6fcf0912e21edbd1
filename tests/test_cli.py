import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from preflight import cli
from tests.helpers import REPO, in_mount_namespace, run_cli, write_config
from tests.report_helpers import read_junit

# What this CPU-only machine has: shared memory, a real directory, and a DataLoader.
MACHINE_HAS = """
version: 1
defaults: {duration: 1s}
checks:
  shm:
    allocate: 64 MiB
    allocatable: {min: 64 MiB}
  storage:
    path: {data}
    data_size: 32 MiB
    seq_read: {min: 1 MB/s}
  dataloader:
    path: {data}
    batch_size: 8
    num_workers: 1
    throughput: {min: 10 samples/s}
"""


@pytest.fixture
def dataset(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for index in range(64):
        (data / f"sample-{index:03}.bin").write_bytes(bytes([index]) * 4096)
    return data


def test_help_and_list_do_not_import_torch():
    for args in (["--help"], ["list"], ["run", "--help"]):
        code = (
            "import sys\nfrom preflight.cli import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, capture_output=True)


# What `--help` and `--version` may import of preflight: the parser and the argument tables of `run` and `fleet`,
# no check, no config, no YAML, no torch (bench/cli_startup.py times them against a bare interpreter).
_LIGHT = {"preflight", "preflight.cli", "preflight.errors", "preflight.commands", "preflight.commands.run",
          "preflight.commands.fleet"}


@pytest.mark.parametrize("args, allowed", [(["--help"], _LIGHT), (["run", "--help"], _LIGHT),
                                           (["fleet", "--help"], _LIGHT),
                                           (["validate", "--help"], _LIGHT),
                                           (["--version"], {"preflight", "preflight.cli", "preflight.errors"}),
                                           (["-V"], {"preflight", "preflight.cli", "preflight.errors"})])
def test_help_and_version_import_no_check_config_or_torch(args, allowed):
    code = (
        "import sys\nfrom preflight.cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('preflight', 'torch', 'yaml', 'argparse'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    imported = set(done.stdout.splitlines()[-1].split())
    assert imported - {"argparse"} <= allowed, sorted(imported - allowed)
    if args in (["--version"], ["-V"]):
        assert done.stdout.splitlines()[0] == "preflight 0.1.0" and "argparse" not in imported  # before the parser


def test_help_lists_every_exit_code():
    result = run_cli("--help")
    assert result.returncode == 0
    epilog = " ".join(result.stdout.split("exit codes:", 1)[1].split())  # argparse rewraps it
    assert re.fullmatch(r"0 passed .*, 1 a check failed .*, 2 usage or config error, 3 internal error .*", epilog), \
        epilog


def test_list_shows_every_check_with_parameters_and_units():
    result = run_cli("list")
    assert result.returncode == 0
    for name in ("cuda:", "shm:", "storage:", "dataloader:", "transfer:"):
        assert name in result.stdout
    assert re.search(r"^    seq_read +MB/s +higher is better$", result.stdout, re.MULTILINE)
    assert re.search(r"^    block_size +size +default 1 MiB$", result.stdout, re.MULTILINE)


def test_bundled_default_on_a_cpu_machine_fails_on_cuda_and_measures_the_rest(tmp_path, dataset):
    report = tmp_path / "report.xml"
    result = run_cli("run", "--junit-xml", str(report), "--json", str(tmp_path / "r.json"),
                     "--set", "defaults.duration=1s", cwd=dataset, env={"DATA_DIR": str(dataset)}, timeout=300)
    assert result.returncode == 1, result.stderr
    lines = {line.split(" ")[0]: line for line in result.stdout.splitlines() if " ..." in line}
    assert "FAIL" in lines["cuda.device_count"]
    assert "no CUDA device: torch" in result.stdout and "is a CPU build" in result.stdout
    for measured in ("shm.size", "shm.allocatable", "storage.seq_read", "dataloader.throughput"):
        assert " - " not in lines[measured] and "could not measure" not in lines[measured], lines[measured]
    # each check's duration, once, on its first row: where every id fits beside the column (the intervals beside
    # the values may take its room at 80 columns; then no row has it)
    timed = {name for name, row in lines.items() if re.search(r" \d+\.\ds$", row)}
    assert timed in (set(), {"cuda.device_count", "xid.xid_drain", "shm.size", "storage.filesystem",
                             "dataloader.throughput", "transfer.h2d_pinned"}), timed
    read_junit(report)
    suite = ET.parse(report).getroot().find("testsuite")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.findall("testcase")}
    data = json.loads((tmp_path / "r.json").read_text())
    judged = [r for r in data["results"] if r["verdict"] != "info"]
    assert len(cases) == len(judged) == int(suite.get("tests"))
    assert cases[("preflight.cuda", "device_count")].find("failure").get("type") == "ThresholdNotMet"
    assert cases[("preflight.transfer", "h2d_pinned")].find("failure") is not None
    assert cases[("preflight.storage", "seq_read")].find("failure") is None
    assert "no CUDA device" in cases[("preflight.cuda", "device_count")].find("failure").text
    assert data["exit_code"] == 1 and data["schema"] == 1
    seq = next(r for r in data["results"] if r["id"] == "storage.seq_read")
    assert seq["unit"] == "MB/s" and seq["value"] > 1 and len(seq["samples"]) >= 2  # decided: its interval clears 200 MB/s


def test_the_bundled_default_with_no_dataset_named_fails_its_dataset_rows_and_says_how_to_name_one(tmp_path, dataset):
    """Issue 21 case 1: DATA_DIR unset, run from a directory that holds data but was never named as the
    dataset. The node is still measured (the working directory), and no dataset row can pass; the config's mistake
    exits 2, not 1 (issue 35: a Slurm prolog drained every node the same missing DATA_DIR ran on)."""
    # open_files_limit is the node's, not the dataset's: under CI's `ulimit -n 1024` it fails (exit 1) for real
    result = run_cli("run", "--only", "storage,dataloader", "--json", str(tmp_path / "r.json"),
                     "--set", "defaults.duration=0.5s", "--set", "storage.readers=1", "--set", "dataloader.worker_pools=1",
                     "--set", "storage.open_files_limit.min=64", cwd=dataset, env={"DATA_DIR": ""}, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    results = {r["id"]: r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    for name in ("storage.seq_read", "storage.small_files", "dataloader.throughput", "storage.free_space",
                 "storage.free_inodes"):
        row = results[name]
        assert row["value"] is not None and row["subject"] == "no_dataset", row  # measured, and labelled
        # A figure above its minimum cannot pass; one below it fails on its value (on a busy machine, seq_read read
        # 161 of 200 MB/s), and both say what was measured.
        assert row["verdict"] in ("fail", "warn"), row
        assert "; measured on no dataset named (the working directory): not the dataset" in row["message"], row
        assert row["hint"].startswith("no dataset named: set DATA_DIR=")
    assert results["storage.seq_read"]["note"].startswith("on a scratch file beside the working directory's data: ")
    limit = results["storage.open_files_limit"]  # a process fact, not the dataset's: judged as ever
    assert limit["subject"] is None and "not the dataset" not in limit["message"], limit
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("preflight: error: no dataset named: set DATA_DIR="), last  # one line, the fix
    # Both instances that measured no dataset: naming it for storage alone left the dataloader unnamed.
    assert last.endswith("or --set storage.path=/path/to/dataset --set dataloader.path=/path/to/dataset; to measure "
                         "the working directory, name it: --set storage.path=. --set dataloader.path=.")
    table = " ".join(result.stdout.split())
    assert "measured on no dataset named (the working directory)" in table
    named = run_cli("run", "--only", "storage", "--json", "-", "--set", "defaults.duration=0.5s",
                    "--set", "storage.readers=1", "--set", "storage.path=.", cwd=dataset, timeout=300)
    seq = next(r for r in json.loads(named.stdout)["results"] if r["id"] == "storage.seq_read")
    # Named explicitly: the figure is the dataset's (scratch verified beside it) and judged on its value alone.
    assert seq["subject"] == "scratch_on_dataset_fs" and "cannot pass" not in seq["message"], seq


def test_a_config_of_what_this_machine_has_passes(tmp_path, dataset):
    path = write_config(tmp_path, MACHINE_HAS.replace("{data}", str(dataset)))
    result = run_cli("run", "-c", str(path), "--json", "-")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)  # --json - puts only JSON on stdout
    verdicts = {r["id"]: r["verdict"] for r in data["results"]}
    assert verdicts["shm.allocatable"] == verdicts["storage.seq_read"] == verdicts["dataloader.throughput"] == "pass"
    assert next(r for r in data["results"] if r["id"] == "dataloader.throughput")["value"] > 10


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("version: 1\nchecks:\n  storage:\n    seq_raed: {min: 1 GB/s}\n", ":4:5: unknown key `seq_raed`: did you mean `seq_read`?"),
        ("version: 1\nchecks:\n  storage:\n    seq_read: {min: 8 GiB}\n", ":4:21: `seq_read`: '8 GiB' is a size, but a bandwidth is expected"),
        ("version: 1\nchecks:\n  shm: {}\n  shm: {}\n", ":4:3: duplicate key `shm`"),
    ],
)
def test_config_errors_exit_2_with_one_located_line(tmp_path, text, fragment):
    path = write_config(tmp_path, text)
    result = run_cli("run", "-c", str(path), "--junit-xml", str(tmp_path / "r.xml"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"preflight: error: {path}{fragment}" + result.stderr.split(fragment, 1)[1].rstrip()]
    assert "Traceback" not in result.stderr
    (case,) = [case for suite in read_junit(tmp_path / "r.xml") for case in suite]  # written though invalid
    assert case.result[0].type == "ConfigError" and fragment in case.result[0].message


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run", "-c", "/nonexistent/t.yaml"], "/nonexistent/t.yaml: cannot read the config (No such file or directory): check the thresholds file's path (-c FILE, or validate FILE)"),
        (["run", "--only", "nope"], "--only nope: no such check instance"),
        (["run", "--skip", "shm,nope"], "--skip nope: no such check instance"),
        (["run", "--only", "shm", "--skip", "shm"], "--skip shm: that leaves no check to run"),
        (["run", "--set", "storage.path"], "--set storage.path: expected KEY=VALUE"),
        (["run", "--junit-xml", "/nonexistent/dir/r.xml"], "directory /nonexistent/dir does not exist"),
    ],
)
def test_usage_errors_exit_2_without_measuring(args, fragment):
    result = run_cli(*args)
    assert result.returncode == 2
    assert fragment in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_docker_default_64_mib_shm_fails_with_the_fix(tmp_path):
    """A real 64 MiB tmpfs, as Docker mounts /dev/shm by default, in a private mount namespace."""
    shm = tmp_path / "shm"
    shm.mkdir()
    path = write_config(tmp_path, f"""
        version: 1
        checks:
          shm:
            path: {shm}
            allocate: 1 GiB
            size: {{min: 8 GiB}}
            allocatable: {{min: 1 GiB}}
        """)
    script = f"mount -t tmpfs -o size=64m tmpfs {shm} && {sys.executable} -m preflight run -c {path} --json -"
    result = in_mount_namespace(script)
    assert result.returncode == 1, result.stderr
    results = {r["id"]: r for r in json.loads(result.stdout)["results"]}
    assert results["shm.size"]["value"] == pytest.approx(64 / 1024)
    assert results["shm.size"]["verdict"] == "fail"
    assert "--shm-size=8g" in results["shm.size"]["hint"]
    assert results["shm.allocatable"]["verdict"] == "fail"
    assert results["shm.allocatable"]["value"] == pytest.approx(64 / 1024)  # halved from 1 GiB to what fits


def test_the_check_reference_in_the_docs_is_generated_from_the_tables():
    # docs/configuration.md holds `preflight list --markdown` between its check-reference markers.
    page = (REPO / "docs" / "configuration.md").read_text()
    section = page.split("<!-- check-reference", 1)[1].split("-->", 1)[1].split("<!-- /check-reference -->")[0]
    assert section.strip() == run_cli("list", "--markdown").stdout.strip(), (
        "docs/configuration.md: paste `preflight list --markdown` between the check-reference markers")


def test_distributed_outside_torchrun_is_a_usage_error(monkeypatch, capsys, tmp_path) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "t.yaml"
    config.write_text("version: 1\nchecks:\n  shm: {}\n")
    assert cli.main(["run", "-c", str(config), "--distributed"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "RANK, WORLD_SIZE" in error and "torchrun --nproc-per-node" in error


def test_the_crash_handler_never_raises_without_a_crash_log_or_a_stderr(monkeypatch):
    from preflight.io import tempdir
    from preflight.commands import validate

    class ClosedStream:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        flush = write

    def no_room(report_paths=()):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(validate, "main", lambda args: 1 / 0)
    monkeypatch.setattr(tempdir, "choose", no_room)
    monkeypatch.setattr(sys, "stderr", ClosedStream())
    assert cli.main(["validate"]) == cli.EXIT_INTERNAL


def test_skip_runs_every_check_but_those_named_and_dash_v_is_version(tmp_path):
    path = write_config(tmp_path, """
        version: 1
        checks:
          shm:
            allocate: 1 MiB
            size: {min: 1 MiB}
          scratch:
            check: shm
            allocate: 1 MiB
        """)
    result = run_cli("run", "-c", str(path), "--skip", "scratch", "--json", "-")
    assert result.returncode == 0, result.stderr
    assert {r["instance"] for r in json.loads(result.stdout)["results"]} == {"shm"}
    assert "1 check from" in result.stderr
    assert "--skip ID,..." in run_cli("run", "--help").stdout
    version = run_cli("-V")
    assert version.returncode == 0 and version.stdout == run_cli("--version").stdout != ""
    assert "-V, --version" in run_cli("--help").stdout  # argparse's own -V too: `preflight -V run` is no surprise
