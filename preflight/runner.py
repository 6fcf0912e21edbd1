"""Run each check instance in a worker process with a timeout, and judge what comes back.

A check that hangs, segfaults, calls ``os._exit`` or is OOM-killed becomes an ``error``
result for that check: the runner kills the worker's whole process group (DataLoader
workers included), removes the scratch directories it announced, starts a fresh worker
for the next check and goes on. SIGTERM and SIGINT end the run the same way, with the
interrupted check and those not yet run reported as errors, so a report is always written.

Checks that read other checks (``samples_per_gpu: measured``): each producer instance runs
before its consumers (``ordered``), and the consumer's option is filled with the producer's
judged figure, or with why there is none (``resolve``); results stay in config order.

Noise: an instance with ``repeats: N`` runs N times and each metric's runs are combined
(``measurement.combine``: the median of their values is judged); with ``retries: K``, a
miss within ``retry_margin`` of its bound (``verdict.near_miss``) is re-measured up to K
times, the last attempt is judged and the earlier ones are recorded in the result.

One run per node measures at a time: ``run`` holds the node's measuring lock (``host.node_lock``)
from its first measurement to its last, notes under each result how long it waited for another
run, and reports every metric unmeasurable when the lock stayed held past ``PREFLIGHT_LOCK_WAIT``.

Every wait is bounded, also on a process that cannot die. A check stuck in a filesystem request
that never completes (a hard mount whose server is gone, a FUSE daemon that never replies) sleeps
in the kernel, and SIGKILL does not end it (giampaolo/psutil#1931, lxc/lxd#3664). So a killed
worker's group gets ``KILL_GRACE_S``; what is left then is abandoned, never waited for again (its
processes are kept in ``ABANDONED``), the check's error names the file and mount it is stuck on
(``host.stuck``), and the run goes on with a fresh worker: an instance costs at most its ``timeout``
plus ``STUCK_BOUND_S``. The abandoned process is recorded beside the node lock (``host.orphans``): while
it stays stuck, this run and later ones do not start a check that reads under its path (another worker
would stick there too), and report the orphan at once. Workers never hold the node lock (its
descriptor is close-on-exec and no descriptor is passed to them), so an abandoned one cannot keep it
past the run. The runner itself
never touches the filesystem under test: the walk and every stat run in the worker, and scratch
left by a killed worker is removed by a child process waited for at most ``SCRATCH_WAIT_S``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from preflight.host import identity, node_lock, pids, orphans, stuck
from preflight.io import scratch, tempdir
from preflight.io.dataset import Dataset
from preflight.host.cgroup_memory import OomWatch
from preflight.checks import CHECKS
from preflight.checks.base import Produced, runs_as_job
from preflight.config import Config, Instance
from preflight.errors import UsageError
from preflight.measurement import Measurement, combine
from preflight.verdict import Outcome, Result, judge, near_miss, record_attempts, storage_first

LOG_TAIL_BYTES = 2000  # of a dead worker's output, quoted in its error
KILL_GRACE_S = 5.0  # a killed worker's process group has this long to go; what is left is stuck, and abandoned
POLL_S = 0.05  # between looks at a killed worker's group
# What an instance may take past its timeout: the kill's grace, plus reading /proc for the stuck threads and
# their mount (milliseconds; a second allowed for a loaded node).
STUCK_BOUND_S = KILL_GRACE_S + 1.0
SCRATCH_WAIT_S = 5.0  # for the child that removes a killed worker's scratch; past it, that child is left to finish


class Abandoned(NamedTuple):
    """A worker left behind in the kernel: never waited for again, kept here so that nothing reaps it by mistake."""

    process: subprocess.Popen  # type: ignore[type-arg]
    pids: tuple[int, ...]  # its process group's members still there when it was abandoned
    reason: str
    threads: tuple[stuck.Blocked, ...] = ()  # what they wait on, uninterruptible ones first


ABANDONED: list[Abandoned] = []  # this process's workers that would not die, oldest first


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived while checks were running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class WorkerDied(Exception):
    pass


class ConfigMistakeReply(RuntimeError):
    """The check stopped at a mistake of the config's or the job's code (``errors.ConfigMistake``), not the node's."""


class Worker:
    """One worker process in its own session, talking JSON lines (see ``preflight.worker``).

    Its log, and every temporary file of the check and the libraries it runs (TMPDIR is
    set for it), go in ``temp_dir``: a writable place found by ``tempdir.choose``.
    Starting one raises OSError when the log cannot be created or the process started.
    """

    def __init__(self, temp_dir: str, user: identity.Identity | None = None) -> None:
        handle, self.log_path = tempfile.mkstemp(prefix="preflight-worker-", suffix=".log", dir=temp_dir)
        os.close(handle)  # the worker opens it; the runner only reads its tail
        user = user or identity.own()
        if not user.is_own:
            os.chown(self.log_path, user.uid, user.gid)
        env = user.environ(dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TMPDIR=temp_dir))
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "preflight.worker", self.log_path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: one killpg ends DataLoader workers too
                # No descriptor but the three pipes: the node lock's (close-on-exec too) must never live on in a
                # worker, or one stuck in the kernel would hold the lock for every later run on the node.
                close_fds=True,
                env=env,
                **user.popen(),  # the job's user, groups dropped first (``host.identity``)
            )
        except BaseException:
            os.unlink(self.log_path)
            raise
        self.buffer = b""
        self.oom = OomWatch.start()  # taken again for each job: an OOM kill is told from other SIGKILLs by it

    def run(self, job: dict[str, Any], timeout_s: float, scratch_dirs: list[str],
            said: Callable[[str], None] = lambda line: None) -> list[Measurement]:
        """Send ``job`` and wait for its measurements; ``said`` gets each line of progress the check reports.

        Raises:
            TimeoutError: no answer within ``timeout_s`` (the worker is then killed).
            WorkerDied: the process ended without answering (crash, os._exit, OOM kill).
            RuntimeError: the check raised; the message is its exception (``ConfigMistakeReply`` for a mistake
                of the config's or the job's code).
        """
        assert self.process.stdin is not None
        self.oom = OomWatch.start()
        try:
            self.process.stdin.write((json.dumps(job) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            raise WorkerDied(self._death()) from None
        deadline = time.monotonic() + timeout_s
        while True:
            message = self._read_message(deadline)
            if "scratch" in message:
                scratch_dirs.append(message["scratch"])
            elif "progress" in message:
                said(message["progress"])
            elif "error" in message:
                raise (ConfigMistakeReply if message.get("config_error") else RuntimeError)(message["error"])
            else:
                return [Measurement.from_dict(m) for m in message["measurements"]]

    def _read_message(self, deadline: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise WorkerDied(self._death())
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def drain_scratch(self, scratch_dirs: list[str]) -> None:
        """Collect scratch announcements already sent but not yet read (before a kill), without blocking."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        try:
            while select.select([fd], [], [], 0)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                self.buffer += chunk
        except OSError:
            pass
        for line in self.buffer.split(b"\n"):
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "scratch" in message:
                scratch_dirs.append(message["scratch"])

    def _death(self) -> str:
        """Why the worker ended without answering: the signal, and for SIGKILL whether the kernel OOM-killed it."""
        try:
            code = self.process.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:  # its output closed, yet it does not exit: stuck on the way out
            return "the worker closed its output but did not exit"
        if code < 0:
            name = signal.Signals(-code).name
            cause = {"SIGKILL": " (out of memory? see `dmesg` or the pod's OOMKilled status)",
                     "SIGSEGV": " (segmentation fault)", "SIGBUS": " (bus error: /dev/shm full?)"}.get(name, "")
            evidence = self.oom.evidence() if name == "SIGKILL" else ""
            if evidence:
                cause = (f": the kernel OOM-killed the check's process {evidence}; raise the container's or pod's "
                         f"memory limit, or lower the check's sizes")
            what = f"killed by {name}{cause}"
        else:
            what = f"worker exited with status {code} without a result"
        tail = self.log_tail()
        return f"{what}; last output: {tail}" if tail else what

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.strip().splitlines()[-5:])

    def blocked(self) -> list[stuck.Blocked]:
        """The threads of the worker's group now sleeping uninterruptibly, with the file each waits on."""
        return stuck.blocked(stuck.group(self.process.pid), "D", ignore=(self.log_path,))

    def kill(self) -> list[stuck.Blocked]:
        """SIGKILL the worker's process group and wait at most ``KILL_GRACE_S`` for all of it to go.

        Returns [] when it went. Else what is left sleeps in the kernel on a request that does not
        complete, where no signal ends it: it is abandoned (pipes closed, never waited for again, kept
        in ``ABANDONED``) and its threads are returned, uninterruptible ones first, each with what it waits on.
        """
        group = self.process.pid  # start_new_session: the worker leads its own group
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + KILL_GRACE_S
        while True:
            if self.process.poll() is not None and not stuck.group(group):  # reaped, and no child left
                self.close()
                return []
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        left = stuck.group(group)
        if not left and self.process.poll() is not None:  # it went as the grace ended: not stuck
            self.close()
            return []
        threads = stuck.blocked(left, "DRS", ignore=(self.log_path,)) or [
            stuck.Blocked(pid, pid, "?", "", "", "") for pid in left]
        ABANDONED.append(Abandoned(self.process, tuple(left), threads[0].where(), tuple(threads)))
        self.close()
        return threads

    def stop(self) -> None:
        """End the worker politely (EOF on stdin), then make sure its group is gone."""
        if self.process.stdin:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream:
                try:
                    stream.close()
                except OSError:
                    pass
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


ProgressCallback = Callable[[Instance, "list[Result] | None"], None]


def run(config: Config, progress: ProgressCallback = lambda instance, results: None,
        temp_dir: str | None = None, lock: node_lock.Settings | None = None) -> list[Result]:
    """Run every instance of ``config`` and return all results, in config order.

    ``progress(instance, None)`` is called when an instance starts and
    ``progress(instance, results)`` when it is judged. Workers keep their logs in
    ``temp_dir`` (default: ``tempdir.choose()``). Never raises for a check's fault.
    The node's measuring lock (``lock``, default: ``node_lock.settings()`` of the environment)
    is held from the first measurement to the last: a run that waited for it says so under
    each result, one that could not get it reports every metric unmeasurable with the reason.

    Raises:
        UsageError: no ``temp_dir`` was given and no writable temporary directory exists, or
            the lock file cannot be opened.
    """
    temp_dir = temp_dir or tempdir.choose()
    job = identity.job(config.run_as)
    seats = {True: Seat(identity.own(), temp_dir), False: Seat(identity.own(), temp_dir)}  # by runs_as_job
    with Dataset.started(temp_dir) as dataset:  # every check continues one pass over the dataset: each file read once
        if job.taken and not job.is_own:
            seats[True] = Seat(job, identity.workspace(job, temp_dir))
            dataset.share_with(job.uid, job.gid)
            _refuse_unimportable(job, seats[True].place)
        try:
            return _run(config, progress, lock, dataset, seats, *identity.not_the_jobs_view(job))
        finally:
            if seats[True].place != temp_dir:
                shutil.rmtree(seats[True].place, ignore_errors=True)


class Seat(NamedTuple):
    """Whom a worker runs as, and where its files go (``identity.workspace``)."""

    user: identity.Identity
    place: str


def _refuse_unimportable(user: identity.Identity, place: str) -> None:
    """Stop before measuring where the job's user cannot run preflight's worker (an install only root may read).

    Raises:
        UsageError: ``python -m preflight.worker``'s modules do not import as ``user``; the line names the fix.
    """
    env = user.environ(dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TMPDIR=place))
    try:
        probe = subprocess.run([sys.executable, "-c", "import preflight.worker"], capture_output=True, text=True,
                               env=env, timeout=60, check=False, **user.popen())
        failed = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1] if probe.returncode else ""
    except OSError as error:  # the interpreter itself (a venv's link into /root, say) is not the user's to run
        failed = f"{error.strerror}: {error.filename or sys.executable}"
    if failed:
        raise UsageError(f"the job's user, {user.describe()} ({user.source}), cannot run preflight with "
                         f"{sys.executable}: {failed}: install preflight where that user can read and run it (the "
                         f"training image's own Python), or leave out defaults.run_as")


def _run(config: Config, progress: ProgressCallback, lock: node_lock.Settings | None, dataset: Dataset,
         seats: dict[bool, Seat], not_the_job: str, fix: str) -> list[Result]:
    """``run``'s body, inside the run's pass over the ``dataset``; checks whose answer depends on who reads run in
    ``seats[True]`` (as the job, where it can be taken), the others in ``seats[False]``; where the job's view was
    not taken, their rows that depend on it say ``not_the_job``, and stderr says it once with the ``fix``."""
    node = node_lock.NodeLock.open(lock or node_lock.settings())
    results: list[Result] = []
    workers: dict[Seat, Worker] = {}
    if not_the_job:
        print(f"preflight: {not_the_job}: {fix}", file=sys.stderr)
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    for signum in previous:
        signal.signal(signum, interrupt)
    pending = ordered(config.instances)
    done: dict[str, tuple[list[Result], Outcome]] = {}  # what producers measured, for their consumers
    noted: dict[str, tuple[str, str]] = {}  # each instance's notes: whose view it took, the lock's wait
    current: Instance | None = None
    try:
        try:
            wait = node.acquire(f"`preflight run -c {config.path}`", say=lambda line: print(line, file=sys.stderr))
        except node_lock.Busy as busy:
            wait = node_lock.Wait(0.0, "")
            results += _unmeasurable(pending, str(busy), progress)
            pending = []
        record = node.path if node.fd is not None else ""  # where this node's orphans are remembered
        known = orphans.live(record) if record and pending else []
        while pending:
            current = instance = resolve(pending.pop(0), done)
            progress(instance, None)
            in_the_way = _in_the_way(instance, known)
            if in_the_way:
                judged = _noted(judge(instance, Outcome(error=in_the_way)), wait.note)
                done[instance.name] = (judged, Outcome(error=in_the_way))
                results += judged
                current = None
                progress(instance, judged)
                continue
            earlier: list[list[Result]] = []
            as_job = runs_as_job(CHECKS[instance.check])
            seat = seats[as_job]
            while True:
                abandoned = len(ABANDONED)
                outcome, worker = _measure(workers.pop(seat, None), instance, seat, dataset,
                                           getattr(progress, "said", lambda line: None))
                if worker is not None:
                    workers[seat] = worker
                left = [orphans.orphan(a.threads[0], instance.name) for a in ABANDONED[abandoned:] if a.threads]
                if left:
                    known += left
                    if record:
                        orphans.remember(record, left)
                judged = judge(instance, outcome)
                if len(earlier) < instance.retries and near_miss(judged, instance.retry_margin):
                    earlier.append(judged)
                    continue
                break
            notes = (not_the_job if as_job else "", wait.note)
            judged = _noted(_not_the_jobs(record_attempts(judged, earlier), notes[0]), notes[1])
            done[instance.name] = (judged, outcome)
            noted[instance.name] = notes
            results += judged
            current = None
            progress(instance, judged)
    except Interrupted as stop:
        for worker in workers.values():
            worker.kill()
        workers.clear()
        if current is not None:
            results += judge(current, Outcome(error=f"interrupted by {stop}"))
        for rest in pending:
            results += judge(rest, Outcome(error=f"not run: interrupted by {stop}"))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for worker in workers.values():
            worker.stop()
        node.close()
    results = _with_the_runs_faults(results, done, noted, config.instances, dataset)
    place = {instance.name: index for index, instance in enumerate(config.instances)}
    # stable: config order; then the one hint that reads another instance's verdict (``verdict.storage_first``)
    return storage_first(sorted(results, key=lambda result: place.get(result.instance, len(place))))


def _in_the_way(instance: Instance, known: list[orphans.Orphan]) -> str:
    """Why ``instance`` is not started: a process of this run or an earlier one is still stuck in the kernel under a
    path it reads (its ``path`` options, by name); "" when none is."""
    paths = [os.path.abspath(instance.options[o.name]) for o in CHECKS[instance.check].OPTIONS
             if o.kind == "path" and isinstance(instance.options.get(o.name), str) and instance.options[o.name]]
    for orphan in known:
        for path in paths:
            if orphan.blocks(path) and orphan.alive():
                return (f"not run: preflight's process {orphan.pid} (measuring `{orphan.instance}`, abandoned "
                        f"{orphan.since}) is still stuck in uninterruptible I/O at {orphan.path}, where reading "
                        f"{path} would stick another; {stuck.mount_of(orphan.path).advice()}")
    return ""


def _unmeasurable(instances: list[Instance], reason: str, progress: ProgressCallback) -> list[Result]:
    """Every metric of ``instances`` judged as not measured for ``reason`` (fail closed where it has a threshold)."""
    results: list[Result] = []
    for instance in instances:
        progress(instance, None)
        unit = {metric.name: metric.unit for metric in CHECKS[instance.check].METRICS}
        judged = judge(instance, Outcome(tuple(Measurement(name, None, unit[name], reason=reason) for name in unit)))
        results += judged
        progress(instance, judged)
    return results


def _noted(results: list[Result], note: str) -> list[Result]:
    """``results`` with ``note`` put before each one's own note ("" leaves them as they are)."""
    if not note:
        return results
    return [dataclasses.replace(r, note=f"{note}; {r.note}" if r.note else note) for r in results]


def _with_the_runs_faults(results: list[Result], done: Done, noted: Mapping[str, tuple[str, str]],
                          instances: Sequence[Instance], dataset: Dataset) -> list[Result]:
    """``results`` with each row that counts the dataset's faults (``Metric.counts_faults``) counting those that
    other checks of the run met under its ``path`` too: every file the run read belongs to the one dataset, so a
    storage row that read a share passes no file the DataLoader found unreadable after it (issue 43). Such an
    instance is judged again with its count raised and its note naming them."""
    for instance in instances:
        path = instance.options.get("path")
        faulty = {m.name for m in CHECKS[instance.check].METRICS if m.counts_faults}
        if not faulty or not isinstance(path, str) or not path or instance.name not in done:
            continue
        found = dataset.failures_under(path)
        own = {name for name, (_, reader) in found.items() if reader == instance.name}
        others = {name: met for name, met in found.items() if name not in own and met[1] != instance.name}
        judged, outcome = done[instance.name]
        if not others or outcome.error:
            continue
        named = sorted(others)
        said = (f"{len(named)} more found by {', '.join(sorted({reader or 'another check' for _, reader in others.values()}))} "
                f"in the files it read: {', '.join(named[:3])}{', ...' if len(named) > 3 else ''} "
                f"({others[named[0]][0]})")
        raised = Outcome(tuple(dataclasses.replace(m, value=float(m.value) + len(named), samples=(),
                                                   note="; ".join(filter(None, (m.note, said))))
                               if m.metric in faulty and isinstance(m.value, (int, float)) else m
                               for m in outcome.measurements), duration_s=outcome.duration_s)
        view, wait = noted.get(instance.name, ("", ""))
        again = _noted(_not_the_jobs(judge(instance, raised), view), wait)
        results = [r for r in results if r.instance != instance.name] + again
    return results


def _not_the_jobs(results: list[Result], note: str) -> list[Result]:
    """``results`` whose figure depends on who reads (``Metric.by_user``) and was measured, with ``note`` after
    their own: they were taken as someone other than the job ("" leaves them all as they are)."""
    if not note:
        return results
    return [dataclasses.replace(r, note=f"{r.note}; {note}" if r.note else note)
            if r.value is not None and getattr(r.declared, "by_user", False) else r for r in results]


def producers(instance: Instance) -> list[str]:
    """The instances whose figures ``instance``'s options read (``Option.measured_by``), in option order."""
    options = instance.options
    return [options[o.name]["from"] for o in CHECKS[instance.check].OPTIONS
            if o.measured_by and isinstance(options[o.name], dict)]


def ordered(instances: Sequence[Instance]) -> list[Instance]:
    """``instances`` in config order, except that each producer runs before the instances that read it.

    ``config`` refuses a producer that is missing or of the wrong check, and one check never reads
    its own kind, so there is no cycle; a producer left out (``--only``) is skipped here and its
    consumer says so (``resolve``).
    """
    by_name = {instance.name: instance for instance in instances}
    placed: list[Instance] = []

    def place(instance: Instance) -> None:
        if instance in placed:
            return
        for name in producers(instance):
            if name in by_name and name != instance.name:
                place(by_name[name])
        placed.append(instance)

    for instance in instances:
        place(instance)
    return placed


Done = Mapping[str, "tuple[Sequence[Result], Outcome]"]  # instance name -> its judged results and raw outcome


def resolve(instance: Instance, done: Done) -> Instance:
    """``instance`` with each option that reads a producer (``Produced``) given the fastest device's figure of the
    producer's run in ``done``, or the reason there is none (it did not run, errored, failed its own threshold or
    could not measure): the consumer then fails closed with that reason, never takes a figure from another run."""
    options = dict(instance.options)
    for option in CHECKS[instance.check].OPTIONS:
        wanted = options[option.name]
        if option.measured_by and isinstance(wanted, dict):
            options[option.name] = _figure(wanted, done)
    return instance._replace(options=options)


def _figure(wanted: Produced, done: Done) -> Produced:
    producer, metric = wanted["from"], wanted["metric"]
    if producer not in done:
        return {**wanted, "reason": f"the `{producer}` instance did not run (left out with --only?): run both"}
    judged, outcome = done[producer]
    if outcome.error:
        return {**wanted, "reason": f"the `{producer}` instance errored: {outcome.error}"}
    failed = next((r for r in judged if r.metric == metric and r.verdict == "fail"), None)
    if failed is not None:
        return {**wanted, "reason": f"`{failed.id}` failed: {failed.message}"}
    rows = [m for m in outcome.measurements if m.metric == metric]
    missing = next((m for m in rows if not isinstance(m.value, (int, float))), None)
    if missing is not None or not rows:
        where = f"[{missing.device}]" if missing is not None and missing.device else ""
        why = missing.reason if missing is not None else "the check reported no value"
        return {**wanted, "reason": f"`{producer}.{metric}{where}` was not measured: {why}"}
    values = [float(m.value) for m in rows]  # type: ignore[arg-type]
    return {**wanted, "value": max(values), "source": f"{producer}.{metric}, fastest of {len(values)} "
                                                       f"device{'s' if len(values) != 1 else ''}"}


def _measure(worker: Worker | None, instance: Instance, seat: Seat, dataset: Dataset,
             said: Callable[[str], None] = lambda line: None) -> tuple[Outcome, Worker | None]:
    """Run ``instance`` ``repeats`` times and combine each metric's runs (median of their values); ``said`` gets its
    progress lines.

    Any run's error is the outcome (fail closed); returns the worker to reuse, if any.
    """
    runs: list[Outcome] = []
    for _ in range(instance.repeats):
        if worker is None or worker.process.poll() is not None:
            worker = Worker(seat.place, seat.user)
        outcome, worker = _run_instance(worker, instance, dataset, said)
        if outcome.error:
            return outcome, worker
        runs.append(outcome)
    if len(runs) == 1:
        return runs[0], worker
    by_target: dict[tuple[str, str | None], list[Measurement]] = {}
    for outcome in runs:
        for m in outcome.measurements:
            by_target.setdefault((m.metric, m.device), []).append(m)
    combined = tuple(combine(repeats) for repeats in by_target.values())
    return Outcome(combined, duration_s=sum(outcome.duration_s for outcome in runs)), worker


def _run_instance(worker: Worker, instance: Instance, dataset: Dataset,
                  said: Callable[[str], None] = lambda line: None) -> tuple[Outcome, Worker | None]:
    """Run one instance; returns its outcome and the worker to reuse (None if it was killed)."""
    job = {
        "module": CHECKS[instance.check].__name__,
        "options": dict(instance.options),
        "duration_s": instance.duration_s,
        "timeout_s": instance.timeout_s,
        "instance": instance.name,  # for the fixes a check names ("set checkpoints.scratch_dir")
        "metrics": list(instance.budget.metrics or ()),  # the judged ones: a costly part only they need runs
        "option_where": dict(instance.option_where),  # FILE:LINE:COL, to name where the job's code was named
        "dataset": dataset.ledger,  # the run's one pass over the dataset, continued by every check
        "bounds": dict(instance.budget.bounds),  # the judged metrics' fixed bounds: how long to measure, not a verdict
        "max_duration_s": instance.max_duration_s,
    }
    scratch_dirs: list[str] = []
    start = time.monotonic()
    alive: Worker | None = worker
    left: list[stuck.Blocked] = []
    kept: list[str] = []
    try:
        measurements = worker.run(job, instance.timeout_s, scratch_dirs, said)
        outcome = Outcome(tuple(measurements), duration_s=time.monotonic() - start)
    except TimeoutError:
        worker.drain_scratch(scratch_dirs)
        before = worker.blocked()  # what it was doing at the timeout, before the kill ends the killable waits
        limit = pids.reached_now()  # and whether a pids limit refused a thread it waits on (tasks still held)
        left = worker.kill()
        alive = None
        error = (_stuck(left, f"at the {instance.timeout_s:g}s timeout") if left
                 else _timed_out(instance.timeout_s, before, limit))
        outcome = Outcome(error=error, duration_s=time.monotonic() - start)
    except WorkerDied as death:
        left = worker.kill()
        alive = None
        outcome = Outcome(error=_stuck(left, "as it died") if left else str(death),
                          duration_s=time.monotonic() - start)
    except RuntimeError as error:
        outcome = Outcome(error=str(error), duration_s=time.monotonic() - start,
                          config_error=isinstance(error, ConfigMistakeReply))
    except BaseException:  # Interrupted (SIGTERM/SIGINT): clean up, then let run() report it
        worker.drain_scratch(scratch_dirs)
        left = worker.kill()
        raise
    finally:
        kept = _remove_scratch(scratch_dirs, [stuck.mount_of(b.path).mount_point for b in left if b.path])
    if kept and outcome.error:
        outcome = outcome._replace(error=f"{outcome.error}; its scratch is left at {', '.join(kept)}: remove it "
                                         f"once the mount answers")
    return outcome, alive


def _timed_out(timeout_s: float, before: list[stuck.Blocked], limit: str | None = None) -> str:
    """The error of a check killed at its timeout that then went: a slow node, unless it sat in the kernel on a file
    or a pids limit was reached (``limit``, ``pids.reached_now``: a thread it waited on could not start)."""
    text = f"timed out after {timeout_s:g}s and was killed"
    if limit:
        return f"{text}; {limit}"
    waiting = next((b for b in before if b.path), None)
    if waiting is None:
        return f"{text}; raise `timeout` in thresholds.yaml if the node is slow"
    mount = stuck.mount_of(waiting.path)
    return (f"{text}; at the timeout it was in uninterruptible I/O at {waiting.path} ({waiting.where()}), on "
            f"{mount.fstype} at {mount.mount_point} ({mount.source}): raise `timeout` if that mount is only slow; "
            f"if its server or daemon is gone, a longer one will not help")


def _stuck(left: list[stuck.Blocked], when: str) -> str:
    """The error of a check whose worker would not die: the file and mount it is stuck on, and the fix."""
    first = left[0]
    pids = sorted({b.pid for b in left})
    named = ", ".join(map(str, pids))
    what = (f"stuck in uninterruptible I/O at {first.path or 'a file it did not name'} ({first.where()}): "
            f"killed {when}, still there {KILL_GRACE_S:g}s later, so the run went on without it (process"
            f"{'es' if len(pids) > 1 else ''} {named} left behind until the request completes or is aborted)")
    if not first.path:
        return f"{what}; check the filesystems the check reads and `dmesg`; a longer `timeout` will not help"
    return f"{what}; {stuck.mount_of(first.path).advice()}"


REMOVE = "import shutil, sys\nfor path in sys.argv[1:]:\n    shutil.rmtree(path, ignore_errors=True)\n"


def _remove_scratch(paths: list[str], dead_mounts: list[str]) -> list[str]:
    """Remove a worker's scratch directories from a child process, waiting at most ``SCRATCH_WAIT_S``.

    The runner never touches the filesystem under test itself: an ``rmtree`` on a mount that does not
    answer would hold the run (and the node lock) forever. Scratch on ``dead_mounts`` is not tried;
    returns those paths, left in place.
    """
    mine = [path for path in paths if scratch.PREFIX in os.path.basename(path.rstrip(os.sep))]
    kept = [path for path in mine if any(stuck.contains(mount, path) for mount in dead_mounts)]
    doomed = [path for path in mine if path not in kept]
    if doomed:
        try:
            child = subprocess.Popen([sys.executable, "-I", "-S", "-c", REMOVE, *doomed], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            return kept
        try:
            child.wait(timeout=SCRATCH_WAIT_S)
        except subprocess.TimeoutExpired:
            ABANDONED.append(Abandoned(child, (child.pid,), f"removing scratch {', '.join(doomed)}"))
    return kept
