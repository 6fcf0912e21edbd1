"""The job's own DataLoader (``loader: "package.module:factory"``), measured as the object the job trains from.

Loading layer. Built with ``loader_args`` (by ``validate`` too: no worker starts); the options that would set its
settings are refused beside it. Its batch sampler is recorded in place (``object.__setattr__``: a copy would not be
the job's object); each fresh pool is a new iterator of it. docs/checks.md (``loader:``).
"""

from __future__ import annotations

from typing import Any, Mapping

from preflight.checks import usercode
from preflight.loading import settings, user


def build(options: Mapping[str, Any]) -> tuple[Any, user.Job]:
    """The DataLoader ``options["loader"]`` names, and its Dataset as a ``user.Job``; call under ``usercode.on_path``.

    Raises:
        UserCodeError: the factory or count_samples cannot be imported or called, or returns no DataLoader.
    """
    import torch.utils.data

    spec = options["loader"]
    loader = usercode.call(spec, "loader", options.get("loader_args") or {}, torch.utils.data.DataLoader,
                           "a torch.utils.data.DataLoader")
    counting = options.get("count_samples") or ""
    count = user.theirs(usercode.load(counting, "count_samples"), counting) if counting else None
    return loader, user.Job(loader.dataset, loader.collate_fn, count)


def start_method(loader: Any) -> str:
    """The start method ``loader``'s workers use: its ``multiprocessing_context``, or this Python's default."""
    context = loader.multiprocessing_context
    if context is None:
        import multiprocessing

        return multiprocessing.get_start_method()
    return context if isinstance(context, str) else context.get_start_method()


def refuse_unpicklable(options: Mapping[str, Any], loader: Any) -> None:
    """Raise ``UserCodeError`` (on ``loader``) where its start method must pickle its Dataset, collate_fn or
    worker_init_fn for each worker and cannot (``settings.refuse_unpicklable``)."""
    chosen = "default" if loader.multiprocessing_context is None else start_method(loader)
    settings.refuse_unpicklable({"multiprocessing_context": chosen, "loader": options["loader"]},
                                loader.num_workers, {"dataset": loader.dataset, "collate_fn": loader.collate_fn,
                                                     "worker_init_fn": loader.worker_init_fn}, blame="loader")


def check_user_code(options: Mapping[str, Any]) -> None:
    """``preflight validate``: build the job's DataLoader once (no worker starts) and pickle what its workers would
    receive.

    Raises:
        UserCodeError: as ``build`` and ``refuse_unpicklable``.
    """
    with usercode.on_path(options["python_path"]):
        loader, _ = build(options)
        refuse_unpicklable(options, loader)


def counting(loader: Any, job: user.Job, replays: user.Replays | None) -> user.Count:
    """How to count the batches ``loader`` returns (see the module's docstring); records its batch sampler."""
    if user.iterable(loader.dataset):
        count = job.count_samples or user.from_batch(loader.batch_size or 1)
        return replays.counting(count) if replays is not None else count
    if loader.batch_sampler is None:  # batch_size=None: each item is one sample
        return job.count_samples or (lambda item: (1, user.tensor_bytes(item)))
    recorded = user.RecordedBatches.of(loader.batch_sampler)
    object.__setattr__(loader, "batch_sampler", recorded)  # DataLoader.__setattr__ refuses it after __init__
    return job.count_samples or recorded.count


def describe(options: Mapping[str, Any], loader: Any) -> str:
    """The method column: the factory, and the settings the job's DataLoader holds."""
    workers = loader.num_workers
    shown = [f"batch_size={loader.batch_size}", f"num_workers={workers}", f"pin_memory={loader.pin_memory}",
             f"prefetch_factor={loader.prefetch_factor if workers else None}"]
    if workers:
        shown += [f"multiprocessing_context={start_method(loader)}",
                  f"persistent_workers={loader.persistent_workers}"]
        if loader.timeout:
            shown.append(f"timeout={loader.timeout:g}")
    shown.append(f"drop_last={loader.drop_last}")
    if getattr(loader, "in_order", True) is False:
        shown.append("in_order=False")
    for name in ("sampler", "collate_fn", "worker_init_fn"):
        value = getattr(loader, name, None)
        if value is not None:
            shown.append(f"{name}={_name(value)}")
    if loader.generator is not None:
        shown.append("generator given")
    kind = type(loader)
    what = "DataLoader" if kind.__module__.startswith("torch.") else f"{kind.__module__}.{kind.__qualname__}"
    dataset = loader.dataset
    size = "iterable" if user.iterable(dataset) else f"{len(dataset)} samples"
    return (f"the job's {what}({', '.join(shown)}) from {options['loader']}(**loader_args), over "
            f"{type(dataset).__name__} ({size})")


def _name(value: Any) -> str:
    """A callable's or an object's name for the method column (``default_collate``, ``RandomSampler``)."""
    return getattr(value, "__qualname__", None) or type(value).__name__

