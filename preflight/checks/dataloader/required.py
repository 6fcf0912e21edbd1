"""The rate a node must deliver, in the user's terms: per-GPU rate x GPUs x headroom."""

from __future__ import annotations

from typing import NamedTuple

from preflight.units import format_value


class Required(NamedTuple):
    per_gpu: float  # samples/s one GPU consumes
    gpus: int
    headroom_pct: float  # extra margin, 20 for 20 %
    source: str = ""  # where per_gpu was measured ("model.samples_per_s, fastest of 8 devices"); "" when configured

    @property
    def rate(self) -> float:
        """samples/s the loader must deliver."""
        return self.per_gpu * self.gpus * (1 + self.headroom_pct / 100)

    def arithmetic(self) -> str:
        """``300 samples/s/GPU x 8 GPUs x 1.2 headroom = 2880 samples/s``, with the source of the per-GPU
        rate in brackets after it when it was measured."""
        margin = f" x {1 + self.headroom_pct / 100:g} headroom" if self.headroom_pct else ""
        gpus = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        source = f" ({self.source})" if self.source else ""
        return (f"{format_value(self.per_gpu, 'samples/s')}/GPU{source} x {gpus}{margin} = "
                f"{format_value(self.rate, 'samples/s')}")


def visible_gpus() -> int:
    """GPUs this process may use (torch.cuda.device_count honours CUDA_VISIBLE_DEVICES)."""
    import torch

    return torch.cuda.device_count()
