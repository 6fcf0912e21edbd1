from pathlib import Path

import pytest

from preflight import config
from preflight.errors import ConfigError, UsageError
from tests.helpers import REPO, write_config
from tests.helpers import configured

VALID = """
version: 1
defaults: {timeout: 30s, duration: 2s}
checks:
  storage:
    path: /tmp
    seq_read: {min: 1 GB/s}
  checkpoints:
    check: storage
    path: ${CKPT_DIR:-/var/tmp}
    seq_read: {min: 500 MB/s, severity: warn}
  cuda:
    driver_version: {min: "535.10"}
"""


def load(tmp_path, text, overrides=(), environ=None):
    return config.load(str(write_config(tmp_path, text)), overrides, environ or {})


def test_valid_file_gives_instances_with_thresholds_in_canonical_units(tmp_path):
    loaded = load(tmp_path, VALID)
    storage, checkpoints, cuda = loaded.instances
    assert (storage.name, storage.check, storage.options["path"]) == ("storage", "storage", "/tmp")
    assert storage.thresholds[0].min == 1000.0  # 1 GB/s in the metric's unit, MB/s
    assert storage.options["block_size"] == 1 << 20  # the default "1 MiB", parsed by the same parser
    assert (storage.timeout_s, storage.duration_s) == (30, 2)
    assert (checkpoints.check, checkpoints.options["path"]) == ("storage", "/var/tmp")
    assert checkpoints.thresholds[0].severity == "warn"
    assert cuda.thresholds[0].min == "535.10"  # versions keep the text as written, not float 535.1
    assert storage.thresholds[0].where.endswith("thresholds.yaml:6:5")


def test_environment_and_set_overrides(tmp_path):
    loaded = load(tmp_path, VALID, ["storage.path=/mnt/x", "checkpoints.seq_read.min=2 GB/s",
                                    "defaults.duration=1s"], {"CKPT_DIR": "/ckpt"})
    storage, checkpoints, _ = loaded.instances
    assert storage.options["path"] == "/mnt/x"
    assert checkpoints.options["path"] == "/ckpt"
    assert checkpoints.thresholds[0].min == 2000.0
    assert storage.duration_s == 1
    # An annotation points at what set the bound: the flag, not the line it overrode.
    assert checkpoints.thresholds[0].where == "--set checkpoints.seq_read.min=2 GB/s"
    assert storage.thresholds[0].where.endswith("thresholds.yaml:6:5")


@pytest.mark.parametrize(
    "text, where, fragment",
    [
        ("version: 1\nchecks:\n  storage:\n    seq_raed: {min: 1 GB/s}\n", ":4:5:", "did you mean `seq_read`?"),
        ("version: 1\nchecks:\n  storage:\n    seq_read: {min: 8 GiB}\n", ":4:21:",
         "'8 GiB' is a size, but a bandwidth is expected"),
        ("version: 1\nchecks:\n  shm: {}\n  shm: {}\n", ":4:3:", "duplicate key `shm` (first written at"),
        ("version: 1\nchecks:\n  storge: {}\n", ":3:3:", "unknown check `storge`: did you mean `storage`?"),
        # a metric written at the level of the checks (issue 25): where it belongs, not "add `check:`"
        ("version: 1\nchecks:\n  storage:\n    path: /data\n  seq_read: {min: 1 GB/s}\n", ":5:3:",
         "`seq_read` belongs under a check such as `storage:`: it is a metric of that check, not a check"),
        ("version: 1\nchecks:\n  batch_size: 64\n", ":3:3:",
         "`batch_size` belongs under a check such as `"),
        ("version: 2\nchecks: {shm: {}}\n", ":1:10:", "expected `version: 1`"),
        ("", ":1:1:", "the file is empty"),
        ("version: 1\nchecks:\n  shm:\n    size: 8 GiB\n", ":4:11:", "give it a threshold like {min: 8 GiB}"),
        ("version: 1\nchecks:\n  shm:\n    path: no\n", ":4:11:", "expected text, found False"),
        ("version: 1\nchecks:\n  dataloader:\n    batch_size: 1e3\n", ":4:17:", "expected a whole number"),
        ("version: 1\nchecks:\n  shm:\n    size: {min: -1 GiB}\n", ":4:17:", "must not be negative"),
        ("version: 1\nchecks:\n  shm:\n    size: {min: 1 GiB, sevrity: warn}\n", ":4:24:",
         "did you mean `severity`?"),
        ("version: 1\nchecks:\n  storage:\n    path: ${DATA}\n", ":4:11:", "environment variable DATA is not set"),
        # an interpolation mistake points at its "$" where the source shows the text verbatim...
        ("version: 1\nchecks:\n  storage:\n    path: ./x/${DATA_DIR-./data\n", ":4:15:",
         "`${DATA_DIR-./data` is not closed: add `}`, or write $$ for a literal $"),
        ("version: 1\nchecks:\n  storage:\n    path: 'a ${DATA_DIR/a/b}'\n", ":4:14:",
         "`/` is not an interpolation operator"),
        ("version: 1\nchecks:\n  storage: {path: \"$${DATA} ${}\"}\n", ":3:29:", "`${}` names no variable"),
        ("version: 1\nchecks:\n  storage:\n    path: ${DATA:?mount the dataset at /data}\n", ":4:11:",
         "environment variable DATA is not set: mount the dataset at /data"),
        # ...and at the value where escapes or line breaks make the column uncertain
        ("version: 1\nchecks:\n  storage:\n    path: \"\\t${1X}\"\n", ":4:11:", "`${1X}`: a variable name is"),
        ("version: 1\nchecks:\n  storage:\n    path: a\n      b ${X\n", ":4:11:", "`${X` is not closed"),
        ("version: 1\nchecks: [1, 2\n", ":3:1:", "invalid YAML"),
        ("version: 1\nchecks:\n  cuda:\n    driver_version: {min: latest}\n", ":4:27:",
         'expected a version like "535.104"'),
    ],
)
def test_errors_are_located_and_name_the_fix(tmp_path, text, where, fragment):
    with pytest.raises(ConfigError) as error:
        load(tmp_path, text)
    message = str(error.value)
    assert message.startswith(str(tmp_path / "thresholds.yaml") + where), message
    assert fragment in message


def test_environment_forms_read_as_docker_compose_reads_them(tmp_path):
    text = ("version: 1\nchecks:\n  storage:\n    path: ${DATA_DIR-./data}/$$x/$SUB\n"
            "  cuda:\n    name: {match: \"^H100$\"}\n    driver_version: {min: \"${DRIVER_MIN:-535.104}\"}\n")
    loaded = load(tmp_path, text, environ={"SUB": "train"})
    storage, cuda = loaded.instances
    assert storage.options["path"] == "./data/$x/train"
    assert [t.match or t.min for t in cuda.thresholds] == ["^H100$", "535.104"]
    loaded = load(tmp_path, text, ["cuda.driver_version.min=${DRIVER_MIN:-550.54}"], {"DATA_DIR": "/d", "SUB": "s"})
    assert loaded.instances[0].options["path"] == "/d/$x/s"
    assert loaded.instances[1].thresholds[1].min == "550.54"


def test_an_override_with_a_bad_reference_names_the_flag(tmp_path):
    with pytest.raises(ConfigError, match=r"^--set storage\.path=\$\{X/a\}: `\$\{X/a\}`: `/` is not an interpolation"):
        load(tmp_path, VALID, ["storage.path=${X/a}"])


def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read the config .*check the thresholds file.s path"):
        config.load(str(tmp_path / "nope.yaml"))


def test_bad_override_names_the_flag(tmp_path):
    with pytest.raises(ConfigError, match=r"^--set storage\.path: expected KEY=VALUE"):
        load(tmp_path, VALID, ["storage.path"])
    with pytest.raises(ConfigError, match=r"^--set storage.seq_read.min=fast: `seq_read`: expected a bandwidth"):
        load(tmp_path, VALID, ["storage.seq_read.min=fast"])


def test_only_selects_instances_and_rejects_unknown_ids(tmp_path):
    loaded = load(tmp_path, VALID)
    assert [i.name for i in loaded.select(["cuda", "storage"]).instances] == ["storage", "cuda"]
    with pytest.raises(UsageError, match="--only storag: no such check instance.*did you mean `storage`"):
        loaded.select(["storag"])


def test_alias_bomb_is_refused(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, n in zip("abcdefgh", "bcdefghi")
    )
    with pytest.raises(ConfigError, match="too large or nested too deeply"):
        load(tmp_path, bomb)


def test_bundled_default_is_valid_and_is_the_top_level_file(tmp_path):
    assert config.bundled_path().read_bytes() == (REPO / "thresholds.yaml").read_bytes()
    loaded = config.load(str(config.bundled_path()), environ={})
    assert {i.name for i in loaded.instances} == {"cuda", "xid", "shm", "storage", "dataloader", "transfer"}
    xid = next(i for i in loaded.instances if i.name == "xid")
    assert not xid.required  # a pod that may not read the kernel log skips it, with the fix, and is not failed
    storage = next(i for i in loaded.instances if i.name == "storage")
    assert storage.options["path"] == ""  # no DATA_DIR: no dataset named (checks.subject: nothing can pass)


def test_resolve_prefers_explicit_then_local_then_bundled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config.resolve_path("x.yaml") == "x.yaml"
    assert config.resolve_path(None) == str(config.bundled_path())
    (tmp_path / "thresholds.yaml").write_text("version: 1\n")
    assert config.resolve_path(None) == "thresholds.yaml"


def test_a_text_metric_takes_a_regex_match(tmp_path):
    (threshold,) = configured(tmp_path, "cuda", 'name: {match: "H100|H200", severity: warn}').thresholds
    assert (threshold.match, threshold.min, threshold.max, threshold.severity) == ("H100|H200", None, None, "warn")
    assert threshold.where.endswith("thresholds.yaml:4:5")


@pytest.mark.parametrize("body, message", [
    ('device_count: {match: "1"}',
     "thresholds.yaml:4:27: `device_count`: `match` is for text metrics; use `min`/`max` here"),
    ('name: {match: "H100(", severity: fail}',
     "thresholds.yaml:4:19: `name.match`: invalid regular expression 'H100(' (missing ), unterminated subpattern at "
     "position 4): quote it and escape special characters"),
    ("name: {match: 100}", "thresholds.yaml:4:19: `name.match`: expected a regular expression like \"H100|H200\", "
                           "found 100"),
    ("ecc_mode: {match: on}", 'thresholds.yaml:4:23: `ecc_mode.match`: YAML reads on as a boolean: quote it ("on")'),
    ('name: {match: "H100", min: 1}', "thresholds.yaml:4:11: `name`: give either `match` or `min`/`max`, not both"),
    ("name: {min: 1}", "thresholds.yaml:4:17: `name` is text and takes no min/max: use `{match: REGEX}`"),
    ("allocate: 150 %", "thresholds.yaml:4:15: `cuda.allocate` must be at most 100, found '150 %'"),
    ("allocate: 0 %", "thresholds.yaml:4:15: `cuda.allocate` must be at least 1, found '0 %'"),
])
def test_wrong_gpu_thresholds_and_options_name_the_place_and_fix(tmp_path, body, message):
    with pytest.raises(ConfigError) as raised:
        configured(tmp_path, "cuda", body)
    assert str(raised.value).endswith(message)
    assert str(raised.value).startswith(str(tmp_path))


FLEET_BASE = "version: 1\n{fleet}checks:\n  shm: {{}}\n"


def load_fleet(tmp_path: Path, fleet: str = "", overrides: tuple[str, ...] = ()) -> config.Config:
    path = tmp_path / "thresholds.yaml"
    path.write_text(FLEET_BASE.format(fleet=fleet))
    return config.load(str(path), overrides)


def test_fleet_settings_default_when_absent(tmp_path: Path) -> None:
    assert load_fleet(tmp_path).fleet == config.FleetSettings(300.0, "auto", 0.5, "fail")


def test_fleet_section_is_parsed_with_units(tmp_path: Path) -> None:
    settings = load_fleet(tmp_path, "fleet: {timeout: 2min, backend: gloo, median_ratio: 0.7, severity: warn}\n").fleet
    assert settings == config.FleetSettings(120.0, "gloo", 0.7, "warn")


def test_fleet_values_can_be_overridden_from_the_command_line(tmp_path: Path) -> None:
    assert load_fleet(tmp_path, "fleet: {timeout: 60s}\n", ("fleet.timeout=10s",)).fleet.timeout_s == 10.0


@pytest.mark.parametrize("fleet, message", [
    ("fleet: {timout: 60s}\n", "unknown key `timout`: did you mean `timeout`?"),
    ("fleet: {timeout: 60}\n", "`fleet.timeout`"),
    ("fleet: {backend: mpi}\n", "`fleet.backend` must be one of auto, nccl, gloo"),
    ("fleet: {median_ratio: 2}\n", "`fleet.median_ratio` must be a number between 0 and 1"),
    ("fleet: {severity: block}\n", "severity must be `fail` or `warn`"),
])
def test_fleet_mistakes_are_located_config_errors(tmp_path: Path, fleet: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"thresholds.yaml:2:\d+") as raised:
        load_fleet(tmp_path, fleet)
    assert message in str(raised.value)


def test_a_bad_default_is_named_where_it_was_written(tmp_path):
    with pytest.raises(ConfigError) as error:
        load(tmp_path, "version: 1\ndefaults: {duration: 2}\nchecks:\n  shm: {}\n")
    assert str(error.value).endswith("thresholds.yaml:2:22: `defaults.duration`: expected a duration with its unit "
                                     "like `30s`, found bare number 2")


def test_python_path_is_relative_to_the_config_file_and_dataset_args_stay_plain(tmp_path, monkeypatch):
    (tmp_path / "job" / "src").mkdir(parents=True)
    path = write_config(tmp_path / "job", """
        version: 1
        checks:
          dataloader:
            dataset: "jobdata:build"
            python_path: [src, "."]
            dataset_args: {root: /data, sizes: [224, 256], crop: {ratio: 0.875}}
    """)
    monkeypatch.chdir(tmp_path)
    options = config.load(str(path.relative_to(tmp_path)), environ={}).instances[0].options
    assert options["python_path"] == [str(tmp_path / "job" / "src"), str(tmp_path / "job")]
    assert options["dataset_args"] == {"root": "/data", "sizes": [224, 256], "crop": {"ratio": 0.875}}
    assert config.load(str(path), environ={}, overrides=["dataloader.python_path=job"]).instances[0].options[
        "python_path"] == [str(tmp_path / "job")]  # one directory from the command line, relative to it


@pytest.mark.parametrize("body, where, message", [
    ("python_path: [src, nowhere]", "4:24", "`dataloader.python_path`: nowhere ({dir}/nowhere) is not a directory: "
                                            "paths here are relative to the config file's directory ({dir})"),
    ("python_path: [1]", "4:19", "`dataloader.python_path`: expected a list of directories, like [src], found 1"),
    ("dataset_args: [1, 2]", "4:19", "`dataloader.dataset_args`: expected a mapping of names to values"),
])
def test_python_path_and_dataset_args_mistakes_are_located(tmp_path, body, where, message):
    (tmp_path / "src").mkdir()
    path = write_config(tmp_path, f"version: 1\nchecks:\n  dataloader:\n    {body}\n")
    with pytest.raises(ConfigError) as error:
        config.load(str(path), environ={})
    assert str(error.value).startswith(f"{path}:{where}: " + message.format(dir=tmp_path))


@pytest.mark.parametrize("check, body, where, message", [
    ("dataloader", 'dataset: "jobpkg.data"', "4:14",
     "`dataloader.dataset`: expected \"package.module:callable\", found 'jobpkg.data'"),
    ("dataloader", 'dataset: "jobpkg.data:make"\n    collate_fn: "jobpkg.data:"', "5:17",
     "`dataloader.collate_fn`: expected \"package.module:callable\", found 'jobpkg.data:'"),
    ("dataloader", 'dataset: "jobpkg.data:make"\n    count_samples: "len(batch)"', "5:20",
     "`dataloader.count_samples`: expected \"package.module:callable\", found 'len(batch)'"),
    ("dataloader", 'dataset: "job-pkg.data:make"', "4:14",
     "`dataloader.dataset`: expected \"package.module:callable\", found 'job-pkg.data:make'"),
    ("model", "model: resnet05", "4:12", "`model.model`: expected resnet18, resnet50, tiny or \"package.module:callable\", "
                                         "found 'resnet05': did you mean `resnet50`?"),
    ("model", 'model: ""', "4:12", "`model.model`: expected resnet18, resnet50, tiny or \"package.module:callable\", "
                                   "found ''"),
])
def test_a_malformed_name_of_the_jobs_code_is_a_located_config_error(tmp_path, check, body, where, message):
    """A typo in a "package.module:callable" is the config's mistake, found where the file is read: `run`
    used to measure, then fail the node with the check's error (exit 1)."""
    path = write_config(tmp_path, f"version: 1\nchecks:\n  {check}:\n    {body}\n")
    with pytest.raises(ConfigError) as error:
        config.load(str(path), environ={})
    assert str(error.value) == f"{path}:{where}: {message}"


def test_the_jobs_code_and_built_in_names_load_as_written(tmp_path):
    path = write_config(tmp_path, 'version: 1\nchecks:\n  dataloader:\n    dataset: "jobpkg.data:Images.make"\n'
                                  '    count_samples: "jobpkg.count:samples"\n  model:\n    model: tiny\n'
                                  '  job-model:\n    check: model\n    model: "jobpkg.net:make"\n')
    options = {i.name: i.options for i in config.load(str(path), environ={}).instances}
    assert (options["dataloader"]["dataset"], options["dataloader"]["count_samples"],
            options["dataloader"]["collate_fn"]) == ("jobpkg.data:Images.make", "jobpkg.count:samples", "")
    assert (options["model"]["model"], options["job-model"]["model"]) == ("tiny", "jobpkg.net:make")


def test_an_unknown_key_under_defaults_is_located_with_a_suggestion(tmp_path):
    with pytest.raises(ConfigError) as error:
        load(tmp_path, "version: 1\ndefaults: {duration: 2s, timout: 60s}\nchecks:\n  shm: {}\n")
    assert str(error.value).endswith("thresholds.yaml:2:26: unknown key `timout`: did you mean `timeout`?")
    with pytest.raises(ConfigError, match=r"thresholds.yaml:2:12: unknown key `path`$"):
        load(tmp_path, "version: 1\ndefaults: {path: /data}\nchecks:\n  shm: {}\n")


def test_an_override_does_not_move_an_unknown_check_error_off_its_name(tmp_path):
    message = ("thresholds.yaml:3:3: unknown check `storge`: did you mean `storage`? Or add `check: <name>` to make "
               "`storge` an instance of a known check")
    for overrides in ([], ["storge.path=/b"]):
        with pytest.raises(ConfigError) as error:
            load(tmp_path, "version: 1\nchecks:\n  storge: {path: /a}\n", overrides)
        assert str(error.value).endswith(message)
