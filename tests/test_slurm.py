"""ci/slurm against a real Slurm: slurmctld, slurmd and munged on this machine as a one-node cluster.

Each cluster test writes a slurm.conf (and a munge key) in a temporary directory, starts the daemons
from Debian's `slurm-wlm` and `munge`, and stops them after. slurmd runs ci/slurm/healthcheck.py as
its HealthCheckProgram and ci/slurm/prolog.sh as its Prolog (with PrologFlags=Alloc,DeferBatch, as
docs/slurm.md installs it), each through a small wrapper that sets their environment (this checkout
on PYTHONPATH, the test's gate files and report directory). It is skipped, with the reason, where
the packages are missing, where it is not root (slurmd must be) or where the daemons do not start;
ci/slurm/run-tests.sh installs them and runs it.

Waits are bounded and counted in health-check passes (each pass appends its exit code to a file),
never in seconds of work: "the job stayed pending" means it was pending after a further failing pass.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

import pytest

from preflight.host import node_lock
from tests.helpers import REPO

DAEMONS = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "sbatch", "squeue")
INTERVAL_S = 2  # HealthCheckInterval (s): the tests count passes, so a busy machine slows them, never fails them
PATIENCE_S = 120  # for any one state change: a few health-check passes on a busy two-core machine



def load_healthcheck() -> ModuleType:
    """ci/slurm/healthcheck.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("healthcheck", REPO / "ci" / "slurm" / "healthcheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def shm_gate(fits: bool) -> str:
    """A gate on /dev/shm's size: 1 MiB (passes anywhere) or a GiB more than this machine's /dev/shm has."""
    total = os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize
    minimum = "1 MiB" if fits else f"{math.ceil(total / 2**30) + 1} GiB"
    return f"version: 1\nchecks:\n  shm:\n    size: {{min: {minimum}}}\n"


class Cluster:
    """A one-node Slurm in ``root``; ``run`` calls its client commands with its slurm.conf."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))
        self.processes: list[subprocess.Popen] = []
        self.gates = root / "gates"
        self.reports = root / "reports"
        self.passes = root / "healthcheck.passes"
        self.prolog_environment: dict[str, str] = {}

    def write_prolog(self, **settings: str) -> Path:
        """(Re)write the Prolog's wrapper with ``settings`` over its environment; slurmd runs the new one next."""
        return wrapper(self.root / "prolog", {**self.prolog_environment, **settings},
                       f"{REPO / 'ci' / 'slurm' / 'prolog.sh'}")

    def run(self, *command: str) -> str:
        return subprocess.run(command, env=self.env, capture_output=True, text=True, check=True, timeout=30).stdout

    def set_gate(self, name: str, text: str) -> None:
        """Replace a gate file whole (a health check running meanwhile reads the old or the new one)."""
        temporary = self.gates / f".{name}.tmp"
        temporary.write_text(text)
        temporary.replace(self.gates / f"{name}.yaml")

    def state(self) -> tuple[str, str]:
        """The node's state as sinfo names it (``idle``, ``drained``, ``allocated``) and its reason."""
        line = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T|%E").strip().splitlines()[0]
        state, _, reason = line.partition("|")
        return state, reason

    def health_passes(self) -> list[int]:
        return [int(code) for code in self.passes.read_text().split()] if self.passes.exists() else []

    def wait_until(self, what: str, done: Callable[[], bool], timeout: float = PATIENCE_S) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not happen within {timeout:g}s; node {self.state()}, health-check passes "
                            f"{self.health_passes()}\n{self.logs()}")
            time.sleep(0.5)

    def wait_passes(self, count: int) -> None:
        """Wait until ``count`` more health-check passes have finished."""
        target = len(self.health_passes()) + count
        self.wait_until(f"{count} more health-check passes", lambda: len(self.health_passes()) >= target)

    def job_state(self, job: str) -> str:
        shown = self.run("scontrol", "show", "job", job, "-o")
        return next(field.split("=", 1)[1] for field in shown.split() if field.startswith("JobState="))

    def job_field(self, job: str, name: str) -> str:
        """One field of ``scontrol show job`` whose value may hold spaces (``AdminComment``, ``Reason``)."""
        shown = self.run("scontrol", "show", "job", job)  # one field or a few per line; a free-text field ends its line
        match = re.search(rf"(?:^|\s){name}=(.*)$", shown, re.MULTILINE)
        return match.group(1).strip() if match else ""

    def logs(self) -> str:
        try:
            parts = ["--- jobs\n" + self.run("scontrol", "show", "job")]
        except (subprocess.SubprocessError, OSError) as error:
            parts = [f"--- jobs: {error}"]
        for name in ("slurmctld.log", "slurmd.log", "reports/" + f"{self.node}-healthcheck.log"):
            path = self.root / name
            if path.exists():
                parts.append(f"--- {name} (tail)\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:]))
        return "\n".join(parts)

    def start(self, command: list[str], name: str) -> None:
        process = subprocess.Popen(command, env=self.env, stdout=(self.root / f"{name}.out").open("wb"),
                                   stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(process)
        time.sleep(1)
        if process.poll() is not None:
            output = (self.root / f"{name}.out").read_text(errors="replace")[-1500:]
            self.stop()
            pytest.skip(f"{name} did not start here (exit {process.returncode}): {output.strip()}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self.processes.clear()


def wrapper(path: Path, environment: dict[str, str], program: str, passes: Path | None = None) -> Path:
    """An executable that runs ``program`` with ``environment``, as a site's install would set it up."""
    exports = "\n".join(f"export {key}='{value}'" for key, value in environment.items())
    record = f'\necho "$code" >> {passes}' if passes else ""
    path.write_text(f"#!/bin/sh\n{exports}\n{program}\ncode=$?{record}\nexit $code\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    missing = [name for name in DAEMONS if not shutil.which(name)]
    if missing:
        pytest.skip(f"needs Slurm and MUNGE ({', '.join(missing)} not found): `apt-get install -y slurm-wlm munge`, "
                    f"or run ci/slurm/run-tests.sh")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to start jobs and run its Prolog and HealthCheckProgram")
    root = tmp_path_factory.mktemp("slurm")
    root.chmod(0o755)
    cluster = Cluster(root)
    for directory in ("state", "spool", "gates", "reports", "munge"):
        (root / directory).mkdir()
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = root / "munge" / "munge.socket"
    cluster.set_gate("healthcheck", shm_gate(fits=True))
    cluster.set_gate("prolog", shm_gate(fits=True))
    common = {"PYTHONPATH": str(REPO), "SLURM_CONF": str(root / "slurm.conf"), "PREFLIGHT_REPORT_DIR": str(root / "reports"),
              "PREFLIGHT_LOCK": str(root / "node.lock"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    health = wrapper(root / "healthcheck", {**common, "PREFLIGHT_HEALTHCHECK_CONFIG": str(root / "gates" / "healthcheck.yaml")},
                     f"{sys.executable} {REPO / 'ci' / 'slurm' / 'healthcheck.py'}", passes=cluster.passes)
    cluster.prolog_environment = {**common, "PREFLIGHT": f"{sys.executable} -m preflight",
                                  "PREFLIGHT_CONFIG_DIR": str(root / "gates")}
    prolog = cluster.write_prolog()
    cpus = os.cpu_count() or 1
    (root / "slurm.conf").write_text(textwrap.dedent(f"""\
        ClusterName=preflight-test
        SlurmctldHost={cluster.node}(127.0.0.1)
        SlurmctldPort={free_port()}
        SlurmdPort={free_port()}
        SlurmUser=root
        SlurmdUser=root
        AuthType=auth/munge
        CredType=cred/munge
        AuthInfo=socket={socket_path}
        StateSaveLocation={root / 'state'}
        SlurmdSpoolDir={root / 'spool'}
        SlurmctldPidFile={root / 'slurmctld.pid'}
        SlurmdPidFile={root / 'slurmd.pid'}
        SlurmctldLogFile={root / 'slurmctld.log'}
        SlurmdLogFile={root / 'slurmd.log'}
        ProctrackType=proctrack/linuxproc
        TaskPlugin=task/none
        JobAcctGatherType=jobacct_gather/none
        AccountingStorageType=accounting_storage/none
        JobCompType=jobcomp/none
        SelectType=select/cons_tres
        SelectTypeParameters=CR_Core
        MpiDefault=none
        MailProg=/bin/true
        ReturnToService=2
        PrologFlags=Alloc,DeferBatch
        MessageTimeout=30
        # Under a CI run's load slurmd gave up on the prolog's launch notice ("REQUEST_LAUNCH_PROLOG notification
        # failed, giving up after 20 sec": 2 x the default MessageTimeout of 10 s) and Slurm drained the node
        Prolog={prolog}
        HealthCheckProgram={health}
        HealthCheckInterval={INTERVAL_S}
        HealthCheckNodeState=IDLE
        NodeName={cluster.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=500 State=UNKNOWN
        PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
        """))
    try:
        cluster.start(["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={socket_path}",
                       f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'munge' / 'munged.log'}",
                       f"--seed-file={root / 'munge' / 'munged.seed'}"], "munged")
        cluster.start(["slurmctld", "-D", "-i", "-f", str(root / "slurm.conf")], "slurmctld")
        cluster.start(["slurmd", "-D", "-f", str(root / "slurm.conf")], "slurmd")
        yield cluster
    finally:
        cluster.stop()


def test_a_failing_gate_drains_the_node_a_job_waits_and_a_passing_one_resumes_it(cluster: Cluster) -> None:
    cluster.wait_until("the node coming up idle", lambda: cluster.state()[0] == "idle")
    cluster.wait_passes(1)
    assert cluster.state() == ("idle", "none")  # a passing gate leaves the node as it is

    cluster.set_gate("healthcheck", shm_gate(fits=False))
    cluster.wait_until("the failing gate draining the node", lambda: cluster.state()[0] == "drained")
    assert cluster.state()[1] == "preflight: shm.size"
    assert "preflight: shm.size" in cluster.run("sinfo", "-R")  # what an operator sees

    job = cluster.run("sbatch", "--parsable", "--wrap", "true", f"--output={cluster.root / 'job-%j.out'}").strip()
    cluster.wait_passes(2)  # two more failing passes: the node stays drained and the job waits
    assert cluster.state() == ("drained", "preflight: shm.size")
    assert cluster.job_state(job) == "PENDING"
    assert cluster.health_passes()[-2:] == [1, 1]

    cluster.set_gate("healthcheck", shm_gate(fits=True))
    cluster.wait_until("the passing gate resuming the node and the job finishing",
                       lambda: cluster.job_state(job) == "COMPLETED")
    cluster.wait_until("the node idle again", lambda: cluster.state() == ("idle", "none"))
    assert (cluster.reports / f"{cluster.node}-job{job}-prolog.json").exists()  # the Prolog gated the job itself


def test_a_node_drained_by_someone_else_is_never_resumed(cluster: Cluster) -> None:
    cluster.wait_until("the node coming up idle", lambda: cluster.state()[0] == "idle")
    cluster.run("scontrol", "update", f"nodename={cluster.node}", "state=drain", "reason=admin: fan replacement")
    cluster.wait_passes(2)  # passing gates meanwhile
    assert cluster.health_passes()[-2:] == [0, 0]
    assert cluster.state() == ("drained", "admin: fan replacement")

    # A failing Prolog: Slurm drains the node ("Prolog error") and holds the job; a passing health check keeps it so.
    cluster.run("scontrol", "update", f"nodename={cluster.node}", "state=resume")
    cluster.set_gate("prolog", shm_gate(fits=False))
    job = cluster.run("sbatch", "--parsable", "--wrap", "true", f"--output={cluster.root / 'job-%j.out'}").strip()
    cluster.wait_until("the failing Prolog draining the node", lambda: cluster.state()[0] in ("drained", "draining"))
    cluster.wait_passes(2)
    assert cluster.state() == ("drained", "Prolog error")
    assert cluster.job_state(job) == "PENDING"
    report = cluster.reports / f"{cluster.node}-job{job}-prolog.json"
    assert '"id": "shm.size"' in report.read_text() and '"verdict": "fail"' in report.read_text()


def test_the_fleet_example_runs_under_srun_and_writes_one_merged_report(cluster: Cluster, tmp_path: Path) -> None:
    cluster.wait_until("the node coming up idle", lambda: cluster.state()[0] == "idle")
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.bin").write_bytes(os.urandom(16 << 20))
    config = tmp_path / "fleet.yaml"
    config.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{duration: 1s, timeout: 60s}}
        fleet: {{timeout: 60s}}
        checks:
          storage:
            path: {data}
            data_size: 16 MiB
            seq_read: {{min: 1 MB/s}}
          collective:
            min_size: 64 KiB
            max_size: 256 KiB
            allreduce_busbw: {{min: 0.001 GB/s}}
        """))
    # Two ranks on the one node (gloo on CPU): what GPUS_PER_NODE=2 would start on a node with two GPUs.
    environment = dict(cluster.env, PYTHONPATH=str(REPO), GPUS_PER_NODE="2", PREFLIGHT_PYTHON=sys.executable,
                       PREFLIGHT_FLEET_CONFIG=str(config), PREFLIGHT_REPORT_DIR=str(tmp_path), OMP_NUM_THREADS="1",
                       PREFLIGHT_LOCK=str(cluster.root / "node.lock"))
    job = subprocess.run(["sbatch", "--parsable", "--nodes=1", f"--output={tmp_path}/job-%j.out",
                          str(REPO / "ci" / "slurm" / "fleet.sbatch")], env=environment, cwd=tmp_path,
                         capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    cluster.wait_until("the fleet job ending", lambda: cluster.job_state(job) in ("COMPLETED", "FAILED"), timeout=300)

    output = (tmp_path / f"job-{job}.out").read_text()
    assert cluster.job_state(job) == "COMPLETED", output[-3000:]
    report = json.loads((tmp_path / f"preflight-fleet-{job}.json").read_text())
    assert (report["kind"], report["world_size"], report["exit_code"]) == ("fleet", 2, 0)
    (host,) = report["hosts"]
    assert host["facts"]["ranks"] == "0,1"
    verdicts = {r["id"]: r["verdict"] for r in host["results"]}
    assert verdicts["storage.seq_read"] == verdicts["collective.allreduce_busbw"] == "pass"
    assert (tmp_path / f"preflight-fleet-{job}.xml").exists()


def test_the_drain_reason_lists_failed_ids_and_is_cut_with_a_count() -> None:
    healthcheck = load_healthcheck()
    assert healthcheck.reason(["shm.size"]) == "preflight: shm.size"
    ids = [f"storage{n}.seq_read" for n in range(40)]
    cut = healthcheck.reason(ids, limit=80)
    assert cut == "preflight: storage0.seq_read, storage1.seq_read, storage2.seq_read +37 more"
    assert len(healthcheck.reason(ids)) <= healthcheck.REASON_CHARS
    assert healthcheck.reason(["x" * 100], limit=30) == "preflight: " + "x" * 19


def test_a_failure_only_for_want_of_the_lock_is_no_fault_of_the_node() -> None:
    healthcheck = load_healthcheck()
    busy = {"id": "storage.seq_read", "verdict": "fail",
            "message": f"could not measure: {node_lock.BUSY} (/dev/shm/preflight.lock) for all of ..."}
    real = {"id": "shm.size", "verdict": "fail", "message": "measured 64 MiB, required >= 8 GiB"}
    passed = {"id": "cuda.device_count", "verdict": "pass", "message": "measured 8"}
    assert healthcheck.failed_ids({"results": [busy, passed]}) == (["storage.seq_read"], True)
    assert healthcheck.failed_ids({"results": [busy, real, passed]}) == (["storage.seq_read", "shm.size"], False)


def submit(cluster: Cluster, *options: str, ran: Path) -> str:
    """A batch job that creates ``ran`` when it runs; its id."""
    return cluster.run("sbatch", "--parsable", *options, f"--output={cluster.root / 'job-%j.out'}",
                       "--wrap", f"touch {ran}").strip()


def settled(cluster: Cluster) -> tuple[str, str]:
    """The node's state once it holds no job any more: a job stopped by its prolog leaves it ``mixed`` or
    ``completing`` for a moment (its epilog runs), which is neither in service nor drained yet."""
    busy = ("allocated", "mixed", "completing")
    cluster.wait_until("the node releasing the stopped job", lambda: not cluster.state()[0].startswith(busy))
    return cluster.state()


def held(cluster: Cluster, job: str) -> bool:
    """Whether ``job`` is pending with priority 0: requeued held, waiting for `scontrol release`."""
    return cluster.job_state(job) == "PENDING" and cluster.job_field(job, "Priority").startswith("0 ")


def test_a_typo_in_the_gate_a_job_names_cancels_the_job_and_never_drains_the_node(cluster: Cluster,
                                                                                  tmp_path: Path) -> None:
    # issue 33 case 5: the prolog exited 2 ("cannot read .../shmonyl.yaml") and Slurm drained the node, "Prolog error".
    cluster.wait_until("the node coming up idle", lambda: cluster.state()[0] == "idle")
    cluster.set_gate("shm", shm_gate(fits=True))
    job = submit(cluster, "--comment=preflight=shmonyl", ran=tmp_path / "typo-ran")
    cluster.wait_until("the prolog ending the job or draining the node",
                       lambda: cluster.job_state(job) == "CANCELLED" or "drain" in cluster.state()[0])
    assert settled(cluster) == ("idle", "none")
    assert cluster.job_state(job) == "CANCELLED"
    assert not (tmp_path / "typo-ran").exists()  # cancelled before its script ran: no job runs ungated
    said = cluster.job_field(job, "AdminComment")  # what the job's owner reads in `scontrol show job`
    assert said.startswith("preflight: --comment preflight=shmonyl names no installed gate "
                           f"({cluster.gates}/shmonyl.yaml does not exist; installed: healthcheck, prolog, shm)")
    assert "the job was cancelled; node " + cluster.node + " stays in service" in said
    assert said in (cluster.reports / f"{cluster.node}-job{job}-prolog.log").read_text()
    cluster.wait_passes(2)
    assert settled(cluster) == ("idle", "none")

    bad_name = submit(cluster, "--comment=preflight=../prolog", ran=tmp_path / "name-ran")  # not a gate name at all
    cluster.wait_until("the prolog ending the job or draining the node",
                       lambda: cluster.job_state(bad_name) == "CANCELLED" or "drain" in cluster.state()[0])
    assert settled(cluster) == ("idle", "none")
    assert "--comment preflight=../prolog is not a gate name (letters, digits, - and _)" in \
        cluster.job_field(bad_name, "AdminComment")

    # The node's own failure under the gate the job named still drains it, and Slurm requeues the job held.
    cluster.set_gate("shm", shm_gate(fits=False))
    failing = submit(cluster, "--comment=preflight=shm", ran=tmp_path / "fail-ran")
    cluster.wait_until("the failing gate draining the node", lambda: cluster.state()[0] in ("drained", "draining"))
    cluster.wait_until("the node drained", lambda: cluster.state() == ("drained", "Prolog error"))
    assert cluster.job_state(failing) == "PENDING"
    assert not (tmp_path / "fail-ran").exists()


BUGGY_PREFLIGHT = """\
# preflight with a bug planted in its runner: the CLI's boundary turns it into one line and exit 3.
import sys

import preflight.runner

preflight.runner.run = lambda *args, **kwargs: 1 / 0
from preflight import cli

sys.exit(cli.main())
"""


def test_a_wrong_gate_file_or_a_bug_in_preflight_holds_the_job_and_never_drains_the_node(cluster: Cluster,
                                                                                        tmp_path: Path) -> None:
    cluster.wait_until("the node coming up idle", lambda: cluster.state()[0] == "idle")
    # The administrator's gate has a typo (exit 2): no job can be gated, none is lost; the node is not at fault.
    cluster.set_gate("prolog", "version: 1\nchecks:\n  shm:\n    sise: {min: 1 MiB}\n")
    job = submit(cluster, ran=tmp_path / "config-ran")
    cluster.wait_until("the prolog holding the job or draining the node",
                       lambda: held(cluster, job) or "drain" in cluster.state()[0])
    assert settled(cluster) == ("idle", "none")
    assert cluster.job_state(job) == "PENDING"  # held: `scontrol release` puts it back in the queue
    assert not (tmp_path / "config-ran").exists()
    said = cluster.job_field(job, "AdminComment")
    assert said.startswith(f"preflight: gate {cluster.gates}/prolog.yaml: a configuration error (exit 2): "
                           f"preflight: error: {cluster.gates}/prolog.yaml:4:5: ")
    assert "did you mean `size`?" in said and said.endswith("the job is held until `scontrol release "
                                                             f"{job}`; node {cluster.node} stays in service")

    # Fixed and released, the job runs (Slurm made the requeued job eligible 2 minutes later; start it now).
    cluster.set_gate("prolog", shm_gate(fits=True))
    cluster.run("scontrol", "release", job)
    cluster.run("scontrol", "update", f"jobid={job}", "starttime=now")
    cluster.wait_until("the released job completing", lambda: cluster.job_state(job) == "COMPLETED")
    assert (tmp_path / "config-ran").exists()

    # A bug in preflight (exit 3) says nothing about the node either.
    buggy = tmp_path / "buggy_preflight.py"
    buggy.write_text(BUGGY_PREFLIGHT)
    cluster.write_prolog(PREFLIGHT=f"{sys.executable} {buggy}")
    crashed = submit(cluster, ran=tmp_path / "bug-ran")
    cluster.wait_until("the prolog holding the job or draining the node",
                       lambda: held(cluster, crashed) or "drain" in cluster.state()[0])
    assert settled(cluster) == ("idle", "none")
    assert not (tmp_path / "bug-ran").exists()
    said = cluster.job_field(crashed, "AdminComment")
    assert said.startswith("preflight: preflight crashed (exit 3, a bug in preflight): "
                           "preflight: internal error: ZeroDivisionError('division by zero') (crash log: ")


def test_a_prolog_installed_wrong_holds_each_job_and_never_drains_the_node(cluster: Cluster, tmp_path: Path) -> None:
    # Public reports of the same kind, where a prolog's own setup drained every node it ran on:
    # mknoxnv/ubuntu-slurm#4 (Prolog=/etc/slurm/prolog.d/* with no such directory: "Prolog error" on every node)
    # and NVIDIA/deepops#919 (the prolog's PATH had no `sh`: every job failed, every node drained).
    cluster.wait_until("the node coming up idle", lambda: cluster.state()[0] == "idle")
    cases = {  # PREFLIGHT_CONFIG_DIR or PREFLIGHT as installed -> the start of what the job's owner is told
        "no-gates-directory": ({"PREFLIGHT_CONFIG_DIR": str(tmp_path / "missing")},
                               f"preflight: gate {tmp_path}/missing/prolog.yaml: a configuration error (exit 2): "
                               f"preflight: error: {tmp_path}/missing/prolog.yaml: cannot read the config "
                               "(No such file or directory)"),
        "no-such-command": ({"PREFLIGHT": str(tmp_path / "bin" / "preflight")},
                            f"preflight: the preflight command ({tmp_path}/bin/preflight) could not be started "
                            "(exit 127): "),
        "no-such-module": ({"PREFLIGHT": f"{sys.executable} -m preflight_"},
                           f"preflight: the preflight command ({sys.executable} -m preflight_) exited 1 without "
                           f"a report: {sys.executable}: No module named preflight_: fix PREFLIGHT"),
    }
    for case, (settings, told) in cases.items():
        cluster.write_prolog(**settings)
        ran = tmp_path / f"{case}-ran"
        job = submit(cluster, ran=ran)
        cluster.wait_until(f"{case}: the prolog holding the job or draining the node",
                           lambda: held(cluster, job) or "drain" in cluster.state()[0])
        assert settled(cluster) == ("idle", "none"), case
        assert not ran.exists(), case
        said = cluster.job_field(job, "AdminComment")
        assert said.startswith(told), (case, said)
        assert said.endswith(f"the job is held until `scontrol release {job}`; node {cluster.node} stays in service")

    cluster.write_prolog()  # installed right: the held jobs run once released
    for job in ("1", "2", "3"):
        cluster.run("scontrol", "release", job)
        cluster.run("scontrol", "update", f"jobid={job}", "starttime=now")
    cluster.wait_until("the released jobs completing",
                       lambda: all(cluster.job_state(job) == "COMPLETED" for job in ("1", "2", "3")))
    assert all((tmp_path / f"{case}-ran").exists() for case in cases)


def test_a_health_check_that_cannot_judge_leaves_the_node_as_it_is(cluster: Cluster) -> None:
    # mej/nhc#139: a custom NHC check whose own probe failed (curl to Prometheus) could only pass (resume) or
    # fail (drain). Here the health check's gate has a typo: preflight exits 2 and the node is neither.
    cluster.wait_until("the node coming up idle", lambda: cluster.state()[0] == "idle")
    cluster.set_gate("healthcheck", "version: 1\nchecks:\n  shm:\n    sise: {min: 1 MiB}\n")
    cluster.wait_until("two passes of the broken gate", lambda: cluster.health_passes()[-2:] == [2, 2])
    assert settled(cluster) == ("idle", "none")
    log = (cluster.reports / f"{cluster.node}-healthcheck.log").read_text()
    assert "unknown key `sise`: did you mean `size`?" in log
    assert log.rstrip().endswith("preflight exited 2 (2: fix " + str(cluster.gates / "healthcheck.yaml") +
                                 "; 3: a bug, see the crash log above): node left as it is")

    cluster.run("scontrol", "update", f"nodename={cluster.node}", "state=drain", "reason=preflight: shm.size")
    cluster.wait_passes(2)  # a drain of preflight's own is not resumed either while the gate cannot judge
    assert cluster.state() == ("drained", "preflight: shm.size")
