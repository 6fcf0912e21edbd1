"""config.load on files with merge keys and with several mistakes: merged values are read as YAML 1.1 says and
located where they were written; every mistake in values is one located line, all of them in one run.

Locations are counted by hand from the texts below (after ``write_config``'s dedent); messages are pinned whole.
"""

from __future__ import annotations

import pytest

from preflight import config
from preflight.errors import ConfigError, ConfigErrors
from tests.helpers import write_config


def load(tmp_path, text, environ=None):
    return config.load(str(write_config(tmp_path, text)), environ=environ or {})


def lines_of(tmp_path, text, environ=None) -> list[str]:
    """The mistakes ``load`` reports, one line each, with the file's path written as ``F``."""
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, text, environ)
    return str(raised.value).replace(str(tmp_path / "thresholds.yaml"), "F").splitlines()


FIVE_MISTAKES = """
    version: 1
    checks:
      storage:
        path: /tmp
        seq_raed: {min: 1 GB/s}
        rand_read: {min: 20000 IOPS, severity: fatal}
      dataloader:
        num_workers: 2.5
        throughput: {min: 1000 samples}
      cuda_x: {}
      shm:
        repeats: 0
"""


def test_five_mistakes_are_five_located_lines_in_one_run_in_the_file_s_order(tmp_path):
    # EvilBit-Labs/opnDossier#32, NagiosEnterprises/nagioscore#388: validation stopped at the first mistake,
    # so each run showed one more; here each line has its place and fix, a mistake in one value leaving the
    # others (and the other instances) to be checked
    assert lines_of(tmp_path, FIVE_MISTAKES) == [
        "F:5:5: unknown key `seq_raed`: did you mean `seq_read`?",
        "F:6:44: severity must be `fail` or `warn`, found 'fatal'",
        "F:8:18: `dataloader.num_workers`: expected a whole number or `auto`, found 2.5",
        "F:9:23: `throughput`: unknown unit 'samples' in '1000 samples': write it like `1000 samples/s`",
        "F:10:3: unknown check `cuda_x`: did you mean `cuda`? Or add `check: <name>` to make `cuda_x` an instance "
        "of a known check",
        "F:12:14: `shm.repeats` must be a whole number from 1 to 20, found 0",
    ]


def test_the_first_mistake_is_the_error_s_place_for_callers_that_read_one(tmp_path):
    with pytest.raises(ConfigErrors) as raised:
        load(tmp_path, FIVE_MISTAKES)
    assert raised.value.where.endswith("thresholds.yaml:5:5") and len(raised.value.errors) == 6


def test_a_value_that_failed_is_told_once_not_again_by_each_rule_that_reads_it(tmp_path):
    # an unset variable is the mistake; "not a bandwidth" about its text would be its echo
    assert lines_of(tmp_path, """
        version: 1
        checks:
          storage:
            seq_read: {min: "${READ_MIN}"}
            timeout: 5 parsecs
    """) == ["F:4:22: environment variable READ_MIN is not set: export it or write ${READ_MIN:-default}",
             "F:5:14: `storage.timeout`: unknown unit 'parsecs' in '5 parsecs': write it like `30s`"]


def test_a_key_dropped_as_not_text_leaves_no_echo_about_its_mapping(tmp_path):
    assert lines_of(tmp_path, "version: 1\nchecks:\n  1: {}\n") == ["F:3:3: keys must be text, found '1'"]


def test_a_mistake_in_defaults_is_told_once_for_every_instance_that_reads_it(tmp_path):
    assert lines_of(tmp_path, """
        version: 1
        defaults: {timeout: 5 parsecs, severity: fatal}
        checks: {shm: {}, storage: {}}
        fleet: {backend: ncl, median_ratio: 2}
    """) == ["F:2:21: `defaults.timeout`: unknown unit 'parsecs' in '5 parsecs': write it like `30s`",
             "F:2:42: severity must be `fail` or `warn`, found 'fatal'",
             "F:4:18: `fleet.backend` must be one of auto, nccl, gloo, found 'ncl': did you mean `nccl`?",
             "F:4:37: `fleet.median_ratio` must be a number between 0 and 1, like 0.5 (flag nodes below half the "
             "fleet median), found 2"]


SHARED = """
    version: 1
    checks:
      storage: &storage
        path: /tmp
        seq_read: {min: 1 GB/s}
        timeout: 60s
      checkpoints:
        <<: *storage
        check: storage
        path: /var/tmp
"""


def test_an_instance_merges_another_and_its_own_keys_win(tmp_path):
    # symfony/language-tools#61: `readonly: {<<: *dbal_default, url: ...}` was "unknown key <<"; the merged
    # connection keeps the base's keys and its own `url`
    storage, checkpoints = load(tmp_path, SHARED).instances
    assert (checkpoints.check, checkpoints.options["path"], checkpoints.timeout_s) == ("storage", "/var/tmp", 60)
    assert checkpoints.thresholds == storage.thresholds  # the same bound, located where it was written
    assert storage.thresholds[0].where.endswith("thresholds.yaml:5:5")  # seq_read's key, in storage


def test_what_makes_an_instance_may_come_from_the_merge(tmp_path):
    # redhat-developer/vscode-yaml#241: a key the schema requires, given only through `<<`, was "missing"
    (scratch, checkpoints) = load(tmp_path, """
        version: 1
        checks:
          scratch: &on_storage
            check: storage
            path: /tmp
          checkpoints:
            <<: *on_storage
            seq_write: {min: 1 GB/s}
    """).instances
    assert (checkpoints.check, checkpoints.options["path"]) == ("storage", "/tmp")
    assert [t.metric for t in checkpoints.thresholds] == ["seq_write"]


def test_a_list_of_merges_takes_each_key_from_the_first_mapping_that_has_it(tmp_path):
    storage, checkpoints = load(tmp_path, """
        version: 1
        checks:
          storage:
            path: /tmp
            seq_read: &fast {min: 2 GB/s}
            seq_write: &warned {min: 1 GB/s, max: 50 GB/s, severity: warn}
          checkpoints:
            check: storage
            seq_write: {<<: [*fast, *warned]}
    """).instances
    (merged,) = checkpoints.thresholds
    assert (merged.min, merged.max, merged.severity) == (2000.0, 50_000.0, "warn")  # MB/s


def test_a_mistake_in_a_merged_mapping_is_told_at_its_line_in_the_base(tmp_path):
    text = SHARED.replace("seq_read: {min: 1 GB/s}", "seq_read: {min: 1 GB}")
    # both instances read the one bad value: one line, where it was written
    assert lines_of(tmp_path, text) == ["F:5:21: `seq_read`: '1 GB' is a size, but a bandwidth is expected here "
                                        "(like `1.5 GB/s`)"]


def test_a_merged_key_the_instance_does_not_take_names_the_merge_that_brought_it(tmp_path):
    assert lines_of(tmp_path, """
        version: 1
        checks:
          storage: &storage
            path: /tmp
          transfer:
            <<: *storage
    """) == ["F:4:5: unknown key `path` (merged here by the `<<` at F:6:5)"]


def test_a_key_written_twice_is_refused_and_a_key_written_and_merged_is_not(tmp_path):
    assert lines_of(tmp_path, SHARED + "        path: /srv\n") == [
        "F:11:5: duplicate key `path` (first written at F:10:5): keep one"]
    assert load(tmp_path, SHARED).instances[1].options["path"] == "/var/tmp"


def test_the_merge_example_in_the_docs_loads_as_the_docs_say(tmp_path):
    from tests.helpers import REPO

    page = (REPO / "docs" / "configuration.md").read_text()
    example = page.split("### Anchors and merge keys", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    storage, checkpoints, scratch = load(tmp_path, example).instances
    assert checkpoints.options["path"] == "/ckpt" and checkpoints.timeout_s == 60
    assert [t.metric for t in checkpoints.thresholds] == ["seq_read", "seq_write"]
    assert (scratch.duration_s, scratch.timeout_s, scratch.options["path"]) == (2, 60, "/data")
