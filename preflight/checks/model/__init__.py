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

# The tables only: `measuring` is imported when the check runs, for a short start-up (bench/cli_startup.py).

from typing import Any, Mapping

from preflight.checks.base import Budget, Metric
from preflight.training import options as training_options
from preflight.measurement import Measurement

NAME = "model"
HELP = "training-step samples/s and step time p50/p99 of resnet18/50 or the job's own model on each GPU, compute only"
DURATION = "timed windows of training steps on each device, after warm-up steps: duration per device"
BUILTIN, OPTIONS = training_options.BUILTIN, training_options.OPTIONS
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
    """The protocol's hook: ``preflight validate`` builds the job's model once, on the CPU (``training.options``)."""
    training_options.check_user_code(options)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure the training step on every visible GPU (else on the CPU, said in each row's note)."""
    from preflight.checks.model import measuring

    return measuring.measure(options, budget)
