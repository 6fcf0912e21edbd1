"""The options that say which model trains a step, and how: read by the model and pipeline checks alike."""

from __future__ import annotations

from typing import Any, Mapping

from preflight.checks.base import Option

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


def check_user_code(options: Mapping[str, Any]) -> None:
    """The protocol's hook: ``preflight validate`` imports the job's model factory and builds it once, on the CPU."""
    if options["model"] not in BUILTIN:
        from preflight.training import build

        build.check_user_code(options)
