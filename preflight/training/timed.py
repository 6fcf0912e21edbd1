"""The training step timed: warm-up, then windows of steps, alone or interleaved with other kinds of step.

Used by the model check (the step alone on each device) and the pipeline check (the step alone and fed by the
job's DataLoader, interleaved). Method: NVIDIA Deep Learning Examples' ``benchmark_training`` (docs/checks.md).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping, Sequence

from preflight.checks import usercode
from preflight.checks.base import Budget
from preflight.host import gpu
from preflight.sampling import sample
from preflight.training.options import BUILTIN
from preflight.training.step import TrainingStep, Window, timeline_for, window

WARMUP_STEPS = 3  # then one discarded window: cuDNN autotuning, the caching allocator's growth, clocks ramping up


def unsupported(options: Mapping[str, Any], device: str) -> str:
    """Why ``options`` cannot run on ``device`` (bf16 before Ampere, channels_last on a non-image input), or ""."""
    if options["channels_last"] and len(options["input_shape"]) != 3:
        return (f"channels_last needs an image input_shape (C, H, W), found {options['input_shape']}: set "
                f"channels_last: false")
    if options["precision"] == "bf16" and device.startswith("cuda"):
        return _bf16_unsupported(device)
    return ""


def _bf16_unsupported(device: str) -> str:
    if gpu.TorchCuda().bf16_native(int(device.split(":")[1])):
        return ""
    return f"{device} has no bf16 Tensor Cores (bf16 needs compute capability 8.0, Ampere, or newer): use fp16"


def new_step(model: Any, options: Mapping[str, Any], device: str) -> TrainingStep:
    """The training step ``options`` describe, on ``device``."""
    return TrainingStep(model, device, list(options["input_shape"]), int(options["batch_size"]),
                        options["precision"], bool(options["channels_last"]), int(options["num_classes"]))


def timed(step: Callable[[], int], device: str, budget: Budget) -> tuple[list[Window], str]:
    """Warm up, then windows of back-to-back steps through ``sampling.sample``; the windows and why it stopped.

    Algorithm::

        run WARMUP_STEPS steps, then one window of budget/10 s, and discard them
        repeat (sampling.sample, at least 5 windows, stop on spread <= 5% or the budget):
            run steps for budget/10 s, each boundary marked (CUDA events or host clock)
            window rate = samples / sum(step times)
    """
    windows, stopped = interleaved((step,), device, budget)
    return [w[0] for w in windows], stopped


def interleaved(steps: Sequence[Callable[[], int]], device: str, budget: Budget) -> tuple[list[tuple[Window, ...]], str]:
    """``timed`` for several kinds of step at once: each sample is one window of each, in turn.

    Interleaving puts a shared machine's changing load on every kind alike, so their ratio holds
    where two phases run one after the other would not. With several steps, the budget is
    ``budget.duration_s`` per step and sampling stops on the spread of the last step's rate over
    the first's; with one, on the spread of its rate.
    """
    with _autotuned(device):
        seconds = max(0.05, budget.duration_s / 10)
        timeline = timeline_for(device)
        for step in steps:
            for _ in range(WARMUP_STEPS):
                step()
            window(step, timeline(), seconds)
        taken: list[tuple[Window, ...]] = []

        def one() -> float:
            taken.append(tuple(window(settled(step), timeline(), seconds) for step in steps))
            return taken[-1][-1].samples_per_s / (taken[-1][0].samples_per_s if len(steps) > 1 else 1.0)

        stopped = sample(one, budget.duration_s * len(steps), warmup=0, min_samples=5, target_spread=0.05).stopped
    return taken, stopped


def settled(step: Callable[[], int]) -> Callable[[], int]:
    """``step`` after its ``settle()``, where it has one (``pipeline.Feed``: its workers kept prefetching while
    the other kinds of window ran), so each of its windows starts in steady state."""
    settle = getattr(step, "settle", None)
    if settle is not None:
        settle()
    return step


def describe(options: Mapping[str, Any], device: str) -> str:
    """The method, for the report: model, precision, layout, batch, optimizer and clock."""
    shape = "x".join(map(str, options["input_shape"]))
    layout = ", channels_last" if options["channels_last"] else ""
    scaler = " with GradScaler" if options["precision"] == "fp16" and device.startswith("cuda") else ""
    clock = "CUDA events between steps" if device.startswith("cuda") else "host clock (CPU)"
    return (f"{options['model']} {options['precision']}{scaler}{layout}, batch {options['batch_size']} x {shape} "
            f"synthetic on {device}, SGD step, {WARMUP_STEPS} steps + 1 window warm-up discarded, {clock}")


@contextlib.contextmanager
def user_step(options: Mapping[str, Any], device: str) -> Iterator[None]:
    """Name the job's own code when its model raises during a step (``usercode.blame``), as the dataloader does."""
    try:
        yield
    except Exception as error:  # noqa: BLE001  only the job's own exceptions are re-worded
        if options["model"] in BUILTIN or not usercode.blame_frames(error):
            raise
        raise usercode.UserCodeRaised(f"model.model: {usercode.blame(error)}: raised while training a step on "
                                      f"{device}") from None


@contextlib.contextmanager
def failing_step(options: Mapping[str, Any], device: str) -> Iterator[list[str]]:
    """Turn the device running out of memory, or a built-in model failing, into a reason (appended to the
    yielded list), with the fix; the job's own model's errors go on to ``user_step``."""
    import torch

    failed: list[str] = []
    try:
        yield failed
    except torch.OutOfMemoryError as error:
        first = (str(error).strip().splitlines() or ["out of memory"])[0]
        failed.append(f"{device} ran out of memory for {options['model']} at batch_size {options['batch_size']} "
                      f"({first[:160]}): lower batch_size, or free the GPU (another process holds memory: nvidia-smi)")
    except RuntimeError as error:
        if options["model"] not in BUILTIN:
            raise
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        failed.append(f"the {options['model']} step failed on {device} ({first[:200]}): check input_shape "
                      f"{options['input_shape']} (C, H, W) and precision; on a GPU, dmesg for Xid errors")
    finally:
        if device.startswith("cuda"):
            torch.cuda.empty_cache()  # gpu-only


@contextlib.contextmanager
def _autotuned(device: str) -> Iterator[None]:
    """``device`` current (events record on its stream, not cuda:0's) and cuDNN picking its fastest kernels during
    warm-up (``cudnn.benchmark``, as NVIDIA's training scripts set it); both restored afterwards."""
    import torch

    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = device.startswith("cuda")
    try:
        with torch.cuda.device(torch.device(device)) if device.startswith("cuda") else contextlib.nullcontext():
            yield
    finally:
        torch.backends.cudnn.benchmark = saved
