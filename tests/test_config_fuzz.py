"""Fuzz thresholds.yaml: every mutated or hostile file loads, or is one `FILE:LINE:` error; never a traceback or hang.

A seeded mutator (reproducible: a failure names its seed) rewrites the bundled file and
hand-written edge cases line by line and token by token. Most cases call ``config.load``
in-process (what the CLI calls); a sample goes through ``preflight validate`` to prove the
whole command line answers with exit 2 and one line.
"""

from __future__ import annotations

import random
import re
import signal
import time

import pytest

from preflight import config
from preflight.errors import UsageError
from tests.helpers import REPO, run_cli

BUNDLED = (REPO / "thresholds.yaml").read_text()
CASES_IN_PROCESS = 2000
CASES_THROUGH_CLI = 12
HANG_S = 5

EDGE_CASES = [
    "",
    "\n\n# only a comment\n",
    "version: 1\nchecks: {}\n",
    "version: yes\nchecks: {storage: {}}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: no}}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: 1e3}}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: 1e3 MB/s}}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: -5 GB/s}}\n",
    "version: 1\nchecks:\n  storage: {data_size: -1 GiB}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: .nan}}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: nan MB/s}}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: 1e999 MB/s}}\n",
    "version: 1\nchecks:\n  cuda: {device_count: {min: " + "9" * 400 + "}}\n",
    "version: 1\nchecks:\n  storage: {max_files: " + "9" * 400 + "}\n",
    "version: 1\nchecks:\n  storage: {block_size: 1e400 GiB}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: 1 XB/s}}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: 1 GiB}}\n",
    "version: 1\nchecks:\n\tstorage: {}\n",
    "version: 1\nchecks:\n  storage:\n\tpath: /x\n",
    "\x00\x01\x02\xff\xfe binary junk \x89PNG\r\n\x1a\n",
    "version: 1\nchecks: " + "[" * 5000 + "]" * 5000 + "\n",
    "version: 1\nchecks: " + "{a: " * 500 + "1" + "}" * 500 + "\n",
    "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
    "version: 1\ndefaults: &d {timeout: 10s}\nchecks:\n  storage: {<<: *d}\n",
    "version: 1\nchecks:\n  storage: !!python/object/apply:os.system [true]\n",
    "version: 1\nchecks:\n  storage: {path: !!binary aGVsbG8=}\n",
    "version: 1\nchecks:\n  storage: {path: 2026-11-29}\n",
    "version: 1\nchecks:\n  storage: {timeout: 0s}\n",
    "version: 1\nchecks:\n  storage: {timeout: 1e9 h}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: 2 GB/s, max: 1 GB/s}}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: 1 GB/s}, seq_read: {min: 2 GB/s}}\n",
    "version: 1\nchecks:\n  1: {}\n",
    "version: 1\nchecks:\n  [a, b]: {}\n",
    "version: 1\nchecks:\n  storage: {path: ${UNSET_VARIABLE_FOR_FUZZ}}\n",
    "version: 1\nchecks:\n  cuda: {driver_version: {min: 535.104.05.01.x}}\n",
    "version: 1\nchecks:\n  dataloader: {num_workers: -3}\n",
    "version: 1\nchecks:\n  dataloader: {num_workers: 2.5}\n",
    "version: 1\nchecks:\n  dataloader: {num_workers: Auto}\n",
    "version: 1\nchecks:\n  shm: {size: {min: 8 GiB, severity: fatal}}\n",
    "version: 1\nchecks:\n  storage: {required: maybe}\n",
    "version: 1\n---\nversion: 1\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: \"\u00a0200 MB/s\"}}\n",
    "version: 1\nbaseline: missing.json\nchecks:\n  storage: {seq_read: {min: 90% of baseline}}\n",
    "version: 1\nbaseline: [1]\nchecks:\n  storage: {seq_read: {min: 90% of baseline}}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: 90% of baseline}, repeats: 0, retries: -1}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: \"" + "9" * 5000 + " MB/s\"}}\n",
    "version: 1\nchecks:\n  storage: {path: \"${A:-${B-${C:+x}}}/$$/$\"}\n",
    "version: 1\nchecks:\n  storage: {path: \"" + "${A:-" * 20 + "x" + "}" * 20 + "\"}\n",
    "version: 1\nchecks:\n  storage: {path: \"" + "$" * 5001 + "{\"}\n",
    "version: 1\nchecks:\n  storage: {seq_read: {min: \"${BW:?set BW}\"}}\n",
    "version: 1\nchecks:\n  ${CHECK:-storage}: {$KEY: x}\n",
]

NASTY_TOKENS = [
    "yes", "no", "on", "off", "y", "~", "null", "1e3", "-1", "-5 GiB", ".nan", ".inf", "-.inf", "1e999",
    "9" * 40, "1 XB", "8 KB", "0x1F", "0o17", "1_000", "[]", "{}", "[1, 2]", "{min: 1}", "''", '"', "'", ":",
    "- x", "&anchor", "*anchor", "!!str", "!!float", "!!binary aGk=", "!!set {a}", "!!timestamp 2001-12-14",
    "\t", "#", "|", ">", "%YAML 1.1", "---", "...", "\u2028", "\ufeff", "\x85", "${HOME}", "${X:-}", "\\",
    "$", "$$", "$HOME", "${", "${}", "${1}", "${X-d}", "${X:?why}", "${X+r}", "${X/a/b}", "${A:-${B:-x}}", "$${X}",
    "1000 samples/s", "1 GB/s", "30s", "8 GiB", "warn", "fail", "storage", "check", "min", "max",
    "90% of baseline", "110 % of baseline", "baseline", "baseline: nowhere.json", "repeats", "retries: 9",
    "retry_margin: 200%",
]


def mutate(text: str, rng: random.Random) -> str:
    """Apply one to four random edits: drop, duplicate or swap lines, replace or insert tokens, junk, truncate."""
    for _ in range(rng.randint(1, 4)):
        lines = text.split("\n") or [""]
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        action = rng.randrange(8)
        if action == 0:
            del lines[i]
        elif action == 1:
            lines.insert(i, lines[j])
        elif action == 2:
            lines[i], lines[j] = lines[j], lines[i]
        elif action == 3:
            words = re.split(r"(\s+|[{}\[\],:])", lines[i])
            k = rng.randrange(len(words))
            words[k] = rng.choice(NASTY_TOKENS)
            lines[i] = "".join(words)
        elif action == 4:
            position = rng.randint(0, len(lines[i]))
            lines[i] = lines[i][:position] + rng.choice(NASTY_TOKENS) + lines[i][position:]
        elif action == 5:
            lines[i] = " " * rng.randint(0, 6) + lines[i].lstrip()
        elif action == 6:
            junk = "".join(chr(rng.choice([rng.randrange(32), rng.randrange(32, 0x2FF)])) for _ in range(5))
            lines.insert(i, junk)
        else:
            return "\n".join(lines)[: rng.randrange(len(text) + 1)]
        text = "\n".join(lines)
    return text


def generate(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    seeds = [BUNDLED, *EDGE_CASES]
    cases = [case.encode("utf-8", "surrogateescape") for case in EDGE_CASES]
    cases.append(b"version: 1\nchecks:\n  storage: {path: \xff\xfe\x80}\n")
    cases.append(b"\xff\xfe\x00v\x00e\x00r\x00" + bytes(rng.randrange(256) for _ in range(200)))
    while len(cases) < count:
        cases.append(mutate(rng.choice(seeds), rng).encode("utf-8", "surrogateescape"))
    return cases


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def test_at_least_a_thousand_mutated_configs_load_or_fail_with_located_lines(tmp_path):
    """Each mistake is one located line; a file with several has several (``ConfigErrors``), each located."""
    path = tmp_path / "thresholds.yaml"
    located = re.compile(re.escape(str(path)) + r":\d+:\d+: \S")
    outcomes = {"valid": 0, "error": 0}
    multiple: list[bytes] = []
    previous = signal.signal(signal.SIGALRM, _alarm)
    start = time.monotonic()
    try:
        for number, case in enumerate(generate(CASES_IN_PROCESS, seed=20261129)):
            path.write_bytes(case)
            signal.alarm(HANG_S)
            try:
                config.load(str(path), environ={})
                outcomes["valid"] += 1
            except UsageError as error:
                message = str(error)
                assert all(located.match(line) for line in message.split("\n")), \
                    f"case {number} {case[:200]!r}: {message!r}"
                multiple.extend([case] if "\n" in message else [])
                outcomes["error"] += 1
            except Hang:
                pytest.fail(f"case {number} hung for {HANG_S}s: {case[:200]!r}")
            except Exception as error:  # noqa: BLE001  the point: any other exception is a traceback for a user
                pytest.fail(f"case {number} raised {type(error).__name__}: {error!r:.300} on {case[:300]!r}")
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert sum(outcomes.values()) >= 1000
    assert outcomes["valid"] >= 20 and outcomes["error"] >= 500, outcomes  # the mutator reaches both sides
    assert time.monotonic() - start < 60


def test_mutated_configs_through_the_command_line_exit_2_with_located_lines(tmp_path):
    path = tmp_path / "thresholds.yaml"
    for number, case in enumerate(generate(CASES_THROUGH_CLI * 8, seed=7)[::8]):
        path.write_bytes(case)
        result = run_cli("validate", "-c", str(path), timeout=30)
        assert "Traceback" not in result.stderr, case
        if result.returncode == 0:
            assert result.stdout.startswith(f"{path}: valid")
        else:
            assert result.returncode == 2, (case, result.stderr)
            *each, last = result.stderr.splitlines()
            if each:  # several mistakes: one located line each, then the count
                assert all(line.startswith(f"{path}:") for line in each), result.stderr
                assert last == f"preflight: error: {len(each)} errors in {path}: fix each line above (nothing was " \
                               f"measured)", result.stderr
            else:
                assert last.startswith(f"preflight: error: {path}:"), result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "storage.seq_read.min"], "--set storage.seq_read.min: expected KEY=VALUE"),
        (["--set", "storage.seq_read.min=fast"], "--set storage.seq_read.min=fast: `seq_read`: expected a bandwidth"),
        (["--set", "storage.nonsense=1"], "--set storage.nonsense=1: unknown key `nonsense`"),
        (["--set", "storage.path=[1, 2]"], "--set storage.path=[1, 2]: the value must be a single scalar"),
        (["--only", "storage,nosuch"], "--only nosuch: no such check instance"),
        (["-c", "/nonexistent/thresholds.yaml"], "/nonexistent/thresholds.yaml: cannot read the config"),
        (["-c", "/"], "/: cannot read the config (Is a directory)"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2_before_measuring(tmp_path, args, message):
    result = run_cli("run", *args, "--set", "defaults.timeout=1s", cwd=tmp_path, timeout=30)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1].startswith(f"preflight: error: {message}"), result.stderr
