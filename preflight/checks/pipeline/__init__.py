"""The job's DataLoader feeding the model's training step on the device, end to end: is the GPU waiting for data?

The check measures, in one run on one device (the first visible GPU, as one rank of a
data-parallel job; else the CPU, said in each row's note), the training step alone on a
synthetic batch already on the device (``model_samples_per_s``: the ``model`` check's method)
and the same step fed by the job's DataLoader (``samples_per_s``): each step takes the next
batch, moves it to the device (``non_blocking`` from pinned memory) and trains on it. The two
are timed in interleaved windows (model alone, fed, model alone, ...), so a shared node's
changing load falls on both alike. ``input_bound``, per pair of windows, median of pairs, is the
share of step time the device spent waiting for data: on a GPU 1 - end-to-end / model alone; on
the CPU, whose cores the workers share with the step (a fed step is slower than alone without
waiting), the fed steps' measured host time in the loader's next batch over their time
(``measuring.shares``). It is what MLPerf Storage's DLIO emulates with a sleep (accelerator
utilization, AU), measured here with the real model, so AU = 100 % - input_bound.

Options: a pipeline names the loader it measures with the ``dataloader`` check's options and the
model with the ``model`` check's, read from those checks' own tables (no option is declared
twice). The two share ``batch_size`` (the loader's batch is the step's batch) and
``python_path`` (one ``sys.path`` imports the dataset and the model). The dataloader's
emulation and required-rate options (``step_time``, ``samples_per_gpu``, ``gpus``,
``headroom``) are left out: this check measures the real step instead; so is ``worker_pools``:
the model is fed from one pool of workers, its windows alternating with the model's alone. What a batch gives the
model: the first tensor of a batch whose per-sample shape is ``input_shape`` (the job's
Dataset, ``synthetic``) is the step's input; file samples (bytes read, decoded or not) give the
step its synthetic on-device batch once the loader has delivered theirs, so the wait for the
files is measured and the model still trains on a batch of the right shape.

Each of the two kinds of window gets the instance's ``duration``; with ``worker_sweep`` the windows
at the configured ``num_workers`` and the sweep (``sweep``: input_bound at 1, 2, 4, ... workers and
``recommended_num_workers``, where it reaches its floor) are two phases that share it equally.
"""

from __future__ import annotations

# The tables only: `measuring` is imported when the check runs, for a short start-up (bench/cli_startup.py).

from typing import Any, Mapping

from preflight.loading import options as loading_options
from preflight.training import options as training_options
from preflight.checks.base import DEFAULT_STARTUP_S, Budget, Metric, Timing
from preflight.measurement import Measurement

NAME = "pipeline"
HELP = ("end-to-end training samples/s with the job's DataLoader feeding the model on the GPU, the model alone, and "
        "input_bound: the share of step time spent waiting for data")
DURATION = ("the model alone and the model fed by the loader, interleaved window by window: each kind gets "
            "duration, so the check measures for about twice it per device; with worker_sweep, the windows at "
            "num_workers and the sweep's share it equally")
_HELP = {
    "python_path": "directories put first on sys.path to import loader, dataset, collate_fn, count_samples, "
                   "sampler, worker_init_fn and model (relative to this file), e.g. [src]",
    "synthetic": "random float32 samples of input_shape instead of files (IPC and collation, not storage)",
    "batch_size": "samples per batch: the DataLoader's batch is the training step's batch",
    "worker_sweep": "also measure input_bound at 1, 2, 4, ... workers up to the CPUs the cgroup allows and "
                    "num_workers, each a fresh pool feeding the step, alone and fed interleaved for an equal share "
                    "of the sweep's phase of duration (the sweep is one phase beside the check's windows), and "
                    "report recommended_num_workers: the fewest where input_bound is within the noise of its floor",
}
OPTIONS = (
    *(option._replace(help=_HELP.get(option.name, option.help),
                      for_factory=("dataset", "worker_init_fn", "loader", "model")
                      if option.name == "python_path"
                      else option.for_factory)
      for option in loading_options.OPTIONS),
    *(option for option in training_options.OPTIONS if option.name not in ("batch_size", "python_path")),
)
METRICS = (
    Metric("samples_per_s", "samples/s", True, "end-to-end training samples/s: the job's DataLoader feeding the "
           "training step on the device, batches moved non_blocking from pinned memory; windows after warm-up, "
           "median (step boundaries as in the model check)", per_device=True,
           hint="compare with model_samples_per_s: when input_bound is high, the DataLoader is the limit", about_data=True, by_user=True),
    Metric("model_samples_per_s", "samples/s", True, "the same training step alone on synthetic input already on "
           "the device, measured in the same run (the model check's method: NVIDIA Deep Learning Examples "
           "benchmark_training)", per_device=True),
    Metric("input_bound", "%", False, "share of step time the device waited for data: on a GPU 1 - samples_per_s / "
           "model_samples_per_s, on the CPU (whose cores the workers share) the fed steps' host time waiting for "
           "the next batch over their time; the measured counterpart of MLPerf Storage's emulated AU (AU = 100% - input_bound, "
           "DLIO); 0 when the loader keeps up", per_device=True,
           hint="the device waits for data: raise num_workers if CPUs are idle, keep pin_memory on, use a faster "
                "volume or shards (WebDataset, LMDB); the dataloader check over the same path shows the loader alone", about_data=True, by_user=True),
    Metric("recommended_num_workers", "", None, "with worker_sweep: the fewest workers where input_bound reaches "
           "its floor, the lowest at 1, 2, 4, ... workers up to the CPUs allowed and num_workers: their share of the "
           "model's samples/s (100 % - input_bound) within 5 % of the floor's (pairs of windows that overlap the "
           "floor's are not told apart; the curve is in the message)", per_device=True),
)


def check_user_code(options: Mapping[str, Any]) -> None:
    """The protocol's hook: ``preflight validate`` builds the job's dataset and model once (never iterates or trains)."""
    loading_options.check_user_code(options)
    training_options.check_user_code(options)


def measure(options: Mapping[str, Any], budget: Budget) -> list[Measurement]:
    """Measure the model alone, then fed by the DataLoader, on the first visible GPU (else the CPU)."""
    from preflight.checks.pipeline import measuring

    return measuring.measure(options, budget)


def phases(options: Mapping[str, Any]) -> int:
    """The measuring phases that share ``duration``: the windows at ``num_workers`` and the worker sweep
    (``worker_sweep``); each interleaves the model alone with the model fed."""
    return 1 + bool(options.get("worker_sweep"))


def timing(options: Mapping[str, Any], budget: Budget) -> Timing:
    """Twice ``duration`` of measuring (two kinds of window, one device), after ``DEFAULT_STARTUP_S``."""
    return Timing(2 * budget.duration_s, DEFAULT_STARTUP_S)
