"""``preflight fleet``'s own command line: torchrun's flags (or the PET_* variables it reads), checked before any
torchrun starts, and the run's options passed on to every rank."""

from __future__ import annotations

import json

import pytest

from preflight import cli
from preflight.commands import fleet


def test_the_launchers_flags_are_taken_out_and_the_runs_options_passed_on():
    argv = ["fleet", "--nnodes", "4", "--node_rank=2", "--nproc-per-node", "8", "--master-addr=node-0",
            "--master-port", "29500", "-c", "fleet.yaml", "--junit-xml", "fleet.xml", "--set", "fleet.timeout=60s"]
    assert fleet.run_arguments(argv) == ["-c", "fleet.yaml", "--junit-xml", "fleet.xml", "--set", "fleet.timeout=60s"]


@pytest.mark.parametrize("argv, environ, message", [
    ([], {}, "--nnodes not given (nor $PET_NNODES): give the fleet's node count, the same on every node, e.g. "
             "`preflight fleet --nnodes 4 --node-rank $NODE_RANK ...`"),
    (["--nnodes", "2"], {}, "--node-rank not given (nor $PET_NODE_RANK): give this node's index, 0 to 1 (Slurm: "
                            "$SLURM_NODEID; an Indexed Job: $JOB_COMPLETION_INDEX)"),
    (["--nnodes", "2", "--node-rank", "2"], {}, "--node-rank 2 is not a node of --nnodes 2: give 0 to 1"),
    (["--nnodes", "1:4"], {}, "--nnodes 1:4: preflight fleet runs torchrun's static rendezvous, which needs one "
                              "fixed count of nodes: give --nnodes N"),
    ([], {"PET_NNODES": "2", "PET_NODE_RANK": "1"}, "--master-addr not given (nor $PET_MASTER_ADDR): give node 0's "
                                                    "address, the same on every node of the 2"),
    (["--nnodes", "1", "--master-port", "70000"], {}, "--master-port 70000: give a TCP port, 1 to 65535"),
    (["--nnodes", "1", "--nproc-per-node", "eight"], {}, "--nproc-per-node eight: give a count of ranks, or gpu, "
                                                         "cpu or auto"),
])
def test_a_launcher_mistake_is_one_line_and_exit_2_before_torchrun(monkeypatch, capsys, tmp_path, argv, environ,
                                                                    message):
    for name in fleet.LAUNCHER.values():
        monkeypatch.delenv(name[0], raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["fleet", *argv, "--json", str(tmp_path / "r.json")]) == 2
    assert capsys.readouterr().err == f"preflight: error: {message}\n"
    assert not (tmp_path / "r.json").exists()  # the fleet's size is unknown: no report shape to give


def test_torchruns_variables_place_the_node_as_in_a_pytorchjob(monkeypatch):
    environ = {"PET_NNODES": "3", "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "8", "PET_MASTER_ADDR": "job-master-0",
               "PET_MASTER_PORT": "23456"}
    args = cli._parser().parse_args(["fleet", "-c", "fleet.yaml"])
    assert fleet._launcher(args, environ) == (3, 2, "8", "job-master-0", 23456)
    flags = cli._parser().parse_args(["fleet", "--node-rank", "0", "-c", "fleet.yaml"])
    assert fleet._launcher(flags, environ)[1] == 0  # a flag wins over the variable, as in torchrun
    alone = cli._parser().parse_args(["fleet", "--nnodes", "1"])
    assert fleet._launcher(alone, {}) == (1, 0, "1", "127.0.0.1", 29500)


def test_a_config_mistake_is_reported_on_every_node_before_torchrun_starts(capsys, tmp_path):
    config = tmp_path / "fleet.yaml"
    config.write_text("version: 1\nfleet: {timeout: 5 parsecs}\nchecks:\n  shm: {}\n")
    report = tmp_path / "r.json"
    code = cli.main(["fleet", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "4", "--master-addr",
                     "node-0", "-c", str(config), "--json", str(report)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"preflight: error: {config}:2:") and "torch.distributed" not in err
    document = json.loads(report.read_text())
    assert (document["kind"], document["world_size"], document["exit_code"]) == ("fleet", 8, 2)
