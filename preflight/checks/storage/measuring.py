"""The storage check's measuring: the walk of the data, facts, then each group of I/O metrics isolated.

Imported by ``storage.measure`` when the check runs (see the package's docstring for the method). The walk comes first
(``Budget.walk_s``, never raising): the filesystem holding most of the bytes is the one every row measures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import errno
import os
from typing import Any, Callable, Iterator, Mapping, Sequence

from preflight.checks import dataset_path, subject
from preflight.checks.base import Budget, Metric
from preflight.checks.storage import measure_io
from preflight.checks.storage.data import Found, survey
from preflight.checks.storage.facts import facts, os_error_reason
from preflight.host.fsinfo import Filesystem, filesystem_of
from preflight.io.dataset import Spent
from preflight.io.dataset_walk import UNREADABLE, DataFile, describe_files
from preflight.io.scratch import choose_parent, ran_out, scratch_dir
from preflight.measurement import Measurement, unmeasurable
from preflight.units import format_value

# The rows whose figures come from the files the walk found (the facts and the writes do not).
BUILT_ON_WALK = ("filesystem", "unreadable_files", "seq_read", "rand_read", "rand_read_p50", "rand_read_p99",
                 "small_files", "small_files_bandwidth")
SCAN_SHARE = 0.85  # of the timeout, where scan: all stops reading, so the rows are reported before the kill
SHARDS_HINT = ("small files read at {small:.0f} MB/s against {seq:.0f} MB/s sequential: pack them into shards "
               "(WebDataset tar, LMDB, TFRecord) so each read is large")


def measure(options: Mapping[str, Any], budget: Budget, metrics: Sequence[Metric]) -> list[Measurement]:
    """Measure every one of ``metrics`` on ``options["path"]``; unmeasurable ones say why in one line."""
    options, dataset_named = subject.named(options)
    path, instance = options["path"], budget.named("storage")  # "checkpoints" names its own options in fixes
    deadline = time.monotonic() + budget.timeout_s * SCAN_SHARE  # where a scan: all stops, the rows still reported
    mount = dataset_path.mounted(path)  # where a `mounted` threshold is declared, a missing path is the node's
    missing = dataset_path.reason(path, instance, directory=False, mount_required=budget.requires("mounted"))
    if missing:
        return [mount] + [unmeasurable(m.name, missing, m.unit) for m in metrics if m.name != "mounted"]
    for option in ("block_size", "rand_block"):
        if int(options[option]) % 4096:
            reason = f"{instance}.{option} must be a multiple of 4 KiB for O_DIRECT, found {options[option]} B"
            return [unmeasurable(m.name, reason, m.unit) for m in metrics]
    budget = budget.with_dataset()
    found = survey(path, int(options["data_size"]), int(options["small_file_size"]), dataset_path.max_files(options),
                   budget.walk_s, budget.dataset)
    home = subject.bytes_home(found.files, path)
    fs, device = _filesystem(home, path), subject.device_of(home)
    results = facts(fs, path if subject.device_of(path) == device else fs.mount_point, _where_note(found, path, fs))
    results.append(mount)
    results += _walk_metrics(found, path)
    results = subject.labelled(results, "dataset", metrics)
    parent, no_scratch = choose_parent(path, options["scratch_dir"], f"{instance}.scratch_dir")
    with _scratch(parent, path, instance) as (scratch, scratch_error):
        io = measure_io.IO(options, budget, fs, scratch, no_scratch or scratch_error, device, dataset_named)
        results += _isolated(lambda: io.reads(found), measure_io.READ_METRICS, path, instance, scratch)
        results += _isolated(lambda: io.small(found), (("small_files", "files/s"), ("small_files_bandwidth", "MB/s")),
                             path, instance, scratch)
        asked = [(name, unit) for name, unit in (("seq_write", "MB/s"), ("fsync_p99", "ms")) if budget.wants(name)]
        if asked:  # scratch writes on the dataset's volume only for a configuration that judges them
            results += _isolated(io.writes, asked, path, instance, scratch)
        if options.get("scan") == "all":  # every file no part read, read once, before the faults are counted
            said = io.scan(found, max(0.0, deadline - time.monotonic()))
            results = [dataclasses.replace(m, note="; ".join(filter(None, (m.note, said))))
                       if m.metric == "unreadable_files" else m for m in results]
        results = _failed_reads(results, io.failed, found)
        results = _sampled(results, budget.dataset.touched_count([f.name for f in found.files]), len(found.files))  # type: ignore[union-attr]
    results = _reached(results, found, path)
    caveat = fs.caveat()
    if caveat and fs.kind != "memory":
        results = [_with_hint(m, f"the data under {path} is on {fs.fstype} ({caveat}): mount the dataset volume itself")
                   for m in results]
    if not dataset_named:
        about_data = {m.name for m in metrics if m.about_data}
        results = [dataclasses.replace(m, subject="no_dataset", hint=subject.no_dataset_fix(instance))
                   if m.metric in about_data and m.measured else m for m in results]
    return _shards_hint(results)


def _filesystem(home: str, path: str) -> Filesystem:
    """The filesystem of ``home`` (a dataset file), or of ``path`` when that file was deleted meanwhile."""
    try:
        return filesystem_of(home)
    except OSError:
        return filesystem_of(path)


def _where_note(found: Found, path: str, fs: Filesystem) -> str:
    """What the ``filesystem`` row adds when the data is not all on ``path``'s filesystem: where its links lead, or
    which filesystems hold what share; only the one with the most bytes is measured."""
    if not found.devices:
        return ""
    if len(found.devices) > 1:
        files, size = len(found.files), sum(f.size for f in found.files)

        def share(group: list[DataFile]) -> str:  # "850 (85%) and 93.5 MB (85%)": of the files, of the bytes
            group_size = sum(f.size for f in group)
            return (f"{len(group)} ({_percent(len(group), files)}) and {format_value(group_size / 1e6, 'MB')} "
                    f"({_percent(group_size, size)})")

        others = [f"{_filesystem(subject.bytes_home(group, path), path).describe()} holds {share(group)}"
                  for group in found.devices[1:4]]
        more = f"; {len(found.devices) - 4} more filesystems hold the rest" if len(found.devices) > 4 else ""
        return (f"the data under {path} lies on {len(found.devices)} filesystems (shares of the {files} data files"
                f"{' the walk reached' if found.walk.stopped else ''} and of their bytes): {fs.describe()} holds "
                f"{share(found.devices[0])}, the most bytes, and is measured; {'; '.join(others)}{more}: not measured")
    try:
        own = os.stat(path).st_dev
    except OSError:
        return ""
    if own == found.devices[0][0].device:
        return ""
    return (f"{path} links here: its {describe_files(found.devices[0])} lie on this filesystem, where the job's "
            f"open() lands; {path} itself is on {filesystem_of(path).describe()}")


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "0%"


def _reached(results: list[Measurement], found: Found, path: str) -> list[Measurement]:
    """Every figure built on a walk that stopped before the end says so, once: which files it reached."""
    reached = found.walk.reached(found.files, path)
    if not reached:
        return results
    return [dataclasses.replace(m, note="; ".join(n for n in (m.note, reached) if n))
            if m.measured and m.metric in BUILT_ON_WALK and found.walk.cut() not in m.note else m for m in results]


def _walk_metrics(found: Found, path: str) -> list[Measurement]:
    """``unreadable_files`` and ``skipped_files`` from the walk that chose the data."""
    walk = found.walk
    method = f"walk of {path}: {walk.looked_at} entries looked at, {len(found.files)} data files"
    unreadable = walk.unreadable()
    return [
        Measurement("unreadable_files", float(unreadable), "", method=method,
                    note=f"{walk.summary(UNREADABLE)}: the job stops at the first with PermissionError" if unreadable else ""),
        Measurement("skipped_files", float(sum(walk.skipped.values())), "", method=method, note=walk.summary()),
    ]


def _failed_reads(results: list[Measurement], failed: set[str], found: Found) -> list[Measurement]:
    """``unreadable_files`` with the files whose reads failed with EIO added, the first named: ``open()`` and
    ``stat()`` succeed on them, only a read (and the job's worker) fails."""
    if not failed:
        return results
    named = sorted(failed)
    first = ", ".join(named[:3]) + (", ..." if len(named) > 3 else "")
    said = f"{len(named)} of {len(found.files)} files cannot be read (I/O error): {first}"
    return [dataclasses.replace(m, value=float(m.value or 0) + len(named), samples=(),
                                note="; ".join(n for n in (said, m.note) if n))
            if m.metric == "unreadable_files" and m.measured else m for m in results]


def _sampled(results: list[Measurement], read: int, found: int) -> list[Measurement]:
    """``unreadable_files`` saying how much of the dataset was read, where the reads took a share of it: a read error
    in a file no check read does not show, so its 0 is "none in the files read" (issue 43)."""
    if read >= found:
        return results
    said = f"reads over {read} of the {found} files found: a file not read shows no read error (scan: all reads them)"
    return [dataclasses.replace(m, note="; ".join(n for n in (m.note, said) if n))
            if m.metric == "unreadable_files" and m.measured else m for m in results]


def _isolated(measure_group: Callable[[], list[Measurement]], metrics: Sequence[tuple[str, str]],
              path: str, instance: str, scratch: str | None) -> list[Measurement]:
    """Run one group of metrics; an OSError makes just that group unmeasurable, with its reason and fix (naming
    ``instance``'s options, and on ENOSPC whether inodes or bytes ran out in ``scratch``), and so does a pass
    with nothing left for the group to read once (``Spent`` before its first sample)."""
    try:
        return measure_group()
    except Spent as spent:
        reason = (f"nothing left to read for the first time under {path} ({spent}): the checks before it read the "
                  f"whole dataset; point {instance}.path at more of it or run {instance} alone (--only)")
        return [unmeasurable(name, reason, unit) for name, unit in metrics]
    except OSError as error:
        reason = os_error_reason(error, path, instance, scratch or "")
        return [unmeasurable(name, reason, unit) for name, unit in metrics]


@contextlib.contextmanager
def _scratch(parent: str | None, path: str, instance: str) -> Iterator[tuple[str | None, str]]:
    if parent is None:
        yield None, ""
        return
    try:
        context = scratch_dir(parent, protect=path)
        directory = context.__enter__()
    except OSError as error:
        full = ran_out(parent) if error.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        yield None, (f"cannot create scratch space in {parent} ({error.strerror}{f': {full}' if full else ''}): "
                     f"{'delete files there or ' if full else ''}set {instance}.scratch_dir to a writable directory "
                     f"on the volume to measure")
        return
    try:
        yield directory, ""
    finally:
        context.__exit__(None, None, None)


def _with_hint(m: Measurement, hint: str) -> Measurement:
    if not m.measured or m.hint or m.unit == "text":
        return m
    return dataclasses.replace(m, hint=hint)


def _shards_hint(results: list[Measurement]) -> list[Measurement]:
    by_name = {m.metric: m for m in results}
    seq, small = by_name.get("seq_read"), by_name.get("small_files_bandwidth")
    if not (seq and small and seq.measured and small.measured) or small.value >= 0.25 * seq.value:  # type: ignore[operator]
        return results
    hint = SHARDS_HINT.format(small=small.value, seq=seq.value)
    # Packing is no fix for scratch elsewhere nor for no dataset named: their own hints say what to do.
    return [dataclasses.replace(m, hint=hint) if m.metric in ("small_files", "small_files_bandwidth")
            and m.subject not in ("scratch_elsewhere", "no_dataset") else m for m in results]
