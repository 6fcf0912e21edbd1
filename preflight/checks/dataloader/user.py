"""The job's own Dataset (``dataset: "package.module:factory"``), built and counted as the job's loop sees it.

``build`` imports the factory with ``python_path`` on ``sys.path`` (``usercode``), calls it with
``dataset_args`` as keyword arguments and refuses anything that is not a
``torch.utils.data.Dataset`` (an ``IterableDataset`` is one); ``collate_fn`` names the job's
collate function, else torch's default is used. ``count_batch`` counts what a batch holds
however it is shaped: samples are the first dimension of the first tensor found (depth first,
as torch's default collate stacks every field along dimension 0), bytes are the sum of every
tensor's ``nbytes``: what the training loop receives, decoded, not what was read from disk.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from preflight.checks import usercode
from preflight.checks.base import UserCodeError


def build(options: Mapping[str, Any]) -> tuple[Any, Callable[..., Any] | None]:
    """The dataset ``options`` names and its collate function (None: torch's default); call under ``usercode.on_path``.

    Raises:
        UserCodeError: the factory or collate_fn cannot be imported or called, or the factory's
            value is not a Dataset (or a map-style one without ``__len__``). Never iterates the dataset.
    """
    import torch.utils.data

    spec = options["dataset"]
    dataset = usercode.call(spec, "dataset", options["dataset_args"], torch.utils.data.Dataset,
                            "a torch.utils.data.Dataset or IterableDataset")
    if not isinstance(dataset, torch.utils.data.IterableDataset) and not hasattr(dataset, "__len__"):
        raise UserCodeError("dataset", f"{spec}(**dataset_args) returned a map-style {type(dataset).__name__} without "
                            f"__len__, which a DataLoader's sampler needs: define __len__, or subclass IterableDataset")
    collate = usercode.load(options["collate_fn"], "collate_fn") if options["collate_fn"] else None
    return dataset, collate


def check_user_code(options: Mapping[str, Any]) -> None:
    """``preflight validate``: import and build the dataset (and collate_fn) once, never iterating it.

    Raises:
        UserCodeError: as ``build``.
    """
    if options["dataset"]:
        with usercode.on_path(options["python_path"]):
            build(options)


def count_batch(batch: Any) -> tuple[int, int]:
    """(samples, bytes) in a collated batch: the first tensor's first dimension, and every tensor's nbytes.

    Raises:
        TypeError: the batch holds no tensor and is not a sequence (say what collate_fn returns).
    """
    tensors = list(_tensors(batch))
    if tensors:
        first = tensors[0]
        return (int(first.shape[0]) if first.dim() else 1), sum(t.element_size() * t.nelement() for t in tensors)
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        return len(batch), 0
    raise TypeError(f"cannot count the samples in a batch of {type(batch).__name__}: make collate_fn return "
                    f"tensors (the first dimension is the batch) or a list of samples")


def _tensors(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _tensors(getattr(value, field.name))
