"""One training step, as a job's loop runs it, and the clock that times steps back to back.

``TrainingStep`` holds the model on its device, an SGD optimizer (momentum 0.9), a synthetic
batch made once on the device and random labels. A call runs forward under ``torch.autocast``
(bf16/fp16; none for fp32), the loss, backward (through a ``GradScaler`` for fp16 on CUDA, as
PyTorch's AMP recipe), ``optimizer.step()`` and ``zero_grad(set_to_none=True)``. The loss is
cross-entropy when the output is (batch, num_classes) logits, else the mean of the first
output tensor: backward then still runs through the whole network, which is what is timed.

``window`` runs steps for a stated time and returns samples/s and each step's time, from a
``Timeline``: CUDA events recorded on the device's stream at each step boundary
(``EventTimeline``, gpu-only; the host never waits between steps, so launches overlap as in
training), or the host clock on the CPU, where every op is synchronous (``HostTimeline``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

AUTOCAST = {"bf16": "bfloat16", "fp16": "float16"}


class TrainingStep:
    """One training step of ``model`` on ``device`` ("cpu", "cuda:0"); call it to run one.

    ``inputs`` (a batch already on the device) replaces the synthetic batch for that call.
    Returns the samples stepped (the batch's first dimension).
    """

    def __init__(self, model: Any, device: str, input_shape: list[int], batch_size: int, precision: str,
                 channels_last: bool, num_classes: int) -> None:
        import torch

        self.device = torch.device(device)
        self.format = torch.channels_last if channels_last else torch.contiguous_format
        self.model = model.to(self.device, memory_format=self.format).train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.inputs = torch.randn(batch_size, *input_shape, device=self.device).contiguous(memory_format=self.format)
        self.labels = torch.randint(0, num_classes, (batch_size,), device=self.device)
        self.num_classes = num_classes
        self.dtype = getattr(torch, AUTOCAST[precision]) if precision in AUTOCAST else None
        cuda = self.device.type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda") if precision == "fp16" and cuda else None  # gpu-only

    def __call__(self, inputs: Any = None) -> int:
        import torch

        batch = self.inputs if inputs is None else inputs
        with torch.autocast(self.device.type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            loss = self._loss(self.model(batch))
        if self.scaler is not None:  # gpu-only
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return int(batch.shape[0])

    def _loss(self, output: Any) -> Any:
        import torch.nn.functional as functional

        logits = first_tensor(output)
        if logits is None:
            raise TypeError(f"the model returned {type(output).__name__} holding no tensor: return the logits "
                            f"(or a tuple or dict whose first tensor is the output)")
        if logits.dim() == 2 and logits.shape[1] == self.num_classes and logits.shape[0] <= len(self.labels):
            return functional.cross_entropy(logits.float(), self.labels[:logits.shape[0]])
        return logits.float().mean()

    def as_input(self, batch: Any) -> Any:
        """``batch`` (a host tensor) on the device, in the step's memory format; non_blocking from pinned memory."""
        moved = batch.to(self.device, non_blocking=batch.is_pinned())
        return moved.contiguous(memory_format=self.format) if moved.dim() == 4 else moved


def first_tensor(value: Any) -> Any:
    """The first tensor in ``value`` (a tensor, or nested tuples, lists and dicts), depth first; None if none."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        found = first_tensor(item)
        if found is not None:
            return found
    return None


class HostTimeline:
    """Step boundaries on the host clock: right on the CPU, where ops finish before the call returns."""

    def __init__(self) -> None:
        self.marks: list[float] = []

    def mark(self) -> None:
        self.marks.append(time.perf_counter())

    def intervals_ms(self) -> list[float]:
        return [1e3 * (b - a) for a, b in zip(self.marks, self.marks[1:])]


class EventTimeline:  # gpu-only
    """Step boundaries as CUDA events on the current stream: device time, launch overlap kept."""

    def __init__(self) -> None:
        self.marks: list[Any] = []

    def mark(self) -> None:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.marks.append(event)

    def intervals_ms(self) -> list[float]:
        self.marks[-1].synchronize()
        return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]


def timeline_for(device: str) -> Callable[[], Any]:
    """The timeline class for ``device``: CUDA events on a GPU, the host clock on the CPU."""
    return EventTimeline if device.startswith("cuda") else HostTimeline


class Window(NamedTuple):
    samples_per_s: float
    step_ms: tuple[float, ...]  # each step's time, in order
    # host ms the steps spent waiting for their input (a fed step's ``waited_ms``: the loader's next batch and its
    # copy to the device); None for a step that waits for none (the model alone)
    wait_ms: float | None = None


def window(step: Callable[[], int], timeline: Any, seconds: float) -> Window:
    """Run ``step`` back to back for at least ``seconds`` of host time (whole steps, at least one).

    samples/s = samples stepped / the sum of the step times, so it agrees with the step times
    by construction; the timeline is read (synchronised) once, at the end. A step that counts the
    host time it waits for its input (``waited_ms``, a running total: ``pipeline.Feed``) gives the
    window's share of it in ``wait_ms``; one fed by ``round_steps`` workers runs whole rounds of
    that many steps, as the dataloader check's windows do (``loading.loop``): the workers'
    batches arrive a round together, and a window cut inside a round keeps the round's wait
    without all of its batches.
    """
    waited = getattr(step, "waited_ms", None)
    rounds = getattr(step, "round_steps", 1)
    start = time.perf_counter()
    samples = steps_taken = 0
    timeline.mark()
    while True:
        samples += step()
        steps_taken += 1
        timeline.mark()
        if time.perf_counter() - start >= seconds and steps_taken % rounds == 0:
            break
    steps = tuple(timeline.intervals_ms())
    wait = None if waited is None else getattr(step, "waited_ms") - waited
    return Window(samples / (sum(steps) / 1e3), steps, wait)
