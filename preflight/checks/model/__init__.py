"""Training-step throughput of a model on each visible CUDA device: compute only, no data loading.

One step is what a training loop does per batch: forward, loss, backward, ``optimizer.step()``
(SGD with momentum) and ``zero_grad``, on a synthetic batch created once on the device, so no
input pipeline or host-to-device copy is in the figure (``step``). The model is torchvision's
``resnet18``/``resnet50`` (``weights=None``: nothing is downloaded; torchvision is not a
dependency: installed to match the image's torch, ``build.vision_fix``), the built-in ``tiny``
CNN (for smoke tests, not a benchmark), or the job's own ``"package.module:factory"`` (imported with ``python_path`` as the dataloader's
``dataset`` is, called with ``model_args``; ``build``). ``precision`` runs the step under
``torch.autocast`` (bf16, or fp16 with a ``GradScaler`` on CUDA); ``channels_last`` puts the
model and input in NHWC memory format.

Method: as NVIDIA Deep Learning Examples' ``benchmark_training`` mode and MLPerf Training report
throughput: warm-up steps are discarded (cuDNN autotuning, allocator growth), then timed windows
of back-to-back steps through ``sampling.sample``; samples/s of a window = batch_size x steps /
the window's time, median of windows compared. On CUDA the step boundaries are CUDA events on
the device's stream (no host sync between steps, as in a real loop; ``timeline``); on a CPU-only
node the model runs on the CPU, timed with the host clock, and every row says so.
"""

from __future__ import annotations

# This module holds the check's tables, which `validate`, `list` and `explain` read; the measuring
# code (`measuring`) is imported only when the check runs, to keep their start-up short
# (bench/cli_startup.py).

from typing import Any, Mapping

from preflight.checks.base import Budget, Metric, Option
from preflight.measurement import Measurement

NAME = "model"
HELP = "training-step samples/s and step time p50/p99 of resnet18/50 or the job's own model on each GPU, compute only"
DURATION = "timed windows of training steps on each device, after warm-up steps: duration per device"
BUILTIN = ("resnet18", "resnet50", "tiny")  # names that are not "package.module:factory"
OPTIONS = (
    Option("model", "code", "resnet50", "resnet18 | resnet50 (torchvision, installed to match the image's torch, "
           "random weights) | tiny (a built-in 3-conv CNN for smoke tests) | \"package.module:factory\" returning "
           "the job's torch.nn.Module", choices=BUILTIN),
    Option("model_args", "mapping", {}, "keyword arguments passed to the model factory ({depth: 50})",
           for_factory=("model",)),
    Option("python_path", "paths", [], "directories put first on sys.path to import the model factory (relative "
           "to this file), e.g. [src]", for_factory=("model",)),
    Option("input_shape", "shape", [3, 224, 224], "shape of one sample, without the batch dimension (C, H, W)"),
    Option("batch_size", "int", 64, "samples per step, per device (compare published figures at their batch size)",
           minimum=1),
    Option("precision", "choice", "fp32", "fp32 | bf16 (torch.autocast) | fp16 (torch.autocast, GradScaler on CUDA)",
           choices=("fp32", "bf16", "fp16")),
    Option("channels_last", "bool", False, "NHWC memory format for the model and input (faster convolutions with "
           "bf16/fp16 on Tensor Cores)"),
    Option("num_classes", "int", 1000, "classes of the classifier head and of the random labels", minimum=1),
)
METRICS = (
    Metric("samples_per_s", "samples/s", True, "training samples/s (forward, backward, SGD step) on synthetic input "
           "already on the device: batch_size x steps / time per window after warm-up steps, median of windows; "
           "CUDA events between steps (NVIDIA Deep Learning Examples benchmark_training, MLPerf Training)",
           per_device=True, hint="compare with the published figure for this GPU at this batch size and precision "
           "(docs/checks.md): check clocks and power (cuda.clock_throttle), the driver, and other processes on the GPU"),
    Metric("step_time_p50", "ms", False, "median time of one training step, from CUDA events at the step boundaries "
           "(host clock on CPU), warm-up steps excluded", per_device=True),
    Metric("step_time_p99", "ms", False, "99th percentile of the step time (linear interpolation between ranks, as "
           "numpy.percentile): stalls from throttling, other tenants or the GradScaler's skipped steps",
           per_device=True, hint="a long tail over a steady median: look for clock throttling, ECC retirement or "
                                 "another process sharing the GPU (nvidia-smi)"),
)


def check_user_code(options: Mapping[str, Any]) -> None:
    """The protocol's hook: ``preflight validate`` imports the job's model factory and builds it once, on the CPU."""
    if options["model"] not in BUILTIN:
        from preflight.checks.model import build

        build.check_user_code(options)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure the training step on every visible GPU (else on the CPU, said in each row's note)."""
    from preflight.checks.model import measuring

    return measuring.measure(options, budget)
