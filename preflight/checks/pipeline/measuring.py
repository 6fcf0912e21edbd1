"""The pipeline check's measuring: the step alone, then the step fed by the DataLoader, and the share lost waiting.

Imported by ``pipeline.measure`` when the check runs (see the package's docstring for the method).
The loader comes from ``loading``, the step and its timing from ``training``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Mapping, Sequence

from preflight.checks import subject, usercode
from preflight.checks.base import Budget, UserCodeError
from preflight.loading.footprint import shared_memory
from preflight.loading.loop import EPOCH_ENDED, Epochs, explaining_worker_oom
from preflight.loading.source import Loader, Source, loader_for, opened
from preflight.loading.user import Uncountable
from preflight.training import build
from preflight.training.timed import describe, failing_step, interleaved, new_step, unsupported, user_step
from preflight.training.step import TrainingStep, Window, first_tensor
from preflight.checks.pipeline import phases, sweep
from preflight.host import gpu
from preflight.measurement import Measurement, unmeasurable
from preflight.units import format_value

NAMES = ("samples_per_s", "model_samples_per_s", "input_bound")
UNITS = {"samples_per_s": "samples/s", "model_samples_per_s": "samples/s", "input_bound": "%",
         "recommended_num_workers": ""}


@explaining_worker_oom
def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Every pipeline metric on the first visible CUDA device, else on the CPU (each row's note says so); none
    when torch counts GPUs it cannot open (``TorchView.unopened``)."""
    view = gpu.TorchCuda().view()
    if view.unopened:  # GPUs the job's torch counts but cannot open: a CPU figure would stand in for them
        return _unmeasurable(_names(options), view.reason, None)
    device = f"cuda:{view.devices[0].index}" if view.devices else "cpu"
    note = "" if view.devices else f"measured on the CPU: {view.reason}"
    with usercode.on_path(options["python_path"]):
        results = _measure(options, budget, device)
    return [dataclasses.replace(m, note="; ".join(filter(None, (note, m.note)))) if note and m.measured else m
            for m in results]


def _names(options: Mapping[str, Any]) -> tuple[str, ...]:
    """The metrics a run with ``options`` reports: ``recommended_num_workers`` only with ``worker_sweep``."""
    return NAMES + (("recommended_num_workers",) if options["worker_sweep"] else ())


def _measure(options: Mapping[str, Any], budget: Budget, device: str) -> list[Measurement]:
    names = _names(options)
    reason = unsupported(options, device)
    if reason:
        return _unmeasurable(names, reason, device)
    try:
        model = build.build(options)
    except build.Unavailable as error:
        return _unmeasurable(names, str(error), device)
    except UserCodeError as error:
        raise usercode.UserCodeRaised(f"pipeline.{error.option}: {error}") from None
    method = describe(options, device)
    with user_step(options, device):
        with failing_step(options, device) as failed:
            step = new_step(model, options, device)
            step()  # a model that cannot train fails here, before any loader starts
        if failed:
            return _unmeasurable(names, failed[0], device)
        fed_names = tuple(name for name in names if name != "model_samples_per_s")
        with opened(options, budget, "pipeline") as source:
            if isinstance(source, str):
                alone, stopped = interleaved((step,), device, budget)
                return [_model_rate(alone, device, method, stopped), *_unmeasurable(fed_names, source, device)]
            loader = loader_for(options, source)
            shm = shared_memory.need(options, source, loader)  # workers that would die of /dev/shm are not started
            if isinstance(shm, shared_memory.Need) and shm.short:
                alone, stopped = interleaved((step,), device, budget)
                return [_model_rate(alone, device, method, stopped),
                        *_unmeasurable(fed_names, shm.why_not_started(fix=True), device)]
            feed = Feed(loader, step, options["input_shape"], loader.workers * (loader.prefetch_factor or 0))
            phase = budget.split(phases(options))
            try:
                pairs, stopped = interleaved((step, feed), device, phase)
            except Uncountable as error:  # the batches' samples cannot be counted: the model alone still can be
                uncounted = str(error)
            else:
                uncounted = ""
            if uncounted:
                del feed  # its workers exit before the model is timed alone (the error's frames held it till here)
                alone, stopped = interleaved((step,), device, budget)
                return [_model_rate(alone, device, method, stopped), *_unmeasurable(fed_names, uncounted, device)]
            first, fs = feed.loader.first_pass, feed.loader.fs
            reread = first is not None and first.passes > 1  # the loop ran past the first epoch: it says so
            end_to_end = Measurement("samples_per_s", samples=tuple(p[1].samples_per_s for p in pairs),
                                     unit="samples/s", device=device, stopped=stopped,
                                     note="; ".join(filter(None, (source.note, first.describe() if reread else ""))),
                                     method=f"{feed.loader.method}, {feed.fed}; step: {method}",
                                     cache_bound=source.cache_bound,  # the job's files stayed in memory
                                     subject=subject.of_reads(source.subject, reread, fs))
            bound = input_bound(pairs, end_to_end, device)
            results = [end_to_end, _model_rate(pairs, device, method, stopped), bound]
            if options["worker_sweep"]:
                del feed  # its workers exit before the sweep's pools start
                swept = sweep.measure(_fed_shares(options, source, step, device), loader.workers, phase, device,
                                      float(bound.value), f"{loader.method}; step: {method}")  # type: ignore[arg-type]
                results.append(dataclasses.replace(swept, subject=source.subject))
    return results


def _model_rate(windows: Sequence[tuple[Window, ...]], device: str, method: str, stopped: str) -> Measurement:
    return Measurement("model_samples_per_s", samples=tuple(w[0].samples_per_s for w in windows), unit="samples/s",
                       device=device, method=method, stopped=stopped)


def shares(pairs: Sequence[tuple[Window, Window]], device: str) -> tuple[float, ...]:
    """The share of each fed window's time the device waited for data, per pair of interleaved windows (model
    alone, then fed), in %.

    On a GPU, ``100 x (1 - fed / alone)`` samples/s: the loader's workers run on the CPUs, so the step's device
    time fed is its time alone, and what a fed step takes beyond it the device spent idle (a host wait that the
    device's queued work covers is not counted: a host clock there said 60 % waiting where the GPU waited 10 %,
    lightly-ai/lightly-train#749). On the CPU the device is the cores the workers use too: a fed
    step runs slower than alone because they take CPU, not because it waits, and ``1 - fed / alone`` counted that
    as waiting (54 % where the training loop's own wait was 8 %, bench/pipeline_vs_loop.py). There every op is
    synchronous, so the share is what the fed steps measured: the host time in the loader's next batch and its
    copy over the window's (``Window.wait_ms``), as pytorch/examples' ImageNet loop reports ``data_time`` of
    ``batch_time``. Never negative: a pipeline cannot outrun its model, so a GPU pair where it seems to is noise, 0.
    """
    if not device.startswith("cuda"):
        return tuple(min(100.0, 100 * (fed.wait_ms or 0.0) / sum(fed.step_ms)) for _, fed in pairs)
    return tuple(max(0.0, 100 * (1 - fed.samples_per_s / alone.samples_per_s)) for alone, fed in pairs)


def input_bound(pairs: Sequence[tuple[Window, Window]], end_to_end: Measurement, device: str) -> Measurement:
    """``shares`` of the pairs of interleaved windows (model alone, then fed) on ``device``, in %; the median is the
    value."""
    fed = float(end_to_end.value)  # type: ignore[arg-type]
    model = sorted(p[0].samples_per_s for p in pairs)[len(pairs) // 2]
    rule = ("1 - end-to-end / model-alone samples/s" if device.startswith("cuda") else
            "the fed steps' host time waiting for the next batch (and its copy) / the fed window's time (the CPU: "
            "the workers share its cores with the step)")
    method = (f"{rule}, per pair of interleaved windows, median of {len(pairs)} "
              f"pairs (medians: {format_value(fed, 'samples/s')} / {format_value(model, 'samples/s')})")
    hint = (f"the device waits for data: the loader delivers {format_value(fed, 'samples/s')}, the model alone "
            f"trains {format_value(model, 'samples/s')}: raise num_workers if CPUs are idle, keep pin_memory on, use "
            f"a faster volume or shards (WebDataset, LMDB); the dataloader check over the same data shows the loader "
            f"alone")
    return Measurement("input_bound", samples=shares(pairs, device), unit="%", device=end_to_end.device, method=method,
                       stopped=end_to_end.stopped, hint=hint, note=end_to_end.note, subject=end_to_end.subject)


def _fed_shares(options: Mapping[str, Any], source: Source, step: TrainingStep,
                device: str) -> Callable[[int, Budget], tuple[float, ...]]:
    """The sweep's rate at ``n`` workers: 100 % - input_bound of each pair of windows, the step alone and fed by a
    fresh loader over ``source`` with ``options`` but ``n`` workers, interleaved within the count's ``share``."""

    def at(workers: int, share: Budget) -> tuple[float, ...]:
        loader = loader_for({**options, "num_workers": workers}, source)
        feed = Feed(loader, step, options["input_shape"], loader.workers * (loader.prefetch_factor or 0))
        pairs, _ = interleaved((step, feed), device, share)
        return tuple(100 - bound for bound in shares(pairs, device))  # its workers exit as feed goes out of scope

    return at


class Feed:
    """One end-to-end step: the loader's next batch onto the device, then the training step; returns its samples.

    The batch's first tensor is the step's input when its per-sample shape is ``input_shape``;
    otherwise (file samples are byte counts) the step trains on its synthetic on-device batch.
    ``fed`` says which, for the method column. Samples are counted as the dataloader check counts
    them (``Loader.fresh``: for the job's map-style Dataset, its batch sampler's indices).
    """

    def __init__(self, loader: Loader, step: TrainingStep, input_shape: Sequence[int], prefetched: int = 0) -> None:
        self.loader, self.step, self.shape = loader, step, tuple(input_shape)
        self.prefetched = prefetched  # batches the workers hold ready at most: workers x prefetch_factor
        # one for the whole run, read epoch after epoch as a job's loop reads it
        dataloader, self.count = loader.fresh()
        self.epochs = Epochs(dataloader)
        self.fed = "no batch yet"
        self.waited_ms = 0.0  # host time spent in the loader's next batch and its copy to the device, all calls
        self.workers = max(1, loader.workers)

    def __call__(self) -> int:
        start = time.perf_counter()
        batch = self.epochs.next()
        samples, _ = self.count(batch)
        inputs = first_tensor(batch)
        if inputs is not None and tuple(inputs.shape[1:]) == self.shape:
            self.fed = f"each batch's {'x'.join(map(str, self.shape))} tensor fed to the model"
            moved = self.step.as_input(inputs)
            self.waited_ms += 1e3 * (time.perf_counter() - start)
            self.step(moved)
        else:
            self.waited_ms += 1e3 * (time.perf_counter() - start)
            shape = "none" if inputs is None else "x".join(map(str, inputs.shape[1:]))
            self.fed = (f"batches hold no {'x'.join(map(str, self.shape))} tensor (per-sample shape {shape}): the "
                        f"step trains on its on-device batch after each batch arrives")
            self.step()
        return samples

    def settle(self) -> None:
        """Take, untimed, the batches the workers prefetched while the model ran alone, then step ``prefetched``
        times untimed on new ones.

        A job's loader never pauses, so a slow one's queue is empty in steady state; after an alone window it is
        full, and a fed window started then would count up to ``prefetched`` batches it never waited for (a
        throttled one-worker loader measured 93 samples/s where it can make 50). Those batches are taken without
        training on them: stepping on them gave the workers the steps' time to make the next ones, which the
        window then found ready (2 workers at 2 ms a sample: 850 samples/s where a training loop gets 725,
        bench/pipeline_vs_loop.py). Only the current epoch's batches can be prefetched: the next epoch's pool has
        made none yet, so the draining stops at the epoch's end. The untimed steps after them are the loop's: a
        fast loader's workers refill its queue there, as they do beside a job's steps, and a slow one's queue is
        empty when the window starts. They go on to the end of a round of the workers' batches, or of the epoch,
        so the window, whole rounds too (``round_steps``), starts and ends where a round does.
        """
        for _ in range(self.prefetched):
            if self.epochs.next(new_epoch=False) is EPOCH_ENDED:
                break
        for _ in range(self.prefetched):
            self()
        epoch = self.epochs.epochs
        while self.epochs.position % self.round_steps and self.epochs.epochs == epoch:
            self()

    @property
    def round_steps(self) -> int:
        """A window's steps: whole rounds of the workers' batches, at most an epoch's (an epoch of fewer batches
        than workers holds one round of them), known once an epoch ended."""
        return min(self.workers, self.epochs.epoch_batches or self.workers)


def _unmeasurable(names: Sequence[str], reason: str, device: str | None) -> list[Measurement]:
    return [unmeasurable(name, reason, UNITS[name], device) for name in names]
