"""The model a step trains: torchvision's ResNets, the built-in ``tiny`` CNN, or the job's own factory.

Built on the CPU with random weights; the caller moves it to the device. torchvision is an
optional extra, and its wheels pin one torch version, so a missing or mismatched torchvision is
``Unavailable`` (the check's metrics become unmeasurable with the fix), never an install here.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from preflight.checks import usercode


def vision_fix(torch_version: str) -> str:
    """The install line for the torchvision built for ``torch_version`` (``torch.__version__``, e.g. ``2.13.0+cu126``).

    torch 2.N pairs with torchvision 0.(N+15) (the compatibility table in torchvision's README: 2.0 with
    0.15 ... 2.9 with 0.24). ``--no-deps``, because each torchvision release pins one torch and pip would
    otherwise replace the training image's torch to satisfy it; Pillow, which torchvision imports, has no
    dependencies of its own. A torch this rule does not cover gets the rule in words.
    """
    match = re.match(r"2\.(\d+)\.", torch_version)
    pinned = f"'torchvision==0.{int(match[1]) + 15}.*'" if match else "torchvision==<the release built for it>"
    return f"pip install --no-deps {pinned} pillow (built for torch {torch_version}; --no-deps keeps this torch)"


class Unavailable(Exception):
    """A built-in model this image cannot build; ``str()`` is the one-line reason with the fix."""


def build(options: Mapping[str, Any]) -> Any:
    """The ``torch.nn.Module`` that ``options["model"]`` names, on the CPU; call under ``usercode.on_path``.

    Raises:
        Unavailable: resnet18/resnet50 without an importable torchvision.
        UserCodeError: the factory cannot be imported or called, or returns no ``torch.nn.Module``.
    """
    import torch

    name, classes = options["model"], int(options["num_classes"])
    if name == "tiny":
        return tiny(int(options["input_shape"][0]), classes)
    if name in ("resnet18", "resnet50"):
        try:
            import torchvision.models
        except ImportError as error:
            raise Unavailable(f"model: {name} needs torchvision ({error}): {vision_fix(torch.__version__)}") from None
        except Exception as error:  # noqa: BLE001  a torchvision built for another torch fails in many ways
            raise Unavailable(f"model: {name}: torchvision does not load with this torch "
                              f"({type(error).__name__}: {error}): {vision_fix(torch.__version__)}") from None
        return getattr(torchvision.models, name)(weights=None, num_classes=classes)
    return usercode.call(name, "model", options["model_args"], torch.nn.Module, "a torch.nn.Module")


def check_user_code(options: Mapping[str, Any]) -> None:
    """``preflight validate``: import the factory and build the model once on the CPU; never trains it.

    Raises:
        UserCodeError: as ``build``.
    """
    with usercode.on_path(options["python_path"]):
        build(options)


def tiny(channels: int, num_classes: int) -> Any:
    """Three stride-2 conv-BN-ReLU blocks, global average pool and a linear head (about 100k parameters).

    A model small enough for a CPU smoke run: its figure says the step runs, not how fast a
    real model trains.
    """
    from torch import nn

    layers: list[Any] = []
    for width_in, width_out in ((channels, 32), (32, 64), (64, 128)):
        layers += [nn.Conv2d(width_in, width_out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width_out),
                   nn.ReLU(inplace=True)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, num_classes))
